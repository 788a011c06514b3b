#!/usr/bin/env python3
"""The PyTorch twin of `torchlean train gpt`: nanoGPT's model (the same module names, so our
checkpoint loads with `load_state_dict(strict=True)`), trained from our initial checkpoint on
our batches with nanoGPT's optimizer setup, printing its per-step losses as JSON.

Input: a directory written by the Rust test `crates/train/tests/twin.rs`:
  init.safetensors   our checkpoint at step 0 (`optimizer.*` tensors are ignored)
  plan.json          {"config": GptTrainConfig, "vocab": V, "dtype": "f64"|"f32",
                      "lrs": [lr of each step], "batches": [{"ids": [...], "targets": [...]}]}
Output (stdout): {"losses": [loss of step 1, ...]}

With `--train CHECKPOINT TEXT [THREADS]`, nanoGPT's own training run, for the figures our
`train gpt` is compared on: the configuration and vocabulary are read from our checkpoint's
metadata (any `torchlean train gpt --save` file; its weights are not used), the model starts
from nanoGPT's initialisation (`torch.manual_seed(seed)`), batches are nanoGPT's `get_batch`
(`torch.randint` offsets into the 90 % train split of TEXT), the learning rate nanoGPT's
`get_lr` (linear warmup, cosine decay to `min_lr`), and the run ends with the loss on
`eval_iters` batches of each split. Output: {"val_loss", "train_loss", "seconds", "ms_per_step",
"peak_rss_mib", "threads"} (peak RSS of this whole process, PyTorch's import included).

With `--eval`, the directory instead holds a trained checkpoint `model.safetensors` and
`plan.json` with "batches" to score: the output is {"eval_loss": the mean loss over them} from
the checkpoint loaded with `load_state_dict(strict=True)`, in evaluation mode.

    python bench/pytorch/gpt_twin.py DIR
    python bench/pytorch/gpt_twin.py --eval DIR
    python bench/pytorch/gpt_twin.py --train gpt.safetensors crates/train/data/shakespeare/input.txt 2
"""
import json
import math
import resource
import struct
import sys
import time

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


def train_from_scratch(checkpoint, text_path, threads):
    with open(checkpoint, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(json.loads(f.read(n))["__metadata__"]["torchlean"])
    cfg, m, vocab = meta["config"], meta["config"]["model"], meta["vocabulary"]
    torch.set_num_threads(threads)
    torch.manual_seed(cfg["seed"])
    index = {ch: i for i, ch in enumerate(vocab)}
    text = open(text_path, encoding="utf-8").read()
    data = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    cut = int(0.9 * len(data))
    splits = {"train": data[:cut], "val": data[cut:]}
    block, batch = m["block"], cfg["batch"]

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - block, (batch,))
        x = torch.stack([d[i:i + block] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + block] for i in ix])
        return x, y

    def get_lr(it):
        if it < cfg["warmup"]:
            return cfg["lr"] * (it + 1) / (cfg["warmup"] + 1)
        if it > cfg["iters"]:
            return cfg["min_lr"]
        ratio = (it - cfg["warmup"]) / (cfg["iters"] - cfg["warmup"])
        return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg["lr"] - cfg["min_lr"])

    model = GPT(len(vocab), block, m["n_layer"], m["n_head"], m["n_embd"], m["dropout"])
    # nanoGPT's _init_weights and its scaled c_proj initialisation
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * m["n_layer"]))
        elif p.dim() >= 2:
            torch.nn.init.normal_(p, mean=0.0, std=0.02)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]))
    model.train()
    start = time.perf_counter()
    for it in range(cfg["iters"]):
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        loss = model(*get_batch("train"))
        loss.backward()
        if cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        final = {s: sum(model(*get_batch(s)).item() for _ in range(cfg["eval_iters"]))
                 / cfg["eval_iters"] for s in ("train", "val")}
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    json.dump({"val_loss": final["val"], "train_loss": final["train"], "seconds": seconds,
               "ms_per_step": 1e3 * seconds / cfg["iters"], "peak_rss_mib": peak_kb / 1024,
               "threads": threads}, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "--eval":
        evaluate(sys.argv[2])
    elif sys.argv[1] == "--train":
        train_from_scratch(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    else:
        main(sys.argv[1])
