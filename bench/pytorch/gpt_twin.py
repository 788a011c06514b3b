#!/usr/bin/env python3
"""The PyTorch twin of `torchlean train gpt`: nanoGPT's model (the same module names, so our
checkpoint loads with `load_state_dict(strict=True)`), trained from our initial checkpoint on
our batches with nanoGPT's optimizer setup, printing its per-step losses as JSON.

Input: a directory written by the Rust test `crates/train/tests/twin.rs`:
  init.safetensors   our checkpoint at step 0 (`optimizer.*` tensors are ignored)
  plan.json          {"config": GptTrainConfig, "vocab": V, "dtype": "f64"|"f32",
                      "lrs": [lr of each step], "batches": [{"ids": [...], "targets": [...]}]}
Output (stdout): {"losses": [loss of step 1, ...]}

With `--eval`, the directory instead holds a trained checkpoint `model.safetensors` and
`plan.json` with "batches" to score: the output is {"eval_loss": the mean loss over them} from
the checkpoint loaded with `load_state_dict(strict=True)`, in evaluation mode.

    python bench/pytorch/gpt_twin.py DIR
    python bench/pytorch/gpt_twin.py --eval DIR
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        # not part of the state_dict (nanoGPT registers it only without flash attention)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)), persistent=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.n_head
        q, k, v = (z.view(b, t, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load(d, plan, file):
    """The twin with the parameters of `file` (our checkpoint), loaded strictly."""
    m = plan["config"]["model"]
    dtype = torch.float64 if plan["dtype"] == "f64" else torch.float32
    model = GPT(plan["vocab"], m["block"], m["n_layer"], m["n_head"], m["n_embd"], m["dropout"])
    model = model.to(dtype)
    state = {k: v.to(dtype) for k, v in load_file(f"{d}/{file}").items()
             if not k.startswith("optimizer.")}
    model.load_state_dict(state, strict=True)
    return model


def batch_tensors(batch, block):
    b = len(batch["ids"]) // block
    return torch.tensor(batch["ids"]).view(b, -1), torch.tensor(batch["targets"]).view(b, -1)


def evaluate(d):
    plan = json.load(open(f"{d}/plan.json"))
    torch.set_num_threads(1)
    model = load(d, plan, "model.safetensors")
    model.eval()
    block = plan["config"]["model"]["block"]
    with torch.no_grad():
        losses = [model(*batch_tensors(b, block)).item() for b in plan["batches"]]
    json.dump({"eval_loss": sum(losses) / len(losses)}, sys.stdout)


def main(d):
    plan = json.load(open(f"{d}/plan.json"))
    cfg, m = plan["config"], plan["config"]["model"]
    torch.set_num_threads(1)
    model = load(d, plan, "init.safetensors")
    # nanoGPT's configure_optimizers: decay the parameters of rank >= 2 only
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=1e-8,
                            foreach=False)
    model.train()
    losses = []
    for lr, batch in zip(plan["lrs"], plan["batches"]):
        for g in opt.param_groups:
            g["lr"] = lr
        loss = model(*batch_tensors(batch, m["block"]))
        loss.backward()
        if cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    json.dump({"losses": losses}, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "--eval":
        evaluate(sys.argv[2])
    else:
        main(sys.argv[1])
