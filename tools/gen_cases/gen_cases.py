#!/usr/bin/env python3
"""Build `torchlean.case.v1` files from PyTorch modules, with PyTorch in float64 as the oracle.

    $TORCHLEAN_PYTHON tools/gen_cases/gen_cases.py [--out tests/cases] [--only NAME ...] [--check]

Each case of the registry (`cases.py`, one small function per case) gives a module and an
input; this script exports the graph with `tools/torch_export`, then runs the module in
PyTorch: the output, the gradient of `<seed, output>` for the input and for every parameter,
under a cotangent `seed` drawn from N(0, 1) (never ones). It writes `gen_<name>.json` for each
case; the output is a pure function of the registry (seeds from the case name, one CPU
thread, floats as Python's shortest round-trip repr), so a rerun writes the same bytes.

`--check` writes nothing: it exits 1 naming every file that differs from what it would write
(and every stale `gen_*.json` the registry no longer has), up to the last bits of the
expected values (`case_difference`).
"""
import argparse
import json
import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch_export"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import torch_export as tx  # noqa: E402
from registry import REGISTRY  # noqa: E402

F64_TOLERANCE = {"rtol": 1e-6, "atol": 1e-9}
F32_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
PREFIX = "gen_"


def seed_of(name):
    return zlib.crc32(name.encode())


def grad_payload(ex, named, grads):
    """`{node id: {payload name: gradient}}` for every parameter the graph reads."""
    out = {}
    for pname, g in zip(named, grads):
        sites = ex.sites.get(pname, [])
        if not sites:
            continue
        if len(sites) != 1:
            raise ValueError(f"parameter {pname} is read at {len(sites)} places; PyTorch's "
                             "gradient is their sum, which a case cannot state per node")
        nid, slot = sites[0]
        out.setdefault(nid, {})[slot] = tx.tensor_json(g)
    return {str(k): out[k] for k in sorted(out)}


def build_case(defn):
    torch.manual_seed(seed_of(defn.name))
    module, x = defn.build()
    module = module.train(defn.train)
    ex = tx.export(module, x)
    for node in ex.graph["nodes"]:
        for attr in defn.omit.get(node["kind"], []):
            node.pop(attr, None)
    named = [n for n, p in module.named_parameters()]
    params = [p for n, p in module.named_parameters()]
    xg = x.detach().clone().requires_grad_(True)
    out = module(xg)
    gen = torch.Generator().manual_seed(seed_of(defn.name) + 1)
    seed = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad(out, [xg] + params, seed, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, [xg] + params)]
    c = {
        "format": "torchlean.case.v1",
        "name": PREFIX + defn.name,
        "graph": ex.graph,
        "payload": tx.payload_json(ex.payload),
        "input": tx.tensor_json(x),
        "seed": tx.tensor_json(seed),
        "expect": {
            "output": tx.tensor_json(out),
            "grad_input": tx.tensor_json(grads[0]),
            "grad_payload": grad_payload(ex, named, grads[1:]),
        },
        "tolerance": F32_TOLERANCE if defn.dtype == "f32" else F64_TOLERANCE,
    }
    if defn.dtype == "f32":
        c["dtype"] = "f32"
    return tx.dumps(c) + "\n"


# A case written on another machine may differ in the last bits of its expected values:
# PyTorch's f64 products sum in the order of the machine's BLAS kernels (AVX2 and AVX-512
# differ). Across the 61 cases, the AVX-512 Xeon that wrote them and a 2-vCPU AVX2 EPYC
# (2026-12-07) differed by up to 2.5e-13 relative, 7.8e-16 absolute.
EXPECT_RTOL, EXPECT_ATOL = 1e-12, 1e-15


def case_difference(fresh, old, path="", in_expect=False):
    """Where parsed case `fresh` differs from `old`, or None: the numbers under `expect` may
    differ within EXPECT_RTOL relative plus EXPECT_ATOL; everything else (graph, inputs, seed,
    tolerance, which expected values are NaN or infinite) must be identical."""
    if isinstance(fresh, dict) and isinstance(old, dict):
        if fresh.keys() != old.keys():
            return f"{path or '/'}: the keys differ"
        for k in fresh:
            d = case_difference(fresh[k], old[k], f"{path}/{k}", in_expect or (not path and k == "expect"))
            if d:
                return d
        return None
    if isinstance(fresh, list) and isinstance(old, list) and len(fresh) == len(old):
        for i, (a, b) in enumerate(zip(fresh, old)):
            d = case_difference(a, b, f"{path}[{i}]", in_expect)
            if d:
                return d
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (fresh, old))
    if in_expect and numbers:
        if abs(fresh - old) <= EXPECT_RTOL * max(abs(fresh), abs(old)) + EXPECT_ATOL:
            return None
    elif type(fresh) is type(old) and fresh == old:
        return None
    return f"{path}: {fresh!r} against {old!r}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "cases"))
    ap.add_argument("--only", nargs="*", help="case names (without the gen_ prefix)")
    ap.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a difference")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    args = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    import cases  # noqa: F401  (fills REGISTRY)

    if args.list:
        for c in REGISTRY:
            print(PREFIX + c.name)
        return 0
    chosen = [c for c in REGISTRY if not args.only or c.name in args.only]
    unknown = set(args.only or []) - {c.name for c in REGISTRY}
    if unknown:
        print(f"gen_cases: unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    differs, failed = [], []
    for c in chosen:
        path = os.path.join(args.out, PREFIX + c.name + ".json")
        try:
            text = build_case(c)
        except tx.ExportFailed as e:
            failed.extend(f"{c.name}: {line}" for line in e.lines())
            continue
        if args.check:
            old = open(path).read() if os.path.exists(path) else None
            if old is None:
                differs.append(path + " (missing)")
            elif old != text:
                where = case_difference(json.loads(text), json.loads(old))
                if where:
                    differs.append(f"{path} ({where})")
        else:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
    if not args.only:
        known = {PREFIX + c.name + ".json" for c in REGISTRY}
        stale = sorted(f for f in os.listdir(args.out) if f.startswith(PREFIX) and f.endswith(".json") and f not in known)
        differs.extend(os.path.join(args.out, f) + " (stale: not in the registry)" for f in stale)
    for line in failed:
        print(line, file=sys.stderr)
    if failed:
        return 2
    for p in differs:
        print(f"differs: {p}")
    if args.check and differs:
        return 1
    print(f"{len(chosen)} case(s) {'checked' if args.check else 'written'} to {os.path.normpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
