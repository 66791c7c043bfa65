"""ONNX conformance on a GPU: the Gather node cases of the onnx package."""

import pytest

from support.onnx_cases import GATHER_CASES, case, onnx_gather_cases  # noqa: F401 (a fixture)
from support.reference import assert_same

pytest.importorskip("onnx")
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", GATHER_CASES)
def test_onnx_gather_on_gpu(onnx_gather_cases, name):
    cp = pytest.importorskip("cupy")
    import cugather

    axis, sets = case(onnx_gather_cases, name)
    for inputs, (expected,) in sets:
        data, indices = inputs
        got = cugather.gather(cp.asarray(data), cp.asarray(indices), axis=axis)
        assert_same(cp.asnumpy(got), expected, f"{name}: data {data.shape} {data.dtype}, "
                                               f"indices {indices.tolist()}, axis {axis}")
