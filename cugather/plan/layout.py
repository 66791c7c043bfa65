"""NumPy dtypes that mirror the argument structs of the kernels.

Kernels take one struct by value; the host fills a size-1 structured array of
the matching dtype.  Every rendered source carries ``static_assert``s built
from these offsets, so a drift between the two sides fails to compile.  The
structs live beside their kernels: ``GatherArgs``, ``StridedArgs``,
``WindowArgs``, ``FlatArgs``, ``SpanArgs`` and ``CheckArgs`` in
kernels/gather.cuh, ``ElementsArgs`` in kernels/elements.cuh, ``NDArgs`` and
``NDCheckArgs`` in kernels/nd.cuh,
``QuantArgs`` in kernels/quantized.cuh.  A kind registered from another module
(:func:`cugather.plan.keys.register_kind`) adds its struct to
:data:`ARGS_DTYPES` and :data:`POINTER_FIELDS` (``ShardedArgs``, in
cugather/distributed/plan.py).
"""

from __future__ import annotations

import numpy

from .tuning import MAX_DIMS

__all__ = ["ARGS_DTYPES", "DIVISOR", "FILL", "POINTERS", "layout_of", "new_args",
           "POINTER_FIELDS"]

DIVISOR = numpy.dtype(
    [("d", "<u8"), ("m", "<u8"), ("l", "<u4"), ("pad", "<u4")], align=True)

#: The fill value's bytes (16: the widest element), the last field of a gather.
FILL = ("fill", "<u8", (2,))
#: The pointers that lead the struct of every kernel that moves data.
POINTERS = [("data", "<u8"), ("indices", "<u8"), ("out", "<u8"), ("first_bad", "<u8")]

GATHER_ARGS = numpy.dtype(POINTERS + [
    ("s_outer", "<i8"), ("s_axis", "<i8"), ("axis_len", "<i8"),
    ("rows", "<u8"), ("units", "<u8"), ("n_indices", "<u8"), ("outer", "<u8"),
    ("n_div", DIVISOR),
    ("chunk", "<u4"), ("stage_unit", "<u4"), ("row_unroll", "<u4"), ("pad", "<u4"),
    FILL,
], align=True)

