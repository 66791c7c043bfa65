"""Interop (GPU tier): torch tensors in and out without copies, several GPUs.

* torch tensors are accepted through DLPack and through
  ``__cuda_array_interface__`` without a copy: the CuPy view shares the
  tensor's pointer and the call allocates nothing but its output;
* results go to torch without a copy (``torch.from_dlpack`` and
  ``torch.as_tensor`` share the pointer);
* arrays on a second GPU are compiled for and run on that GPU, the current
  device is left as it was; data, indices and ``out`` on different devices
  are a clear ValueError.  Multi-GPU tests skip with their reason on a
  one-GPU machine, where the placement checks still run.
"""

from __future__ import annotations

import numpy as np
import pytest

from support import gpu as g
from support.reference import assert_same

pytestmark = pytest.mark.gpu


class CudaArrayInterfaceOnly:
    """Exposes a tensor through ``__cuda_array_interface__`` alone (no DLPack)."""

    def __init__(self, tensor):
        self.tensor = tensor  # keeps the memory alive
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def _pool_growth(fn):
    """(result, bytes CuPy's pool handed out during ``fn`` and still holds)."""
    cp = g.cp()
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    before = pool.used_bytes()
    result = fn()
    cp.cuda.Device().synchronize()
    return result, pool.used_bytes() - before


# ---------------------------------------------------------------- torch in
@pytest.mark.parametrize("route", ["dlpack", "cuda_array_interface"])
def test_torch_tensors_are_read_in_place(route):
    torch = g.torch_cuda()
    cp = g.cp()
    import cugather
    from cugather import validate as _arrays

    table = torch.randn(4096, 1024, device="cuda")  # 16 MiB
    idx = torch.randint(-4096, 4096, (100,), device="cuda")
    if route == "cuda_array_interface":
        table_in, idx_in = CudaArrayInterfaceOnly(table), CudaArrayInterfaceOnly(idx)
    else:
        table_in, idx_in = table, idx
    assert _arrays.as_data(table_in).data.ptr == table.data_ptr()
    torch.cuda.synchronize()
    out, grown = _pool_growth(lambda: cugather.gather(table_in, idx_in, 0))
    assert grown <= out.nbytes + 4096, (
        f"the call took {grown} bytes from CuPy's pool for a {out.nbytes}-byte result: "
        f"an input was copied")
    want = torch.index_select(table, 0, torch.where(idx < 0, idx + 4096, idx))
    assert isinstance(out, type(table_in) if isinstance(table_in, torch.Tensor) else cp.ndarray)
    assert_same(_host(out), want.cpu().numpy())
    assert cp.cuda.runtime.getDevice() == table.device.index


def test_torch_tensors_through_every_operation():
    torch = g.torch_cuda()
    rng = np.random.default_rng(1)
    host = g.host_arrays(rng, "float32")
    tensors = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    for name, mode in g.OP_MODES:
        if not g.available(name):
            continue
        got = g.call(name, mode, tensors)
        assert isinstance(got, torch.Tensor), f"{name}: a torch tensor in, a torch tensor out"
        assert_same(_host(got), g.reference(name, mode, host), f"{name} mode={mode}")


def _host(arr):
    """A result on the host: torch tensors (torch in, torch out) and CuPy arrays."""
    return arr.cpu().numpy() if hasattr(arr, "cpu") else arr.get()


def test_gather_elements_matches_torch_gather():
    torch = g.torch_cuda()
    import cugather

    if not hasattr(cugather, "gather_elements"):
        pytest.skip("cugather has no gather_elements in this version")
    x = torch.randn(37, 53, device="cuda", dtype=torch.float16)
    idx = torch.randint(0, 53, (37, 20), device="cuda")
    got = torch.from_dlpack(cugather.gather_elements(x, idx, 1))
    assert torch.equal(got, torch.gather(x, 1, idx))


def test_torch_stream_argument():
    """stream= takes a torch.cuda.Stream and orders the gather after its earlier work."""
    torch = g.torch_cuda()
    import cugather

    table = torch.arange(1000 * 16, device="cuda", dtype=torch.float32).reshape(1000, 16)
    idx = torch.randint(0, 1000, (500,), device="cuda")
    cugather.gather(table, idx, 0, mode="wrap")  # compile and bind first
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # busy for a while
        table += 1
        got = cugather.gather(table, idx, 0, mode="wrap", stream=side)
    side.synchronize()
    assert torch.equal(torch.from_dlpack(got), torch.index_select(table, 0, idx))


