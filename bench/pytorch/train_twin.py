#!/usr/bin/env python3
"""The PyTorch twin of `torchlean train`: the same model, initial parameters, batches and
optimizer, trained in PyTorch, printing its per-step losses as JSON.

Input: a directory written by the Rust test `crates/train/tests/twin.rs` (or by hand):
  init.safetensors   our initial checkpoint (exactly PyTorch's state_dict names)
  data.safetensors   `x` (the training split, as our trainer sees it) and `y` (labels, as floats)
  plan.json          {"model": {...}, "optimizer": {...}, "schedule": ..., "dtype": "f64",
                      "rows": [[row, ...] per step], "clip_grad_norm": null}
Output (stdout): {"losses": [loss of step 1, ...]}

    python bench/pytorch/train_twin.py DIR
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


def build(model):
    f, c = model["features"], model["classes"]
    if model["arch"] == "mlp":
        return nn.Sequential(nn.Linear(f, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, c))
    h, w = model["image"]
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * (h // 2) * (w // 2), c))


def optimizer(params, cfg):
    kind = cfg["kind"]
    kw = {k: v for k, v in cfg.items() if k != "kind"}
    if "beta1" in kw:
        kw["betas"] = (kw.pop("beta1"), kw.pop("beta2"))
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}[kind]
    return cls(params, foreach=False, **kw)


def main():
    d = sys.argv[1]
    plan = json.load(open(f"{d}/plan.json"))
    dtype = torch.float64 if plan["dtype"] == "f64" else torch.float32
    torch.set_num_threads(1)
    model = build(plan["model"]).to(dtype)
    # our checkpoint holds exactly the state_dict (the optimizer state is in a file beside it)
    # of the exported module: the parameters, and the input normalization's buffers, which the
    # twin does not need (data.safetensors holds the data as our trainer standardized it)
    state = load_file(f"{d}/init.safetensors")
    for buffer in ("input_mean", "input_scale"):
        state.pop(buffer)
    model.load_state_dict(state, strict=True)
    data = load_file(f"{d}/data.safetensors")
    x, y = data["x"].to(dtype), data["y"].long()
    if plan["model"]["arch"] == "cnn":
        h, w = plan["model"]["image"]
        x = x.reshape(-1, 1, h, w)
    opt = optimizer(model.parameters(), plan["optimizer"])
    lrs = plan.get("lrs")
    losses = []
    for k, rows in enumerate(plan["rows"]):
        if lrs is not None:
            for g in opt.param_groups:
                g["lr"] = lrs[k]
        idx = torch.tensor(rows, dtype=torch.int64)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        if plan.get("clip_grad_norm") is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), plan["clip_grad_norm"], foreach=False)
        opt.step()
        losses.append(loss.item())
    json.dump({"losses": [l if math.isfinite(l) else None for l in losses]}, sys.stdout)


if __name__ == "__main__":
    main()
