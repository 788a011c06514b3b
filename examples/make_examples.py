"""Writes the small files the README's tour uses (run from the repository root; the
safetensors files need torch, numpy and safetensors):

    python examples/make_examples.py IRIS_CSV

IRIS_CSV: scikit-learn's copy of Fisher's iris data (sklearn/datasets/data/iris.csv in its
wheel: a count line, then four measurements and a class number per row), rewritten with named
columns and class names. Everything else is made here from fixed numbers or seed 0.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write_json(name, value):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(value, f)
        f.write("\n")


def iris(source):
    rows = [line.strip().split(",") for line in open(source)]
    header, rows = rows[0], rows[1:]
    names = header[2:]
    with open(os.path.join(HERE, "iris.csv"), "w") as f:
        f.write("sepal_length,sepal_width,petal_length,petal_width,species\n")
        for r in rows:
            f.write(",".join(r[:4] + [names[int(r[4])]]) + "\n")


def two_outputs():
    # crates/ir/tests/september/two_outputs.json: input [3, 2]; outputs [] and [3, 2]
    write_json("two_outputs/x.json", {"shape": [3, 2], "data": [-1.5, -1.0, -0.5, 0.5, 1.0, 1.5]})
    write_json("two_outputs/s0.json", {"shape": [], "data": [1.0]})
    write_json("two_outputs/s1.json", {"shape": [3, 2], "data": [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]})


def log_of_zero():
    # sum(log(x)) at a zero: the forward pass's first infinity is at the log node
    graph = {
        "format": "torchlean.ir.v1",
        "input_id": 0,
        "output_ids": [2],
        "nodes": [
            {"id": 0, "kind": "input", "parents": [], "shape": [3], "value_kind": "tensor"},
            {"id": 1, "kind": "log", "parents": [0], "shape": [3], "value_kind": "tensor"},
            {"id": 2, "kind": "reduce_sum", "parents": [1], "shape": [], "value_kind": "tensor",
             "axes": [0], "keepdim": False},
        ],
    }
    write_json("log_of_zero.json", graph)
    write_json("log_of_zero_x.json", {"shape": [3], "data": [1.0, 0.0, 2.0]})


def zoo_cnn_input():
    # the input PyTorch's outputs in crates/onnx/tests/zoo/cnn.safetensors were computed at
    from safetensors.numpy import load_file

    x = load_file("crates/onnx/tests/zoo/cnn.safetensors")["input"]
    write_json("zoo_cnn_x.json", {"shape": list(x.shape), "data": [float(v) for v in x.ravel()]})


def mlp_state():
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    # `torchlean train mlp` on the digits: 64 pixels in, 10 classes out
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )
    save_file(model.state_dict(), os.path.join(HERE, "mlp_state.safetensors"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    iris(sys.argv[1])
    two_outputs()
    log_of_zero()
    zoo_cnn_input()
    mlp_state()
