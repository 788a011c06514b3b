#!/usr/bin/env python3
"""PyTorch -> TorchLean IR: capture an `nn.Module` with `torch.export` and write
`torchlean.ir.v1` JSON plus its payload (safetensors, or Payload JSON).

    $TORCHLEAN_PYTHON tools/torch_export/torch_export.py model.py:build \
        -o graph.json --payload weights.safetensors [--input x.json]

`model.py:build` names a callable returning a module, or a `(module, example_input)` pair
(then `--input` is optional; with `--input` the example comes from that tensor JSON file).
The example input fixes the graph's shapes. Unsupported ops and attribute values are all
reported at once, one line each with the source location, and the exit code is 2.

As a library: `export(module, x)` returns an `Export` (graph dict, payload, and where each
parameter went), `write_payload_json`, `write_payload_safetensors`, `tensor_json`.

The mapping (aten op -> IR kinds) is the `HANDLERS` table below; see README.md.
"""
import argparse
import importlib.util
import json
import math
import operator
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchlean_ops  # noqa: E402,F401  (registers the torchlean:: custom ops)

aten = torch.ops.aten
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


class Problem(Exception):
    """One op the exporter cannot write, with why."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class ExportFailed(Exception):
    """Every problem found, each `(op name, source location, reason)`."""

    def __init__(self, problems):
        super().__init__(f"{len(problems)} unsupported op(s)")
        self.problems = problems

    def lines(self):
        return [f"{where}: {op}: {reason}" for op, where, reason in self.problems]


class Poison:
    """The value of an op that could not be exported (its readers are skipped quietly)."""


class Leaf:
    """A parameter, buffer or lifted constant: becomes payload of the op that reads it, or a
    `const` node the first time it is read as a plain tensor."""

    def __init__(self, name, tensor, is_param):
        self.name = name
        self.tensor = tensor.detach()
        self.is_param = is_param


class Export:
    """The result: `graph` (a `torchlean.ir.v1` dict), `payload` (`{node id: {name: tensor |
    float}}`) and `sites` (`{parameter name: [(node id, payload name), ...]}`)."""

    def __init__(self, graph, payload, sites):
        self.graph = graph
        self.payload = payload
        self.sites = sites


def source_location(node):
    """The innermost frame of the user's code (not torch's) in the node's stack trace."""
    trace = node.meta.get("stack_trace") or ""
    frames = []
    for line in trace.splitlines():
        line = line.strip()
        if line.startswith("File "):
            parts = line.split('"')
            if len(parts) >= 3:
                path = parts[1]
                rest = parts[2]
                lineno = rest.split("line ")[1].split(",")[0] if "line " in rest else "?"
                frames.append((path, lineno))
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(TORCH_DIR)]
    pick = (user or frames or [None])[-1]
    return f"{pick[0]}:{pick[1]}" if pick else "<no stack trace>"


def op_name(target):
    if isinstance(target, torch._ops.OpOverload):
        return f"{target._schema.name}.{target._overloadname}".replace("::", ".")
    return getattr(target, "__name__", str(target))


def bind(node):
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    out = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def shape_of(node):
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return [int(d) for d in val.shape]
    raise Problem("no static tensor shape")


def norm_axis(axis, rank):
    axis = int(axis)
    if axis < 0:
        axis += rank
    if not 0 <= axis < max(rank, 1):
        raise Problem(f"axis {axis} out of range for rank {rank}")
    return axis


class Builder:
    def __init__(self):
        self.nodes = []
        self.shapes = []
        self.payload = {}
        self.sites = {}
        self.consts = {}

    def add(self, kind, parents, shape, **attrs):
        nid = len(self.nodes)
        node = {"id": nid, "kind": kind, "parents": list(parents), "shape": list(shape)}
        node.update(attrs)
        self.nodes.append(node)
        self.shapes.append(list(shape))
        return nid

    def put(self, nid, name, value, leaf=None):
        self.payload.setdefault(nid, {})[name] = value
        if leaf is not None and leaf.is_param:
            self.sites.setdefault(leaf.name, []).append((nid, name))

    # values -------------------------------------------------------------------------------

    def tensor(self, v):
        """The IR id of a tensor value (a leaf becomes a `const` node, once)."""
        if isinstance(v, Leaf):
            if v.name not in self.consts:
                shape = [int(d) for d in v.tensor.shape]
                nid = self.add("const", [], shape, value_shape=shape)
                self.put(nid, "value", v.tensor, v)
                self.consts[v.name] = nid
            return self.consts[v.name]
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise Problem(f"operand {v!r} is not a tensor")

    def shape(self, nid):
        return self.shapes[nid]

    def broadcast(self, nid, to):
        frm = self.shape(nid)
        if frm == list(to):
            return nid
        return self.add("broadcast_to", [nid], to, from_shape=frm, to_shape=list(to))

    def reshape(self, nid, to):
        frm = self.shape(nid)
        to = list(to)
        if frm == to:
            return nid
        if len(to) == 1 and len(frm) != 1:
            return self.add("flatten", [nid], to, value_shape=frm)
        return self.add("reshape", [nid], to, in_shape=frm, out_shape=to)


