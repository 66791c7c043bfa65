"""The operators: validation of their arguments, then the op runtime.

``gather`` (GatherOp, gather, take), ``elements`` (gather_elements,
take_along_axis) and ``nd`` (gather_nd).  Each module's ``run`` takes
arrays already validated for a backend, so that the host-execution test tier
drives the same path on the CPU.
"""
