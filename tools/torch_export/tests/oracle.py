#!/usr/bin/env python3
"""For each module of `examples.py`: export it with `torch_export.py`'s command line (graph
JSON + safetensors payload) into OUT/<name>/, and write PyTorch's float64 answers beside it:
`input.json`, `seed.json` (an N(0, 1) cotangent) and `expected.json` (`output`, `grad_input`,
`grad_payload` keyed by node id and payload name, as `torchlean grad` prints them).

    $TORCHLEAN_PYTHON tools/torch_export/tests/oracle.py OUT
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import examples  # noqa: E402
import torch_export as tx  # noqa: E402


def main(out):
    torch.set_num_threads(1)
    for name, build in examples.EXAMPLES.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        rc = tx.main([os.path.join(HERE, "examples.py") + ":" + name, "-o", os.path.join(d, "graph.json"),
                      "--payload", os.path.join(d, "payload.safetensors"),
                      "--write-input", os.path.join(d, "input.json")])
        if rc != 0:
            return rc
        module, x = build()
        sites = tx.export(module, x).sites
        xg = x.clone().requires_grad_(True)
        y = module(xg)
        seed = torch.randn(y.shape, generator=torch.Generator().manual_seed(9))
        named = list(module.named_parameters())
        grads = torch.autograd.grad(y, [xg] + [p for _, p in named], seed, allow_unused=True)
        gp = {}
        for (pname, p), g in zip(named, grads[1:]):
            for nid, slot in sites.get(pname, []):
                gp.setdefault(str(nid), {})[slot] = tx.tensor_json(torch.zeros_like(p) if g is None else g)
        with open(os.path.join(d, "seed.json"), "w") as f:
            f.write(tx.dumps(tx.tensor_json(seed)))
        with open(os.path.join(d, "expected.json"), "w") as f:
            f.write(tx.dumps({"output": tx.tensor_json(y), "grad_input": tx.tensor_json(grads[0]),
                              "grad_payload": gp}))
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