# handlers: (builder, bound args, fx node) -> IR id (or a tuple for multi-output ops) -------

UNARY = {
    aten.detach.default: "detach",
}

# What the exporter reads of each op row of crates/spec/src/ops/desc.rs (generated by
# `UPDATE_DOCS=1 cargo test -p torchlean-spec --test docs`).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rows.json")) as f:
    ROWS = json.load(f)

# A row whose PyTorch expression is one call on its operand, `F.f({x}, arg={attr}, ...)` or
# `torch.f({x})`: `aten.f` maps to its kind, each keyword argument to the attribute it names.
ROW_CALL = re.compile(r"^(?:F|torch)\.(\w+)\(\{x\}((?:, \w+=\{\w+\})*)\)$")


def h_row(kind, args, op):
    """The handler of `op` for the row of `kind`: `args` are (aten argument, attribute) pairs;
    every other argument of `op` with a default must be at it."""
    named = {arg for arg, _ in args}
    fixed = [(a.name, a.default_value) for a in op._schema.arguments[1:]
             if a.name not in named and a.has_default_value()]

    def h(b, a, node):
        for name, default in fixed:
            if name in a and a[name] != default:
                raise Problem(f"{kind} with {name}={a[name]} (only {default})")
        x = b.tensor(a["self"])
        attrs = {attr: a[arg] for arg, attr in args if arg in a}
        return b.add(kind, [x], b.shape(x), **attrs)

    return h


def row_handlers():
    """`{aten op: handler}` for every row whose PyTorch expression is one call (ROW_CALL)."""
    out = {}
    for row in ROWS:
        m = ROW_CALL.match(row["torch"])
        packet = getattr(aten, m.group(1), None) if m and row["operands"] == ["x"] else None
        op = getattr(packet, "default", None)
        if op is not None:
            out[op] = h_row(row["kind"], re.findall(r"(\w+)=\{(\w+)\}", m.group(2)), op)
    return out


IDENTITY = {aten.clone.default, aten.alias.default, aten.contiguous.default}


def h_unary(kind):
    def h(b, a, node):
        x = b.tensor(a["self"])
        return b.add(kind, [x], b.shape(x))

    return h


def h_identity(b, a, node):
    return b.tensor(a["self"])


def h_dropout(b, a, node):
    if a.get("train"):
        raise Problem("dropout in training mode (export the module in eval mode)")
    return b.tensor(a["input"])


def h_softplus(b, a, node):
    if float(a["beta"]) != 1.0:
        raise Problem(f"softplus with beta={a['beta']} (only beta=1)")
    x = b.tensor(a["self"])
    return b.add("softplus", [x], b.shape(x))


def clamp_attrs(lo, hi):
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return attrs


def h_clamp(b, a, node):
    lo, hi = a.get("min"), a.get("max")
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        raise Problem("clamp with tensor bounds")
    x = b.tensor(a["self"])
    return b.add("clamp", [x], b.shape(x), **clamp_attrs(lo, hi))


def h_clamp_min(b, a, node):
    x = b.tensor(a["self"])
    return b.add("clamp", [x], b.shape(x), **clamp_attrs(a["min"], None))


def h_clamp_max(b, a, node):
    x = b.tensor(a["self"])
    return b.add("clamp", [x], b.shape(x), **clamp_attrs(None, a["max"]))


def h_hardtanh(b, a, node):
    x = b.tensor(a["self"])
    return b.add("clamp", [x], b.shape(x), **clamp_attrs(a["min_val"], a["max_val"]))


def h_rsqrt(b, a, node):
    x = b.tensor(a["self"])
    s = b.add("sqrt", [x], b.shape(x))
    return b.add("inv", [s], b.shape(x))


def h_square(b, a, node):
    x = b.tensor(a["self"])
    return b.add("mul_elem", [x, x], b.shape(x))


def h_pow(b, a, node):
    if a["exponent"] != 2:
        raise Problem(f"pow with exponent {a['exponent']} (only 2)")
    x = b.tensor(a["self"])
    return b.add("mul_elem", [x, x], b.shape(x))


def scalar_const(b, c, shape):
    """A scalar `const` broadcast to `shape` (for a number operand with no exact scalar kind)."""
    nid = b.add("const", [], [], value_shape=[])
    b.put(nid, "value", torch.tensor(float(c), dtype=torch.float64))
    return b.broadcast(nid, shape)


