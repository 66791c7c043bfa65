"""cugather: fast, checked gather kernels for CuPy arrays.

ONNX ``Gather`` (:func:`gather`), a ``numpy.take`` drop-in (:func:`take`) and a
reusable :class:`GatherOp` that caches per-shape launch plans.  Kernels are
rendered from Jinja2 templates per unit width, index type and out-of-range
mode, compiled at run time by NVRTC and cached in memory and on disk.
Importing the package touches no GPU.
"""

from ._version import __version__
from ._gather import CacheInfo, GatherOp, gather, take
from ._plan import GatherPlan
from . import jit  # inspect and control compiled kernels

__all__ = ["__version__", "gather", "take", "GatherOp", "GatherPlan", "CacheInfo", "jit"]
