"""ONNX GatherElements (``gather_elements``, torch.gather) and numpy's
``take_along_axis``.

Per call: validate (``cugather.validate``) -> the op runtime: the plan
(``cugather.plan.elements``) cached for this call key, bound on first use,
one launch of the elements kernel, which in raise mode checks every index
it reads (one host synchronisation).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy

from .. import frontends, validate
from ..plan.core import DeviceLimits, Operand, Plan
from ..plan.elements import along_axis_shape, elements_shape, plan_elements
from ..runtime.cache import PlanCacheInfo
from ..runtime.key import Geometry, call_key, fill_token, geometry_of_key, out_bits
from ..runtime.launch import CUDA, execute
from ..runtime.op import OpRuntime
from ..validate import Array

__all__ = ["gather_elements", "take_along_axis", "run", "plan_for", "cache_info", "cache_clear"]

_INDEX_DTYPES = frozenset(validate.INDEX_DTYPES)
_SHAPE_RULES = {"elements": elements_shape, "along": along_axis_shape}


def plan_for(geo: Geometry, limits: DeviceLimits, **force: Any) -> Plan:
    """The plan of a call with geometry ``geo`` (``force``: the planner's test knobs)."""
    out_shape = _SHAPE_RULES[geo.op](geo.data_shape, geo.indices_shape, geo.axis)
    data = Operand(geo.data_shape, geo.data_strides, geo.dtype.itemsize, geo.data_align)
    return plan_elements(data, geo.indices_shape, geo.index_dtype.name, geo.axis, geo.mode,
                         out_shape=out_shape, out_align=geo.out_align, limits=limits, **force)


def _geometry(key: Tuple[Any, ...]) -> Geometry:
    op, axis, mode, fill = key[10:]
    return geometry_of_key(op, key, axis, mode, fill)


_RUNTIME = OpRuntime(plan_for, _geometry, 512)


def cache_info() -> PlanCacheInfo:
    """Hits, misses, maxsize and size of the plan cache of gather_elements and
    take_along_axis."""
    return _RUNTIME.info()


def cache_clear() -> int:
    """Drop every cached plan of gather_elements and take_along_axis."""
    return _RUNTIME.clear()


def run(op: str, data: Array, indices: Array, axis: Any, out: Optional[Array], mode: str,
        fill_value: Any, stream: Any, device: int, backend: Any) -> Array:
    """GatherElements (``op="elements"``) or take_along_axis (``op="along"``) on
    arrays already validated for ``backend``: call key, runtime, launch."""
    if type(axis) is not int or not -data.ndim <= axis < data.ndim:
        axis = validate.normalize_axis(axis, data.ndim)  # TypeError / AxisError
    if type(fill_value) is not int:
        validate.check_fill(fill_value)
    ptr = backend.pointer(data)
    key = call_key(backend, device, data, ptr, indices, out_bits(out, backend),
                   (op, axis % data.ndim, mode, fill_token(fill_value) if mode == "fill" else None))
    return _RUNTIME.run(key, data, ptr, indices, out, stream, fill_value)


def _cached(op: str, data: Array, indices: Array, axis: Any, out: Optional[Array], mode: str,
            fill_value: Any) -> Optional[Array]:
    """The cached path (see GatherOp.__call__) for CuPy ``data`` and ``indices``: the
    result, or None when this call's key has no plan yet (the caller validates)."""
    nd = data.ndim
    if (type(axis) is not int or not -nd <= axis < nd or type(mode) is not str
            or (mode == "fill" and type(fill_value) is not int)):
        return None
    mem = data.data
    ptr, device = mem.ptr, mem.device_id
    if indices.data.device_id != device:
        return None
    bound = _RUNTIME.cached((
        CUDA, device, data.shape, data.strides, data.dtype, ptr & 255, indices.shape,
        indices.strides, indices.dtype, 0 if out is None else out_bits(out, CUDA), op,
        axis % nd, mode, fill_value if mode == "fill" else None))
    if bound is None or bound.copy_data:
        return None
    return execute(bound, data, ptr, indices, out, None, device)


def _call(op: str, data: Array, indices: Any, axis: Any, out: Optional[Array], mode: str,
          fill_value: Any, stream: Any) -> Array:
    if stream is None and type(indices) is validate.cupy_ndarray():
        result = _cached(op, data, indices, axis, out, mode, fill_value)
        if result is not None:
            return result
    if stream is not None:  # conversions and copies run on it too
        with validate.current_stream(stream):
            return _slow_call(op, data, indices, axis, out, mode, fill_value, stream)
    return _slow_call(op, data, indices, axis, out, mode, fill_value, None)


def _slow_call(op: str, data: Array, indices: Any, axis: Any, out: Optional[Array], mode: str,
               fill_value: Any, stream: Any) -> Array:
    cp = validate.cupy_module()
    device = data.data.device_id
    if (type(indices) is not cp.ndarray or indices.dtype not in _INDEX_DTYPES
            or not indices._c_contiguous or indices.data.device_id != device):
        indices = validate.as_indices(indices, device)
    return run(op, data, indices, axis, out, mode, fill_value, stream, device, CUDA)


def gather_elements(data: Any, indices: Any, axis: int = 0, *, out: Optional[Array] = None,
                    mode: str = "raise", fill_value: Any = 0, stream: Any = None) -> Array:
    """ONNX ``GatherElements`` (``torch.gather``): pick one element per index.

    ``out[i][j][k] = data[indices[i][j][k]][j][k]`` for ``axis=0``, and
    likewise for other axes: every output element takes the element of
    ``data`` at its own position, with the ``axis`` coordinate replaced by
    the index stored at that position.  One kernel launch.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        Array of rank >= 1; any dtype, any strides (read in place).
    indices : cupy.ndarray, numpy.ndarray or sequence of int
        Integer indices of the same rank as ``data``; on dimensions other than
        ``axis`` they may be smaller than ``data``, never larger.  int32 and
        int64 are used as they are.  Values in ``[-n, n)`` are valid (``n =
        data.shape[axis]``), negative ones counting from the end.
    axis : int
        Axis of ``data`` the indices address.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype; must not
        overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy.  ``"raise"`` checks every index on the GPU (the
        kernel checks what it reads; with ``out=`` a check kernel runs first,
        so ``out`` stays untouched) and raises IndexError, at the cost of one
        host synchronisation; ``"wrap"`` takes indices modulo ``n``;
        ``"clip"`` clamps to ``[0, n-1]``; ``"fill"`` writes ``fill_value``.
        The last three never synchronise and are safe inside CUDA graph
        capture.
    fill_value : scalar
        Written for out-of-range indices when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        Shape ``indices.shape``, dtype of ``data``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad index, its position and the
        valid range; nothing is written.
    ValueError
        If the ranks differ or indices exceed data on another dimension.
    """
    ndarray = validate.cupy_ndarray()
    if type(data) is ndarray and type(indices) is ndarray and stream is None:
        result = _cached("elements", data, indices, axis, out, mode, fill_value)
        if result is not None:
            return result
    validate.check_mode(mode, validate.GATHER_MODES)
    cp = validate.cupy_module()
    if type(data) is not cp.ndarray:
        fe = frontends.native(data)
        if fe is not None:
            return _call_native(fe, "elements", data, indices, axis, out, mode, fill_value,
                                stream)
        data = validate.as_data(data)
    if data.ndim == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    return _call("elements", data, indices, axis, out, mode, fill_value, stream)


def _call_native(fe: Any, op: str, data: Any, indices: Any, axis: Any, out: Any, mode: str,
                 fill_value: Any, stream: Any) -> Any:
    """A torch or JAX call (cugather.frontends): results in the caller's type and stream."""
    with fe.on_stream(stream):
        d = fe.prepare_data(data, "arr" if op == "along" else "data")
        if d.ndim == 0:
            raise ValueError("data must have at least one dimension, got a 0-d array")
        if axis is None:  # take_along_axis(axis=None): the flattened array
            d, axis = d.reshape((-1,)), 0
        i = fe.prepare_indices(indices, d.device)
        return fe.result(run(op, d, i, axis, fe.prepare_out(out), mode, fill_value, stream,
                             d.device, fe.backend))


def take_along_axis(arr: Any, indices: Any, axis: Optional[int] = -1) -> Array:
    """``numpy.take_along_axis`` for CuPy arrays, in one kernel launch.

    Parameters
    ----------
    arr : cupy.ndarray or GPU array
        Source array (any dtype, any strides).
    indices : cupy.ndarray or array_like of int
        Integer indices with ``arr``'s number of dimensions; the dimensions
        other than ``axis`` broadcast against ``arr`` (neither side is
        materialised).  Negative values count from the end.
    axis : int or None
        Axis to take along (default -1, as in NumPy 2.3+).  ``None`` takes
        from the flattened array; ``indices`` must then be 1-D.

    Returns
    -------
    cupy.ndarray
        The broadcast shape of ``arr`` and ``indices``, with
        ``indices.shape[axis]`` on ``axis``.

    Raises
    ------
    IndexError
        For non-integer indices, indices that do not broadcast against
        ``arr``, and any index outside ``[-n, n)``, checked on the GPU by the
        kernel that gathers (one launch, one host synchronisation).
    ValueError
        If ``indices`` does not have ``arr``'s number of dimensions.
    """
    cp = validate.cupy_module()
    if type(arr) is cp.ndarray and type(indices) is cp.ndarray:
        result = _cached("along", arr, indices, axis, None, "raise", 0)
        if result is not None:
            return result
    fe = frontends.native(arr)
    if fe is not None:
        if axis is None and len(getattr(indices, "shape", (0,))) != 1:
            raise ValueError(f"when axis=None, `indices` must have a single dimension; got "
                             f"shape {tuple(indices.shape)}")
        return _call_native(fe, "along", arr, indices, axis, None, "raise", 0, None)
    arr = validate.as_data(arr, "arr")
    if validate.is_gpu_array(indices) and not isinstance(indices, cp.ndarray):
        indices = validate.as_data(indices, "indices")  # torch and others: a zero-copy view
    if not hasattr(indices, "dtype"):
        indices = numpy.asarray(indices)
        if indices.size == 0 and indices.dtype.kind == "f":
            indices = indices.astype(numpy.int64)  # [] is float64 to NumPy
    if numpy.dtype(indices.dtype).kind not in "iu":
        raise IndexError(f"`indices` must be an integer array, got dtype {indices.dtype}")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"when axis=None, `indices` must have a single dimension; got "
                             f"shape {tuple(indices.shape)}")
        with cp.cuda.Device(arr.data.device_id):
            arr = arr.reshape(-1)
        axis = 0
    return _call("along", arr, indices, axis, None, "raise", 0, None)
