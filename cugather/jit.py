"""See and control what cugather compiled: kernels, their cost, the caches.

The public face of :mod:`cugather.inspect`; see there for the details.
"""

from .inspect.api import *  # noqa: F401,F403
from .inspect.api import __all__  # noqa: F401
