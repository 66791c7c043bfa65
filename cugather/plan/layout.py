"""NumPy dtypes that mirror the argument blocks of kernels/common.cuh.

Kernels take one struct by value; the host fills a size-1 structured array of
the matching dtype.  Every rendered source carries ``static_assert``s built
from these offsets, so a drift between the two sides fails to compile.
"""

from __future__ import annotations

import numpy

__all__ = ["ARGS_DTYPES", "DIVISOR", "MAX_DIMS", "MAX_RANKS", "layout_of", "new_args",
           "POINTER_FIELDS"]

MAX_DIMS = 8  # CG_MAX_DIMS
#: Most shards one sharded-gather argument block describes (CG_MAX_RANKS):
#: the block stays near 1 KB, well inside the 4 KB of kernel parameters.
MAX_RANKS = 64

DIVISOR = numpy.dtype(
    [("d", "<u8"), ("m", "<u8"), ("l", "<u4"), ("pad", "<u4")], align=True)

_FILL = ("fill", "<u8", (2,))

GATHER_ARGS = numpy.dtype([
    ("data", "<u8"), ("indices", "<u8"), ("out", "<u8"),
    ("s_outer", "<i8"), ("s_axis", "<i8"), ("axis_len", "<i8"),
    ("rows", "<u8"), ("units", "<u8"), ("n_indices", "<u8"), ("outer", "<u8"),
    ("n_div", DIVISOR),
    ("chunk", "<u4"), ("stage_unit", "<u4"), ("row_unroll", "<u4"), ("pad", "<u4"),
    _FILL,
], align=True)

ELEM_ARGS = numpy.dtype([
    ("data", "<u8"), ("indices", "<u8"), ("out", "<u8"),
    ("total", "<u8"), ("axis_len", "<i8"), ("s_axis", "<i8"),
    ("ndim", "<u4"), ("index_dim", "<u4"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    _FILL,
], align=True)

CHECK_ARGS = numpy.dtype([
    ("indices", "<u8"), ("n", "<u8"), ("axis_len", "<i8"), ("first_bad", "<u8"),
], align=True)

# kernels/gather_family.cuh
ELEMENTS_ARGS = numpy.dtype([
    ("data", "<u8"), ("indices", "<u8"), ("out", "<u8"),
    ("total", "<u8"), ("axis_len", "<i8"), ("s_axis", "<i8"),
    ("ndim", "<u4"), ("col_tiles", "<u4"), ("cols", "<u8"), ("row_tiles", "<u8"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    ("index_strides", "<u8", (MAX_DIMS,)),
    _FILL,
], align=True)

ND_ARGS = numpy.dtype([
    ("data", "<u8"), ("indices", "<u8"), ("out", "<u8"),
    ("rows", "<u8"), ("units", "<u8"),
    ("ndim", "<u4"), ("tuple_dim", "<u4"), ("m", "<u4"),
    ("tile_cu", "<u4"), ("tile_ru", "<u4"), ("pad", "<u4"),
    ("dims", DIVISOR, (MAX_DIMS,)),
    ("strides", "<i8", (MAX_DIMS,)),
    ("bounds", "<i8", (MAX_DIMS,)),
    ("comp_strides", "<i8", (MAX_DIMS,)),
    _FILL,
], align=True)

ND_CHECK_ARGS = numpy.dtype([
    ("indices", "<u8"), ("n", "<u8"), ("first_bad", "<u8"),
    ("m_div", DIVISOR),
    ("bounds", "<i8", (MAX_DIMS,)),
], align=True)

# kernels/sharded.cuh
SHARDED_ARGS = numpy.dtype([
    ("indices", "<u8"), ("out", "<u8"),
    ("n", "<u8"), ("units", "<u8"), ("total", "<i8"),
    ("n_shards", "<u4"), ("row_unroll", "<u4"),
    _FILL,
    ("offsets", "<i8", (MAX_RANKS + 1,)),
    ("bases", "<u8", (MAX_RANKS,)),
], align=True)

#: C struct name -> dtype.
ARGS_DTYPES = {"GatherArgs": GATHER_ARGS, "ElemArgs": ELEM_ARGS, "CheckArgs": CHECK_ARGS,
               "ElementsArgs": ELEMENTS_ARGS, "NDArgs": ND_ARGS, "NDCheckArgs": ND_CHECK_ARGS,
               "ShardedArgs": SHARDED_ARGS}

#: Pointer fields, in the order the launcher writes them for each call.
POINTER_FIELDS = {
    "GatherArgs": ("data", "indices", "out"),
    "ElemArgs": ("data", "indices", "out"),
    "CheckArgs": ("indices", "first_bad"),
    "ElementsArgs": ("data", "indices", "out"),
    "NDArgs": ("data", "indices", "out"),
    "NDCheckArgs": ("indices", "first_bad"),
    "ShardedArgs": ("indices", "out"),  # shard bases are fields of the plan
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
