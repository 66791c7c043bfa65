"""Benchmark cases for gather_elements / take_along_axis and gather_nd.

:func:`cases` returns dicts that ``python -m cugather bench`` runs::

    {"name", "setup": callable(cupy, rng) -> state, "cugather": callable(state),
     "peers": {name: callable(state)}, "variants": {name: callable(state)},
     "ceiling": (callable(state), bytes), "bytes": int, "note": str}

``bytes`` is the gather's byte accounting, 2 x output bytes + index bytes;
``ceiling`` is a device-to-device copy of the output bytes (it moves 2 x
output bytes).  ``setup`` builds the operands on the GPU, checks cugather's
result against every peer once (:class:`MismatchError` on a difference), and
returns the state the callables share.
Peers: ``cupy.take_along_axis`` and ``torch.gather`` (when torch has CUDA)
for gather_elements; CuPy fancy indexing and an onnxruntime-style GatherND
(an offsets kernel, then one element per thread with 32-bit fast_divmod, 256
threads) for gather_nd.  Indices are in ``[0, n)`` so that every peer
computes the same function; cugather runs in ``wrap`` mode (no
synchronisation; take_along_axis through its kernel in that mode), with
``raise`` (bounds check and one host synchronisation per call) as a variant.
"""

from __future__ import annotations

import math

import numpy

__all__ = ["cases", "MismatchError", "ORT_GATHER_ND_SOURCE", "ort_gather_nd"]

# onnxruntime's CUDA GatherND in structure: one thread per index tuple turns
# it into an element offset (negative components wrapped once), then one
# thread per output element with a 32-bit fast_divmod by the slice size.
ORT_GATHER_ND_SOURCE = r"""
struct FastDivmod { unsigned int d; unsigned int m; unsigned int l; };

extern "C" __global__ void ort_nd_offsets(const long long* idx, long long* offsets,
    long long n_tuples, int m, const long long* bounds, const long long* strides,
    long long tuples_per_batch, long long batch_stride)
{
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_tuples) return;
    long long off = (t / tuples_per_batch) * batch_stride;
    for (int k = 0; k < m; ++k) {
        long long v = idx[t * m + k];
        if (v < 0) v += bounds[k];
        off += v * strides[k];
    }
    offsets[t] = off;
}

template <typename T>
__global__ void ort_nd_copy(const T* data, const long long* offsets, T* out, long long n,
                            FastDivmod slice)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int q = (__umulhi((unsigned int)i, slice.m) + (unsigned int)i) >> slice.l;
    unsigned int r = (unsigned int)i - q * slice.d;
    out[i] = data[offsets[q] + r];
}
"""

_RAW = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long",
        16: "double2"}
_RAW_NUMPY = {1: numpy.uint8, 2: numpy.uint16, 4: numpy.uint32, 8: numpy.uint64,
              16: numpy.complex128}
_module = {}


def _fast_divmod(d: int):
    l = (d - 1).bit_length()  # noqa: E741 - the shift is called l in the literature
    m = ((1 << 32) * ((1 << l) - d)) // d + 1
    return numpy.array([(d, m & 0xFFFFFFFF, l)], dtype=numpy.dtype(
        [("d", "<u4"), ("m", "<u4"), ("l", "<u4")], align=True))


