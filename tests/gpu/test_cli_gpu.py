"""The command line on a GPU: info lists the devices, inspect targets the GPU's architecture."""

import pytest

from support.jit import run_json

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


def test_info_and_inspect_on_a_gpu(capsys):
    import cupy

    from cugather.compile.compiler import arch_for_device

    code, doc, _ = run_json(capsys, "info")
    assert code == 0 and len(doc["gpus"]) == cupy.cuda.runtime.getDeviceCount()
    g = doc["gpus"][0]
    props = cupy.cuda.runtime.getDeviceProperties(0)
    assert g["sms"] == props["multiProcessorCount"] and g["nvrtc_target"] == arch_for_device(0)
    code, doc, _ = run_json(capsys, "inspect", "--no-source")
    assert code == 0 and doc["arch"] == arch_for_device(0)
