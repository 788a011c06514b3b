#!/usr/bin/env python3
"""PyTorch's values and gradients for `tests/cases/conform_matmul_square.json`: matmul with a
square right operand, 2-D and batched.

Rerun (from the repository root) with the project's virtualenv:

    $TORCHLEAN_PYTHON tools/pytorch/conform_matmul_square.py > tests/cases/conform_matmul_square.json

(`TORCHLEAN_PYTHON=~/.venvs/torchlean-bench/bin/python`). Deterministic: seeded inputs,
float64 throughout, floats written with Python's shortest round-trip repr (exact in f64).

Why the case exists: a matmul left-operand VJP that multiplies by B where it should multiply by
Bᵀ type-checks only when B is square, so only a square right operand can show it. The graph:

    x:[2,3,3] -> reshape [6,3] -> matmul W:[3,3] (2-D, W a payload const) -> reshape [2,3,3]
              -> matmul tanh(x) (batched, the right operand square and depending on x)

with a random seed, so every gradient (x's, W's) goes through a square right operand.
"""
import json

import torch

torch.set_default_dtype(torch.float64)

gen = torch.Generator().manual_seed(14)
x = torch.randn(2, 3, 3, generator=gen, requires_grad=True)
w = torch.randn(3, 3, generator=gen, requires_grad=True)
seed = torch.randn(2, 3, 3, generator=gen)

h = x.reshape(6, 3) @ w
y = h.reshape(2, 3, 3) @ torch.tanh(x)
y.backward(seed)


def t(v):
    return {"shape": list(v.shape), "data": [float(e) for e in v.detach().reshape(-1)]}


nodes = [
    {"id": 0, "kind": "input", "parents": [], "shape": [2, 3, 3]},
    {"id": 1, "kind": "const", "parents": [], "shape": [3, 3], "value_shape": [3, 3]},
    {"id": 2, "kind": "reshape", "parents": [0], "shape": [6, 3],
     "in_shape": [2, 3, 3], "out_shape": [6, 3]},
    {"id": 3, "kind": "matmul", "parents": [2, 1], "shape": [6, 3]},
    {"id": 4, "kind": "reshape", "parents": [3], "shape": [2, 3, 3],
     "in_shape": [6, 3], "out_shape": [2, 3, 3]},
    {"id": 5, "kind": "tanh", "parents": [0], "shape": [2, 3, 3]},
    {"id": 6, "kind": "matmul", "parents": [4, 5], "shape": [2, 3, 3]},
]
case = {
    "format": "torchlean.case.v1",
    "name": "conform_matmul_square",
    "graph": {"format": "torchlean.ir.v1", "input_id": 0, "output_id": 6, "nodes": nodes},
    "payload": {"1": {"value": t(w)}},
    "input": t(x),
    "seed": t(seed),
    "expect": {
        "output": t(y),
        "grad_input": t(x.grad),
        "grad_payload": {"1": {"value": t(w.grad)}},
    },
    "tolerance": {"rtol": 1e-6, "atol": 1e-9},
}
print(json.dumps(case))