def ort_gather_nd(cp, data, idx, batch_dims: int = 0):
    """A callable() running the onnxruntime-style GatherND on C-contiguous ``data``
    and int64 ``idx``; returns the output array (allocated once)."""
    if "mod" not in _module:
        names = [f"ort_nd_copy<{t}>" for t in _RAW.values()]
        _module["mod"] = cp.RawModule(code=ORT_GATHER_ND_SOURCE, options=("--std=c++14",),
                                      name_expressions=names)
    mod = _module["mod"]
    b, m = batch_dims, idx.shape[-1]
    slice_shape = data.shape[b + m:]
    slice_size = math.prod(slice_shape)
    n_tuples = math.prod(idx.shape[:-1])
    elem_strides = [s // data.itemsize for s in data.strides]
    bounds = cp.asarray(numpy.array(data.shape[b:b + m], numpy.int64))
    strides = cp.asarray(numpy.array(elem_strides[b:b + m], numpy.int64))
    per_batch = max(1, n_tuples // max(1, math.prod(data.shape[:b])))
    batch_stride = elem_strides[b - 1] if b else 0
    offsets = cp.empty(n_tuples, cp.int64)
    out = cp.empty(idx.shape[:-1] + slice_shape, data.dtype)
    raw = _RAW_NUMPY[data.itemsize]
    data_raw, out_raw = data.view(raw), out.view(raw)
    offsets_fn = mod.get_function("ort_nd_offsets")
    copy_fn = mod.get_function(f"ort_nd_copy<{_RAW[data.itemsize]}>")
    n = out.size
    div = _fast_divmod(slice_size)
    tuples_grid, out_grid = (-(-n_tuples // 256),), (-(-n // 256),)

    def run():
        offsets_fn(tuples_grid, (256,), (idx, offsets, numpy.int64(n_tuples), numpy.int32(m),
                                         bounds, strides, numpy.int64(per_batch),
                                         numpy.int64(batch_stride)))
        copy_fn(out_grid, (256,), (data_raw, offsets, out_raw, numpy.int64(n), div))
        return out
    return run


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _same(a, b) -> bool:
    return a.shape == b.shape and bool((a.view(numpy.uint8) == b.view(numpy.uint8)).all())


class MismatchError(AssertionError):
    """cugather and a peer disagree on a benchmark case's result."""


def _require(same: bool, case: str, other: str) -> None:
    if not same:
        raise MismatchError(f"{case}: cugather's result differs from {other}")


def _copy_ceiling(cp, out):
    src, dst = cp.empty_like(out), cp.empty_like(out)
    rt = cp.cuda.runtime
    return lambda state: rt.memcpyAsync(dst.data.ptr, src.data.ptr, out.nbytes,
                                        rt.memcpyDeviceToDevice,
                                        cp.cuda.get_current_stream().ptr)


def _random(cp, rng, shape, dtype):
    return rng.standard_normal(shape, dtype=numpy.float32).astype(dtype)


# ---------------------------------------------------------------- gather_elements
def _elements_case(name, shape, dtype, idx_shape, axis, index_dtype="int64", note=""):
    import cugather
    from ..ops import elements as elements_op
    from ..runtime.launch import CUDA

    out_shape = tuple(max(n, k) if d != axis else k
                      for d, (n, k) in enumerate(zip(shape, idx_shape)))
    broadcast = out_shape != tuple(idx_shape)
    itemsize = numpy.dtype(dtype).itemsize
    out_bytes = math.prod(out_shape) * itemsize
    idx_bytes = math.prod(idx_shape) * numpy.dtype(index_dtype).itemsize
    torch = _torch()

    def setup(cp, rng):
        data = _random(cp, rng, shape, dtype)
        idx = rng.integers(0, shape[axis], size=idx_shape, dtype=numpy.int64).astype(index_dtype)
        got = (cugather.take_along_axis(data, idx, axis) if broadcast
               else cugather.gather_elements(data, idx, axis, mode="wrap"))
        state = {"data": data, "idx": idx}
        _require(_same(got, cp.take_along_axis(data, idx, axis)), name, "cupy.take_along_axis")
        if torch is not None:
            td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.astype(numpy.int64))
            ti = ti.expand(out_shape) if broadcast else ti
            state.update(td=td, ti=ti)
            cp.cuda.Device().synchronize()
            _require(_same(got, cp.from_dlpack(torch.gather(td, axis, ti))), name, "torch.gather")
        _require(_same(run(state), got), name, "the timed wrap-mode call")
        state["ceiling"] = _copy_ceiling(cp, got)
        return state

    def run(state):
        if broadcast:  # take_along_axis's kernel in wrap mode: no check, no synchronisation
            data = state["data"]
            return elements_op.run("along", data, state["idx"], axis, None, "wrap", 0, None,
                                   data.data.device_id, CUDA)
        return cugather.gather_elements(state["data"], state["idx"], axis, mode="wrap")

    def cupy_take_along_axis(state):
        import cupy

        return cupy.take_along_axis(state["data"], state["idx"], axis)

    peers = {"cupy.take_along_axis": cupy_take_along_axis}
    if torch is not None:
        peers["torch.gather"] = lambda s: torch.gather(s["td"], axis, s["ti"])
    variants = {"cugather_raise": (
        (lambda s: cugather.take_along_axis(s["data"], s["idx"], axis)) if broadcast
        else (lambda s: cugather.gather_elements(s["data"], s["idx"], axis)))}
    return {"name": name, "op": "take_along_axis" if broadcast else "gather_elements",
            "setup": setup, "cugather": run, "peers": peers, "variants": variants,
            "ceiling": (lambda s: s["ceiling"](s), 2 * out_bytes),
            "bytes": 2 * out_bytes + idx_bytes, "note": note}


# ---------------------------------------------------------------- gather_nd
def _nd_case(name, shape, dtype, idx_lead, m, batch_dims=0, index_dtype="int64", note=""):
    import cugather

    b = batch_dims
    idx_shape = tuple(shape[:b]) + tuple(idx_lead) + (m,)
    out_shape = idx_shape[:-1] + tuple(shape[b + m:])
    itemsize = numpy.dtype(dtype).itemsize
    out_bytes = math.prod(out_shape) * itemsize
    idx_bytes = math.prod(idx_shape) * numpy.dtype(index_dtype).itemsize

    def fancy(cp, data, idx):
        lead = tuple(cp.arange(n).reshape((n,) + (1,) * (len(idx_shape) - 2 - d))
                     for d, n in enumerate(shape[:b]))
        return data[lead + tuple(idx[..., k] for k in range(m))]

    def setup(cp, rng):
        data = _random(cp, rng, shape, dtype)
        idx = cp.stack([rng.integers(0, n, size=idx_shape[:-1], dtype=numpy.int64)
                        for n in shape[b:b + m]], -1).astype(index_dtype)
        idx64 = idx.astype(numpy.int64)
        got = cugather.gather_nd(data, idx, b, mode="wrap")
        ort = ort_gather_nd(cp, data, idx64, b)
        _require(_same(got, fancy(cp, data, idx)), name, "CuPy fancy indexing")
        _require(_same(got, ort()), name, "the onnxruntime-style GatherND")
        _require(_same(got, cugather.gather_nd(data, idx, b)), name, "raise mode")
        return {"data": data, "idx": idx, "ort": ort, "ceiling": _copy_ceiling(cp, got)}

    def cupy_fancy(state):
        import cupy

        return fancy(cupy, state["data"], state["idx"])

    return {"name": name, "op": "gather_nd", "setup": setup,
            "cugather": lambda s: cugather.gather_nd(s["data"], s["idx"], b, mode="wrap"),
            "peers": {"cupy fancy indexing": cupy_fancy, "ort_style": lambda s: s["ort"]()},
            "variants": {"cugather_raise": lambda s: cugather.gather_nd(s["data"], s["idx"], b)},
            "ceiling": (lambda s: s["ceiling"](s), 2 * out_bytes),
            "bytes": 2 * out_bytes + idx_bytes, "note": note}


def cases(quick: bool = False) -> list:
    """The gather_elements / take_along_axis / gather_nd benchmark cases."""
    all_cases = [
        _elements_case("ge_last_axis_f32", (4096, 4096), "float32", (4096, 1024), 1,
                       note="top-k style: 1024 picks per row"),
        _elements_case("ge_first_axis_f32", (16384, 1024), "float32", (4096, 1024), 0),
        _elements_case("ge_mid_axis_f16_i32", (256, 512, 64), "float16", (256, 256, 64), 1,
                       index_dtype="int32"),
        _elements_case("tal_rows_f16", (64, 4096, 128), "float16", (64, 1024, 1), 1,
                       note="take_along_axis, one index per 256 B row"),
        _nd_case("gnd_rows1k_f32", (100000, 256), "float32", (65536,), 1,
                 note="1 KB slices"),
        _nd_case("gnd_pairs_f16", (1024, 1024, 64), "float16", (262144,), 2,
                 note="128 B slices, 2-component tuples"),
        _nd_case("gnd_scalar_f32", (4096, 4096), "float32", (4 << 20,), 2,
                 note="one element per tuple"),
        _nd_case("gnd_batch_f32", (64, 4096, 256), "float32", (512,), 1, batch_dims=1,
                 note="batch_dims=1, 1 KB slices"),
    ]
    if quick:
        keep = ("ge_last_axis_f32", "tal_rows_f16", "gnd_rows1k_f32", "gnd_scalar_f32")
        return [c for c in all_cases if c["name"] in keep]
    return all_cases
