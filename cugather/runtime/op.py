"""The op runtime: call key -> cached plan -> bound kernels -> launch.

Every operator (``GatherOp`` and the functions built on it, ``gather_elements``
/ ``take_along_axis``, ``gather_nd``, the sharded gather's peer reads)
validates its arguments, builds a :func:`~.key.call_key` and hands it to an
:class:`OpRuntime`.  A repeated call compares its key with the runtime's memo
of the last one (one tuple comparison), falls back to the LRU plan cache, and
plans and binds only on a miss; then :func:`~.launch.execute` launches.
"""

from __future__ import annotations

from typing import Callable, Optional

from .binding import Bound, bind
from .cache import PlanCache
from .key import with_data
from .launch import execute

__all__ = ["OpRuntime"]


class OpRuntime(PlanCache):
    """Plans cached per call key (a memo of the last key, then an LRU), bound on
    first use, then launched.

    Parameters
    ----------
    planner : callable
        ``planner(geometry, limits) -> Plan``: pure, raises the op's shape errors.
    geometry : callable
        ``geometry(key) -> Geometry``: the named geometry of a call key.
    maxsize : int
        Most bound plans kept.
    """

    __slots__ = ("planner", "geometry", "_memo", "native")

    def __init__(self, planner: Callable, geometry: Callable, maxsize: int):
        super().__init__(maxsize)
        self.planner = planner
        self.geometry = geometry
        self._memo: tuple = (None, None)  # (key, Bound), replaced as one value
        #: A front door's own memo, ``(its key, its launcher)``: a torch call compares
        #: the tensors' attributes with it before building a View or a call key.
        self.native: tuple = (None, None)

    def cached(self, key: tuple) -> Optional[Bound]:
        """The bound plan of ``key`` if one is cached (memo, then LRU), else None."""
        memo = self._memo
        if memo[0] == key:
            self.hits += 1
            return memo[1]
        bound = self.get(key)
        if bound is not None:
            self._memo = (key, bound)
        return bound

    def bound(self, key: tuple, fill_value) -> Bound:
        """The bound plan of ``key``, planned and bound on a miss."""
        bound = self.cached(key)
        if bound is None:
            geo = self.geometry(key)
            backend = geo.backend
            plan = self.planner(geo, backend.limits(geo.device))
            fill = None
            if plan.main is not None and plan.main.key.mode == "fill":
                fill = backend.fill_bytes(fill_value, geo.dtype)
            out_dtype = geo.dtype if plan.out_dtype is None else plan.out_dtype
            bound = bind(plan, geo.device, fill, backend, out_dtype)
            self.put(key, bound)
            self._memo = (key, bound)
        return bound

    def remember_native(self, native_key: tuple, key: tuple, launcher_of: Callable) -> None:
        """Memoise ``launcher_of(bound)`` under a front door's ``native_key`` for the
        plan just run under ``key`` (nothing when that plan has no such launcher)."""
        memo = self._memo  # the plan just run: looked up without counting a hit
        bound = memo[1] if memo[0] == key else self._data.get(key)
        launcher = launcher_of(bound) if bound is not None and not bound.copy_data else None
        if launcher is not None:
            self.native = (native_key, launcher)

    def clear(self) -> int:
        self._memo = (None, None)
        self.native = (None, None)
        return super().clear()

    def run(self, key: tuple, data, data_ptr: int, indices, out, stream, fill_value,
            extra: tuple = ()):
        """Launch the plan of ``key`` on validated arrays; returns the output."""
        bound = self.bound(key, fill_value)
        if bound.copy_data:  # merging needs a C-contiguous copy: plan that one
            backend = key[0]
            data = backend.contiguous_copy(data, key[1])
            data_ptr = backend.pointer(data)
            bound = self.bound(with_data(key, data, data_ptr), fill_value)
        return execute(bound, data, data_ptr, indices, out, stream, key[1], extra)
