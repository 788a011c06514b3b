"""Runs modules written by `torchlean export-torch` in PyTorch (float64) and compares them
with torchlean's own results: IR -> PyTorch -> outputs (and gradients) equal ours.

    python run_exported.py MANIFEST.json

MANIFEST is a JSON list of {"name", "module", "case", "ours"}: the exported module, the
torchlean.case.v1 file whose input and seed it runs on, and `torchlean grad`'s JSON for that
case ({"output", "grad_input", "grad_payload"}). One JSON line per case on stdout (the worst
relative error of the output and of every gradient), then a summary line; exit 1 if any case
is off by more than RTOL (relative to the largest magnitude of our tensor) or fails to run.
Needs torch and safetensors.
"""
import importlib.util
import json
import math
import sys

import torch

RTOL = 1e-9


def tensor(t):
    """Tensor JSON (`"nan"`, `"inf"`, `"-inf"` for non-finite values) as float64."""
    data = [float(v) if isinstance(v, str) else v for v in t["data"]]
    return torch.tensor(data, dtype=torch.float64).reshape(t["shape"])


def rel_error(got, want):
    """max|got - want| / max(max|want|, 1), NaN positions required to agree."""
    if tuple(got.shape) != tuple(want.shape):
        return math.inf
    if got.numel() == 0:
        return 0.0
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return math.inf
    g, w = torch.nan_to_num(got, nan=0.0), torch.nan_to_num(want, nan=0.0)
    same = g == w  # equal infinities
    diff = torch.where(same, torch.zeros_like(g), (g - w).abs())
    scale = max(w[torch.isfinite(w)].abs().max().item() if torch.isfinite(w).any() else 0.0, 1.0)
    return diff.max().item() / scale


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(entry):
    case = json.load(open(entry["case"]))
    ours = json.load(open(entry["ours"]))
    model = load(entry["module"], entry["name"]).Model(dtype=torch.float64)
    x = tensor(case["input"]).requires_grad_(True)
    y = model(x)
    errors = {"output": rel_error(y.detach(), tensor(ours["output"]))}
    seed = tensor(case["seed"]) if case.get("seed") else torch.ones_like(y)
    params = dict(model.named_parameters())
    wanted = [x] + list(params.values())
    grads = torch.autograd.grad(y, wanted, grad_outputs=seed, allow_unused=True)
    as_dense = lambda g, like: torch.zeros_like(like) if g is None else g
    errors["grad_input"] = rel_error(as_dense(grads[0], x), tensor(ours["grad_input"]))
    for (attr, p), g in zip(params.items(), grads[1:]):
        node, tname = attr[1:].split("_", 1)
        want = ours["grad_payload"].get(node, {}).get(tname)
        if want is None:
            errors[f"grad {node}.{tname}"] = math.inf
            continue
        errors[f"grad {node}.{tname}"] = rel_error(as_dense(g, p), tensor(want))
    return errors


def main():
    entries = json.load(open(sys.argv[1]))
    failed = 0
    for entry in entries:
        try:
            errors = run(entry)
            worst = max(errors.values())
            ok = worst <= RTOL
            line = {"case": entry["name"], "pass": ok, "worst_rel": worst,
                    "errors": {k: v for k, v in errors.items() if v > RTOL}}
        except Exception as e:  # a module that does not run is a failed case
            ok, line = False, {"case": entry["name"], "pass": False, "error": repr(e)}
        failed += not ok
        print(json.dumps(line))
    print(json.dumps({"passed": len(entries) - failed, "failed": failed}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
