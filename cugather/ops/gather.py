"""Public gather API: GatherOp, gather (ONNX Gather) and take (numpy.take).

Pipeline per call: validate and normalise (``_arrays``) -> look up the plan
for this geometry (``_plan``, cached per op) -> bound kernel (``_compiler`` +
``_launch``) -> launch.  A cached call is a dictionary hit, an output
allocation and one launch; raise mode adds a bounds check and one sync.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict, namedtuple
from typing import Optional

import numpy

from .. import validate as _arrays
from ..validate import GATHER_MODES, TAKE_MODES, alignment, cupy_module
from ..compile.compiler import load_kernel
from ..runtime.launch import BoundKernel, _ready, fill_words, launch_checked
from ..plan.gather import DeviceLimits, GatherPlan, Operand, normalize_axis, plan_gather

__all__ = ["GatherOp", "gather", "take", "CacheInfo"]

CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize")

_INDEX_DTYPES = frozenset(_arrays.INDEX_DTYPES)


class _Fast:
    """CuPy callables of the cached path, looked up once (None until CuPy loads)."""

    ndarray = get_device = current_stream = None

    @classmethod
    def load(cls):
        cp = cupy_module()
        cls.ndarray = cp.ndarray
        cls.get_device = cp.cuda.runtime.getDevice
        cls.current_stream = cp.cuda.get_current_stream
        return cls


_live_ops = weakref.WeakSet()  # every GatherOp, so jit.cache_clear() can reach their plans
_live_lock = threading.Lock()
_limits: dict = {}


def _device_limits(device: int) -> DeviceLimits:
    lim = _limits.get(device)
    if lim is None:
        cp = cupy_module()
        attrs = cp.cuda.Device(device).attributes
        lim = DeviceLimits(sm_count=attrs["MultiProcessorCount"],
                           max_shared_mem=attrs["MaxSharedMemoryPerBlock"])
        _limits[device] = lim
    return lim


class _Bound:
    """A cached plan with its kernels bound on one device."""

    __slots__ = ("plan", "gather", "check", "out_shape", "copy_data", "fast")

    def __init__(self, plan: GatherPlan, gather, check, contiguous_indices: bool):
        self.plan, self.gather, self.check = plan, gather, check
        self.out_shape = plan.out_shape
        self.copy_data = plan.copy_data
        # fast: one launch and nothing else (no check, no copy, non-empty output)
        self.fast = (gather is not None and check is None and not plan.copy_data
                     and contiguous_indices)


class GatherOp:
    """A gather along one axis with fixed mode, caching per-shape plans.

    Parameters
    ----------
    axis : int
        Axis of ``data`` to gather along (negative counts from the end).
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy.  Indices in ``[-n, n)`` are always valid, negative
        ones counting from the end.  ``"raise"`` checks every index on the GPU
        before anything is written and raises IndexError (one extra kernel and
        one host synchronisation per call); ``"wrap"`` takes indices modulo
        ``n``; ``"clip"`` clamps to ``[0, n-1]``; ``"fill"`` writes
        ``fill_value``.  The last three never synchronise and are safe inside
        CUDA graph capture.
    fill_value : scalar
        Value written for out-of-range indices in ``"fill"`` mode.
    cache_size : int
        Most per-shape plans kept (the oldest are dropped first).

    Calling ``op(data, indices, out=None, stream=None)`` returns
    ``take(data, indices, axis)`` as a CuPy array on ``data``'s device.
    """

    def __init__(self, axis: int = 0, *, mode: str = "raise", fill_value=0,
                 cache_size: int = 256):
        self._init(axis, _arrays.check_mode(mode, GATHER_MODES), mode, fill_value, cache_size)

    def _init(self, axis, public_mode, kernel_mode, fill_value, cache_size, allow_bool=False):
        if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
            raise TypeError(f"axis must be an integer, got {type(axis).__name__} {axis!r}")
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        _arrays.check_fill(fill_value)
        self.axis = int(axis)
        self.mode = public_mode
        self.fill_value = fill_value
        self._kernel_mode = kernel_mode
        self._allow_bool = allow_bool
        self._maxsize = cache_size
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0
        with _live_lock:
            _live_ops.add(self)
        self._force = {}  # plan overrides (kind, math_name, max_grid) for tests and benchmarks

    def __repr__(self):
        return (f"GatherOp(axis={self.axis}, mode={self.mode!r}, fill_value={self.fill_value!r},"
                f" cached_plans={len(self._cache)})")

    # ------------------------------------------------------------ cache
    def cache_info(self) -> CacheInfo:
        """Plan-cache statistics: hits, misses, maxsize, currsize."""
        with self._lock:
            return CacheInfo(self._hits, self._misses, self._maxsize, len(self._cache))

    def cache_clear(self) -> None:
        """Drop every cached plan and reset the counters."""
        with self._lock:
            self._cache.clear()
            self._hits = self._misses = 0

    # ------------------------------------------------------------ planning
    def _plan_for(self, data: Operand, indices_shape, index_dtype, out_align=256,
                  limits: DeviceLimits = DeviceLimits(), **force) -> GatherPlan:
        axis = normalize_axis(self.axis, len(data.shape))
        # take() (allow_bool) follows numpy.take: unread indices are not checked.
        return plan_gather(data, tuple(indices_shape), index_dtype, axis, self._kernel_mode,
                           out_align=out_align, limits=limits,
                           check_unread=not self._allow_bool, **force)

    def plan(self, data, indices, **force) -> GatherPlan:
        """The plan a call with these operands would use; launches nothing.

        ``data`` and ``indices`` may be arrays (NumPy or CuPy), or
        ``(shape, dtype)`` pairs; no GPU is needed.  Keyword arguments
        ``kind``, ``math_name`` and ``max_grid`` force a variant (testing).
        """
        data_op, _ = _operand(data, "data")
        index_op, idx_dtype = _operand(indices, "indices")
        idx_dtype = _arrays._index_dtype(idx_dtype, self._allow_bool, "indices")
        if not data_op.shape:
            raise ValueError("data must have at least one dimension, got a 0-d array")
        return self._plan_for(data_op, index_op.shape, idx_dtype.name, **force)

    def _bind(self, key, data, indices, device: int, out_align: int) -> _Bound:
        if data.ndim == 0:
            raise ValueError("data must have at least one dimension, got a 0-d array")
        plan = self._plan_for(Operand(data.shape, data.strides, data.itemsize, key[7]),
                              indices.shape, indices.dtype.name, out_align,
                              _device_limits(device), **self._force)
        fill = None
        if self._kernel_mode == "fill":
            # Units narrower than an element take their part of it (fill_at).
            fill = fill_words(_arrays.fill_bytes(self.fill_value, data.dtype))
        if (plan.n_indices and not plan.axis_len and self._kernel_mode != "fill"
                and math.prod(plan.out_shape)):
            raise IndexError(f"cannot take {plan.n_indices} indices from axis {plan.axis} of "
                             f"size 0 (mode={self.mode!r})")
        gather = check = None
        if plan.key is not None:
            fields = dict(plan.fields)
            if fill is not None:
                fields["fill"] = fill
            spec_type = "ElemArgs" if plan.key.kind == "elem" else "GatherArgs"
            fn = load_kernel(plan.key, device).function
            gather = BoundKernel(fn, spec_type, fields, plan.grid, plan.block, plan.shared_mem)
        if plan.check_key is not None:
            fn = load_kernel(plan.check_key, device).function
            grid = (max(1, min(-(-plan.n_indices // 256), 4096)), 1, 1)
            check = BoundKernel(fn, "CheckArgs", dict(n=plan.n_indices, axis_len=plan.axis_len),
                                grid, (256, 1, 1))
        contiguous_idx = indices.flags.c_contiguous
        return _Bound(plan, gather, check, contiguous_idx)

    # ------------------------------------------------------------ call
    def __call__(self, data, indices, *, out=None, stream=None):
        if stream is not None:  # conversions and copies run on it too
            with _arrays.current_stream(stream):
                return self._call(data, indices, out)
        return self._call(data, indices, out)

    def _call(self, data, indices, out, stream=None):
        fast = _Fast if _Fast.ndarray is not None else _Fast.load()
        ndarray = fast.ndarray
        if type(data) is not ndarray:
            data = _arrays.as_data(data)
        mem = data.data
        device = mem.device_id
        if (type(indices) is not ndarray or indices.dtype not in _INDEX_DTYPES
                or indices.data.device_id != device):
            indices = _arrays.as_indices(indices, device, allow_bool=self._allow_bool)
        p = mem.ptr
        key = (device, data.shape, data.strides, data.dtype, indices.shape, indices.strides,
               indices.dtype, (p & 255 and p & -p) or 256)
        if out is not None:
            q = out.data.ptr if isinstance(out, ndarray) else 0
            key += ((q & 255 and q & -q) or 256,)
        bound = self._cache.get(key)
        if bound is None:
            bound = self._miss(key, data, indices, device)
        else:
            self._hits += 1  # unlocked: exact single-threaded, approximate under contention
        if (bound.fast and fast.get_device() == device
                and device in getattr(_ready, "devices", ())):
            # The cached path: allocate, launch.
            if out is None:
                out = ndarray(bound.out_shape, data.dtype)
            else:
                _arrays.check_out(out, bound.out_shape, data.dtype, device,
                                  {"data": data, "indices": indices})
            bound.gather.launch3(
                p, indices.data.ptr, out.data.ptr,
                fast.current_stream().ptr if stream is None else _arrays.stream_pointer(stream))
            return out
        return self._call_slow(bound, data, indices, out, stream, device)

    def _miss(self, key, data, indices, device: int) -> _Bound:
        out_align = key[8] if len(key) > 8 else 256
        bound = self._bind(key, data, indices, device, out_align)
        with self._lock:
            self._misses += 1
            self._cache[key] = bound
            while len(self._cache) > self._maxsize:  # drop the oldest plan
                self._cache.popitem(last=False)
        return bound

    def _call_slow(self, bound: _Bound, data, indices, out, stream, device: int):
        """Everything but the cached fast path: copies, raise mode, device switch."""
        cp = cupy_module()
        if bound.copy_data:
            return self._call(_contiguous_copy(data, device), indices, out, stream)
        if not indices.flags.c_contiguous:
            with cp.cuda.Device(device):
                indices = cp.ascontiguousarray(indices).reshape(indices.shape)
        return launch_checked(bound.gather, bound.check, bound.out_shape, data, indices, out,
                              stream, device, lambda pos: _index_error(bound.plan, indices, pos))


def _index_error(plan, indices, pos: int) -> IndexError:
    """The IndexError for the out-of-range index at flat position ``pos``."""
    value = int(indices.reshape(-1)[pos].get())
    where = tuple(int(i) for i in numpy.unravel_index(pos, indices.shape))
    n = plan.axis_len
    return IndexError(
        f"index {value} is out of bounds for axis {plan.axis} with size {n} "
        f"(at indices{list(where)}; valid range [{-n}, {n - 1}])")


def _contiguous_copy(data, device: int):
    """A fresh C-contiguous, 256-byte aligned copy of ``data``.

    CuPy's own copy kernels assume element alignment, so an array whose
    address or strides are not multiples of its item size is copied by a
    gather along axis 0 with identity indices instead (units fit any layout).
    """
    cp = cupy_module()
    isz = data.itemsize
    aligned = data.data.ptr % isz == 0 and all(s % isz == 0 for s in data.strides)
    with cp.cuda.Device(device):
        if aligned:
            return data.copy(order="C")
        op = GatherOp.__new__(GatherOp)
        op._init(0, "wrap", "wrap", 0, 4)
        op._force = {"kind": "elem"}
        plan = op.plan(data, (data.shape[:1], numpy.int64))
        if plan.copy_data:
            raise ValueError(f"data of shape {data.shape} with strides {data.strides} at an "
                             f"address not aligned to its item size ({isz}) cannot be "
                             f"gathered: make it contiguous first")
        return op(data, cp.arange(data.shape[0], dtype=numpy.int64))


def _operand(obj, argname: str):
    """(Operand, dtype) for an array, or a (shape, dtype) pair."""
    if isinstance(obj, tuple) and len(obj) == 2 and not hasattr(obj, "shape"):
        shape, dtype = obj
        dtype = numpy.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        return Operand.contiguous(shape, dtype.itemsize), dtype
    if isinstance(obj, (int, numpy.integer)) and not isinstance(obj, bool):
        return Operand((), (), 8), numpy.dtype(numpy.int64)
    if not hasattr(obj, "shape"):
        obj = numpy.asarray(obj)
        if obj.size == 0:
            obj = obj.astype(numpy.int64)
    dtype = numpy.dtype(obj.dtype)
    ptr = getattr(getattr(obj, "data", None), "ptr", None)
    if ptr is None and isinstance(obj, numpy.ndarray):
        ptr = obj.ctypes.data
    strides = tuple(getattr(obj, "strides", None) or Operand.contiguous(obj.shape, dtype.itemsize).strides)
    return Operand(tuple(obj.shape), strides, dtype.itemsize,
                   alignment(ptr) if ptr else 256), dtype


def _clear_plan_caches() -> int:
    """Empty the plan cache of every live GatherOp; return how many plans were dropped."""
    with _live_lock:
        ops = list(_live_ops)
    dropped = 0
    for op in ops:
        dropped += op.cache_info().currsize
        op.cache_clear()
    return dropped


# ---------------------------------------------------------------- functions
_ops: OrderedDict = OrderedDict()
_GATHER_MODE_SET = frozenset(GATHER_MODES)
_ops_lock = threading.Lock()


def _fill_key(fill_value):
    """A hashable stand-in for ``fill_value``."""
    try:
        hash(fill_value)
        return (type(fill_value), fill_value)
    except TypeError:
        return (type(fill_value), repr(fill_value))


def _shared_op(axis, mode: str, kernel_mode: str, fill_value, allow_bool: bool) -> GatherOp:
    """The GatherOp the functions share for these settings (a bounded registry)."""
    try:
        key = (axis, type(axis), kernel_mode, allow_bool, type(fill_value), fill_value)
        op = _ops.get(key)  # an unlocked read: the registry only grows under the lock
    except TypeError:  # unhashable fill_value or axis: the op's own checks report it
        key, op = None, None
    if op is not None:
        return op
    op = GatherOp.__new__(GatherOp)
    op._init(axis, mode, kernel_mode, fill_value, 256, allow_bool)
    if key is not None:
        with _ops_lock:
            op = _ops.setdefault(key, op)
            if len(_ops) > 64:
                _ops.popitem(last=False)
    return op


def gather(data, indices, axis: int = 0, *, out=None, mode: str = "raise", fill_value=0,
           stream=None):
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
        Out-of-range policy; see :class:`GatherOp`.  ``"raise"`` costs a
        bounds-check kernel and one host synchronisation.
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
    if type(mode) is not str or mode not in _GATHER_MODE_SET:
        _arrays.check_mode(mode, GATHER_MODES)
    return _shared_op(axis, mode, mode, fill_value, False)(data, indices, out=out, stream=stream)


def take(a, indices, axis: Optional[int] = None, out=None, mode: str = "raise"):
    """``numpy.take`` for CuPy arrays.

    Parameters
    ----------
    a : cupy.ndarray or GPU array
        Source array.
    indices : array_like of int
        Indices to take (bool is accepted, as by NumPy).
    axis : int, optional
        Axis to take along; ``None`` takes from the flattened array.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype.
    mode : {"raise", "wrap", "clip"}
        As in NumPy: ``"clip"`` clamps to ``[0, n-1]``, so negative indices
        become 0; ``"raise"`` checks on the GPU before writing (one host sync).

    Returns
    -------
    cupy.ndarray
    """
    _arrays.check_mode(mode, TAKE_MODES)
    kernel_mode = "clip_numpy" if mode == "clip" else mode
    if axis is None:
        a = _arrays.as_data(a, "a")
        a = a.reshape(-1) if a.ndim != 1 else a
        axis = 0
    return _shared_op(axis, mode, kernel_mode, 0, True)(a, indices, out=out)
