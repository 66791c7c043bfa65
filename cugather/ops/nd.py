"""ONNX GatherND (``gather_nd``, with batch_dims).

Per call: validate (``cugather.validate``) -> the op runtime: the plan
(``cugather.plan.nd``) cached for this call key, bound on first use, one
launch of the nd kernel, which in raise mode checks every index it reads
(one host synchronisation).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy

from .. import frontends, validate
from ..plan.core import DeviceLimits, Operand, Plan
from ..plan.nd import plan_nd
from ..runtime.cache import PlanCacheInfo
from ..runtime.key import Geometry, call_key, fill_token, geometry_of_key, out_bits
from ..runtime.launch import CUDA, execute
from ..runtime.op import OpRuntime
from ..validate import Array

__all__ = ["gather_nd", "run", "plan_for", "cache_info", "cache_clear"]

_INDEX_DTYPES = frozenset(validate.INDEX_DTYPES)


def plan_for(geo: Geometry, limits: DeviceLimits, **force: Any) -> Plan:
    """The plan of a call with geometry ``geo`` (``force``: the planner's test knobs)."""
    data = Operand(geo.data_shape, geo.data_strides, geo.dtype.itemsize, geo.data_align)
    return plan_nd(data, geo.indices_shape, geo.index_dtype.name, geo.axis, geo.mode,
                   out_align=geo.out_align, **force)


def _geometry(key: Tuple[Any, ...]) -> Geometry:
    batch_dims, mode, fill = key[10:]
    return geometry_of_key("nd", key, batch_dims, mode, fill)


_RUNTIME = OpRuntime(plan_for, _geometry, 512)


def cache_info() -> PlanCacheInfo:
    """Hits, misses, maxsize and size of gather_nd's plan cache."""
    return _RUNTIME.info()


def cache_clear() -> int:
    """Drop every cached plan of gather_nd."""
    return _RUNTIME.clear()


def _check_batch_dims(batch_dims: object) -> int:
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, (int, numpy.integer)):
        raise TypeError(f"batch_dims must be an integer, got {type(batch_dims).__name__} "
                        f"{batch_dims!r}")
    return int(batch_dims)  # the range is checked with the shapes


def run(data: Array, indices: Array, batch_dims: int, out: Optional[Array], mode: str,
        fill_value: Any, stream: Any, device: int, backend: Any) -> Array:
    """GatherND on arrays already validated for ``backend``: call key, runtime, launch."""
    if type(fill_value) is not int:
        validate.check_fill(fill_value)
    ptr = backend.pointer(data)
    key = call_key(backend, device, data, ptr, indices, out_bits(out, backend),
                   (batch_dims, mode, fill_token(fill_value) if mode == "fill" else None))
    return _RUNTIME.run(key, data, ptr, indices, out, stream, fill_value)


def gather_nd(data: Any, indices: Any, batch_dims: int = 0, *, out: Optional[Array] = None,
              mode: str = "raise", fill_value: Any = 0, stream: Any = None) -> Array:
    """ONNX ``GatherND``: slices of ``data`` addressed by index tuples.

    With ``b = batch_dims`` and ``m = indices.shape[-1]``, every index tuple
    ``indices[i..., :]`` selects ``data[batch..., t0, ..., t(m-1)]``, a slice
    of shape ``data.shape[b + m:]``; the first ``b`` dimensions of ``data``
    and ``indices`` are batch dimensions walked together.  One kernel launch
    copying each slice with the widest unit its bytes and strides allow.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        Array of rank ``r >= 1``; any dtype, any strides (read in place).
    indices : cupy.ndarray, numpy.ndarray or sequence of int
        Integer array of rank ``q >= 1``; ``1 <= m <= r - b`` (at most 8).
        int32 and int64 are used as they are.  Component ``k`` of a tuple is
        valid in ``[-n, n)`` with ``n = data.shape[b + k]``, negative values
        counting from the end.
    batch_dims : int
        Number of leading batch dimensions, ``0 <= b < min(q, r)``;
        ``indices.shape[:b]`` must equal ``data.shape[:b]``.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype; must not
        overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy, per component: ``"raise"`` checks every value on
        the GPU and raises IndexError (the kernel checks what it reads, one
        host synchronisation; with ``out=`` a check runs first and ``out``
        stays untouched); ``"wrap"`` takes each component
        modulo its dimension; ``"clip"`` clamps it to ``[0, n-1]``;
        ``"fill"`` writes ``fill_value`` over the whole slice of a tuple with
        any component out of range.  The last three never synchronise.
    fill_value : scalar
        Written for out-of-range tuples when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        Shape ``indices.shape[:-1] + data.shape[b + m:]``, dtype of ``data``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad value, its position in
        ``indices``, the axis of ``data`` it addresses and the valid range.
    ValueError
        For shapes that break the rules above.
    """
    validate.check_mode(mode, validate.GATHER_MODES)
    b = batch_dims if type(batch_dims) is int else _check_batch_dims(batch_dims)
    cp = validate.cupy_module()
    if (stream is None and type(data) is cp.ndarray and type(indices) is cp.ndarray
            and (mode != "fill" or type(fill_value) is int)):
        # The cached path (see GatherOp.__call__): a key built from validated arrays.
        mem = data.data
        ptr, device = mem.ptr, mem.device_id
        if indices.data.device_id == device:
            bound = _RUNTIME.cached((
                CUDA, device, data.shape, data.strides, data.dtype, ptr & 255, indices.shape,
                indices.strides, indices.dtype, 0 if out is None else out_bits(out, CUDA), b,
                mode, fill_value if mode == "fill" else None))
            if bound is not None and not bound.copy_data:
                return execute(bound, data, ptr, indices, out, None, device)
    if type(data) is not cp.ndarray:
        fe = frontends.native(data)
        if fe is not None:  # torch and JAX: results in the caller's type and stream
            with fe.on_stream(stream):
                d = fe.prepare_data(data)
                i = fe.prepare_indices(indices, d.device)
                return fe.result(run(d, i, b, fe.prepare_out(out), mode, fill_value, stream,
                                     d.device, fe.backend))
    if stream is not None:  # conversions and copies run on it too
        with validate.current_stream(stream):
            return _slow_call(data, indices, b, out, mode, fill_value, stream)
    return _slow_call(data, indices, b, out, mode, fill_value, None)


def _slow_call(data: Any, indices: Any, b: int, out: Optional[Array], mode: str,
               fill_value: Any, stream: Any) -> Array:
    cp = validate.cupy_module()
    if type(data) is not cp.ndarray:
        data = validate.as_data(data)  # torch and JAX went through _call_native
    device = data.data.device_id
    if (type(indices) is not cp.ndarray or indices.dtype not in _INDEX_DTYPES
            or not indices._c_contiguous or indices.data.device_id != device):
        indices = validate.as_indices(indices, device)
    return run(data, indices, b, out, mode, fill_value, stream, device, CUDA)
