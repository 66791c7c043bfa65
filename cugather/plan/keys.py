"""Kernel keys: the frozen values that name one compiled kernel, and the kinds.

A key says everything the CUDA source depends on; shapes never enter it (they
travel as kernel arguments), so one compiled kernel serves every shape.
A :class:`KindSpec` describes each kernel kind once -- the header and device
function it instantiates, its argument struct, the index maths, modes and
units it is built for, the constants only its source needs -- for the
planners, the renderer and the test tiers.  :func:`all_kernel_keys`
enumerates what the library can produce.

The kinds of cugather's own operators are listed here.  A subpackage with a
kernel of its own (``cugather.distributed``: ``sharded``) registers it with
:func:`register_kind` when imported; :data:`EXTENSIONS` names those modules,
and this module imports them on the first lookup of a kind it does not know
and whenever it enumerates kinds, so every reader of keys (the disk cache,
``cugather cache list``, the test tiers) sees every kind, while the core never
imports them to plan or launch its own kernels.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Union

import numpy

from . import layout, tuning

__all__ = [
    "KernelKey", "KindSpec", "BUILTIN_KINDS", "EXTENSIONS", "UNITS", "INDEX_DTYPES", "MATHS",
    "KERNEL_MODES", "kinds", "kind_spec", "register_kind", "all_kernel_keys",
]

#: Bytes moved per load/store.
UNITS = (1, 2, 4, 8, 16)
INDEX_DTYPES = ("int32", "int64")
#: Index math: 32-bit or 64-bit fast_divmod, or plain 64-bit division.
MATHS = ("fast32", "fast64", "div64")
#: Compile-time out-of-range policies.  "raise" kernels trust a prior check;
#: "clip_numpy" is numpy.take's clip (negatives become 0).
KERNEL_MODES = ("raise", "wrap", "clip", "clip_numpy", "fill")
_ONNX_MODES = ("raise", "wrap", "clip", "fill")
_FAST = ("fast32", "fast64")


@dataclass(frozen=True)
class KindSpec:
    """One kernel kind: where its code lives and which keys exist.

    ``min_blocks`` is the ``__launch_bounds__`` minimum of resident blocks (an
    int, or a function of the key); it caps registers at 65536 / (threads x
    blocks), chosen per kind where that costs no spills (the NVRTC tier checks).
    """

    header: str          # kernels/<header>: the device function
    function: str        # device function the entry point instantiates
    args_type: str       # C struct passed by value (plan/layout.py mirrors it)
    maths: tuple = _FAST
    modes: tuple = KERNEL_MODES
    units: tuple = UNITS
    min_blocks: Union[int, Callable[["KernelKey"], int]] = 1
    takes_math: bool = True  # the device function's template takes the index math
    #: ``(name, value)`` pairs rendered as ``#define``s into this kind's source
    #: only, beside the global ``tuning.KERNEL_DEFINES``.
    defines: tuple = ()

    @property
    def moves_data(self) -> bool:
        return self.units != (0,)


def _rows_blocks(key: "KernelKey") -> int:
    if key.math != "fast32":
        return 2
    return {16: tuning.ROWS_BLOCKS_U16, 8: tuning.ROWS_BLOCKS_U8}.get(key.unit,
                                                                     tuning.ROWS_BLOCKS_NARROW)


def _flat_blocks(key: "KernelKey") -> int:
    pair = (key.unit, key.math)
    if key.mode == "raise" and pair in tuning.FLAT_BLOCKS_RAISE:
        return tuning.FLAT_BLOCKS_RAISE[pair]
    return tuning.FLAT_BLOCKS[pair]


def _slabf_blocks(key: "KernelKey") -> int:
    # flat's, fewer in raise mode: with the staged and the global read paths
    # both inlined, its bounds check spills at flat's count (2-byte units with
    # int64 indices at one fewer too)
    if key.mode != "raise":
        return _flat_blocks(key)
    return max(1, _flat_blocks(key) - (2 if key.unit == 2 else 1))


def _elements_nd_blocks(key: "KernelKey") -> int:
    # 16-byte units take 6: at 8 (32 registers) they would spill.
    return 4 if key.math != "fast32" else 6 if key.unit >= 16 else 8


def _quant_blocks(key: "KernelKey") -> int:
    # 2-byte outputs (float16, bfloat16) with int64 indices in wrap and clip mode
    # hold 64 registers without spilling; raise and fill mode, 4-byte outputs and
    # int32 indices need more (NVRTC 12.2 spills the int32 wrap kernel at 64).
    if key.mode in ("wrap", "clip") and key.unit == 2 and key.index_dtype == "int64":
        return tuning.QUANT_BLOCKS_WRAP_CLIP
    return tuning.QUANT_BLOCKS


def _weave_blocks(key: "KernelKey") -> int:
    # fast64 with 1-byte units spills at tuning.WEAVE_BLOCKS, and so does fast32's
    # fill mode since a row's second block is read only where the row crosses
    # into it (4-8 bytes, NVRTC 12.9, sm_75 to sm_90): one block fewer there.
    if key.math != "fast32" or (key.unit == 1 and key.mode == "fill"):
        return tuning.WEAVE_BLOCKS - 1
    return tuning.WEAVE_BLOCKS


#: kind -> spec, the built-in kinds and then those registered.  Bounds checks
#: move no data (unit 0) and exist in raise mode only.
_SPECS = {
    "rows": KindSpec("gather.cuh", "gather_rows", "GatherArgs", min_blocks=_rows_blocks),
    "chunks": KindSpec("gather.cuh", "gather_chunks", "GatherArgs",
                       min_blocks=lambda key: tuning.CHUNKS_BLOCKS if key.math == "fast32" else 1),
    # chunks with tuning.CHUNKS16_CU units per thread, for 2- and 4-byte units
    # (rows of 1-byte units take span or window; sm_75 spills them).
    "chunks16": KindSpec("gather.cuh", "gather_chunks16", "GatherArgs", units=(2, 4),
                         min_blocks=lambda key: (tuning.CHUNKS16_BLOCKS if key.math == "fast32"
                                                 else 1)),
    "scalar": KindSpec("gather.cuh", "gather_scalar", "GatherArgs"),
    "inner": KindSpec("gather.cuh", "gather_inner", "GatherArgs", min_blocks=4),
    # Rows of one unit, several outer rows staged per block, each index read once.
    "slab": KindSpec("gather.cuh", "gather_slab", "GatherArgs", min_blocks=4),
    # slab storing several consecutive picks per store (units narrower than
    # their tuning.SLAB_WORD).
    "slabw": KindSpec("gather.cuh", "gather_slabw", "GatherArgs",
                      units=tuple(u for u, w in sorted(tuning.SLAB_WORD.items()) if w > u),
                      min_blocks=4),
    # Rows whose length is not a multiple of 16, moved as 16-byte chunks.
    "window": KindSpec("gather.cuh", "gather_window", "WindowArgs", units=(16,), min_blocks=4),
    # Rows of 3 to 15 bytes, several per 16-byte chunk, through window's loop.
    "pack": KindSpec("gather.cuh", "gather_pack", "WindowArgs", units=(16,), min_blocks=4),
    # Rows of two or more units under 16 bytes: a warp's tile of rows, each row
    # loaded once, laid out in shared memory and stored as 16-byte chunks.
    "weave": KindSpec("gather.cuh", "gather_weave", "WindowArgs", units=(1, 2, 4),
                      min_blocks=_weave_blocks),
    # weave's tiles over slab's staged groups: rows of two or more units under
    # 16 bytes from a table whose axis rows fit in shared memory (FlatArgs).
    "slabr": KindSpec("gather.cuh", "gather_slabr", "FlatArgs", units=(1, 2, 4),
                      min_blocks=lambda key: tuning.SLABR_BLOCKS),
    # Rows of units narrower than 16 bytes, written as 16-byte chunks of units
    # (8-byte chunks of 1-byte units).
    "flat": KindSpec("gather.cuh", "gather_flat", "FlatArgs", units=(1, 2, 4, 8),
                     min_blocks=_flat_blocks),
    # flat's chunks over slab's staged groups of outer rows: rows of any number
    # of units from a table whose axis rows fit in shared memory (FlatArgs).
    "slabf": KindSpec("gather.cuh", "gather_slabf", "FlatArgs", units=(1, 2, 4, 8),
                      min_blocks=_slabf_blocks),
    # flat for rows of one unit where the chunk's units divide the index count:
    # the chunk's indices as vector loads (FlatArgs).
    "flatv": KindSpec("gather.cuh", "gather_flatv", "FlatArgs", units=(1, 2, 4, 8),
                      min_blocks=_flat_blocks),
    # Short calls: one unit per thread, nothing unrolled (FlatArgs).
    "lean": KindSpec("gather.cuh", "gather_lean", "FlatArgs"),
    # An axis of length 1 in wrap and clip mode: every index is 0, the table's
    # rows are repeated and no index is read (FlatArgs; one build, "wrap",
    # serves both modes).
    "bcast": KindSpec("gather.cuh", "gather_bcast", "FlatArgs", units=(1, 2, 4, 8),
                      modes=("wrap",), min_blocks=_flat_blocks),
    # bcast for rows of 16 bytes or more in narrow units: window's 16-byte chunks,
    # each shifted from two aligned blocks of the outer slice's row (WindowArgs).
    "bcastw": KindSpec("gather.cuh", "gather_bcastw", "WindowArgs", units=(16,),
                       modes=("wrap",), min_blocks=4),
    # Long rows of any length and alignment as aligned 16-byte chunks, the
    # row's index read once per thread.
    "span": KindSpec("gather.cuh", "gather_span", "SpanArgs", units=(16,),
                     min_blocks=tuning.SPAN_BLOCKS),
    # The strided fallback of Gather/take: any strides, one unit per thread.
    # Plain division is built for it only, as the reference fast_divmod is
    # measured against.
    "strided": KindSpec("gather.cuh", "gather_strided", "StridedArgs", maths=MATHS),
    "check": KindSpec("gather.cuh", "check_indices", "CheckArgs", maths=("fast64",),
                      modes=("raise",), units=(0,)),
    "elements": KindSpec("elements.cuh", "gather_elements", "ElementsArgs", modes=_ONNX_MODES,
                         min_blocks=_elements_nd_blocks),
    # GatherElements along the innermost axis, a data row staged per output row.
    "elements_row": KindSpec("elements.cuh", "gather_elements_row", "ElementsArgs",
                             modes=_ONNX_MODES, min_blocks=3),
    "nd": KindSpec("nd.cuh", "gather_nd", "NDArgs", modes=_ONNX_MODES,
                   min_blocks=_elements_nd_blocks),
    "check_nd": KindSpec("nd.cuh", "check_nd", "NDCheckArgs", maths=("fast64",),
                         modes=("raise",), units=(0,)),
    # GatherBlockQuantized: rows of a block-quantized uint8 table dequantized as
    # they are gathered; the unit is the output element (2: float16, 4: float32;
    # the _bf16 kinds write bfloat16).  "quantized" moves rows along the last
    # (quantize) axis, "quantized_general" one element per thread for any
    # quantize axis.  Row and element splits are 64-bit: one per row.
    **{kind: KindSpec("quantized.cuh", f"gather_{kind}", "QuantArgs", maths=("fast64",),
                      modes=_ONNX_MODES, units=units, min_blocks=_quant_blocks,
                      takes_math=False)
       for kind, units in (("quantized", (2, 4)), ("quantized_bf16", (2,)),
                           ("quantized_general", (2, 4)), ("quantized_general_bf16", (2,)))},
}
#: The kinds this module lists itself.
BUILTIN_KINDS = tuple(_SPECS)
#: Modules that register further kinds when imported (see :func:`register_kind`).
EXTENSIONS = ("cugather.distributed.plan",)
_REGISTER_LOCK = threading.Lock()


def _load_extensions() -> None:
    # import_module is a dictionary lookup once a module is loaded, and the
    # import lock makes a second thread wait for a registration under way.
    for name in EXTENSIONS:
        importlib.import_module(name)


def kinds() -> tuple:
    """Every kernel kind: the built-in ones, then those of :data:`EXTENSIONS`."""
    _load_extensions()
    return tuple(_SPECS)


def kind_spec(kind: str) -> KindSpec:
    """The spec of ``kind``; ValueError naming the known kinds if there is none."""
    spec = _SPECS.get(kind)
    if spec is None:
        _load_extensions()
        spec = _SPECS.get(kind)
        if spec is None:
            raise ValueError(f"unknown kernel kind {kind!r}; expected one of {tuple(_SPECS)}")
    return spec


def register_kind(kind: str, spec: KindSpec, args_dtype: numpy.dtype,
                  pointer_fields: tuple) -> None:
    """Add a kernel kind of a module named in :data:`EXTENSIONS`.

    Parameters
    ----------
    kind : str
        The kind's name in kernel keys and entry points.
    spec : KindSpec
        Its header (in ``kernels/``), device function, argument struct name and
        the ``#define``s only its source needs (``spec.defines``; names must
        not be those of ``tuning.KERNEL_DEFINES``).
    args_dtype : numpy.dtype
        The argument struct, as :mod:`cugather.plan.layout` mirrors the others.
    pointer_fields : tuple of str
        The pointer fields that lead the struct, in launch order.

    Registering the same kind again with an equal spec and layout does nothing;
    anything else already taken is a ValueError.
    """
    if spec.header == "common.cuh" or not spec.header.endswith(".cuh"):
        raise ValueError(f"spec.header must name a kernels/*.cuh header of the kind, "
                         f"got {spec.header!r}")
    for name, value in spec.defines:
        if not (isinstance(name, str) and name.startswith("CG_")) or not isinstance(value, int):
            raise ValueError(f"spec.defines must be (CG_NAME, int) pairs, got {(name, value)!r}")
        if name in tuning.KERNEL_DEFINES:
            raise ValueError(f"{name} is a global kernel define (tuning.KERNEL_DEFINES); "
                             f"kind {kind!r} cannot define it again")
    pointer_fields = tuple(pointer_fields)
    if args_dtype.names is None or args_dtype.names[:len(pointer_fields)] != pointer_fields:
        raise ValueError(f"pointer_fields {pointer_fields} must lead {spec.args_type}, whose "
                         f"fields are {args_dtype.names}")
    with _REGISTER_LOCK:
        old = _SPECS.get(kind)
        old_dtype = layout.ARGS_DTYPES.get(spec.args_type)
        old_pointers = layout.POINTER_FIELDS.get(spec.args_type)
        if old is not None and old != spec:
            raise ValueError(f"kernel kind {kind!r} is registered already, as {old}")
        if ((old_dtype is not None and old_dtype != args_dtype)
                or (old_pointers is not None and old_pointers != pointer_fields)):
            raise ValueError(f"argument struct {spec.args_type!r} is registered already "
                             f"with another layout")
        layout.ARGS_DTYPES[spec.args_type] = args_dtype
        layout.POINTER_FIELDS[spec.args_type] = pointer_fields
        _SPECS[kind] = spec


@dataclass(frozen=True, order=True)
class KernelKey:
    """Name of one kernel: kind, unit width, index dtype, index math, mode."""

    kind: str
    unit: int
    index_dtype: str
    math: str
    mode: str

    def __post_init__(self):
        spec = kind_spec(self.kind)
        if self.unit not in spec.units:
            raise ValueError(f"unit for kind {self.kind!r} must be one of {spec.units}, "
                             f"got {self.unit!r}")
        if self.index_dtype not in INDEX_DTYPES:
            raise ValueError(f"index_dtype must be one of {INDEX_DTYPES}, got {self.index_dtype!r}")
        if self.math not in spec.maths:
            raise ValueError(f"math for kind {self.kind!r} must be one of {spec.maths}, "
                             f"got {self.math!r}")
        if self.mode not in spec.modes:
            raise ValueError(f"mode for kind {self.kind!r} must be one of {spec.modes}, "
                             f"got {self.mode!r}")

    @property
    def spec(self) -> KindSpec:
        # An unpickled key (another process) may name a kind not registered here yet.
        return _SPECS.get(self.kind) or kind_spec(self.kind)

    @property
    def entry(self) -> str:
        """Name of the ``extern "C"`` entry point."""
        if not self.spec.moves_data:
            return f"cugather_{self.kind}_{_IDX_TAG[self.index_dtype]}"
        return (f"cugather_{self.kind}_u{self.unit}_{_IDX_TAG[self.index_dtype]}"
                f"_{self.math}_{self.mode}")

    def __str__(self) -> str:
        return self.entry


_IDX_TAG = {"int32": "i32", "int64": "i64"}


def all_kernel_keys(of_kinds: Optional[Iterable[str]] = None) -> Iterator[KernelKey]:
    """Yield every kernel key the library can produce (of the kinds ``of_kinds``
    only, when given), in a stable order."""
    for kind in kinds() if of_kinds is None else of_kinds:
        spec = kind_spec(kind)
        for unit in spec.units:
            for index_dtype in INDEX_DTYPES:
                for math in spec.maths:
                    for mode in spec.modes:
                        yield KernelKey(kind, unit, index_dtype, math, mode)
