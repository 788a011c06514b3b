#!/usr/bin/env python3
"""Writes torchvision's ResNet-18 (random weights, seed 0, eval mode) as ONNX, batch 1 at
224×224, input `input`: what the `resnet18_forward` bench case imports on both sides.

    python bench/pytorch/export_resnet18.py target/bench/resnet18.onnx

Needs torch, torchvision and onnx (no download: the weights are random)."""
import os
import sys

import torch
import torchvision


def export(path):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.onnx.export(model, (x,), tmp, input_names=["input"], output_names=["logits"],
                      opset_version=17, dynamo=False)
    os.replace(tmp, path)


if __name__ == "__main__":
    export(sys.argv[1] if len(sys.argv) > 1 else "target/bench/resnet18.onnx")
