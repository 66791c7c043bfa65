"""ONNX conformance on the host tier: the Gather node cases of the onnx package."""

import pytest

from support.onnx_cases import GATHER_CASES, case, onnx_gather_cases  # noqa: F401 (a fixture)
from support.reference import assert_same

from . import build, runner

pytest.importorskip("onnx")
pytestmark = [pytest.mark.hostsim,
              pytest.mark.skipif(build.no_compiler_reason() is not None,
                                 reason=build.no_compiler_reason() or "")]


@pytest.mark.parametrize("name", GATHER_CASES)
def test_onnx_gather_on_host(onnx_gather_cases, name):
    axis, sets = case(onnx_gather_cases, name)
    for inputs, (expected,) in sets:
        data, indices = inputs
        got = runner.host_gather(runner.device_copy(data), indices, axis=axis)
        assert_same(got, expected, f"{name}: data {data.shape} {data.dtype}, indices "
                                   f"{indices.tolist()}, axis {axis}")