def binary(kind, b, lhs, rhs, out):
    l = b.broadcast(b.tensor(lhs), out)
    r = b.broadcast(b.tensor(rhs), out)
    return b.add(kind, [l, r], out)


def h_add_sub(sign):
    def h(b, a, node):
        x, y, alpha = a["self"], a["other"], a.get("alpha", 1)
        out = shape_of(node)
        if not a["_other_is_tensor"]:
            return b.add("add_scalar", [b.tensor(x)], out, c=float(sign * alpha * y))
        y = b.tensor(y)
        if alpha != 1:
            y = b.add("scale", [y], b.shape(y), c=float(alpha))
        return binary("add" if sign > 0 else "sub", b, x, y, out)

    return h


def exact_inverse(c):
    m, _ = math.frexp(c)
    return c != 0 and abs(m) == 0.5


def h_mul(b, a, node):
    x, y = a["self"], a["other"]
    out = shape_of(node)
    if not a["_other_is_tensor"]:
        return b.add("scale", [b.tensor(x)], out, c=float(y))
    return binary("mul_elem", b, x, y, out)


def h_div(b, a, node):
    if a.get("rounding_mode") is not None:
        raise Problem(f"div with rounding_mode={a['rounding_mode']!r}")
    x, y = a["self"], a["other"]
    out = shape_of(node)
    if not a["_other_is_tensor"]:
        if exact_inverse(float(y)):
            return b.add("scale", [b.tensor(x)], out, c=1.0 / float(y))
        return b.add("div", [b.broadcast(b.tensor(x), out), scalar_const(b, y, out)], out)
    return binary("div", b, x, y, out)


def h_rsub(b, a, node):
    if not a["_other_is_tensor"]:
        x = b.tensor(a["self"])
        n = b.add("neg", [x], b.shape(x))
        return b.add("add_scalar", [n], b.shape(x), c=float(a["other"]) * float(a.get("alpha", 1)))
    raise Problem("rsub of two tensors")


def h_binary(kind):
    def h(b, a, node):
        return binary(kind, b, a["self"], a["other"], shape_of(node))

    return h


def h_softmax(kind):
    def h(b, a, node):
        x = b.tensor(a["self"])
        axis = norm_axis(a["dim"], len(b.shape(x)))
        return b.add(kind, [x], b.shape(x), axis=axis)

    return h


def h_linear(b, a, node):
    w, bias = a["weight"], a["bias"]
    if not isinstance(w, Leaf) or (bias is not None and not isinstance(bias, Leaf)):
        raise Problem("linear with a computed weight or bias (only parameters)")
    x = b.tensor(a["input"])
    nid = b.add("linear", [x], shape_of(node))
    b.put(nid, "weight", w.tensor, w)
    if bias is None:
        b.put(nid, "bias", torch.zeros(w.tensor.shape[0], dtype=torch.float64))
    else:
        b.put(nid, "bias", bias.tensor, bias)
    return nid


def same_pair(v, what):
    v = list(v) if isinstance(v, (list, tuple)) else [v, v]
    if len(v) == 1:
        v = v * 2
    if v[0] != v[1]:
        raise Problem(f"{what} {v} differs between the two axes")
    return int(v[0])


def h_conv2d(b, a, node):
    return conv_node(b, a, node, "conv2d")


def h_conv2d_relu(b, a, node):
    return conv_node(b, a, node, "conv2d_relu")


def conv_node(b, a, node, kind):
    """A `conv2d` or `conv2d_relu` node (`kind`) from the convolution's arguments `a`."""
    w, bias = a["weight"], a["bias"]
    if not isinstance(w, Leaf) or (bias is not None and not isinstance(bias, Leaf)):
        raise Problem(f"{kind} with a computed weight or bias (only parameters)")
    if isinstance(a["padding"], str):
        raise Problem(f"{kind} with padding={a['padding']!r} (only numbers)")
    stride = same_pair(a["stride"], "stride")
    padding = same_pair(a["padding"], "padding")
    dilation = same_pair(a["dilation"], "dilation")
    groups = int(a["groups"])
    out_c, group_in_c, kh, kw = (int(d) for d in w.tensor.shape)
    x = b.tensor(a["input"])
    # groups and dilation are written only off their defaults (TorchLean's conv2d has neither)
    extra = {k: v for k, v in (("groups", groups), ("dilation", dilation)) if v != 1}
    nid = b.add(kind, [x], shape_of(node), inC=group_in_c * groups, outC=out_c, kH=kh,
                kW=kw, stride=stride, padding=padding, **extra)
    b.put(nid, "weight", w.tensor, w)
    if bias is None:
        b.put(nid, "bias", torch.zeros(out_c, dtype=torch.float64))
    else:
        b.put(nid, "bias", bias.tensor, bias)
    return nid


