"""Helpers for the GPU tests: skips with a reason, a timed busy kernel, torch.

Importing this module needs no GPU and no CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest

_SPIN = r"""
extern "C" __global__ void cugather_test_spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""
_spin_kernels: dict = {}


def cp():
    import cupy

    return cupy


def spin(stream, ms: float) -> None:
    """Keep ``stream`` busy for ``ms`` milliseconds (one thread polling the global timer)."""
    cupy = cp()
    device = cupy.cuda.runtime.getDevice()
    kernel = _spin_kernels.get(device)
    if kernel is None:
        kernel = cupy.RawKernel(_SPIN, "cugather_test_spin")
        _spin_kernels[device] = kernel
    with stream:  # RawKernel launches on the current stream
        kernel((1,), (1,), (np.uint64(int(ms * 1e6)),))


def free_bytes(device: int = 0) -> int:
    cupy = cp()
    with cupy.cuda.Device(device):
        cupy.get_default_memory_pool().free_all_blocks()
        return cupy.cuda.runtime.memGetInfo()[0]


def require_free(nbytes: int, device: int = 0) -> None:
    """Skip unless ``device`` has ``nbytes`` free (after releasing CuPy's cached blocks)."""
    free = free_bytes(device)
    if free < nbytes:
        pytest.skip(f"needs {nbytes / 2**30:.1f} GiB free on GPU {device}, "
                    f"{free / 2**30:.1f} GiB are")


def require_gpus(n: int) -> None:
    from cugather.env import gpu_count

    have = gpu_count()
    if have < n:
        pytest.skip(f"needs {n} GPUs, {have} visible")


def torch_cuda():
    """torch, or a skip saying why it cannot be used with CUDA here."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch is installed without a usable CUDA device")
    return torch


# ---------------------------------------------------------------- a catalogue of calls
#: (operation, modes) of every public gather entry point.
OPS = (
    ("gather", ("raise", "wrap", "clip", "fill")),
    ("op", ("raise", "wrap", "clip", "fill")),        # GatherOp
    ("take", ("raise", "wrap", "clip")),
    ("elements", ("raise", "wrap", "clip", "fill")),  # gather_elements
    ("along", ("raise",)),                            # take_along_axis
    ("nd", ("raise", "wrap", "clip", "fill")),        # gather_nd
)
OP_MODES = [(name, mode) for name, modes in OPS for mode in modes]


def fill_for(dtype) -> object:
    """A fill value every dtype can hold: -7, or 7 unsigned, True for bool."""
    if str(dtype).startswith("torch."):  # torch.float32 -> float32
        dtype = str(dtype)[len("torch."):]
    dtype = np.dtype(dtype)
    return {"b": True, "u": 7}.get(dtype.kind, -7)

#: Operations with ``out=`` and ``stream=`` arguments (take and take_along_axis
#: follow NumPy's signatures and run on the current stream).
WITH_STREAM = ("gather", "op", "elements", "nd")


def available(name: str) -> bool:
    import cugather

    api = {"elements": "gather_elements", "along": "take_along_axis", "nd": "gather_nd"}
    return name not in api or hasattr(cugather, api[name])


def host_arrays(rng, dtype="float32", index_dtype="int64", rows=64, cols=33, n=300,
                out_of_range=False) -> dict:
    """Inputs of every operation: data (rows, cols) gathered on axis 1, and so on."""
    from .reference import random_data

    def idx(shape, bound):
        lo, hi = (-3 * bound, 3 * bound) if out_of_range else (-bound, bound)
        return rng.integers(lo, hi, size=shape).astype(index_dtype)

    return {
        "data": random_data(rng, (rows, cols), dtype),
        "data3": random_data(rng, (rows, cols, 3), dtype),
        "idx": idx((n,), cols),                 # gather, GatherOp, take: axis 1
        "idx_e": idx((rows, n // 8 + 1), cols),  # gather_elements, take_along_axis: axis 1
        "idx_nd": np.stack([idx((n,), rows), idx((n,), cols)], axis=-1),  # gather_nd, b=0
    }


def device_arrays(host: dict) -> dict:
    """Copies on the current device, finished (side streams do not wait for the copies)."""
    cupy = cp()
    arrays = {k: cupy.asarray(v) for k, v in host.items()}
    cupy.cuda.Device().synchronize()
    return arrays


def inputs(name: str, arrays: dict):
    """(data, indices) of ``name`` in ``arrays`` (host or device)."""
    if name in ("gather", "op", "take"):
        return arrays["data"], arrays["idx"]
    if name in ("elements", "along"):
        return arrays["data"], arrays["idx_e"]
    return arrays["data3"], arrays["idx_nd"]


def call(name: str, mode: str, arrays: dict, out=None, stream=None, op_cache: dict = None):
    """Run ``name`` in ``mode`` on device ``arrays``; ``stream`` None: the current one."""
    import cugather

    data, idx = inputs(name, arrays)
    fill = fill_for(data.dtype)
    if name == "gather":
        return cugather.gather(data, idx, 1, out=out, mode=mode, fill_value=fill, stream=stream)
    if name == "op":
        key = (mode, str(data.dtype))
        op = None if op_cache is None else op_cache.get(key)
        if op is None:
            op = cugather.GatherOp(1, mode=mode, fill_value=fill)
            if op_cache is not None:
                op_cache[key] = op
        return op(data, idx, out=out, stream=stream)
    if name == "elements":
        return cugather.gather_elements(data, idx, 1, out=out, mode=mode, fill_value=fill,
                                        stream=stream)
    if name == "nd":
        return cugather.gather_nd(data, idx, 0, out=out, mode=mode, fill_value=fill,
                                  stream=stream)
    ctx = stream if stream is not None else _Current()
    with ctx:
        if name == "take":
            return cugather.take(data, idx, axis=1, out=out, mode=mode)
        assert out is None, "take_along_axis has no out="
        return cugather.take_along_axis(data, idx, axis=1)


class _Current:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def reference(name: str, mode: str, host: dict):
    """NumPy result of :func:`call` on ``host``, or IndexError."""
    from . import fuzzcases
    from .reference import gather_ref

    data, idx = inputs(name, host)
    i = idx.astype(np.int64)
    fill = fill_for(data.dtype)
    try:
        if name in ("gather", "op"):
            n = data.shape[1]
            return gather_ref(data, np.mod(i, n) if mode == "wrap" else i, 1, mode, fill)
        if name == "take":
            n = data.shape[1]
            return np.take(data, np.mod(i, n) if mode == "wrap" else i, axis=1, mode=mode)
        if name == "elements":
            return fuzzcases.elements_ref(data, i, 1, mode, fill)
        if name == "along":
            return np.take_along_axis(data, i, axis=1)
        return fuzzcases.nd_ref(data, i, 0, mode, fill)
    except IndexError:
        return IndexError


def out_shape(name: str, host: dict) -> tuple:
    data, idx = inputs(name, host)
    if name in ("gather", "op", "take"):
        return data.shape[:1] + idx.shape + data.shape[2:]
    if name in ("elements", "along"):
        return idx.shape
    return idx.shape[:-1] + data.shape[2:]
