"""onnx_node_tests.py OUT — write ONNX's per-operator conformance tests ("node" tests) to OUT.

The `onnx` Python package ships the generators of these tests, not their data. This runs every
generator (`onnx.backend.test.case.node.collect_testcases()`) and writes, per test, the layout
ONNX's backend runners read:

    OUT/<test name>/model.onnx
    OUT/<test name>/test_data_set_0/input_<i>.pb, output_<i>.pb   (TensorProto)

Tests whose inputs or outputs are not plain tensors (sequences, maps, optionals) get their
model.onnx only, without a data set. Expected outputs are the ones the generators compute (ONNX's
reference implementation); ONNX's own runner compares with rtol 1e-3, atol 1e-7.

Needs: python3 with `onnx` and `numpy` (pip install onnx numpy). About a minute; ~1,900 tests.
"""
import os
import sys

from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node


def tensor(x, name):
    if isinstance(x, TensorProto):  # some generators already give TensorProto
        t = TensorProto(); t.CopyFrom(x); t.name = name
        return t
    return numpy_helper.from_array(x, name)


def main(out):
    cases = node.collect_testcases()
    written = without_data = 0
    for case in cases:
        d = os.path.join(out, case.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets or []):
            try:
                files = [(f"input_{j}.pb", tensor(x, case.model.graph.input[j].name))
                         for j, x in enumerate(inputs)]
                files += [(f"output_{j}.pb", tensor(x, case.model.graph.output[j].name))
                          for j, x in enumerate(outputs)]
            except Exception:  # a sequence, map or optional value: no tensor data set
                without_data += 1
                continue
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds, exist_ok=True)
            for name, t in files:
                with open(os.path.join(ds, name), "wb") as f:
                    f.write(t.SerializeToString())
        written += 1
    print(f"{written} node tests written to {out} ({without_data} data sets skipped: not plain tensors)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