# ---------------------------------------------------------------- torch out
def test_results_reach_torch_without_a_copy():
    torch = g.torch_cuda()
    cp = g.cp()
    import cugather

    data = cp.arange(300 * 7, dtype=cp.float64).reshape(300, 7)
    result = cugather.gather(data, cp.asarray([5, -1, 42]), 0)
    via_dlpack = torch.from_dlpack(result)
    via_cai = torch.as_tensor(result, device="cuda")
    assert via_dlpack.data_ptr() == result.data.ptr
    assert via_cai.data_ptr() == result.data.ptr
    assert via_dlpack.shape == (3, 7) and via_dlpack.dtype == torch.float64
    result[0, 0] = -1.0  # one memory: torch sees the write
    cp.cuda.Device().synchronize()
    assert float(via_dlpack[0, 0]) == -1.0 and float(via_cai[0, 0]) == -1.0


# ---------------------------------------------------------------- devices
def test_result_stays_on_the_data_device_and_current_device_is_kept():
    cp = g.cp()
    import cugather

    device = cp.cuda.runtime.getDevice()
    data = cp.arange(64, dtype=cp.int32).reshape(8, 8)
    for name, mode in g.OP_MODES:
        if not g.available(name):
            continue
        rng = np.random.default_rng(2)
        dev = g.device_arrays(g.host_arrays(rng))
        out = g.call(name, mode, dev)
        assert out.data.device_id == dev["data"].data.device_id
        assert cp.cuda.runtime.getDevice() == device
    assert cugather.gather(data, [1, 2], 0).data.device_id == data.data.device_id


def _on(device, fn):
    cp = g.cp()
    with cp.cuda.Device(device):
        return fn()


def test_arrays_on_a_second_gpu_compile_and_run_there():
    g.require_gpus(2)
    cp = g.cp()
    from cugather.compile import compiler as _compiler

    rng = np.random.default_rng(3)
    host = g.host_arrays(rng, "float32")
    dev1 = _on(1, lambda: g.device_arrays(host))
    assert cp.cuda.runtime.getDevice() == 0
    for name, mode in g.OP_MODES:
        if not g.available(name):
            continue
        with cp.cuda.Device(0):
            got = g.call(name, mode, dev1)
            assert cp.cuda.runtime.getDevice() == 0, f"{name} changed the current device"
        assert got.data.device_id == 1, f"{name} put its result on GPU {got.data.device_id}"
        _on(1, lambda: cp.cuda.Device().synchronize())
        assert_same(_on(1, got.get), g.reference(name, mode, host), f"{name} mode={mode} on GPU 1")
    on_one = {lk.compiled.key for lk in _compiler.loaded_kernels() if lk.device == 1}
    assert on_one, "nothing was loaded on GPU 1"


def test_host_indices_go_to_the_data_device():
    g.require_gpus(2)
    cp = g.cp()
    import cugather

    data = _on(1, lambda: cp.arange(100, dtype=cp.float32))
    got = cugather.gather(data, np.array([1, -1, 50]), 0)
    assert got.data.device_id == 1
    assert _on(1, got.get).tolist() == [1.0, 99.0, 50.0]


def test_torch_tensor_on_a_second_gpu():
    g.require_gpus(2)
    torch = g.torch_cuda()
    import cugather

    table = torch.randn(200, 9, device="cuda:1")
    idx = torch.randint(0, 200, (31,), device="cuda:1")
    got = cugather.gather(table, idx, 0)
    assert got.data.device_id == 1
    assert torch.equal(torch.from_dlpack(got), torch.index_select(table, 0, idx))


@pytest.mark.parametrize("name", [n for n, _ in g.OPS])
@pytest.mark.parametrize("misplaced", ["indices", "out"])
def test_operands_on_different_gpus_are_a_value_error(name, misplaced):
    g.require_gpus(2)
    if not g.available(name):
        pytest.skip(f"cugather has no {name} operation in this version")
    if misplaced == "out" and name == "along":
        pytest.skip("take_along_axis has no out=")
    cp = g.cp()
    rng = np.random.default_rng(4)
    host = g.host_arrays(rng, "float32")
    dev = _on(0, lambda: g.device_arrays(host))
    data, idx = g.inputs(name, dev)
    out = None
    if misplaced == "indices":
        key = {"gather": "idx", "op": "idx", "take": "idx", "elements": "idx_e",
               "along": "idx_e", "nd": "idx_nd"}[name]
        dev[key] = _on(1, lambda: cp.asarray(host[key]))
    else:
        out = _on(1, lambda: cp.empty(g.out_shape(name, host), host["data"].dtype))
    with pytest.raises(ValueError, match="GPU"):
        g.call(name, "wrap" if name != "along" else "raise", dev, out=out)