def pool_window(a):
    k = list(a["kernel_size"])
    if len(k) == 1:
        k = k * 2
    stride = a["stride"]
    stride = same_pair(stride if stride else k, "stride") if stride or k[0] == k[1] else None
    if stride is None:
        raise Problem(f"pool with kernel {k} and no stride (the stride differs between axes)")
    if a.get("ceil_mode"):
        raise Problem("pool with ceil_mode=True")
    return int(k[0]), int(k[1]), stride, same_pair(a["padding"], "padding")


def h_max_pool(b, a, node):
    if any(int(d) != 1 for d in (a.get("dilation") or [1])):
        raise Problem(f"max_pool2d with dilation={list(a['dilation'])} (only 1)")
    kh, kw, stride, padding = pool_window(a)
    x = b.tensor(a["self"])
    out = shape_of(node) if node.target is aten.max_pool2d.default else [int(d) for d in node.meta["val"][0].shape]
    if padding == 0:
        nid = b.add("max_pool2d", [x], out, kH=kh, kW=kw, stride=stride)
    else:
        nid = b.add("max_pool2d_pad", [x], out, kH=kh, kW=kw, stride=stride, padding=padding)
    return nid if node.target is aten.max_pool2d.default else (nid, Poison())


def h_avg_pool(b, a, node):
    if a.get("divisor_override") is not None:
        raise Problem("avg_pool2d with divisor_override")
    kh, kw, stride, padding = pool_window(a)
    if padding and not a.get("count_include_pad", True):
        raise Problem("avg_pool2d with count_include_pad=False (only PyTorch's default True)")
    x = b.tensor(a["self"])
    if padding == 0:
        return b.add("avg_pool2d", [x], shape_of(node), kH=kh, kW=kw, stride=stride)
    return b.add("avg_pool2d_pad", [x], shape_of(node), kH=kh, kW=kw, stride=stride, padding=padding)


def h_adaptive_avg_pool(b, a, node):
    if [int(d) for d in a["output_size"]] != [1, 1]:
        raise Problem(f"adaptive_avg_pool2d to {list(a['output_size'])} (only [1, 1])")
    x = b.tensor(a["self"])
    s = b.shape(x)
    r = len(s)
    m = b.add("reduce_mean", [x], s[:-1], axis=r - 1)
    m = b.add("reduce_mean", [m], s[:-2], axis=r - 2)
    return b.reshape(m, shape_of(node))


def norm_leaf(v, what):
    if v is not None and not isinstance(v, Leaf):
        raise Problem(f"{what} is computed (only parameters and buffers)")
    return v


def h_batch_norm(b, a, node):
    x = b.tensor(a["input"])
    s = b.shape(x)
    c = s[1] if len(s) >= 2 else 0
    w, bias = norm_leaf(a["weight"], "weight"), norm_leaf(a["bias"], "bias")
    rm, rv = norm_leaf(a["running_mean"], "running_mean"), norm_leaf(a["running_var"], "running_var")
    ones = torch.ones(c, dtype=torch.float64)
    zeros = torch.zeros(c, dtype=torch.float64)
    eps = float(a["eps"])
    if a["training"]:
        if len(s) != 4:
            raise Problem(f"batch norm in training mode on rank {len(s)} (only [N, C, H, W])")
        nid = b.add("batch_norm2d_nchw_train", [x], s, channels=c, eps=eps)
    else:
        if rm is None or rv is None:
            raise Problem("batch norm in eval mode without running statistics")
        nid = b.add("batch_norm2d_nchw_eval", [x], s, channels=c)
    b.put(nid, "gamma", w.tensor if w else ones, w)
    b.put(nid, "beta", bias.tensor if bias else zeros, bias)
    if not a["training"]:
        b.put(nid, "mean", rm.tensor, rm)
        b.put(nid, "var", rv.tensor, rv)
        b.put(nid, "eps", eps)
    return nid


def h_layer_norm(b, a, node):
    x = b.tensor(a["input"])
    s = b.shape(x)
    axis = len(s) - len(a["normalized_shape"])
    out = b.add("layernorm", [x], s, axis=axis, eps=float(a["eps"]))
    if a["weight"] is not None:
        out = binary("mul_elem", b, out, a["weight"], s)
    if a["bias"] is not None:
        out = binary("add", b, out, a["bias"], s)
    return out


def h_view(b, a, node):
    return b.reshape(b.tensor(a["self"]), shape_of(node))


def h_permute(b, a, node):
    x = b.tensor(a["self"])
    r = len(b.shape(x))
    perm = [norm_axis(d, r) for d in a["dims"]]
    if perm == list(range(r)):
        return x
    return b.add("permute", [x], shape_of(node), perm=perm)


