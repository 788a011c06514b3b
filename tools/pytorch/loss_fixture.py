#!/usr/bin/env python3
"""PyTorch's values and gradients for the losses of `torchlean_nn::loss` (crates/nn/src/loss.rs).

Rerun (from the repository root) with the project's virtualenv:

    $TORCHLEAN_PYTHON tools/pytorch/loss_fixture.py > crates/nn/tests/fixtures/losses.json

(`TORCHLEAN_PYTHON=~/.venvs/torchlean-bench/bin/python`). The output is deterministic: fixed
inputs, float64 throughout, floats written with Python's shortest round-trip repr (exact in
f64). `crates/nn/tests/losses.rs` reads the JSON, and when `TORCHLEAN_PYTHON` is set it reruns
this script and checks that the committed file is what it writes.

Every case is one loss x one reduction (x one label smoothing for cross-entropy) on fixed
inputs, with the loss value and the gradient of the loss w.r.t. the logits (the output), from
`torch.autograd` on:

- `mse`: F.mse_loss(output, target, reduction=r)
- `cross-entropy`: F.cross_entropy(logits, labels, label_smoothing=eps, reduction=r)
- `bce-with-logits`: F.binary_cross_entropy_with_logits(logits, target, reduction=r)

Some inputs have large-magnitude logits (+-30, +-40) to exercise the stable formulas.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def grid(rows, cols, f):
    return [[f(i, j) for j in range(cols)] for i in range(rows)]


# (name, logits or output, labels or targets)
MSE_INPUTS = [
    (
        "small",
        grid(3, 4, lambda i, j: math.sin(0.7 * i + 0.3 * j + 0.1)),
        grid(3, 4, lambda i, j: math.cos(0.5 * i - 0.2 * j)),
    ),
    (
        "large",
        [[30.0, -30.0, 12.5], [-40.0, 0.25, 29.75]],
        [[-30.0, 30.0, 12.0], [40.0, 0.5, -29.5]],
    ),
    ("rank1", [0.5, -1.25, 3.0, 0.0, 2.0], [0.0, -1.0, 2.5, 0.125, -2.0]),
]

CE_INPUTS = [
    (
        "small",
        grid(4, 5, lambda i, j: math.sin(0.9 * i - 0.4 * j + 0.2) * 2.0),
        [0, 4, 2, 1],
    ),
    (
        "large",
        [
            [30.0, -30.0, 0.0, 1.5],
            [-30.0, 30.0, 29.0, -40.0],
            [40.0, 40.0, -30.0, 0.0],
            [-30.0, 0.0, 30.0, 0.0],
        ],
        [2, 2, 0, 2],
    ),
    ("one_row", [[0.1, -0.2, 0.3]], [1]),
]

BCE_INPUTS = [
    (
        "small",
        grid(3, 4, lambda i, j: math.sin(1.1 * i + 0.6 * j - 0.5) * 3.0),
        grid(3, 4, lambda i, j: [0.0, 1.0, 0.25, 0.8][(i + j) % 4]),
    ),
    (
        "large",
        [[30.0, -30.0, 30.0, -30.0], [40.0, -40.0, 15.0, -15.0], [30.0, -30.0, 40.0, -40.0]],
        [[0.0, 1.0, 0.5, 0.5], [0.25, 0.75, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]],
    ),
    ("rank1", [0.0, 2.5, -1.5, 7.0, -0.75], [0.5, 1.0, 0.0, 0.9, 0.1]),
]

SMOOTHING = [0.0, 0.1, 0.35]
REDUCTIONS = ["mean", "sum"]


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def case(loss, name, reduction, x, target, value_fn, **extra):
    x = torch.tensor(x, requires_grad=True)
    value = value_fn(x)
    (grad,) = torch.autograd.grad(value, x)
    row = {
        "name": f"{loss}/{name}/{reduction}",
        "loss": loss,
        "reduction": reduction,
        **extra,
        "shape": list(x.shape),
        "output": flat(x),
        "value": float(value.detach()),
        "grad": flat(grad),
    }
    if isinstance(target, torch.Tensor) and target.dtype == torch.int64:
        row["labels"] = [int(v) for v in target.tolist()]
    else:
        row["target"] = flat(target)
    return row


def main():
    cases = []
    for name, x, t in MSE_INPUTS:
        t = torch.tensor(t)
        for r in REDUCTIONS:
            cases.append(case("mse", name, r, x, t, lambda x: F.mse_loss(x, t, reduction=r)))
    for name, x, labels in CE_INPUTS:
        labels = torch.tensor(labels, dtype=torch.int64)
        for eps in SMOOTHING:
            for r in REDUCTIONS:
                cases.append(
                    case(
                        "cross-entropy",
                        f"{name}/eps={eps}",
                        r,
                        x,
                        labels,
                        lambda x: F.cross_entropy(x, labels, label_smoothing=eps, reduction=r),
                        label_smoothing=eps,
                    )
                )
    for name, x, t in BCE_INPUTS:
        t = torch.tensor(t)
        for r in REDUCTIONS:
            cases.append(
                case(
                    "bce-with-logits",
                    name,
                    r,
                    x,
                    t,
                    lambda x: F.binary_cross_entropy_with_logits(x, t, reduction=r),
                )
            )
    out = {
        "generator": "tools/pytorch/loss_fixture.py",
        "torch": torch.__version__.split("+")[0],
        "dtype": "float64",
        "cases": cases,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
