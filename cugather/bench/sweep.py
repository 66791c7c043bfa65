"""Random gather geometries for ``python -m cugather bench --sweep N [--seed S]``.

The sweep times cugather (wrap mode) against the peers on shapes nobody chose
by hand.  Shapes come from :func:`draw_shapes`, pure Python over
``numpy.random.default_rng(seed)`` (only its ``random()`` doubles are used),
so the same seed gives the same shapes on any machine, with or without a GPU,
and the first k shapes of a sweep of N are the shapes of a sweep of k.

The distribution, one shape per draw:

- **dtype**: item width 1, 2, 4, 8 or 16 bytes, equally likely, then a dtype
  of that width, equally likely: bool/uint8/int8, float16/int16,
  float32/int32, float64/int64, complex128 (except for awkward rows, below).
- **index dtype**: int32 or int64, equally likely.
- **row bytes** (product of the dims after the axis x item size), one of
  three kinds:

  - ``element`` (p = 1/4): the axis is last, a row is one element;
  - ``awkward`` (p = 0.35): a size from :data:`AWKWARD_ROW_BYTES` (3, 5, 6,
    7, 10, 12, 14, 20, 24, 28, 40, 56, 100, 120, 200, 1000, 1500, 3000 B:
    never a multiple of 16, often not of 4), equally likely, then the item
    width among those dividing it (so never complex128);
  - ``loguniform`` (p = 0.4): log-uniform in [1 B, 64 KiB], rounded to a
    whole number (at least 1) of elements; one element means the axis is last.

- **rank and axis**: a row of one element puts the axis last, rank uniform
  in 1..4; otherwise rank uniform in 2..4, the axis uniform in 0..rank-2,
  and the row's element count split over the dims after the axis by
  handing each prime factor to a random dim (dims of 1 happen).
- **outer** (product of the dims before the axis): 1 when the axis is 0,
  else log-uniform in [1, 65536], split over those dims the same way.
- **indices**: count log-uniform in [1, 16 Mi]; index rank 1 (p = 0.7) or 2;
  a single index is a 0-d array half the time.  Values uniform in
  ``[-axis_len, axis_len)`` (the timed peers get them made non-negative).
- **table** (the data array): inside L2 (p = 1/2; bytes log-uniform in
  [outer x row bytes, 40 MiB], axis length rounded down) or far beyond it
  (bytes log-uniform in [200 MiB, 16 GiB], axis length rounded up).

A draw that breaks a constraint is discarded whole and drawn again, so the
sweep follows the distribution above conditioned on: output bytes in
[4 KiB, 1 GiB]; the table in its class's range; axis length below 2**31
(int32 indices address every row); the estimated GPU footprint (table,
indices twice, six output-sized arrays: cugather's, the copy ceiling's,
cupy.take's, torch's, JAX's and a spare) at most :data:`MEMORY_CAP`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["SweepShape", "draw_shape", "draw_shapes", "violations", "WIDTH_DTYPES",
           "AWKWARD_ROW_BYTES", "MIN_OUT", "MAX_OUT", "L2_TABLE_MAX", "BEYOND_TABLE_MIN",
           "TABLE_MAX", "MEMORY_CAP", "MAX_INDICES", "MAX_ROW_BYTES", "MAX_OUTER"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
WIDTH_DTYPES = {1: ("bool", "uint8", "int8"), 2: ("float16", "int16"),
                4: ("float32", "int32"), 8: ("float64", "int64"), 16: ("complex128",)}
AWKWARD_ROW_BYTES = (3, 5, 6, 7, 10, 12, 14, 20, 24, 28, 40, 56, 100, 120, 200, 1000, 1500, 3000)
_WIDTH_OF = {name: w for w, names in WIDTH_DTYPES.items() for name in names}
INDEX_DTYPES = ("int32", "int64")
P_ELEMENT, P_AWKWARD = 0.25, 0.35  # the rest of the rows are log-uniform
P_INDEX_RANK2 = 0.3
MAX_ROW_BYTES = 64 * KiB
MAX_OUTER = 1 << 16
MAX_INDICES = 1 << 24
MIN_OUT, MAX_OUT = 4 * KiB, 1 * GiB
L2_TABLE_MAX = 40 * MiB      # H200 L2 is 50 MB: 40 MiB stays resident with the output around
BEYOND_TABLE_MIN = 200 * MiB
TABLE_MAX = 16 * GiB
MAX_AXIS_LEN = (1 << 31) - 1
MEMORY_CAP = 24 * GiB
OUTPUT_COPIES = 6            # output-sized arrays alive at once while a shape is timed


@dataclass(frozen=True)
class SweepShape:
    """One gather geometry: ``take(data, indices, axis)`` with C-contiguous operands."""

    shape: tuple        # data shape
    dtype: str
    axis: int
    indices: tuple      # indices shape
    index_dtype: str
    table_class: str    # "l2" or "beyond"
    row_class: str      # "element", "awkward" or "loguniform"

    @property
    def itemsize(self) -> int:
        return _WIDTH_OF[self.dtype]

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[self.axis + 1:]) * self.itemsize

    @property
    def outer(self) -> int:
        return math.prod(self.shape[:self.axis])

    @property
    def axis_len(self) -> int:
        return self.shape[self.axis]

    @property
    def n_indices(self) -> int:
        return math.prod(self.indices)

    @property
    def out_shape(self) -> tuple:
        return self.shape[:self.axis] + self.indices + self.shape[self.axis + 1:]

    @property
    def out_bytes(self) -> int:
        return self.outer * self.n_indices * self.row_bytes

    @property
    def table_bytes(self) -> int:
        return self.outer * self.axis_len * self.row_bytes

    @property
    def index_bytes(self) -> int:
        return self.n_indices * (4 if self.index_dtype == "int32" else 8)

    @property
    def moved_bytes(self) -> int:
        """The gather's byte accounting: 2 x output bytes + index bytes."""
        return 2 * self.out_bytes + self.index_bytes

    @property
    def footprint_bytes(self) -> int:
        """GPU bytes alive at once while the shape is timed (an upper estimate)."""
        return self.table_bytes + 2 * self.index_bytes + OUTPUT_COPIES * self.out_bytes

    def label(self) -> str:
        dims = "x".join(map(str, self.shape))
        idx = "x".join(map(str, self.indices)) or "scalar"
        return f"({dims}) {self.dtype} axis {self.axis}, idx ({idx}) {self.index_dtype}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(shape=list(self.shape), indices=list(self.indices), itemsize=self.itemsize,
                 row_bytes=self.row_bytes, outer=self.outer, axis_len=self.axis_len,
                 n_indices=self.n_indices, out_shape=list(self.out_shape),
                 out_bytes=self.out_bytes, table_bytes=self.table_bytes,
                 index_bytes=self.index_bytes, moved_bytes=self.moved_bytes)
        return d


