"""Host execution of cugather's generated CUDA source (no GPU needed).

``build`` compiles the rendered sources, unchanged, against ``cuda_shim.h``
into shared libraries; ``runner`` launches kernels (``launch``) and mirrors
``GatherOp.__call__`` on NumPy arrays (``host_gather``, ``host_take``);
``cases`` and ``keycases`` describe replayable cases, including one set per
kernel key.

Environment:
``CXX``                      the C++ compiler (default: g++, c++, clang++)
``CUGATHER_HOSTSIM_CACHE``   where built libraries are kept (default: a per-user tmp folder)
``CUGATHER_HOSTSIM_UBSAN=0`` build without UndefinedBehaviorSanitizer
``CUGATHER_REQUIRE_TIERS``   e.g. ``nvrtc,hostsim``: a missing tool fails instead of skipping
"""
