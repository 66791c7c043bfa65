"""The op runtime: one path from a plan to a launch, under every operator.

``op`` (geometry -> cached plan -> bound kernels), ``cache`` (the LRU plan
caches), ``binding`` (kernels loaded, argument blocks built), ``launch`` (the
fast path, the checked path with raise mode's read-back, the CUDA backend).
"""

from .binding import Bound, BoundKernel, bind
from .cache import CacheInfo, PlanCache
from .launch import CUDA, execute, launch_checked, run_plan
from .op import OpRuntime

__all__ = ["Bound", "BoundKernel", "bind", "CacheInfo", "PlanCache", "CUDA", "execute",
           "launch_checked", "run_plan", "OpRuntime"]