def transpose(b, x, d0, d1, out):
    r = len(b.shape(x))
    d0, d1 = sorted((norm_axis(d0, r), norm_axis(d1, r)))
    if d0 == d1:
        return x
    if (d0, d1) == (0, 1):
        return b.add("swap_first_two", [x], out)
    if r == 3 and (d0, d1) == (1, 2):
        return b.add("transpose3d_last_two", [x], out)
    return b.add("transpose", [x], out, dim0=d0, dim1=d1)


def h_transpose(b, a, node):
    return transpose(b, b.tensor(a["self"]), a["dim0"], a["dim1"], shape_of(node))


def h_t(b, a, node):
    x = b.tensor(a["self"])
    if len(b.shape(x)) < 2:
        return x
    return transpose(b, x, 0, 1, shape_of(node))


def h_expand(b, a, node):
    return b.broadcast(b.tensor(a["self"]), shape_of(node))


def h_broadcast_tensors(b, a, node):
    xs = [b.tensor(v) for v in a["tensors"]]
    out = [int(d) for d in torch.broadcast_shapes(*(torch.Size(b.shape(x)) for x in xs))]
    return tuple(b.broadcast(x, out) for x in xs)


def h_cat(b, a, node):
    xs = [b.tensor(v) for v in a["tensors"]]
    out = shape_of(node)
    if len(xs) == 1:
        return xs[0]
    return b.add("concat", xs, out, axis=norm_axis(a["dim"], len(out)))


def slice_node(b, x, axis, start, length):
    s = b.shape(x)
    if start == 0 and length == s[axis]:
        return x
    out = list(s)
    out[axis] = length
    return b.add("slice", [x], out, axis=axis, start=start, len=length)


def h_slice(b, a, node):
    x = b.tensor(a["self"])
    s = b.shape(x)
    axis = norm_axis(a["dim"], len(s))
    if (a.get("step") or 1) != 1:
        raise Problem(f"slice with step {a['step']} (only 1)")
    n = s[axis]
    start, end = a.get("start"), a.get("end")
    start = 0 if start is None else int(start)
    end = n if end is None else int(end)
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(start, min(n, end + n if end < 0 else end))
    return slice_node(b, x, axis, start, end - start)


def h_narrow(b, a, node):
    x = b.tensor(a["self"])
    s = b.shape(x)
    axis = norm_axis(a["dim"], len(s))
    start = int(a["start"])
    return slice_node(b, x, axis, start + s[axis] if start < 0 else start, int(a["length"]))


def h_select(b, a, node):
    x = b.tensor(a["self"])
    s = b.shape(x)
    axis = norm_axis(a["dim"], len(s))
    i = int(a["index"])
    return b.reshape(slice_node(b, x, axis, i + s[axis] if i < 0 else i, 1), shape_of(node))


def reduce_axes(kind, b, x, dims, keepdim, out):
    s = b.shape(x)
    axes = sorted({norm_axis(d, len(s)) for d in dims}, reverse=True)
    for ax in axes:
        shape = b.shape(x)
        x = b.add(kind, [x], shape[:ax] + shape[ax + 1:], axis=ax)
    return b.reshape(x, out) if keepdim else x


def h_sum_all(b, a, node):
    x = b.tensor(a["self"])
    return b.add("sum", [x], [])


def h_sum_dim(b, a, node):
    x = b.tensor(a["self"])
    dims = a["dim"]
    if not dims:
        return b.reshape(b.add("sum", [x], []), shape_of(node))
    return reduce_axes("reduce_sum", b, x, dims, a["keepdim"], shape_of(node))


def mean_all(b, x):
    s = b.shape(x)
    if not s:
        return x
    flat = b.reshape(x, [math.prod(s)])
    return b.add("reduce_mean", [flat], [], axis=0)


def h_mean_all(b, a, node):
    return mean_all(b, b.tensor(a["self"]))


def h_mean_dim(b, a, node):
    x = b.tensor(a["self"])
    dims = a["dim"]
    if not dims:
        return b.reshape(mean_all(b, x), shape_of(node))
    return reduce_axes("reduce_mean", b, x, dims, a["keepdim"], shape_of(node))


def h_matmul(b, a, node):
    x, y = b.tensor(a["self"]), b.tensor(a["other"] if "other" in a else a["mat2"])
    sx, sy = b.shape(x), b.shape(y)
    out = shape_of(node)
    if len(sx) < 2 or len(sy) < 2:
        raise Problem(f"matmul of ranks {len(sx)} and {len(sy)} (both must be at least 2)")
    if len(sx) == len(sy) == 2 or (len(sx) == len(sy) == 3 and sx[0] == sy[0]):
        return b.add("matmul", [x, y], out)
    if len(sy) == 2:
        rows = math.prod(sx[:-1])
        flat = b.reshape(x, [rows, sx[-1]])
        m = b.add("matmul", [flat, y], [rows, sy[-1]])
        return b.reshape(m, out)
    batch = out[:-2]
    n = math.prod(batch)
    x3 = b.reshape(b.broadcast(x, batch + sx[-2:]), [n] + sx[-2:])
    y3 = b.reshape(b.broadcast(y, batch + sy[-2:]), [n] + sy[-2:])
    m = b.add("matmul", [x3, y3], [n, sx[-2], sy[-1]])
    return b.reshape(m, out)


