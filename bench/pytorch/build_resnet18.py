#!/usr/bin/env python3
"""Writes a ResNet-18 as ONNX without torch: torchvision's structure as `export_resnet18.py`'s
export has it (eval mode: every batch norm folded into its convolution's bias; Conv, Relu,
MaxPool, Add, GlobalAveragePool, Flatten, Gemm; opset 17), random weights (numpy seed 0), batch
1 at 224×224, input `input`. The `resnet18_forward` bench case falls back to it where torch
and torchvision are not installed; the work is the same, the weights are not.

    python bench/pytorch/build_resnet18.py target/bench/resnet18.onnx

Needs numpy and onnx."""
import os
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(0)
nodes, inits = [], []
count = [0]

def name(p):
    count[0] += 1
    return f"{p}_{count[0]}"

def conv(x, cin, cout, k, s, pad):
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    wn, bn, y = name("w"), name("b"), name("conv")
    inits.append(numpy_helper.from_array(w, wn))
    inits.append(numpy_helper.from_array(b, bn))
    nodes.append(helper.make_node("Conv", [x, wn, bn], [y], kernel_shape=[k, k], strides=[s, s],
                                  pads=[pad] * 4, dilations=[1, 1], group=1))
    return y

def relu(x):
    y = name("relu")
    nodes.append(helper.make_node("Relu", [x], [y]))
    return y

def block(x, cin, cout, s):
    y = relu(conv(x, cin, cout, 3, s, 1))
    y = conv(y, cout, cout, 3, 1, 1)
    idn = conv(x, cin, cout, 1, s, 0) if (s != 1 or cin != cout) else x
    z = name("add")
    nodes.append(helper.make_node("Add", [y, idn], [z]))
    return relu(z)

x = relu(conv("input", 3, 64, 7, 2, 3))
mp = name("pool")
nodes.append(helper.make_node("MaxPool", [x], [mp], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
x = mp
cin = 64
for cout, s in [(64, 1), (128, 2), (256, 2), (512, 2)]:
    x = block(x, cin, cout, s)
    x = block(x, cout, cout, 1)
    cin = cout
g = name("gap")
nodes.append(helper.make_node("GlobalAveragePool", [x], [g]))
f = name("flat")
nodes.append(helper.make_node("Flatten", [g], [f], axis=1))
fw = (rng.standard_normal((1000, 512)) * 0.03).astype(np.float32)
fb = np.zeros(1000, np.float32)
inits += [numpy_helper.from_array(fw, "fc.weight"), numpy_helper.from_array(fb, "fc.bias")]
nodes.append(helper.make_node("Gemm", [f, "fc.weight", "fc.bias"], ["logits"], alpha=1.0, beta=1.0, transB=1))
graph = helper.make_graph(nodes, "resnet18",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
path = sys.argv[1] if len(sys.argv) > 1 else "target/bench/resnet18.onnx"
os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
onnx.save(model, path + ".tmp")
os.replace(path + ".tmp", path)
