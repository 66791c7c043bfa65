"""Running GatherElements / GatherND plans: bound kernels cached per geometry.

The api functions (``_elements``, ``_nd``) validate their arguments and build a
geometry key; this module turns a plan into bound kernels once per key (a
bounded cache shared by both ops) and launches them.  A cached call without a
bounds check is a dictionary hit, an output allocation and one launch; raise
mode runs the check first and reads it back with one host synchronisation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from .. import validate as _arrays
from ..validate import cupy_module
from ..compile.compiler import load_kernel
from ..plan.family import FamilyPlan
from ..ops.gather import CacheInfo, _fill_key
from .launch import BoundKernel, _ready, fill_words, launch_checked

__all__ = ["Bound", "bound_for", "run", "cache_info", "cache_clear", "fill_key"]

MAXSIZE = 512
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()
_counts = {"hits": 0, "misses": 0}

fill_key = _fill_key


class Bound:
    """A plan with its kernels loaded and argument blocks built on one device."""

    __slots__ = ("plan", "main", "check", "out_shape", "copy_data", "fast")

    def __init__(self, plan: FamilyPlan, main, check):
        self.plan, self.main, self.check = plan, main, check
        self.out_shape = plan.out_shape
        self.copy_data = plan.copy_data
        self.fast = main is not None and check is None and not plan.copy_data


def cache_info() -> CacheInfo:
    """Hits, misses, maxsize and size of the bound-plan cache of both ops."""
    with _lock:
        return CacheInfo(_counts["hits"], _counts["misses"], MAXSIZE, len(_cache))


def cache_clear() -> int:
    """Drop every bound plan and reset the counters; return how many were dropped."""
    with _lock:
        n = len(_cache)
        _cache.clear()
        _counts.update(hits=0, misses=0)
        return n


def _bind(plan: FamilyPlan, device: int, fill_value, dtype) -> Bound:
    main = check = None
    if plan.key is not None:
        fields = dict(plan.fields)
        if plan.key.mode == "fill":
            fields["fill"] = fill_words(_arrays.fill_bytes(fill_value, dtype))
        fn = load_kernel(plan.key, device).function
        main = BoundKernel(fn, plan.args_type, fields, plan.grid, plan.block)
    if plan.check_key is not None:
        fn = load_kernel(plan.check_key, device).function
        check = BoundKernel(fn, plan.check_args_type, plan.check_fields, plan.check_grid,
                            (256, 1, 1))
    return Bound(plan, main, check)


def bound_for(key: tuple, make_plan: Callable[[], FamilyPlan], device: int, fill_value,
              dtype) -> Bound:
    """The cached Bound for ``key``, planning and binding it on a miss.

    ``make_plan`` raises the op's shape errors; ``fill_value`` is checked
    against ``dtype`` on a miss (it is part of ``key``).
    """
    bound = _cache.get(key)  # unlocked: a dict lookup is atomic
    if bound is not None:
        _counts["hits"] += 1  # exact single-threaded, approximate under contention
        return bound
    plan = make_plan()
    _arrays.check_fill(fill_value)
    bound = _bind(plan, device, fill_value, dtype)
    with _lock:
        _counts["misses"] += 1
        _cache[key] = bound
        while len(_cache) > MAXSIZE:  # drop the oldest plan
            _cache.popitem(last=False)
    return bound


def run(bound: Bound, data, indices, out, stream, device: int):
    """Allocate or check ``out``, run the bounds check (raise mode), launch."""
    cp = cupy_module()
    if (bound.fast and cp.cuda.runtime.getDevice() == device
            and device in getattr(_ready, "devices", ())):
        if out is None:
            out = cp.ndarray(bound.out_shape, data.dtype)
        else:
            _arrays.check_out(out, bound.out_shape, data.dtype, device,
                              {"data": data, "indices": indices})
        # ElementsArgs and NDArgs lead with data, indices, out.
        bound.main.launch3(data.data.ptr, indices.data.ptr, out.data.ptr,
                           cp.cuda.get_current_stream().ptr if stream is None
                           else _arrays.stream_pointer(stream))
        return out
    return launch_checked(bound.main, bound.check, bound.out_shape, data, indices, out, stream,
                          device, lambda pos: bound.plan.index_error(
                              pos, int(indices.reshape(-1)[pos].get()), indices.shape))
