"""ONNX Gather and numpy.take: GatherOp, gather and take.

Per call: validate (``cugather.validate``) -> the op runtime
(``cugather.runtime``): the plan cached for this call key, bound on first use,
launched.  A repeated call on CuPy arrays is one key comparison, an output
allocation and one launch; raise mode's kernel checks the indices it reads
and adds one host synchronisation.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, ClassVar, Dict, Optional, Tuple, Type

import numpy

from .. import frontends, validate
from ..plan.core import H200, DeviceLimits, Operand, alignment
from ..plan.gather import GatherPlan, plan_gather
from ..runtime.cache import PlanCacheInfo
from ..runtime.key import Geometry, call_key, fill_token, geometry_of_key, out_bits
from ..runtime.launch import CUDA, execute
from ..runtime.op import OpRuntime
from ..validate import Array

__all__ = ["GatherOp", "gather", "take", "take_op", "run", "remember_native"]

_INDEX_DTYPES = frozenset(validate.INDEX_DTYPES)
_ndarray: Any = None  # cupy.ndarray, looked up on the first call (see GatherOp.__call__)


def _load_ndarray() -> Any:
    global _ndarray
    _ndarray = validate.cupy_ndarray()
    return _ndarray
_I32, _I64 = validate.INDEX_DTYPES  # NumPy's own instances, which CuPy arrays carry


#: What a GatherOp's cached plans depend on: fixed once the op is built.
_SETTINGS = frozenset({"axis", "mode", "fill_value", "_axis", "_mode", "_fill_value",
                       "_kernel_mode", "_runtime"})


class GatherOp:
    """A gather along one axis with a fixed mode, caching per-shape plans.

    Parameters
    ----------
    axis : int
        Axis of ``data`` to gather along (negative counts from the end).
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy.  Indices in ``[-n, n)`` are always valid, negative
        ones counting from the end.  ``"raise"`` checks every index on the GPU
        and raises IndexError naming the first bad one: the gather kernel
        checks what it reads, then one host synchronisation (with ``out=`` a
        check kernel runs first, so ``out`` stays untouched); ``"wrap"`` takes indices modulo
        ``n``; ``"clip"`` clamps to ``[0, n-1]``; ``"fill"`` writes
        ``fill_value``.  The last three never synchronise and are safe inside
        CUDA graph capture.
    fill_value : scalar
        Value written for out-of-range indices in ``"fill"`` mode.
    cache_size : int
        Most per-shape plans kept (the least recently used are dropped first).

    Calling ``op(data, indices, out=None, stream=None)`` returns
    ``take(data, indices, axis)`` as a CuPy array on ``data``'s device.
    ``axis``, ``mode`` and ``fill_value`` are read-only: the cached plans
    depend on them (build another op for other settings).
    """

    # ONNX Gather: every index is checked, integer indices only, 0-d data refused.
    _MODES: ClassVar[Tuple[str, ...]] = validate.GATHER_MODES
    _KERNEL_MODES: ClassVar[Dict[str, str]] = {m: m for m in validate.GATHER_MODES}
    _OP = "gather"
    _DATA = "data"
    _ALLOW_BOOL = False
    _CHECK_UNREAD = True
    _axis: int
    _mode: str
    _fill_value: Any
    _kernel_mode: str
    _runtime: OpRuntime

    def __init__(self, axis: int = 0, *, mode: str = "raise", fill_value: Any = 0,
                 cache_size: int = 256) -> None:
        validate.check_mode(mode, self._MODES)
        if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
            raise TypeError(f"axis must be an integer, got {type(axis).__name__} {axis!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        validate.check_fill(fill_value)
        setattr_ = object.__setattr__  # past the read-only guard below
        setattr_(self, "_axis", int(axis))
        setattr_(self, "_mode", mode)
        setattr_(self, "_fill_value", fill_value)
        setattr_(self, "_kernel_mode", self._KERNEL_MODES[mode])
        setattr_(self, "_runtime", OpRuntime(self._plan_geometry, self._geometry, cache_size))

    @property
    def axis(self) -> int:
        """The gather axis (as given; negative counts from the end)."""
        return self._axis

    @property
    def mode(self) -> str:
        """The out-of-range policy."""
        return self._mode

    @property
    def fill_value(self) -> Any:
        """The value written for out-of-range indices in ``"fill"`` mode."""
        return self._fill_value

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SETTINGS:
            raise AttributeError(
                f"{type(self).__name__}.{name.lstrip('_')} is read-only: the op's cached "
                f"plans depend on it; build a new {type(self).__name__}(axis=..., mode=..., "
                f"fill_value=...) instead")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(axis={self.axis}, mode={self.mode!r}, "
                f"fill_value={self.fill_value!r}, cached_plans={self.cache_info().currsize})")

    # ------------------------------------------------------------ cache
    def cache_info(self) -> PlanCacheInfo:
        """Plan-cache statistics: hits, misses, maxsize, currsize."""
        return self._runtime.info()

    def cache_clear(self) -> None:
        """Drop every cached plan and reset the counters."""
        self._runtime.clear()

    # ------------------------------------------------------------ planning
    def _geometry(self, key: Tuple[Any, ...]) -> Geometry:
        """The geometry of a call key (the op's axis, mode and fill are its own)."""
        return geometry_of_key(self._OP, key, self._axis % len(key[2]), self._kernel_mode)

    def _plan_geometry(self, geo: Geometry, limits: DeviceLimits, **force: Any) -> GatherPlan:
        data = Operand(geo.data_shape, geo.data_strides, geo.dtype.itemsize, geo.data_align)
        return plan_gather(data, geo.indices_shape, geo.index_dtype.name, geo.axis, geo.mode,
                           out_align=geo.out_align, limits=limits,
                           check_unread=self._CHECK_UNREAD, **force)

    def plan(self, data: Any, indices: Any, **force: Any) -> GatherPlan:
        """The plan a call with these operands would use; launches nothing.

        ``data`` and ``indices`` may be arrays (NumPy or CuPy; indices also an
        int or a sequence), or ``(shape, dtype)`` pairs; no GPU is needed.
        Everything the call checks is checked here too.  The plan is an H200's
        (its limits and tuning table, :data:`cugather.plan.core.H200`).  Keyword arguments
        ``kind``, ``math_name``, ``max_grid`` and ``row_unroll`` force a
        variant (testing).
        """
        data_op, dtype = _describe(data, self._DATA)
        validate.check_data_dtype(dtype, self._DATA)
        if not data_op.shape:
            data_op = self._zero_d(data_op)
        idx_shape, idx_dtype = _describe_indices(indices)
        idx_dtype = validate.index_dtype(idx_dtype, self._ALLOW_BOOL)
        if self._kernel_mode == "fill":
            validate.fill_bytes(self._fill_value, dtype)
        axis = validate.normalize_axis(self._axis, len(data_op.shape))
        geo = Geometry(self._OP, None, 0, data_op.shape, data_op.strides, dtype, idx_shape,
                       idx_dtype, data_op.align, 256, axis, self._kernel_mode)
        return self._plan_geometry(geo, H200, **force)

    def _zero_d(self, data: Any) -> Any:
        raise ValueError(f"{self._DATA} must have at least one dimension, got a 0-d array")

    # ------------------------------------------------------------ call
    def __call__(self, data: Any, indices: Any, *, out: Optional[Array] = None,
                 stream: Any = None) -> Array:
        ndarray = _ndarray or _load_ndarray()
        if type(data) is ndarray and type(indices) is ndarray:
            # The cached path: the key of these very arrays.  A cached key was
            # built from validated arrays, so a hit says these are valid too.
            mem = data.data
            ptr = mem.ptr
            device = mem.device_id
            if indices.data.device_id == device:
                key = (CUDA, device, data.shape, data.strides, data.dtype, ptr & 255,
                       indices.shape, indices.strides, indices.dtype,
                       0 if out is None else out_bits(out, CUDA))
                runtime = self._runtime
                memo = runtime._memo
                if memo[0] == key:  # OpRuntime.cached, written out: every call runs it
                    runtime.hits += 1
                    bound = memo[1]
                else:
                    bound = runtime.cached(key)
                if bound is not None and not bound.copy_data:
                    if stream is None:
                        if out is None and bound.call is not None:
                            result = bound.call(ptr, indices, ())
                            if result is not None:
                                return result
                        return execute(bound, data, ptr, indices, out, None, device)
                    with validate.current_stream(stream):  # the output's memory too
                        return execute(bound, data, ptr, indices, out, stream, device)
        elif type(data) is not ndarray:
            fe = frontends.native(data)
            if fe is not None:  # torch and JAX: results in the caller's type and stream
                if out is None and stream is None and fe.fast is not None:
                    result = fe.fast(self._runtime, data, indices)  # the front door's memo
                    if result is not None:
                        return result
                return self._call_native(fe, data, indices, out, stream)
        if stream is not None:  # conversions and copies run on it too
            with validate.current_stream(stream):
                return self._call(data, indices, out, stream)
        return self._call(data, indices, out, None)

    def _call(self, data: Any, indices: Any, out: Optional[Array], stream: Any) -> Array:
        ndarray = validate.cupy_ndarray()
        if type(data) is not ndarray:
            data = validate.as_data(data, self._DATA)
        if data.ndim == 0:
            data = self._zero_d(data)
        device = data.data.device_id
        if (type(indices) is not ndarray or indices.dtype not in _INDEX_DTYPES
                or not indices._c_contiguous or indices.data.device_id != device):
            indices = validate.as_indices(indices, device, allow_bool=self._ALLOW_BOOL)
        return run(self, data, indices, out, stream, device, CUDA)

    def _call_native(self, fe: Any, data: Any, indices: Any, out: Any, stream: Any) -> Any:
        if stream is not None:
            with fe.on_stream(stream):  # the front door's own conversions too
                return self._native(fe, data, indices, out, stream)
        return self._native(fe, data, indices, out, None)

    def _native(self, fe: Any, data: Any, indices: Any, out: Any, stream: Any) -> Any:
        d = fe.prepare_data(data, self._DATA)
        if d.ndim == 0:
            d = self._zero_d(d)
        i = fe.prepare_indices(indices, d.device, self._ALLOW_BOOL)
        o = fe.prepare_out(out)
        result = run(self, d, i, o, stream, d.device, fe.backend)
        if o is None and stream is None and fe.remember is not None:
            remember_native(self, fe, data, indices, d, i)
        return fe.result(result)


class _TakeOp(GatherOp):
    """numpy.take's semantics: clip clamps negatives to 0, bool indices are
    allowed, indices no outer slice reads are not checked, 0-d data is 1-d."""

    _MODES = validate.TAKE_MODES
    _KERNEL_MODES = {"raise": "raise", "wrap": "wrap", "clip": "clip_numpy"}
    _OP = "take"
    _DATA = "a"
    _ALLOW_BOOL = True
    _CHECK_UNREAD = False

    def _zero_d(self, data: Any) -> Any:
        if isinstance(data, Operand):
            return Operand((1,), (data.itemsize,), data.itemsize, data.align)
        return data.reshape((1,))


def take_op(axis: int, mode: str, cache_size: int = 256) -> GatherOp:
    """A GatherOp with numpy.take's semantics (what :func:`take` runs)."""
    return _TakeOp(axis, mode=mode, cache_size=cache_size)


def run(op: GatherOp, data: Array, indices: Array, out: Optional[Array], stream: Any,
        device: int, backend: Any) -> Array:
    """``op`` on arrays already validated for ``backend``: call key, runtime, launch."""
    nd = data.ndim
    if not -nd <= op._axis < nd:
        validate.normalize_axis(op._axis, nd)  # numpy's AxisError
    ptr = backend.pointer(data)
    key = call_key(backend, device, data, ptr, indices, out_bits(out, backend))
    return op._runtime.run(key, data, ptr, indices, out, stream, op._fill_value)


def remember_native(op: GatherOp, fe: Any, data: Any, indices: Any, d: Any, i: Any) -> None:
    """Let front door ``fe`` memoise the call that just ran ``op`` on views ``d``, ``i``
    of ``data``, ``indices`` (no out=, no stream=), for its ``fast`` path."""
    key = call_key(fe.backend, d.device, d, fe.backend.pointer(d), i, 0)
    fe.remember(op._runtime, data, indices, d, i, key)


def _shape(shape: Any, argname: str) -> Tuple[int, ...]:
    """A ``(shape, dtype)`` pair's shape: non-negative integers whose product fits int64."""
    dims = (shape,) if isinstance(shape, (int, numpy.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise TypeError(f"{argname} shape must be an int or a sequence of ints, got "
                        f"{type(shape).__name__} {shape!r:.80}") from None
    for n in dims:
        if isinstance(n, bool) or not isinstance(n, (int, numpy.integer)):
            raise TypeError(f"{argname} shape {shape!r:.80} must hold integers, got "
                            f"{type(n).__name__} {n!r}")
        if n < 0:
            raise ValueError(f"{argname} shape {shape!r:.80} has a negative dimension {n}")
    if math.prod(int(n) for n in dims) >= 1 << 63:
        raise ValueError(f"{argname} shape {shape!r:.80} has 2**63 elements or more")
    return tuple(int(n) for n in dims)


def _describe(obj: Any, argname: str) -> Tuple[Operand, numpy.dtype[Any]]:
    """(Operand, dtype) of an array, or of a ``(shape, dtype)`` pair."""
    if isinstance(obj, tuple) and len(obj) == 2 and not hasattr(obj, "shape"):
        shape, dtype = obj
        dtype = numpy.dtype(dtype)
        return Operand.contiguous(_shape(shape, argname), dtype.itemsize), dtype
    if not (hasattr(obj, "shape") and hasattr(obj, "dtype") and hasattr(obj, "strides")):
        raise TypeError(f"{argname} must be an array (NumPy, CuPy or another GPU array) or a "
                        f"(shape, dtype) pair, got {type(obj).__name__}")
    dtype = numpy.dtype(obj.dtype)
    ptr = getattr(getattr(obj, "data", None), "ptr", None)
    if ptr is None and isinstance(obj, numpy.ndarray):
        ptr = obj.ctypes.data
    return Operand(tuple(obj.shape), tuple(obj.strides), dtype.itemsize,
                   alignment(ptr) if ptr else 256), dtype


def _describe_indices(obj: Any) -> Tuple[Tuple[int, ...], numpy.dtype[Any]]:
    """(shape, dtype) of indices given as an array, a pair, an int or a sequence."""
    if isinstance(obj, tuple) and len(obj) == 2 and not hasattr(obj, "shape") and (
            isinstance(obj[0], (tuple, list, int)) and not isinstance(obj[1], (int, float))):
        op, dtype = _describe(obj, "indices")
        return op.shape, dtype
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return tuple(obj.shape), numpy.dtype(obj.dtype)
    host = numpy.asarray(obj)
    if host.dtype == object:
        raise TypeError(f"indices must be integers, got {type(obj).__name__} {obj!r:.80}")
    if host.size == 0 and host.dtype.kind == "f":
        host = host.astype(numpy.int64)  # [] is float64 to NumPy; numpy.take accepts it
    return host.shape, host.dtype


# ---------------------------------------------------------------- functions
_ops: OrderedDict[Any, GatherOp] = OrderedDict()  # the ops gather() and take() share, least recent first
_ops_lock = threading.Lock()
_MAX_SHARED_OPS = 64


def _shared_op(cls: Type[GatherOp], axis: Any, mode: str, fill_value: Any) -> GatherOp:
    """The op the functions share for these settings (a bounded registry)."""
    key = (cls, type(axis), axis, mode, fill_token(fill_value))
    try:
        op = _ops.get(key)  # an unlocked read: dict lookups are atomic
    except TypeError:  # unhashable axis: the op's own check reports it
        return cls(axis, mode=mode, fill_value=fill_value)
    if op is not None:
        return op
    op = cls(axis, mode=mode, fill_value=fill_value)
    with _ops_lock:
        op = _ops.setdefault(key, op)
        _ops.move_to_end(key)
        while len(_ops) > _MAX_SHARED_OPS:
            _ops.popitem(last=False)
    return op


def gather(data: Any, indices: Any, axis: int = 0, *, out: Optional[Array] = None,
           mode: str = "raise", fill_value: Any = 0, stream: Any = None) -> Array:
    """ONNX ``Gather``: entries of ``data`` along ``axis`` at ``indices``.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        Array of rank >= 1; any dtype, any strides.
    indices : cupy.ndarray, numpy.ndarray, sequence or int
        Integer indices (int32 and int64 are used as they are).  Values in
        ``[-n, n)`` are valid, negative ones counting from the end.
    axis : int
        Axis of ``data`` to gather along.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype; must not
        overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy; see :class:`GatherOp`.  ``"raise"`` costs one
        host synchronisation (the kernel checks the indices it reads).
    fill_value : scalar
        Written for out-of-range indices when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        Shape ``data.shape[:axis] + indices.shape + data.shape[axis+1:]``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad index, its position and the
        valid range; nothing is written.
    """
    # The shared op of int settings, looked up as _shared_op keys it (no checks:
    # an op exists only for settings that passed them).
    op = (_ops.get((GatherOp, int, axis, mode, fill_value))
          if type(axis) is int and type(mode) is str and type(fill_value) is int else None)
    if op is None:
        validate.check_mode(mode, validate.GATHER_MODES)
        op = _shared_op(GatherOp, axis, mode, fill_value)
    return op(data, indices, out=out, stream=stream)


def take(a: Any, indices: Any, axis: Optional[int] = None, out: Optional[Array] = None,
         mode: str = "raise") -> Array:
    """``numpy.take`` for CuPy arrays.

    Parameters
    ----------
    a : cupy.ndarray or GPU array
        Source array (a 0-d array counts as 1-d, as in NumPy).
    indices : array_like of int
        Indices to take (bool is accepted, as by NumPy).
    axis : int, optional
        Axis to take along; ``None`` takes from the flattened array.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype.
    mode : {"raise", "wrap", "clip"}
        As in NumPy: ``"clip"`` clamps to ``[0, n-1]``, so negative indices
        become 0; ``"raise"`` checks on the GPU (the kernel checks what it
        reads; one host synchronisation; ``out`` untouched on an error).

    Returns
    -------
    cupy.ndarray
    """
    if type(axis) is int and type(mode) is str:
        op = _ops.get((_TakeOp, int, axis, mode, 0))  # see gather()
        if op is not None:
            return op(a, indices, out=out)
    validate.check_mode(mode, validate.TAKE_MODES)
    if axis is None:
        if frontends.native(a) is None:
            a = validate.as_data(a, "a")
        a = a.reshape(-1) if a.ndim != 1 else a  # torch and JAX flatten alike
        axis = 0
    return _shared_op(_TakeOp, axis, mode, 0)(a, indices, out=out)
