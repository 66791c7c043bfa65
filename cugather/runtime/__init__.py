"""The op runtime: one path from a call to a launch, under every operator.

``key`` (call keys and the geometries planners read), ``op`` (call key ->
memo or LRU -> bound plan -> launch), ``cache`` (the LRU plan caches),
``binding`` (kernels loaded, launchers built once), ``launch`` (the cached
path, raise mode's one-launch check, the CUDA backend).
"""

from .binding import Bound, BoundKernel, bind
from .cache import PlanCache, PlanCacheInfo
from .key import Geometry, call_key, fill_token, geometry_of_key
from .launch import CUDA, execute, run_plan
from .op import OpRuntime

__all__ = ["Bound", "BoundKernel", "bind", "PlanCacheInfo", "PlanCache", "Geometry", "call_key",
           "fill_token", "geometry_of_key", "CUDA", "execute", "run_plan", "OpRuntime"]
