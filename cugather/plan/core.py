"""What every plan shares: operand geometry, units, dimension merging, and the
:class:`Plan` value that carries everything a launch needs.  Pure Python.

A plan is built from shapes, byte strides, item size and pointer alignments
(no CuPy, no GPU).  It names the kernel (a :class:`~cugather.plan.keys.KernelKey`),
the argument-block fields other than the pointers, the grid and block -- for
the gather itself and for the bounds check that raise mode runs first -- so
that binding it to a device is a lookup and a copy into an argument block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from . import tuning
from .fastdiv import MAX_OPERAND, Divisor, make_divisor
from .keys import KernelKey

__all__ = ["Operand", "DeviceLimits", "H200", "Launch", "Plan", "alignment", "unit_for", "merge_dims",
           "split_run", "cdiv", "index_math", "divisors", "pad", "row_unroll", "check_launch",
           "no_empty_axis", "too_many_dims", "GRID_X_MAX", "GRID_YZ_MAX"]

GRID_X_MAX = (1 << 31) - 1
GRID_YZ_MAX = 65535


def alignment(address: int) -> int:
    """Largest power of two, at most 256, dividing ``address`` (256 for 0)."""
    return 256 if address & 255 == 0 else address & -address


def unit_for(*quantities: int) -> int:
    """Widest unit (16, 8, 4, 2 or 1 bytes) dividing every quantity.

    Callers pass every byte count, stride and base alignment a kernel steps
    by, so that each load and store of the unit is naturally aligned.
    """
    for unit in (16, 8, 4, 2):
        if all(q % unit == 0 for q in quantities):
            return unit
    return 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad(values, fill=0) -> list:
    """``values`` padded to :data:`tuning.MAX_DIMS` entries."""
    return list(values) + [fill] * (tuning.MAX_DIMS - len(values))


def index_math(largest: int, forced: Optional[str] = None) -> str:
    """32-bit fast_divmod while every numerator is below 2**31, else 64-bit."""
    if forced is not None:
        return forced
    return "fast32" if largest < MAX_OPERAND[32] else "fast64"


def divisors(sizes, math_name: str) -> list:
    """fast_divmod parameters of ``sizes``, padded with divisors of 1."""
    bits = 32 if math_name == "fast32" else 64
    return [make_divisor(max(n, 1), bits) for n in pad(sizes, 1)]


def merge_dims(dims) -> list:
    """Merge ``(size, stride, ...)`` tuples, outermost first, that step as one.

    Size-1 dimensions are dropped; a dimension merges into the next inner one
    when each of its strides equals that dimension's stride times its size
    (one rule for data bytes and index elements alike).
    """
    out: list = []
    for size, *strides in dims:
        if size == 1:
            continue
        if out and all(o == s * size for o, s in zip(out[-1][1:], strides)):
            out[-1] = (out[-1][0] * size, *strides)
        else:
            out.append((size, *strides))
    return out


def split_run(dims, zero_strides: int = 0) -> tuple:
    """``(dims, run)``: pop the innermost contiguous byte run (data stride 1 and
    the next ``zero_strides`` strides 0) off merged ``dims``."""
    if dims and dims[-1][1] == 1 and all(s == 0 for s in dims[-1][2:2 + zero_strides]):
        return dims[:-1], dims[-1][0]
    return dims, 1  # a 1-byte element whose neighbour is not contiguous


@dataclass(frozen=True)
class Operand:
    """Geometry of one array: shape, byte strides, item size, base alignment."""

    shape: tuple
    strides: tuple
    itemsize: int
    align: int = 256  # largest power of two (capped at 256) dividing the address

    @classmethod
    def contiguous(cls, shape, itemsize, align=256) -> "Operand":
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.append(step)
            step *= max(n, 1)
        return cls(tuple(shape), tuple(reversed(strides)), itemsize, align)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def c_contiguous(self) -> bool:
        want = Operand.contiguous(self.shape, self.itemsize).strides
        return all(n == 1 or s == c for n, s, c in zip(self.shape, self.strides, want))

    def extent(self) -> tuple:
        """[lo, hi): the bytes the array touches relative to its address (lo <= 0
        with negative strides; (0, 0) when empty)."""
        if not self.size:
            return 0, 0
        lo = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s > 0)
        return lo, hi + self.itemsize

    def dims(self, start: int = 0, stop: Optional[int] = None) -> list:
        """``(size, byte stride)`` of dimensions ``start:stop``."""
        return list(zip(self.shape[start:stop], self.strides[start:stop]))


@dataclass(frozen=True)
class DeviceLimits:
    """What a plan needs to know of the device."""

    sm_count: int = 132
    max_shared_mem: int = 48 * 1024  # per block, without opting in
    #: ``"sm_90"`` and the like: whose tuning table the planners consult; ``""``
    #: none (the hand-written rules alone).
    arch: str = ""


#: An H200's limits with its tuning table: what a plan made without a GPU assumes.
H200 = DeviceLimits(arch="sm_90")


def row_unroll(rows: int, rows_per_block_row: int, chunks: int, limits: DeviceLimits,
               most: int) -> int:
    """Rows per thread of a row kernel (rows, sharded): ``most``, or 2, unless
    that leaves fewer than about two waves of blocks, where a partly idle last
    wave costs more than the extra loads in flight gain (measured on H200 with
    the rows kernel: 4 rows per thread is fastest from ~10k blocks on, 2 below
    ~1k); 1 for fewer blocks still."""
    for ru in (most, 2):
        if cdiv(rows, rows_per_block_row * ru) * chunks >= 2 * 4 * limits.sm_count:
            return ru
    return 1


@dataclass(frozen=True)
class Launch:
    """One kernel launch minus the pointers: key, argument fields, grid, block."""

    key: KernelKey
    fields: dict
    grid: tuple
    block: tuple
    shared_mem: int = 0

    @property
    def args_type(self) -> str:
        return self.key.spec.args_type


def check_launch(index_dtype: str, n_indices: int, bounds: tuple) -> Launch:
    """The raise-mode bounds check over ``n_indices`` values, cycling over the
    components of ``bounds`` (one per index-tuple component)."""
    grid = (max(1, min(cdiv(n_indices, tuning.MAX_THREADS), tuning.CHECK_GRID_MAX)), 1, 1)
    block = (tuning.MAX_THREADS, 1, 1)
    if len(bounds) == 1:
        return Launch(KernelKey("check", 0, index_dtype, "fast64", "raise"),
                      dict(n=n_indices, axis_len=bounds[0]), grid, block)
    return Launch(KernelKey("check_nd", 0, index_dtype, "fast64", "raise"),
                  dict(n=n_indices, m_div=make_divisor(len(bounds), 64), bounds=pad(bounds)),
                  grid, block)


def no_empty_axis(mode: str, bounds, bound_axes, n_indices: int, out_size: int) -> None:
    """Wrap and clip have no element to map an index to on an axis of size 0
    (raise mode's check reports the first index instead; fill fills)."""
    if mode in ("wrap", "clip", "clip_numpy") and n_indices and out_size:
        for axis, n in zip(bound_axes, bounds):
            if n == 0:
                raise IndexError(f"cannot take indices from axis {axis} of size 0 "
                                 f"(mode={'clip' if mode == 'clip_numpy' else mode!r})")


@dataclass(frozen=True)
class Plan:
    """One operator's launch, minus the pointers.

    ``main`` is the gather (None when the output is empty, or when ``data``
    must first be copied to a C-contiguous buffer: ``copy_data``); ``check``
    the raise-mode bounds check run before it.  ``bound_axes`` and ``bounds``
    are the data axes the index values address and their sizes, one per
    component of an index tuple (one for Gather and GatherElements).  In raise
    mode the main kernel checks every index it reads; ``check`` runs first
    where the output must stay untouched (``out=``) or there is no gather.
    """

    op: str
    out_shape: tuple
    n_indices: int
    bound_axes: tuple
    bounds: tuple
    main: Optional[Launch] = None
    check: Optional[Launch] = None
    copy_data: bool = False
    reason: str = ""
    out_dtype: Optional[object] = None  # None: the data's dtype
    chosen_by: str = ""  # the tuning table's leaf or the rule that chose the kernel

    # ------------------------------------------------ the main launch, flattened
    @property
    def key(self) -> Optional[KernelKey]:
        return self.main.key if self.main else None

    @property
    def check_key(self) -> Optional[KernelKey]:
        return self.check.key if self.check else None

    @property
    def kind(self) -> str:
        return self.main.key.kind if self.main else ("copy" if self.copy_data else "empty")

    @property
    def grid(self) -> tuple:
        return self.main.grid if self.main else (0, 0, 0)

    @property
    def block(self) -> tuple:
        return self.main.block if self.main else (0, 0, 0)

    @property
    def shared_mem(self) -> int:
        return self.main.shared_mem if self.main else 0

    @property
    def fields(self) -> dict:
        return self.main.fields if self.main else {}

    # ------------------------------------------------ reporting
    def divisors(self) -> dict:
        """fast_divmod parameters in use, by argument name."""
        found = {}
        used = self.fields.get("ndim", 0) - 1  # the outermost dimension takes the quotient
        for name, value in self.fields.items():
            if isinstance(value, Divisor):
                found[name] = value
            elif isinstance(value, list) and value and isinstance(value[0], Divisor):
                found.update((f"{name}[{i}]", v) for i, v in enumerate(value[:max(used, 0)]))
        return found

    def index_error(self, pos: int, value: int, indices_shape) -> IndexError:
        """The IndexError for index ``value`` at flat position ``pos`` of the indices."""
        k = pos % len(self.bounds)
        axis, n = self.bound_axes[k], self.bounds[k]
        where = [int(i) for i in _unravel(pos, tuple(indices_shape))]
        return IndexError(f"index {value} is out of bounds for axis {axis} with size {n} "
                          f"(at indices{where}; valid range [{-n}, {n - 1}])")

    def describe(self) -> str:
        """A readable summary: kernel, variant, unit, grid, divisors, arguments."""
        axes = ", ".join(f"axis {a} of size {n}" for a, n in zip(self.bound_axes, self.bounds))
        if self.main is None:
            lines = [f"output {self.out_shape}: " + (
                f"data is first copied ({self.reason})" if self.copy_data else "nothing to launch")]
        else:
            k = self.main.key
            lines = [
                f"kernel      {k.entry}",
                f"variant     {k.kind} ({self.reason})",
                f"unit        {k.unit} B, index {k.index_dtype}, math {k.math}, mode {k.mode}",
                f"output      {self.out_shape}  ({self.n_indices} index values; {axes})",
                f"grid        {self.grid}  block {self.block}  shared {self.shared_mem} B",
            ]
            if self.chosen_by:
                lines.append(f"chosen by   {self.chosen_by}")
            divs = self.divisors()
            lines += [f"fast_divmod {name}: d={d.d} M={d.m} l={d.l} ({d.bits}-bit)"
                      for name, d in divs.items()]
            plain = [f"{name}={_trim(name, value, self.fields)}" for name, value in self.fields.items()
                     if not _has_divisor(value)]
            if plain:
                lines.append(f"arguments   {' '.join(plain)}")
        if self.check is not None:
            how = ("the gather checks every index it reads (one launch, one synchronisation); "
                   f"{self.check.key.entry} runs first when out= is given"
                   if self.main is not None else f"{self.check.key.entry} over the indices")
            lines.append(f"check       {self.n_indices} index values: {how}")
        return "\n".join(lines)


def _has_divisor(value) -> bool:
    return isinstance(value, Divisor) or (isinstance(value, list) and bool(value)
                                          and isinstance(value[0], Divisor))


def _trim(name: str, value, fields: dict):
    """Padded per-dimension (or per-component) lists, up to the entries in use."""
    if isinstance(value, list) and len(value) == tuning.MAX_DIMS:
        used = fields.get("m") if name in ("bounds", "comp_strides") else fields.get("ndim")
        return value[:used if used is not None else len(value)]
    return value


def _unravel(pos: int, shape: tuple) -> tuple:
    out = []
    for n in reversed(shape):
        pos, c = divmod(pos, n) if n else (pos, 0)
        out.append(c)
    return tuple(reversed(out))


def too_many_dims(data: Operand, ndim: int, **base) -> Plan:
    """The plan when merging leaves more than MAX_DIMS dimensions: copy ``data``
    to a C-contiguous buffer first (which merges), or fail if it already is."""
    if data.c_contiguous:
        raise ValueError(f"output of shape {base['out_shape']} needs {ndim} dimensions after "
                         f"merging; at most {tuning.MAX_DIMS} are supported")
    return Plan(copy_data=True, reason=f"{ndim} dims after merging exceed {tuning.MAX_DIMS}",
                **base)
