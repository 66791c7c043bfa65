"""Plans for GatherBlockQuantized (onnxruntime's ``com.microsoft`` contrib op).  Pure Python.

``data`` is a uint8 table holding two 4-bit values per byte (low nibble
first, packed along the last axis) or one 8-bit value; ``scales`` (and
optionally ``zero_points``) hold one entry per block of ``block_size``
values along ``quantize_axis``.  Output values are
``cast(float32(q - zero_point) * float32(scale))``, gathered along axis 0.

The logical table (values unpacked) is viewed as ``(G, m1, nq, m2)``: ``G``
rows on the gather axis, ``nq`` values on the quantize axis, ``m1`` and
``m2`` the merged axes between and after.  With the quantize axis last
(``m2 == 1``, the embedding-table case) the ``quantized`` kernels move rows:
chunks of 16 or 32 values of up to 4 rows per thread, each chunk one 8- or
16-byte load and 16-byte stores where rows and bases allow (byte loads
otherwise); any other quantize axis takes ``quantized_general``, one
element per thread.  The kernels are ``kernels/quantized.cuh``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

from . import tuning
from .core import (GRID_X_MAX, DeviceLimits, Launch, Plan, cdiv, check_launch,
                   no_empty_axis, row_unroll)
from .fastdiv import make_divisor
from .keys import KernelKey

__all__ = ["QuantShapes", "quantized_shapes", "plan_quantized", "OUT_DTYPES", "BITS"]

#: Output (= scales) dtypes by name, and their element sizes.
OUT_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4}
BITS = (4, 8)


class QuantShapes(NamedTuple):
    """The shapes a GatherBlockQuantized table implies (axes normalised)."""

    values: tuple        # the table with its values unpacked
    scales: tuple
    zero_points: tuple
    gather_axis: int
    quantize_axis: int


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value.__index__())


def _axis(value, ndim: int, name: str) -> int:
    axis = _int(value, name)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name} {axis} is out of bounds for data of rank {ndim} "
                         f"(valid range [{-ndim}, {ndim - 1}])")
    return axis % ndim


def quantized_shapes(data_shape, bits: int = 4, block_size: int = 128, gather_axis: int = 0,
                     quantize_axis: int = -1) -> QuantShapes:
    """Check the operator's attributes against ``data_shape``; the implied shapes.

    onnxruntime's rules for uint8 data: ``bits`` 4 or 8 (2-bit tables are not
    supported here); ``block_size`` a power of two of at least 16; rank >= 2;
    ``gather_axis`` 0 and ``quantize_axis`` another axis; with 4 bits the
    values are packed along the last axis, which must be the quantize axis.
    ``scales`` has ``ceil(n / block_size)`` entries on the quantize axis (``n``
    values there, twice the bytes with 4 bits), ``zero_points`` the same
    with 8 bits and half as many bytes (rounded up) with 4.
    """
    shape = tuple(int(n) for n in data_shape)
    bits, block_size = _int(bits, "bits"), _int(block_size, "block_size")
    if bits not in BITS:
        raise ValueError(f"bits must be 4 or 8 for uint8 data, got {bits}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of 2 and not less than 16, got {block_size}")
    r = len(shape)
    if r < 2:
        raise ValueError(f"data must have at least two dimensions (a gather axis and a quantize "
                         f"axis), got shape {shape}")
    g, q = _axis(gather_axis, r, "gather_axis"), _axis(quantize_axis, r, "quantize_axis")
    if g != 0:
        raise ValueError(f"gather_axis must be 0 (or {-r}) for uint8 data, as onnxruntime's "
                         f"schema requires; got {gather_axis}")
    if q == g:
        raise ValueError(f"quantize_axis ({quantize_axis}) and gather_axis ({gather_axis}) "
                         f"must differ")
    if bits == 4 and q != r - 1:
        raise ValueError(f"with bits=4 the values are packed along the last axis, so "
                         f"quantize_axis must be the last axis ({r - 1} or -1); got "
                         f"{quantize_axis}")
    values = shape[:-1] + (shape[-1] * (8 // bits),)
    nb = cdiv(values[q], block_size)
    scales = values[:q] + (nb,) + values[q + 1:]
    zero_points = values[:q] + ((nb + 1) // 2 if bits == 4 else nb,) + values[q + 1:]
    return QuantShapes(values, scales, zero_points, g, q)


def _values(bits: int, block_size: int, row_bytes: int, data_align: int, out_align: int,
            forced: Optional[int]) -> int:
    """Values per chunk of the rows kernel with one load per chunk, or 0 (byte loads).

    A chunk is one aligned load of its packed bytes (8 or 16 bytes), lies in
    one block and its output is a multiple of 16 bytes: 16 values (32 4-bit
    values only when forced; see plan/tuning.py for what each measured)."""
    widths = ((tuning.QUANT_VALUES, tuning.QUANT_WIDE_VALUES) if bits == 4
              else (tuning.QUANT_VALUES,))
    if forced is not None:
        if forced not in widths:
            raise ValueError(f"values_per_thread must be one of {widths} with bits={bits}, "
                             f"got {forced!r}")
        widths = (forced,)
    for v in widths:
        load = v * bits // 8
        if (v <= block_size and row_bytes % load == 0 and data_align % load == 0
                and out_align % 16 == 0):
            return v
    if forced is not None:
        raise ValueError(f"values_per_thread={forced} needs chunks of one block (block_size "
                         f"{block_size}) and rows of whole {forced * bits // 8}-byte loads "
                         f"(rows of {row_bytes} B, table {data_align}-byte and out "
                         f"{out_align}-byte aligned)")
    return 0


def plan_quantized(data_shape, indices_shape, index_dtype: str, *, out_dtype: str,
                   bits: int = 4, block_size: int = 128, gather_axis: int = 0,
                   quantize_axis: int = -1, mode: str = "raise", data_align: int = 256,
                   out_align: int = 256, limits: DeviceLimits = DeviceLimits(),
                   kind: Optional[str] = None, max_grid: Optional[int] = None,
                   values_per_thread: Optional[int] = None,
                   rows_per_thread: Optional[int] = None) -> Plan:
    """Plan GatherBlockQuantized of a C-contiguous uint8 table of ``data_shape``.

    ``out_dtype`` names the scales' (and output's) dtype; ``data_align`` and
    ``out_align`` are the largest powers of two dividing the two addresses;
    ``limits`` the device's (the grid's waves).  ``kind`` ("rows" or
    "general"), ``max_grid``, ``values_per_thread`` (16 or 32 with 4 bits, 16
    with 8) and ``rows_per_thread`` (1 .. QUANT_MAX_RU) force a variant (tests
    and benchmarks); the last two apply to the rows kernel's vector path.
    The caller checks the shapes of scales and zero points against
    :func:`quantized_shapes`.
    """
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"scales must be float16, bfloat16 or float32, got {out_dtype}")
    shp = quantized_shapes(data_shape, bits, block_size, gather_axis, quantize_axis)
    values, q = shp.values, shp.quantize_axis
    bits, block_size = int(bits), int(block_size)
    G, n_idx = values[0], math.prod(tuple(indices_shape))
    out_shape = tuple(indices_shape) + values[1:]
    out_size = math.prod(out_shape)
    no_empty_axis(mode, (G,), (0,), n_idx, out_size)
    check = check_launch(index_dtype, n_idx, (G,)) if mode == "raise" and n_idx else None
    base = dict(op="quantized", out_shape=out_shape, n_indices=n_idx, bound_axes=(0,),
                bounds=(G,), check=check)
    if out_size == 0:
        return Plan(**base)

    m1, nq, m2 = math.prod(values[1:q]), values[q], math.prod(values[q + 1:])
    nb = cdiv(nq, block_size)
    fields = dict(
        rows=0, total=0, axis_len=G, m1=m1, nq=nq, m2=m2, nb=nb,
        nzq=(nb + 1) // 2 if bits == 4 else nb, row_bytes=nq * bits // 8, chunks=0,
        m1_div=make_divisor(m1, 64), nq_div=make_divisor(nq, 64), m2_div=make_divisor(m2, 64),
        bits=bits, log2_block=block_size.bit_length() - 1, default_zp=1 << (bits - 1), vec=0,
        values=tuning.QUANT_VALUES, row_unroll=1)
    suffix = "_bf16" if out_dtype == "bfloat16" else ""
    unit = OUT_DTYPES[out_dtype]
    cap = max_grid or GRID_X_MAX
    if kind not in (None, "rows", "general"):
        raise ValueError(f"kind must be 'rows' or 'general', got {kind!r}")
    if rows_per_thread is not None and rows_per_thread not in range(1, tuning.QUANT_MAX_RU + 1):
        raise ValueError(f"rows_per_thread must be in [1, {tuning.QUANT_MAX_RU}], got "
                         f"{rows_per_thread!r}")
    if kind == "general" or m2 != 1:
        if kind == "rows":
            raise ValueError(f"the rows kernel needs the quantize axis last; it is {q}")
        fields["total"] = out_size
        grid = (min(cdiv(out_size, tuning.MAX_THREADS), cap), 1, 1)
        main = Launch(KernelKey("quantized_general" + suffix, unit, index_dtype, "fast64", mode),
                      fields, grid, (tuning.MAX_THREADS, 1, 1))
        reason = f"one element per thread over (N, {m1}, {nq}, {m2})"
        return Plan(main=main, reason=reason, **base)

    rows = n_idx * m1
    v = _values(bits, block_size, fields["row_bytes"], data_align, out_align, values_per_thread)
    chunk = v or tuning.QUANT_VALUES
    chunks = cdiv(nq, chunk)
    tx = min(chunks, tuning.MAX_THREADS)
    ty = tuning.MAX_THREADS // tx
    ru = 1
    if v:  # byte loads move one row per thread
        ru = rows_per_thread or row_unroll(rows, ty, 1, limits, tuning.QUANT_MAX_RU)
    fields.update(rows=rows, chunks=chunks, vec=int(bool(v)), values=chunk, row_unroll=ru)
    grid = (min(cdiv(rows, ty * ru), cap), 1, 1)
    main = Launch(KernelKey("quantized" + suffix, unit, index_dtype, "fast64", mode), fields,
                  grid, (tx, ty, 1))
    loads = f"one {chunk * bits // 8}-byte load per chunk" if v else "byte loads"
    reason = (f"rows of {nq} {bits}-bit values, {chunks} chunk(s) of {chunk}, {ty} row(s) per "
              f"block row, {ru} row(s) per thread, {loads}")
    return Plan(main=main, reason=reason, **base)
