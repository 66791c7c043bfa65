"""cugather: fast, checked gather kernels for CuPy arrays.

ONNX ``Gather`` (:func:`gather`), a ``numpy.take`` drop-in (:func:`take`) and a
reusable :class:`GatherOp` that caches per-shape launch plans; ONNX
``GatherElements`` (:func:`gather_elements`, and :func:`take_along_axis` with
NumPy's semantics) and ``GatherND`` (:func:`gather_nd`), one launch each.
Kernels are rendered from Jinja2 templates per unit width, index type and
out-of-range mode, compiled at run time by NVRTC and cached in memory and on
disk.  Importing the package touches no GPU.
"""

from ._version import __version__
from . import jit  # inspect and control compiled kernels
from .frontends import set_output, using_output
from .ops.elements import gather_elements, take_along_axis
from .ops.gather import GatherOp, gather, take
from .ops.nd import gather_nd
from .ops.quantized import gather_block_quantized
from .plan.gather import GatherPlan
from .runtime.cache import PlanCacheInfo

__all__ = ["__version__", "gather", "take", "GatherOp", "GatherPlan", "PlanCacheInfo",
           "gather_elements", "take_along_axis", "gather_nd", "gather_block_quantized", "set_output", "using_output",
           "jit"]
