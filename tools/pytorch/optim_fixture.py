#!/usr/bin/env python3
"""Makes `crates/optim/tests/fixtures/optim.json`: PyTorch's optimizers, gradient clipping and
learning-rate schedules on a fixed small problem, in float64, for `crates/optim/tests/optim.rs`.

What it records:
- `params`: a 2-layer MLP 5 -> 7 (tanh) -> 3 with fixed float64 parameters (names as in
  `nn.Sequential`: `0.weight`, `0.bias`, `2.weight`, `2.bias`), their initial values;
- `runs`: for each optimizer configuration (written in `torchlean-train`'s serde form of
  `OptimConfig` and `Schedule`, so the Rust test reads them as they are), 20 steps of
  cross-entropy on a fixed batch of 8. After every step: the learning rate the step used
  (`scheduler.get_last_lr()`), the gradients before clipping, `clip_grad_norm_`'s total norm
  where the run clips, and every parameter after `optimizer.step()`. At the end: the
  optimizer's state per parameter (PyTorch's buffer names, and `step` where PyTorch keeps one).
- `schedules`: learning rates of several schedules for 50 steps (one cosine for 1000), read
  from PyTorch's schedulers stepped once per step, as a training loop does.

The optimizers run on PyTorch's single-tensor path (`foreach=False`), which the Rust
implementation follows operation by operation.

Rerun (from the repository root):
    /root/.venvs/torchlean-bench/bin/python tools/pytorch/optim_fixture.py \
        > crates/optim/tests/fixtures/optim.json
Floats are written as Python's shortest round-trip repr, so the file reads back bit-exactly.
"""
import json
import math
import sys

import torch

torch.set_default_dtype(torch.float64)

STEPS = 20


def make_model():
    torch.manual_seed(20240601)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.6)
    return model


def batch():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 5, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 1, 0, 2, 2, 1])
    return x, y


def make_optimizer(cfg, params):
    kind = cfg["kind"]
    if kind == "sgd":
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                               dampening=cfg["dampening"], weight_decay=cfg["weight_decay"],
                               nesterov=cfg["nesterov"], foreach=False)
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(params, lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"],
                   weight_decay=cfg["weight_decay"], amsgrad=cfg["amsgrad"], foreach=False)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=cfg["lr"], alpha=cfg["alpha"], eps=cfg["eps"],
                                   weight_decay=cfg["weight_decay"], momentum=cfg["momentum"],
                                   centered=cfg["centered"], foreach=False)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=cfg["lr"], lr_decay=cfg["lr_decay"],
                                   weight_decay=cfg["weight_decay"],
                                   initial_accumulator_value=cfg["initial_accumulator_value"],
                                   eps=cfg["eps"], foreach=False)
    raise ValueError(kind)


def make_scheduler(sched, opt):
    kind = sched["kind"]
    S = torch.optim.lr_scheduler
    if kind == "constant":
        return S.LambdaLR(opt, lambda _epoch: 1.0)
    if kind == "step":
        return S.StepLR(opt, step_size=sched["step_size"], gamma=sched["gamma"])
    if kind == "cosine":
        return S.CosineAnnealingLR(opt, T_max=sched["t_max"], eta_min=sched["eta_min"])
    if kind == "linear":
        return S.LinearLR(opt, start_factor=sched["start_factor"],
                          end_factor=sched["end_factor"], total_iters=sched["total_iters"])
    if kind == "sequential":
        subs = [make_scheduler(s, opt) for s in sched["schedules"]]
        return S.SequentialLR(opt, subs, milestones=sched["milestones"])
    raise ValueError(kind)


def sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    return {"kind": "sgd", "lr": lr, "momentum": momentum, "dampening": dampening,
            "weight_decay": weight_decay, "nesterov": nesterov}


def adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, kind="adam"):
    return {"kind": kind, "lr": lr, "betas": list(betas), "eps": eps,
            "weight_decay": weight_decay, "amsgrad": amsgrad}


