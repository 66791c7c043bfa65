"""The op runtime: geometry -> cached plan -> bound kernels -> launch.

Every operator (``GatherOp`` and the functions built on it, ``gather_elements``
/ ``take_along_axis``, ``gather_nd``) validates its arguments, builds a
:class:`~cugather.validate.Geometry` and hands it to an :class:`OpRuntime`
with its planner.  A cached call is a dictionary hit and a launch.
"""

from __future__ import annotations

from typing import Callable

from .. import validate
from ..plan.core import Plan
from .binding import Bound, bind
from .cache import PlanCache
from .launch import execute

__all__ = ["OpRuntime"]


class OpRuntime(PlanCache):
    """Plans cached per geometry (LRU), bound on first use, then launched.

    Parameters
    ----------
    planner : callable
        ``planner(geometry, limits) -> Plan``: pure, raises the op's shape errors.
    maxsize : int
        Most bound plans kept.
    """

    __slots__ = ("planner",)

    def __init__(self, planner: Callable, maxsize: int):
        super().__init__(maxsize)
        self.planner = planner

    def bound(self, geo: validate.Geometry, fill_value) -> Bound:
        """The cached Bound for ``geo``, planned and bound on a miss."""
        return self.get(geo) or self._miss(geo, fill_value)

    def _miss(self, geo: validate.Geometry, fill_value) -> Bound:
        backend = geo.backend
        plan: Plan = self.planner(geo, backend.limits(geo.device))
        fill = None
        if plan.main is not None and plan.main.key.mode == "fill":
            fill = validate.fill_bytes(fill_value, geo.dtype)
        bound = bind(plan, geo.device, fill, backend)
        self.put(geo, bound)
        return bound

    def run(self, geo: validate.Geometry, data, indices, out, stream, fill_value):
        """Launch the plan of ``geo`` on validated arrays; returns ``out``."""
        bound = self._data.get(geo)  # PlanCache.get, written out: every call runs it
        if bound is None:
            bound = self._miss(geo, fill_value)
        else:
            self.hits += 1
            try:
                self._data.move_to_end(geo)
            except KeyError:  # dropped by another thread meanwhile
                pass
        if bound.copy_data:  # merging needs a C-contiguous copy: plan that one
            data = geo.backend.contiguous_copy(data, geo.device)
            geo = validate.geometry_of(geo, data)
            bound = self.bound(geo, fill_value)
        return execute(bound, data, indices, out, stream, geo.device)