STRIDED_ARGS = numpy.dtype(POINTERS + [
    ("total", "<u8"), ("axis_len", "<i8"), ("s_axis", "<i8"),
    ("ndim", "<u4"), ("index_dim", "<u4"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    FILL,
], align=True)

WINDOW_ARGS = numpy.dtype(POINTERS + [
    ("s_outer", "<i8"), ("s_axis", "<i8"), ("axis_len", "<i8"),
    ("rows", "<u8"), ("row_bytes", "<u8"), ("out_bytes", "<u8"), ("chunks", "<u8"),
    ("lo", "<i8"), ("hi", "<i8"),
    ("n_div", DIVISOR), ("row_div", DIVISOR),
    FILL,
], align=True)

FLAT_ARGS = numpy.dtype(POINTERS + [
    ("s_outer", "<i8"), ("s_axis", "<i8"), ("axis_len", "<i8"),
    ("total", "<u8"), ("chunks", "<u8"),
    ("n_div", DIVISOR), ("unit_div", DIVISOR),
    ("group", "<u4"), ("stage_unit", "<u4"),
    FILL,
], align=True)

SPAN_ARGS = numpy.dtype(POINTERS + [
    ("s_outer", "<i8"), ("s_axis", "<i8"), ("axis_len", "<i8"),
    ("rows", "<u8"), ("row_bytes", "<u8"), ("lo", "<i8"), ("hi", "<i8"),
    ("n_div", DIVISOR), ("seg_div", DIVISOR), ("items", "<u8"),
    FILL,
], align=True)

CHECK_ARGS = numpy.dtype([
    ("indices", "<u8"), ("first_bad", "<u8"), ("n", "<u8"), ("axis_len", "<i8"),
], align=True)

ELEMENTS_ARGS = numpy.dtype(POINTERS + [
    ("total", "<u8"), ("axis_len", "<i8"), ("s_axis", "<i8"),
    ("ndim", "<u4"), ("col_tiles", "<u4"), ("cols", "<u8"), ("row_tiles", "<u8"),
    ("stage_unit", "<u4"), ("pad", "<u4"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    ("index_strides", "<u8", (MAX_DIMS,)),
    FILL,
], align=True)

ND_ARGS = numpy.dtype(POINTERS + [
    ("rows", "<u8"), ("units", "<u8"),
    ("ndim", "<u4"), ("tuple_dim", "<u4"), ("m", "<u4"), ("tile_cu", "<u4"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    ("bounds", "<i8", (MAX_DIMS,)),
    ("comp_strides", "<i8", (MAX_DIMS,)),
    FILL,
], align=True)

ND_CHECK_ARGS = numpy.dtype([
    ("indices", "<u8"), ("first_bad", "<u8"), ("n", "<u8"),
    ("m_div", DIVISOR),
    ("bounds", "<i8", (MAX_DIMS,)),
], align=True)

# kernels/quantized.cuh: the pointers of every kernel, then scales and zero points
QUANT_ARGS = numpy.dtype([
    ("data", "<u8"), ("indices", "<u8"), ("out", "<u8"), ("first_bad", "<u8"),
    ("scales", "<u8"), ("zero_points", "<u8"),
    ("rows", "<u8"), ("total", "<u8"), ("axis_len", "<i8"),
    ("m1", "<u8"), ("nq", "<u8"), ("m2", "<u8"), ("nb", "<u8"), ("nzq", "<u8"),
    ("row_bytes", "<u8"), ("chunks", "<u8"),
    ("m1_div", DIVISOR), ("nq_div", DIVISOR), ("m2_div", DIVISOR),
    ("bits", "<u4"), ("log2_block", "<u4"), ("default_zp", "<u4"), ("vec", "<u4"),
    ("values", "<u4"), ("row_unroll", "<u4"),
    FILL,
], align=True)

#: C struct name -> dtype.
ARGS_DTYPES = {"GatherArgs": GATHER_ARGS, "StridedArgs": STRIDED_ARGS,
               "WindowArgs": WINDOW_ARGS, "FlatArgs": FLAT_ARGS, "SpanArgs": SPAN_ARGS,
               "CheckArgs": CHECK_ARGS,
               "ElementsArgs": ELEMENTS_ARGS, "NDArgs": ND_ARGS, "NDCheckArgs": ND_CHECK_ARGS,
               "QuantArgs": QUANT_ARGS}

#: Pointer fields: they lead each struct, in this order, and a launch writes them
#: all at once (data, indices, out and raise mode's flag, then any others).
POINTER_FIELDS = {
    "GatherArgs": ("data", "indices", "out", "first_bad"),
    "StridedArgs": ("data", "indices", "out", "first_bad"),
    "WindowArgs": ("data", "indices", "out", "first_bad"),
    "FlatArgs": ("data", "indices", "out", "first_bad"),
    "SpanArgs": ("data", "indices", "out", "first_bad"),
    "CheckArgs": ("indices", "first_bad"),
    "ElementsArgs": ("data", "indices", "out", "first_bad"),
    "NDArgs": ("data", "indices", "out", "first_bad"),
    "NDCheckArgs": ("indices", "first_bad"),
    # zero_points is 0 when absent (the kernel then uses the default zero point)
    "QuantArgs": ("data", "indices", "out", "first_bad", "scales", "zero_points"),
}


def layout_of(args_type: str) -> list[tuple[str, int]]:
    """(field, byte offset) pairs of a struct, for the rendered static_asserts."""
    dt = ARGS_DTYPES[args_type]
    return [(name, dt.fields[name][1]) for name in dt.names if name != "pad"]


def new_args(args_type: str, **fields) -> numpy.ndarray:
    """A zeroed size-1 argument block with ``fields`` set."""
    block = numpy.zeros(1, dtype=ARGS_DTYPES[args_type])
    for name, value in fields.items():
        block[name] = value
    return block
