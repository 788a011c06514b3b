"""Writes the September-dialect fixtures of this directory and their expected values.

Each fixture `NAME.json` is a `torchlean.ir.v1` graph in TorchLean's September dialect, written
the way its exporter writes one (`NN/Runtime/PyTorch/Export/TorchExport.lean` of srirampc/
TorchLean @ 3447b74f, as summarised in `../shared/reference/torchlean-wire-latest.md`):
`output_ids`, `value_kind` on every node, weights inline as nested arrays, `const` values flat.
`NAME.expect.json` holds an input, one non-ones seed per output, and what PyTorch computes in
float64 with the same weights: every output, the input gradient and every parameter gradient
(keyed by the file's node id and inline key) of the sum of <seed_k, output_k>.

The forward functions below are written with PyTorch's own ops, not by reading the JSON, so
the expectations are independent of the Rust reader. Run from the repository root:

    $TORCHLEAN_PYTHON crates/ir/tests/september/make_fixtures.py [--out DIR]

(`--out`: write there instead of beside this script; `crates/compiled/tests/dialects.rs` does,
to check that the committed files are what this script writes.)
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))
if "--out" in sys.argv:
    HERE = sys.argv[sys.argv.index("--out") + 1]
gen = torch.Generator().manual_seed(15)


def rand(*shape, scale=1.0):
    return ((torch.rand(*shape, generator=gen) * 2 - 1) * scale).requires_grad_(True)


def node(i, kind, parents, shape, **attrs):
    d = {"id": i, "kind": kind, "parents": parents, "shape": list(shape), "value_kind": "tensor"}
    d.update(attrs)
    return d


def nested(t):
    return t.detach().tolist()


def tensor_json(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


def write(name, nodes, output_ids, x, forward, params):
    """`forward(x) -> list of outputs`; `params`: {(file node id, key): leaf tensor}."""
    graph = {"format": "torchlean.ir.v1", "input_id": 0, "output_ids": output_ids, "nodes": nodes}
    x = x.detach().clone().requires_grad_(True)
    outs = forward(x)
    seeds = [torch.rand(o.shape, generator=gen) + 0.5 for o in outs]
    total = sum((o * s).sum() for o, s in zip(outs, seeds))
    leaves = [x] + list(params.values())
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    grad_payload = {}
    for ((nid, key), leaf), g in zip(params.items(), grads[1:]):
        g = torch.zeros_like(leaf) if g is None else g
        grad_payload.setdefault(str(nid), {})[key] = tensor_json(g)
    expect = {
        "input": tensor_json(x),
        "seeds": [tensor_json(s) for s in seeds],
        "outputs": [tensor_json(o) for o in outs],
        "grad_input": tensor_json(grads[0]),
        "grad_payload": grad_payload,
    }
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(graph, f, indent=1, allow_nan=False)
        f.write("\n")
    with open(os.path.join(HERE, name + ".expect.json"), "w") as f:
        json.dump(expect, f, allow_nan=False)
        f.write("\n")


def mlp():
    w1, b1, w2, b2 = rand(4, 3), rand(4), rand(2, 4), rand(2)
    nodes = [
        node(0, "input", [], [2, 3]),
        node(1, "linear", [0], [2, 4], out_dim=4, in_dim=3, weight=nested(w1), bias=nested(b1)),
        node(2, "relu", [1], [2, 4]),
        node(3, "linear", [2], [2, 2], out_dim=2, in_dim=4, weight=nested(w2), bias=nested(b2)),
    ]
    fwd = lambda x: [F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)]
    params = {(1, "weight"): w1, (1, "bias"): b1, (3, "weight"): w2, (3, "bias"): b2}
    write("mlp", nodes, [3], rand(2, 3, scale=2.0), fwd, params)


def cnn():
    cw, cb, lw, lb = rand(2, 1, 3, 3), rand(2), rand(3, 8), rand(3)
    nodes = [
        node(0, "input", [], [1, 1, 5, 5]),
        node(1, "conv", [0], [1, 2, 5, 5], spatial_rank=2, kernel=[3, 3], stride=[1, 1],
             padding=[1, 1], dilation=[1, 1], padding_after=[1, 1], groups=1, channel_axis=1,
             in_channels=1, out_channels=2, input_spatial=[5, 5], weight=nested(cw),
             bias=nested(cb)),
        node(2, "relu", [1], [1, 2, 5, 5]),
        node(3, "max_pool", [2], [1, 2, 2, 2], spatial_rank=2, kernel=[2, 2], stride=[2, 2],
             padding=[0, 0]),
        node(4, "reshape", [3], [1, 8], in_shape=[1, 2, 2, 2], out_shape=[1, 8]),
        node(5, "linear", [4], [1, 3], out_dim=3, in_dim=8, weight=nested(lw), bias=nested(lb)),
    ]

    def fwd(x):
        h = F.max_pool2d(F.relu(F.conv2d(x, cw, cb, padding=1)), 2, 2)
        return [F.linear(h.reshape(1, 8), lw, lb)]

    params = {(1, "weight"): cw, (1, "bias"): cb, (5, "weight"): lw, (5, "bias"): lb}
    write("cnn", nodes, [5], rand(1, 1, 5, 5, scale=2.0), fwd, params)


def batch_norm():
    gamma, beta, mean = rand(3), rand(3), rand(3, scale=0.5)
    var = (torch.rand(3, generator=gen) + 0.5).requires_grad_(True)
    nodes = [
        node(0, "input", [], [2, 3, 4, 4]),
        node(1, "batch_norm_eval", [0], [2, 3, 4, 4], channel_axis=1, channels=3,
             gamma=nested(gamma), beta=nested(beta), mean=nested(mean), var=nested(var),
             eps=1e-5),
        node(2, "avg_pool", [1], [2, 3, 3, 3], spatial_rank=2, kernel=[2, 2], stride=[2, 2],
             padding=[1, 1]),
        node(3, "reduce_mean", [2], [2, 3], axes=[2, 3], keepdim=False),
    ]

    def fwd(x):
        # F.batch_norm's formula in eval mode, spelled out so that the running statistics get
        # gradients too (PyTorch treats them as buffers)
        c = lambda t: t.view(1, 3, 1, 1)
        h = (x - c(mean)) / torch.sqrt(c(var) + 1e-5) * c(gamma) + c(beta)
        h = F.avg_pool2d(h, 2, 2, padding=1, count_include_pad=True)
        return [h.mean(dim=(2, 3))]

    params = {(1, "gamma"): gamma, (1, "beta"): beta, (1, "mean"): mean, (1, "var"): var}
    write("batch_norm", nodes, [3], rand(2, 3, 4, 4, scale=2.0), fwd, params)


def reductions():
    nodes = [
        node(0, "input", [], [2, 3, 4]),
        node(1, "reduce_sum", [0], [1, 3, 1], axes=[0, 2], keepdim=True),
        node(2, "reduce_mean", [0], [2, 4], axes=[1], keepdim=False),
        node(3, "reduce_sum", [0], [], axes=[0, 1, 2], keepdim=False),
        node(4, "reduce_mean", [0], [2, 1, 4], axes=[1], keepdim=True),
        node(5, "reduce_sum", [4], [2, 1, 4], axes=[], keepdim=False),
    ]
    fwd = lambda x: [
        x.sum(dim=(0, 2), keepdim=True),
        x.mean(dim=1),
        x.sum(),
        x.mean(dim=1, keepdim=True),
    ]
    write("reductions", nodes, [1, 2, 3, 5], rand(2, 3, 4, scale=2.0), fwd, {})


def two_outputs():
    c = rand(2, 3)
    nodes = [
        node(0, "input", [], [3, 2]),
        node(1, "tanh", [0], [3, 2]),
        node(2, "transpose", [1], [2, 3], axis1=0, axis2=1),
        node(3, "const", [], [2, 3], value_shape=[2, 3], values=c.detach().reshape(-1).tolist()),
        node(4, "mul_elem", [2, 3], [2, 3]),
        node(5, "reduce_sum", [4], [], axes=[0, 1], keepdim=False),
    ]

    def fwd(x):
        t = torch.tanh(x)
        return [(t.transpose(0, 1) * c).sum(), t]

    write("two_outputs", nodes, [5, 1], rand(3, 2, scale=2.0), fwd, {(3, "value"): c})


def inline_weights():
    m, v = rand(3, 2), rand(2)
    gamma, beta = rand(2), rand(2)
    eps = torch.tensor(0.1, requires_grad=True)
    nodes = [
        node(0, "input", [], [2, 4, 3]),
        node(1, "const", [], [3, 2], value_shape=[3, 2], values=m.detach().reshape(-1).tolist()),
        node(2, "matmul", [0, 1], [2, 4, 2]),
        node(3, "layernorm", [2], [2, 4, 2], axis=2, gamma=nested(gamma), beta=nested(beta),
             eps=1e-5),
        node(4, "const", [], [], value_shape=[], values=[0.1]),
        node(5, "safe_log", [3, 4], [2, 4, 2]),
        node(6, "const", [], [2], value_shape=[2], values=v.detach().tolist()),
        node(7, "matmul", [5, 6], [2, 4]),
    ]

    def fwd(x):
        h = F.layer_norm(torch.matmul(x, m), (2,), gamma, beta, eps=1e-5)
        h = torch.log(F.softplus(h) + eps)
        return [torch.matmul(h, v)]

    params = {(1, "value"): m, (3, "gamma"): gamma, (3, "beta"): beta, (4, "value"): eps,
              (6, "value"): v}
    write("inline_weights", nodes, [7], rand(2, 4, 3, scale=2.0), fwd, params)


if __name__ == "__main__":
    mlp()
    cnn()
    batch_norm()
    reductions()
    two_outputs()
    inline_weights()
