"""The ONNX Gather node cases shipped with the onnx package (what
tests/hostsim/test_onnx_host.py and tests/gpu/test_onnx_gpu.py run)."""

import functools
import glob
import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


GATHER_CASES = ["test_gather_0", "test_gather_1", "test_gather_2d_indices",
                "test_gather_negative_indices"]


def _as_array(value):
    if isinstance(value, np.ndarray):
        return value
    from onnx import numpy_helper

    return numpy_helper.to_array(value)


def _data_sets(case):
    """[(inputs, outputs)] of a collected case, from memory or its model folder."""
    if getattr(case, "data_sets", None):
        return [([_as_array(v) for v in ins], [_as_array(v) for v in outs])
                for ins, outs in case.data_sets]
    from onnx import TensorProto, numpy_helper

    sets = []
    for folder in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set_*"))):
        def load(pattern):
            arrays = []
            for path in sorted(glob.glob(os.path.join(folder, pattern))):
                tensor = TensorProto()
                with open(path, "rb") as f:
                    tensor.ParseFromString(f.read())
                arrays.append(numpy_helper.to_array(tensor))
            return arrays
        sets.append((load("input_*.pb"), load("output_*.pb")))
    return sets


@functools.lru_cache(maxsize=1)
def _collected() -> dict:
    """name -> (axis, [(inputs, outputs)]) of the Gather cases; collected once per process."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # other operators' case generators warn
        # Unfiltered: onnx records the cases of its first call only (a filtered first call
        # would leave tests/reference_family.py without the GatherElements/GatherND cases).
        cases = collect_testcases()
    found = {}
    for case in cases:
        if case.name not in GATHER_CASES:
            continue
        node = case.model.graph.node[0]
        assert node.op_type == "Gather", f"{case.name} is a {node.op_type} node"
        axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute
                     if a.name == "axis"), 0)
        found[case.name] = (int(axis), _data_sets(case))
    return found


@pytest.fixture(scope="module")
def onnx_gather_cases():
    return _collected()


def case(cases, name):
    assert name in cases, (f"{name} is missing from onnx {onnx.__version__}'s "
                           f"collect_testcases(); found {sorted(cases)}")
    axis, sets = cases[name]
    assert sets, f"{name} has no data sets"
    return axis, sets