def rmsprop(lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    return {"kind": "rmsprop", "lr": lr, "alpha": alpha, "eps": eps,
            "weight_decay": weight_decay, "momentum": momentum, "centered": centered}


def adagrad(lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    return {"kind": "adagrad", "lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value, "eps": eps}


CONSTANT = {"kind": "constant"}


def step_lr(step_size, gamma):
    return {"kind": "step", "step_size": step_size, "gamma": gamma}


def cosine(t_max, eta_min):
    return {"kind": "cosine", "t_max": t_max, "eta_min": eta_min}


def linear(start_factor, end_factor, total_iters):
    return {"kind": "linear", "start_factor": start_factor, "end_factor": end_factor,
            "total_iters": total_iters}


def sequential(schedules, milestones):
    return {"kind": "sequential", "schedules": schedules, "milestones": milestones}


RUNS = [
    ("sgd", sgd(0.1), CONSTANT, None),
    ("sgd_momentum_dampening", sgd(0.05, momentum=0.9, dampening=0.3), CONSTANT, None),
    ("sgd_nesterov_weight_decay", sgd(0.05, momentum=0.8, weight_decay=0.01, nesterov=True),
     CONSTANT, None),
    ("adam", adam(0.01), CONSTANT, None),
    ("adam_amsgrad_weight_decay",
     adam(0.01, betas=(0.8, 0.99), weight_decay=0.05, amsgrad=True), CONSTANT, None),
    ("adamw", adam(0.01, weight_decay=0.1, kind="adamw"), CONSTANT, None),
    ("rmsprop", rmsprop(0.01), CONSTANT, None),
    ("rmsprop_centered_momentum",
     rmsprop(0.005, alpha=0.9, weight_decay=0.02, momentum=0.7, centered=True), CONSTANT, None),
    ("adagrad_lr_decay",
     adagrad(0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.1),
     CONSTANT, None),
    ("sgd_momentum_clip", sgd(0.1, momentum=0.9), CONSTANT, 0.5),
    ("sgd_momentum_step_lr", sgd(0.1, momentum=0.9), step_lr(5, 0.3), None),
    ("adam_cosine", adam(0.01), cosine(15, 1e-4), None),
    ("adamw_warmup_cosine", adam(0.01, weight_decay=0.1, kind="adamw"),
     sequential([linear(0.1, 1.0, 5), cosine(15, 0.0)], [5]), None),
]

SCHEDULES = [
    ("constant", 0.1, CONSTANT, 50),
    ("step", 0.1, step_lr(7, 0.3), 50),
    ("cosine_wraps", 0.05, cosine(12, 1e-3), 50),
    ("cosine_1000", 0.1, cosine(1000, 0.0), 1000),
    ("linear_warmup", 0.2, linear(0.25, 1.0, 8), 50),
    ("linear_decay", 0.2, linear(1.0, 0.1, 10), 50),
    ("warmup_cosine", 0.01, sequential([linear(0.1, 1.0, 5), cosine(20, 1e-5)], [5]), 50),
    ("warmup_step", 0.3, sequential([linear(0.5, 1.0, 4), step_lr(3, 0.7)], [6]), 50),
    ("three_phases", 0.1,
     sequential([linear(0.2, 1.0, 3), CONSTANT, cosine(10, 0.01)], [3, 10]), 50),
]


def flat(t):
    return t.detach().reshape(-1).tolist()


def run(model0, x, y, cfg, sched_cfg, clip):
    model = make_model()
    model.load_state_dict(model0.state_dict())
    names = [n for n, _ in model.named_parameters()]
    params = list(model.parameters())
    opt = make_optimizer(cfg, params)
    sched = make_scheduler(sched_cfg, opt)
    steps = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        record = {"lr": sched.get_last_lr()[0], "loss": loss.item(),
                  "grads": [flat(p.grad) for p in params]}
        if clip is not None:
            record["total_norm"] = torch.nn.utils.clip_grad_norm_(params, clip).item()
        opt.step()
        sched.step()
        record["params"] = [flat(p) for p in params]
        steps.append(record)
    state = {}
    for name, p in zip(names, params):
        st = opt.state[p]
        entry = {"step": int(st["step"].item()) if "step" in st else None, "buffers": {}}
        for k, v in st.items():
            if k != "step":
                entry["buffers"][k] = flat(v)
        state[name] = entry
    return steps, state


def main():
    model0 = make_model()
    x, y = batch()
    out = {
        "torch_version": torch.__version__,
        "steps": STEPS,
        "params": [{"name": n, "shape": list(p.shape), "init": flat(p)}
                   for n, p in model0.named_parameters()],
        "runs": [],
        "schedules": [],
    }
    for name, cfg, sched, clip in RUNS:
        steps, state = run(model0, x, y, cfg, sched, clip)
        out["runs"].append({"name": name, "optimizer": cfg, "schedule": sched, "clip": clip,
                            "steps": steps, "final_state": state})
    for name, base_lr, sched_cfg, n in SCHEDULES:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base_lr)
        sched = make_scheduler(sched_cfg, opt)
        lrs = []
        for _ in range(n):
            lrs.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        out["schedules"].append({"name": name, "base_lr": base_lr, "schedule": sched_cfg,
                                 "lrs": lrs})
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    # The closed form of the cosine schedule against PyTorch's recursion (for the report).
    c = next(s for s in out["schedules"] if s["name"] == "cosine_1000")
    worst = max(abs(lr - 0.1 * (1 + math.cos(math.pi * t / 1000)) / 2) / 0.1
                for t, lr in enumerate(c["lrs"]))
    print(f"cosine_1000: closed form vs recursion, max |diff|/base_lr = {worst:.3e}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
