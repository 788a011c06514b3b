"""Writes PyTorch models' state_dicts for `crates/nn/tests/state_dict.rs`:

    python state_dict_fixture.py OUT_DIR

For each zoo model with a PyTorch twin (`mlp`, `cnn_batchnorm`: the layers of
`torchlean_nn::zoo::Model`, PyTorch's names), randomly initialised (seeded) and, for batch norm,
its running statistics moved by two training-mode passes, writes in float64:

- `NAME.safetensors`: `safetensors.torch.save_file(model.state_dict(), ...)`, as a user would
  (batch norm's `num_batches_tracked` included);
- `NAME.expect.safetensors`: `input`, `loss` (the sum of the eval-mode output on `input`) and
  `grad.<param>` for every parameter (of that loss).

Needs torch and safetensors.
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file


def models():
    torch.manual_seed(15)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 3), torch.nn.LogSoftmax(dim=-1))
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3, stride=1, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2, stride=2), torch.nn.Flatten(), torch.nn.Linear(12, 4))
    return {"mlp": (mlp, (5, 6)), "cnn_batchnorm": (cnn, (2, 1, 4, 4))}


def main():
    out = Path(sys.argv[1])
    for name, (model, shape) in models().items():
        model = model.double()
        model.train()
        with torch.no_grad():
            for _ in range(2):
                model(torch.randn(shape, dtype=torch.float64) * 2 + 0.5)
        model.eval()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  str(out / f"{name}.safetensors"))
        x = torch.randn(shape, dtype=torch.float64)
        loss = model(x).sum()
        params = dict(model.named_parameters())
        grads = torch.autograd.grad(loss, list(params.values()))
        expect = {"input": x, "loss": loss.detach()}
        expect.update({f"grad.{k}": g for k, g in zip(params, grads)})
        save_file(expect, str(out / f"{name}.expect.safetensors"))


if __name__ == "__main__":
    main()