def h_mse(b, a, node):
    if a["reduction"] != 1:
        raise Problem(f"mse_loss with reduction {a['reduction']} (only mean)")
    x = b.tensor(a["self"])
    t = b.broadcast(b.tensor(a["target"]), b.shape(x))
    return b.add("mse_loss", [x, t], [])


def h_cross_entropy(b, a, node):
    if a.get("weight") is not None or float(a.get("label_smoothing") or 0.0) != 0.0:
        raise Problem("cross_entropy with class weights or label smoothing")
    if a["reduction"] not in (1, 2):
        raise Problem("cross_entropy with reduction none")
    t = a["target"]
    if not isinstance(t, Leaf):
        raise Problem("cross_entropy whose target is not a buffer or constant")
    if bool((t.tensor == a.get("ignore_index", -100)).any()):
        raise Problem("cross_entropy with ignored targets")
    x = b.tensor(a["self"])
    if len(b.shape(x)) != 2:
        raise Problem(f"cross_entropy on rank {len(b.shape(x))} logits (only [N, C])")
    nid = b.add("cross_entropy", [x], [], reduction="mean" if a["reduction"] == 1 else "sum")
    b.put(nid, "target", t.tensor.to(torch.float64))
    return nid


def h_embedding(b, a, node):
    if a.get("padding_idx", -1) not in (-1, None):
        raise Problem("embedding with padding_idx")
    if a.get("scale_grad_by_freq") or a.get("sparse"):
        raise Problem("embedding with scale_grad_by_freq or sparse gradients")
    ids = a["indices"]
    if not isinstance(ids, Leaf):
        raise Problem("embedding whose ids are not a buffer or constant")
    return b.add("embedding", [b.tensor(ids), b.tensor(a["weight"])], shape_of(node))


def checked_key(b, key):
    if int(key) != len(b.nodes):
        raise Problem(f"key {key} is not the node's id {len(b.nodes)} (the IR keys a random "
                      "node's stream by its id)")
    return int(key)


def h_causal_attention(b, a, node):
    x = b.tensor(a["qkv"])
    return b.add("causal_attention", [x], shape_of(node), heads=int(a["heads"]))


def h_rand_uniform(b, a, node):
    checked_key(b, a["key"])
    return b.add("rand_uniform", [], [int(d) for d in a["shape"]], seed=int(a["seed"]))


def h_bernoulli_mask(b, a, node):
    p = b.tensor(a["keep_prob"])
    checked_key(b, a["key"])
    return b.add("bernoulli_mask", [p], [int(d) for d in a["shape"]], seed=int(a["seed"]))


HANDLERS = {
    **row_handlers(),
    **{op: h_unary(kind) for op, kind in UNARY.items()},
    **{op: h_identity for op in IDENTITY},
    aten.dropout.default: h_dropout,
    aten.softplus.default: h_softplus,
    aten.clamp.default: h_clamp,
    aten.clamp_min.default: h_clamp_min,
    aten.clamp_max.default: h_clamp_max,
    aten.hardtanh.default: h_hardtanh,
    aten.rsqrt.default: h_rsqrt,
    aten.square.default: h_square,
    aten.pow.Tensor_Scalar: h_pow,
    aten.add.Tensor: h_add_sub(1),
    aten.sub.Tensor: h_add_sub(-1),
    aten.mul.Tensor: h_mul,
    aten.div.Tensor: h_div,
    aten.div.Tensor_mode: h_div,
    aten.rsub.Scalar: h_rsub,
    aten.maximum.default: h_binary("max_elem"),
    aten.minimum.default: h_binary("min_elem"),
    aten.softmax.int: h_softmax("softmax"),
    aten._softmax.default: h_softmax("softmax"),
    aten.log_softmax.int: h_softmax("log_softmax"),
    aten._log_softmax.default: h_softmax("log_softmax"),
    aten.linear.default: h_linear,
    aten.conv2d.default: h_conv2d,
    aten.max_pool2d.default: h_max_pool,
    aten.max_pool2d_with_indices.default: h_max_pool,
    aten.avg_pool2d.default: h_avg_pool,
    aten.adaptive_avg_pool2d.default: h_adaptive_avg_pool,
    aten.batch_norm.default: h_batch_norm,
    aten.layer_norm.default: h_layer_norm,
    aten.view.default: h_view,
    aten.reshape.default: h_view,
    aten._unsafe_view.default: h_view,
    aten.flatten.using_ints: h_view,
    aten.unsqueeze.default: h_view,
    aten.squeeze.dim: h_view,
    aten.squeeze.dims: h_view,
    aten.squeeze.default: h_view,
    aten.permute.default: h_permute,
    aten.transpose.int: h_transpose,
    aten.t.default: h_t,
    aten.expand.default: h_expand,
    aten.cat.default: h_cat,
    aten.broadcast_tensors.default: h_broadcast_tensors,
    aten.slice.Tensor: h_slice,
    aten.narrow.default: h_narrow,
    aten.select.int: h_select,
    aten.sum.default: h_sum_all,
    aten.sum.dim_IntList: h_sum_dim,
    aten.mean.default: h_mean_all,
    aten.mean.dim: h_mean_dim,
    aten.matmul.default: h_matmul,
    aten.mm.default: h_matmul,
    aten.bmm.default: h_matmul,
    aten.mse_loss.default: h_mse,
    aten.cross_entropy_loss.default: h_cross_entropy,
    aten.embedding.default: h_embedding,
    torch.ops.torchlean.causal_attention.default: h_causal_attention,
    torch.ops.torchlean.conv2d_relu.default: h_conv2d_relu,
    torch.ops.torchlean.rand_uniform.default: h_rand_uniform,
    torch.ops.torchlean.bernoulli_mask.default: h_bernoulli_mask,
}