def violations(s: SweepShape) -> list:
    """The constraints ``s`` breaks (an empty list for a valid sweep shape)."""
    bad = []
    if not MIN_OUT <= s.out_bytes <= MAX_OUT:
        bad.append(f"output {s.out_bytes} B outside [{MIN_OUT}, {MAX_OUT}]")
    if s.table_class == "l2" and s.table_bytes > L2_TABLE_MAX:
        bad.append(f"table {s.table_bytes} B above {L2_TABLE_MAX} for an L2 table")
    if s.table_class == "beyond" and not BEYOND_TABLE_MIN <= s.table_bytes <= TABLE_MAX:
        bad.append(f"table {s.table_bytes} B outside [{BEYOND_TABLE_MIN}, {TABLE_MAX}]")
    if not 1 <= s.axis_len <= MAX_AXIS_LEN:
        bad.append(f"axis length {s.axis_len} outside [1, {MAX_AXIS_LEN}]")
    if s.footprint_bytes > MEMORY_CAP:
        bad.append(f"footprint {s.footprint_bytes} B above {MEMORY_CAP}")
    return bad


def _uniform_int(rng, lo: int, hi: int) -> int:
    """An integer uniform in [lo, hi]."""
    return lo + min(int(rng.random() * (hi - lo + 1)), hi - lo)