def leaves(ep, module):
    """`{placeholder name: Leaf}` for every parameter, buffer and lifted constant."""
    sig = ep.graph_signature
    state = ep.state_dict
    out = {}
    for ph, name in sig.inputs_to_parameters.items():
        out[ph] = Leaf(name, state[name], True)
    for ph, name in sig.inputs_to_buffers.items():
        t = state[name] if name in state else ep.constants[name]
        out[ph] = Leaf(name, t, False)
    for ph, name in sig.inputs_to_lifted_tensor_constants.items():
        out[ph] = Leaf(name, ep.constants[name], False)
    return out


def resolve(env, v):
    if isinstance(v, torch.fx.Node):
        return env[v.name]
    if isinstance(v, (list, tuple)):
        return type(v)(resolve(env, x) for x in v)
    return v


def resolve_ghost(env, v, scratch):
    """`resolve`, with each value that could not be exported replaced by an input of its
    shape in `scratch`."""
    if isinstance(v, torch.fx.Node):
        got = env[v.name]
        if isinstance(got, Poison):
            val = v.meta.get("val")
            if isinstance(val, torch.Tensor):
                return scratch.add("input", [], [int(d) for d in val.shape])
        return got
    if isinstance(v, (list, tuple)):
        return type(v)(resolve_ghost(env, x, scratch) for x in v)
    return v


def poisoned(v):
    if isinstance(v, Poison):
        return True
    if isinstance(v, (list, tuple)):
        return any(poisoned(x) for x in v)
    return False


def user_outputs(ep, node):
    """The output node's user outputs (not the buffer mutations of training mode)."""
    outs = node.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    specs = ep.graph_signature.output_specs
    if len(specs) != len(outs):
        return outs
    user = torch.export.graph_signature.OutputKind.USER_OUTPUT
    return [o for o, s in zip(outs, specs) if s.kind == user]


def live_nodes(ep):
    """The names of the nodes the user outputs depend on."""
    out = next(n for n in ep.graph.nodes if n.op == "output")
    todo = [o for o in user_outputs(ep, out) if isinstance(o, torch.fx.Node)]
    live = set()
    while todo:
        n = todo.pop()
        if n.name in live:
            continue
        live.add(n.name)
        todo.extend(n.all_input_nodes)
    return live


def export(module, x):
    """Export `module` applied to the example input `x` (one tensor), in the mode the module
    is in (`eval()` it first for running statistics). Raises `ExportFailed` with every
    problem."""
    ep = torch.export.export(module, (x,))
    sig = ep.graph_signature
    user_inputs = list(sig.user_inputs)
    b = Builder()
    problems = []
    if len(user_inputs) != 1:
        problems.append(("module", "<signature>", f"{len(user_inputs)} inputs (only one)"))
    env = dict(leaves(ep, module))
    out_id = None
    live = live_nodes(ep)
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.name not in live:
            continue
        if node.op == "placeholder":
            if node.name in env:
                continue
            if user_inputs and node.name == user_inputs[0]:
                env[node.name] = b.add("input", [], shape_of(node))
            else:
                env[node.name] = Poison()
        elif node.op == "call_function":
            name = op_name(node.target)
            if node.target is operator.getitem:
                src = resolve(env, node.args[0])
                env[node.name] = Poison() if poisoned(src) else src[node.args[1]]
                continue
            handler = HANDLERS.get(node.target)
            if handler is None:
                problems.append((name, source_location(node), "no TorchLean IR kind"))
                env[node.name] = Poison()
                continue
            bound = bind(node)
            args = {k: resolve(env, v) for k, v in bound.items()}
            target = b
            if poisoned(list(args.values())):
                # an operand could not be exported: check this op's own attributes on a
                # scratch graph (operands as inputs of their shapes), so its problems are
                # reported too, and keep nothing of it
                target = Builder()
                args = {k: resolve_ghost(env, v, target) for k, v in bound.items()}
            args["_other_is_tensor"] = isinstance(bound.get("other"), torch.fx.Node)
            try:
                env[node.name] = handler(target, args, node)
            except Problem as p:
                problems.append((name, source_location(node), p.reason))
                env[node.name] = Poison()
            if target is not b:
                env[node.name] = Poison()
        elif node.op == "output":
            outs = user_outputs(ep, node)
            if len(outs) != 1:
                problems.append(("output", "<signature>", f"{len(outs)} outputs (only one)"))
                continue
            v = resolve(env, outs[0])
            if not poisoned(v):
                try:
                    out_id = b.tensor(v)
                except Problem as p:
                    problems.append(("output", "<signature>", p.reason))
    if problems:
        raise ExportFailed(problems)
    graph = {"format": "torchlean.ir.v1", "input_id": 0, "output_id": out_id, "nodes": b.nodes}
    return Export(graph, b.payload, b.sites)


# files ------------------------------------------------------------------------------------


def number(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def tensor_json(t):
    """Tensor JSON (SPEC 3): shape and flat row-major float64 data."""
    t = t.detach().to(torch.float64).contiguous()
    return {"shape": [int(d) for d in t.shape], "data": [number(v) for v in t.reshape(-1).tolist()]}


def tensor_from_json(v):
    data = [float(x) for x in v["data"]]
    return torch.tensor(data, dtype=torch.float64).reshape(v["shape"])


def payload_json(payload):
    out = {}
    for nid in sorted(payload):
        entry = {}
        for name, v in payload[nid].items():
            entry[name] = float(v) if name == "eps" else tensor_json(v)
        out[str(nid)] = entry
    return out


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def write_payload_json(path, payload):
    with open(path, "w") as f:
        f.write(dumps(payload_json(payload)) + "\n")


def write_payload_safetensors(path, payload):
    from safetensors.torch import save_file

    tensors, meta = {}, {}
    for nid in sorted(payload):
        for name, v in payload[nid].items():
            if name == "eps":
                meta[f"{nid}.eps"] = repr(float(v))
            else:
                tensors[f"{nid}.{name}"] = v.detach().to(torch.float64).contiguous()
    save_file(tensors, path, metadata=meta or None)


def bad_input(line):
    print(line, file=sys.stderr)
    sys.exit(2)


def load_factory(spec):
    path, _, attr = spec.rpartition(":")
    if not path:
        bad_input(f"torch_export: {spec}: expected FILE.py:NAME")
    mspec = importlib.util.spec_from_file_location("torch_export_user_module", path)
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    if not hasattr(mod, attr):
        bad_input(f"torch_export: {path}: no `{attr}`")
    return getattr(mod, attr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="FILE.py:NAME, a callable returning a module or (module, input)")
    ap.add_argument("-o", "--output", required=True, help="the graph, torchlean.ir.v1 JSON")
    ap.add_argument("--payload", required=True, help="P.safetensors or P.json")
    ap.add_argument("--input", help="the example input as tensor JSON")
    ap.add_argument("--train-mode", action="store_true",
                    help="keep the module's training mode (batch norm on batch statistics)")
    ap.add_argument("--write-input", help="also write the example input here (tensor JSON)")
    args = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    made = load_factory(args.model)()
    module, x = made if isinstance(made, tuple) else (made, None)
    if not args.train_mode:
        module.eval()
    if args.input:
        with open(args.input) as f:
            x = tensor_from_json(json.load(f))
    if x is None:
        print(f"torch_export: {args.model}: no example input (give --input)", file=sys.stderr)
        return 2
    try:
        ex = export(module, x)
    except ExportFailed as e:
        for line in e.lines():
            print(line, file=sys.stderr)
        print(f"torch_export: {len(e.problems)} problem(s); nothing written", file=sys.stderr)
        return 2
    except Exception as e:  # torch.export's own refusal (data-dependent control flow, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"torch_export: {args.model}: torch.export failed: {type(e).__name__}: {first}",
              file=sys.stderr)
        return 2
    with open(args.output, "w") as f:
        f.write(dumps(ex.graph) + "\n")
    if args.payload.endswith(".safetensors"):
        write_payload_safetensors(args.payload, ex.payload)
    else:
        write_payload_json(args.payload, ex.payload)
    if args.write_input:
        with open(args.write_input, "w") as f:
            f.write(dumps(tensor_json(x)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