def _choice(rng, seq):
    return seq[_uniform_int(rng, 0, len(seq) - 1)]


def _log_uniform(rng, lo: float, hi: float) -> float:
    return math.exp(math.log(lo) + rng.random() * (math.log(hi) - math.log(lo)))


def _log_uniform_int(rng, lo: int, hi: int) -> int:
    return min(max(int(round(_log_uniform(rng, lo, hi))), lo), hi)


def _prime_factors(n: int) -> list:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _split(rng, value: int, k: int) -> tuple:
    """``k`` dims whose product is ``value``: each prime factor goes to a random dim."""
    if k == 0:
        return ()
    dims = [1] * k
    for p in _prime_factors(value):
        dims[_uniform_int(rng, 0, k - 1)] *= p
    return tuple(dims)


def _row(rng):
    """(dtype, elements per row, row class)."""
    u = rng.random()
    if P_ELEMENT <= u < P_ELEMENT + P_AWKWARD:
        row_bytes = _choice(rng, AWKWARD_ROW_BYTES)
        width = _choice(rng, [w for w in WIDTH_DTYPES if row_bytes % w == 0])
        return _choice(rng, WIDTH_DTYPES[width]), row_bytes // width, "awkward"
    width = _choice(rng, list(WIDTH_DTYPES))
    dtype = _choice(rng, WIDTH_DTYPES[width])
    if u < P_ELEMENT:
        return dtype, 1, "element"
    return dtype, max(1, round(_log_uniform(rng, 1, MAX_ROW_BYTES) / width)), "loguniform"


def _candidate(rng) -> SweepShape:
    dtype, elems, row_class = _row(rng)
    width = _WIDTH_OF[dtype]
    if elems == 1:
        rank = _uniform_int(rng, 1, 4)
        axis = rank - 1
    else:
        rank = _uniform_int(rng, 2, 4)
        axis = _uniform_int(rng, 0, rank - 2)
    index_dtype = _choice(rng, INDEX_DTYPES)
    outer = 1 if axis == 0 else _log_uniform_int(rng, 1, MAX_OUTER)
    n_idx = _log_uniform_int(rng, 1, MAX_INDICES)
    if n_idx == 1 and rng.random() < 0.5:
        idx_shape = ()
    else:
        idx_shape = _split(rng, n_idx, 2 if rng.random() < P_INDEX_RANK2 else 1)
    slab = outer * elems * width  # table bytes per unit of axis length
    if rng.random() < 0.5:
        table_class = "l2"
        axis_len = int(_log_uniform(rng, slab, max(slab, L2_TABLE_MAX)) // slab)
    else:
        table_class = "beyond"
        axis_len = math.ceil(_log_uniform(rng, BEYOND_TABLE_MIN, TABLE_MAX) / slab)
    shape = _split(rng, outer, axis) + (max(axis_len, 1),) + _split(rng, elems, rank - 1 - axis)
    return SweepShape(shape, dtype, axis, idx_shape, index_dtype, table_class, row_class)


def draw_shape(rng, max_tries: int = 10000) -> SweepShape:
    """One sweep shape from ``rng`` (a ``numpy.random.Generator``), redrawn whole
    until it meets every constraint of :func:`violations`."""
    for _ in range(max_tries):
        s = _candidate(rng)
        if not violations(s):
            return s
    raise RuntimeError(f"no valid sweep shape in {max_tries} draws")


def draw_shapes(n: int, seed: int = 0) -> list:
    """The ``n`` shapes of ``python -m cugather bench --sweep n --seed seed``.

    Parameters
    ----------
    n : int
        Number of shapes.
    seed : int
        Seed of ``numpy.random.default_rng``; the same seed gives the same
        shapes on any machine, and shape ``i`` does not depend on ``n``.

    Returns
    -------
    list of SweepShape
    """
    import numpy

    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = numpy.random.default_rng(seed)
    return [draw_shape(rng) for _ in range(n)]
