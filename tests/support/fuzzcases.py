"""Generated cases of the gather family, shared by the fuzz backends.

A :class:`Case` is a small, printable recipe: operation, shapes, dtypes, a
view recipe (slices with any step, then a transpose) for the data and for the
indices, the out-of-range policy, an ``out=`` placement and a seed for the
values.  The arrays are rebuilt from it on demand, so Hypothesis prints a
readable failing case and replays it exactly.  Expected results come from
NumPy alone (``numpy.take``, ``reference.gather_ref``, ``take_along_axis`` and
fancy indexing below); no cugather code is used here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from hypothesis import strategies as st

from .reference import DTYPES, gather_ref, random_data

#: Index dtypes used as they are, and some the library converts first.
INDEX_DTYPES = ["int32", "int64"]
CONVERTED_INDEX_DTYPES = ["int8", "int16", "uint8", "uint16", "uint32", "uint64"]

#: Operations: ONNX Gather, numpy.take, GatherOp (cached plans), ONNX
#: GatherElements, numpy.take_along_axis, ONNX GatherND.
TAKE_OPS = ("gather", "take", "op")
ELEMENTS_ND_OPS = ("elements", "along", "nd")
OPS = TAKE_OPS + ELEMENTS_ND_OPS
MODES_BY_OP = {
    "gather": ("raise", "wrap", "clip", "fill"),
    "op": ("raise", "wrap", "clip", "fill"),
    "take": ("raise", "wrap", "clip"),
    "elements": ("raise", "wrap", "clip", "fill"),
    "along": ("raise",),
    "nd": ("raise", "wrap", "clip", "fill"),
}
#: Operations that accept ``out=`` and ``stream=``.
OUT_OPS = ("gather", "take", "op", "elements", "nd")

DATA_BUDGET = 6000      # elements of a data base array
VIEW_BUDGET = 750       # elements of the data view
INDEX_BUDGET = 400      # elements of an index array
OUT_BUDGET = 60000      # elements of an output


@dataclass(frozen=True)
class View:
    """Recipe for a view of a C-contiguous base: ``base[slices].transpose(perm)``.

    Applied the same way to a NumPy base and to its copy on a backend, so both
    see the same strides, offsets and negative steps.
    """

    slices: tuple
    perm: tuple

    def apply(self, arr):
        if not self.slices:  # 0-d: arr[()] would be a scalar for NumPy
            return arr
        return arr[self.slices].transpose(self.perm)

    @property
    def trivial(self) -> bool:
        return (all(s == slice(None) for s in self.slices)
                and self.perm == tuple(range(len(self.perm))))

    @classmethod
    def plain(cls, rank: int) -> "View":
        return cls((slice(None),) * rank, tuple(range(rank)))


@dataclass(frozen=True)
class Case:
    op: str
    dtype: str
    data_base: tuple          # shape of the contiguous data allocation
    data_view: View
    axis: Optional[int]       # None: the flattened array (take, along); batch_dims for nd
    index_dtype: str
    index_base: tuple
    index_view: View
    index_source: str         # "device", "numpy", "list" or "int"
    values: str               # "in", "neg", "oor" or "extreme"
    mode: str
    fill_value: object
    out_offset: Optional[int]  # None: no out=; else element offset inside a larger buffer
    seed: int
    repeat: bool              # call a second time with fresh arrays of the same geometry

    # ------------------------------------------------------------ geometry
    def rng(self, salt: int = 0):
        return np.random.default_rng([self.seed, salt])

    def data_shape(self) -> tuple:
        return self.data_view.apply(np.empty(self.data_base, dtype=np.uint8)).shape

    def index_shape(self) -> tuple:
        return self.index_view.apply(np.empty(self.index_base, dtype=np.uint8)).shape

    def flat(self) -> bool:
        return self.axis is None and self.op in ("take", "along")

    def bounds(self) -> tuple:
        """Sizes of the data axes the index values address (one per tuple component)."""
        shape = self.data_shape()
        if self.flat():
            return (math.prod(shape),)
        if self.op == "nd":
            b, m = self.axis, self.index_shape()[-1]
            return tuple(shape[b:b + m])
        return (shape[self.axis],)

    def axis_len(self) -> int:
        return self.bounds()[0]

    # ------------------------------------------------------------ arrays
    def data_base_array(self, salt: int = 0) -> np.ndarray:
        return random_data(self.rng(2 * salt), self.data_base, self.dtype)

    def data(self, base: np.ndarray) -> np.ndarray:
        return self.data_view.apply(base)

    def index_base_array(self, salt: int = 0) -> np.ndarray:
        """The index allocation: noise, with the drawn values written through the view."""
        rng = self.rng(2 * salt + 1)
        bounds = self.bounds()
        base = index_values(rng, self.index_base, max(bounds), self.index_dtype, "in")
        view = self.index_view.apply(base)
        if self.op == "nd":
            for k, n in enumerate(bounds):
                view[..., k] = index_values(rng, view.shape[:-1], n, self.index_dtype, self.values)
        else:
            view[...] = index_values(rng, view.shape, bounds[0], self.index_dtype, self.values)
        return base

    def indices(self, base: np.ndarray) -> np.ndarray:
        return self.index_view.apply(base)

    # ------------------------------------------------------------ reference
    def first_bad(self, indices):
        """(value, position) of the first out-of-range index value in C order, or None."""
        idx = np.asarray(indices).astype(np.int64)
        bounds = np.array(self.bounds(), dtype=np.int64)
        if self.op == "nd":
            n = np.broadcast_to(bounds, idx.shape)
        else:
            n = np.full(idx.shape, bounds[0], dtype=np.int64)
        bad = np.flatnonzero(((idx < -n) | (idx >= n)).reshape(-1))
        if not bad.size:
            return None
        pos = tuple(int(p) for p in np.unravel_index(int(bad[0]), idx.shape))
        return int(np.asarray(indices).reshape(-1)[bad[0]]), pos

    def in_range(self, indices) -> bool:
        return self.first_bad(indices) is None

    def expected(self, data: np.ndarray, indices: np.ndarray):
        """The NumPy result, or IndexError when the call must raise it."""
        try:
            if self.op in TAKE_OPS:
                return self._expected_take(data, np.asarray(indices).astype(np.int64))
            if self.op == "elements":
                return elements_ref(data, indices, self.axis % data.ndim, self.mode,
                                    self.fill_value)
            if self.op == "along":
                a, axis = (data.reshape(-1), 0) if self.flat() else (data, self.axis)
                return np.take_along_axis(a, np.asarray(indices).astype(np.int64), axis=axis)
            return nd_ref(data, indices, self.axis, self.mode, self.fill_value)
        except IndexError:
            return IndexError

    def _expected_take(self, data, idx):
        if self.flat():
            a, axis = data.reshape(-1), 0
        else:
            a, axis = data, self.axis % data.ndim
        mode = self.mode
        n = a.shape[axis]
        out_shape = a.shape[:axis] + idx.shape + a.shape[axis + 1:]
        if n == 0 and idx.size and mode != "fill":
            # Nothing to take from.  (numpy.take's wrap loops forever on some
            # empty shapes, so this case is settled here.)  Raise mode checks
            # every index (ONNX), or those some outer slice reads (numpy.take);
            # the other modes fail only when there is an element to write.
            read = self.op != "take" or math.prod(a.shape[:axis]) > 0
            if (mode == "raise" and read) or math.prod(out_shape):
                raise IndexError("empty axis")
            return np.empty(out_shape, a.dtype)
        if mode == "wrap" and n:
            # Same values; numpy's wrap steps by n in a loop, for ages near 2^63.
            idx = np.mod(idx, n)
        if self.op == "take":
            return np.take(a, idx, axis=axis, mode=mode)
        return gather_ref(a, idx, axis, mode, self.fill_value)

    def out_shape(self, data: np.ndarray, indices: np.ndarray) -> tuple:
        idx_shape = np.shape(indices)
        if self.flat():
            return idx_shape
        if self.op in TAKE_OPS:
            axis = self.axis % data.ndim
            return data.shape[:axis] + idx_shape + data.shape[axis + 1:]
        if self.op == "elements":
            return idx_shape
        if self.op == "along":
            axis = self.axis % data.ndim
            return tuple(k if d == axis or n in (k, 1) else n
                         for d, (n, k) in enumerate(zip(data.shape, idx_shape)))
        b, m = self.axis, idx_shape[-1]
        return idx_shape[:-1] + data.shape[b + m:]


# ---------------------------------------------------------------- references
def normalise(idx, n: int, mode: str):
    """(indices mapped into [0, n), mask of those that keep their element); n > 0."""
    idx = np.asarray(idx).astype(np.int64)
    in_range = (idx >= -n) & (idx < n)
    shifted = np.where(in_range & (idx < 0), idx + n, idx)
    if mode == "raise":
        if not in_range.all():
            raise IndexError("index out of range")
        return shifted, np.ones(idx.shape, bool)
    if mode == "wrap":
        return np.mod(idx, n), np.ones(idx.shape, bool)
    if mode == "clip":
        return np.clip(shifted, 0, n - 1), np.ones(idx.shape, bool)
    if mode == "fill":
        return np.where(in_range, shifted, 0), in_range
    raise ValueError(mode)


def elements_ref(data, indices, axis: int, mode: str, fill_value):
    """ONNX GatherElements with the library's modes: indices address data's leading corner."""
    idx = np.asarray(indices).astype(np.int64)
    n = data.shape[axis]
    if idx.size and n == 0:
        if mode != "fill":
            raise IndexError("empty axis")
        return np.full(idx.shape, np.asarray(fill_value).astype(data.dtype))
    corner = data[tuple(slice(None) if d == axis else slice(0, k)
                        for d, k in enumerate(idx.shape))]
    if not idx.size:
        return np.empty(idx.shape, data.dtype)
    norm, keep = normalise(idx, n, mode)
    out = np.take_along_axis(corner, norm, axis=axis)
    return np.where(keep, out, np.asarray(fill_value).astype(data.dtype))


def nd_ref(data, indices, b: int, mode: str, fill_value):
    """ONNX GatherND with the library's modes, by fancy indexing one batch at a time."""
    idx = np.asarray(indices).astype(np.int64)
    m = idx.shape[-1]
    bounds = data.shape[b:b + m]
    slice_shape = data.shape[b + m:]
    out_shape = idx.shape[:-1] + slice_shape
    fill = np.asarray(fill_value).astype(data.dtype)
    if idx.size and 0 in bounds:
        if mode == "raise" or (mode != "fill" and math.prod(out_shape)):
            raise IndexError("empty axis")
        return np.full(out_shape, fill)
    comps, keep = [], np.ones(idx.shape[:-1], bool)
    for k, n in enumerate(bounds):
        norm, ok = normalise(idx[..., k], n, mode) if idx.size else (idx[..., k], keep)
        comps.append(norm)
        keep &= ok
    n_batch = math.prod(data.shape[:b])
    per_batch = math.prod(idx.shape[b:-1])
    out = np.empty((n_batch, per_batch) + slice_shape, data.dtype)
    if out.size:
        flat = data.reshape((n_batch,) + data.shape[b:])
        for i in range(n_batch):
            out[i] = flat[i][tuple(c.reshape(n_batch, per_batch)[i] for c in comps)]
    out = out.reshape(out_shape)
    mask = keep.reshape(keep.shape + (1,) * len(slice_shape))
    return np.where(mask, out, fill)


# ---------------------------------------------------------------- values
def index_values(rng, shape, n: int, dtype: str, values: str) -> np.ndarray:
    """Index values for an axis of length ``n``, representable in ``dtype``.

    ``values``: "in" draws from [0, n), "neg" from [-n, n), "oor" puts some
    values just outside, "extreme" also the limits of the dtype, of int32
    and near 2^62.
    """
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    size = math.prod(shape)
    if n == 0:
        v = rng.integers(-3, 4, size=size)
    elif values == "in":
        v = rng.integers(0, n, size=size)
    else:
        v = rng.integers(-n, n, size=size)
    info = np.iinfo(dt)
    lo, hi = max(int(info.min), -(1 << 63)), min(int(info.max), (1 << 63) - 1)
    if values in ("oor", "extreme") and size:
        k = max(1, size // 8) if values == "oor" else max(1, size // 3)
        where = rng.choice(size, size=min(k, size), replace=False)
        pool = [n, n + 1, 2 * n, 3 * n + 7, -n - 1, -n - 2, -2 * n - 1, -3 * n - 5]
        if values == "extreme":
            far = [lo, hi, lo + 1, hi - 1, (1 << 31) - 1, -(1 << 31), 1 << 31,
                   -(1 << 31) - 1, 1 << 62, -(1 << 62)]
            pool += [x for x in far if lo <= x <= hi]
        v[where] = rng.choice(np.array(pool, dtype=np.int64), size=where.size)
    if dt.kind == "u":
        v = np.abs(v)  # unsigned indices cannot count from the end (abs(int64 min) stays < 0)
    v = np.clip(v, lo, hi)
    return v.astype(dt).reshape(shape)


@functools.lru_cache(maxsize=None)
def fill_values(dtype: str):
    """A strategy of fill values ``dtype`` can hold exactly."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.sampled_from([True, False, 0, 1])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return st.one_of(st.sampled_from([0, -1 if dt.kind == "i" else 1, int(info.min),
                                          int(info.max)]),
                         st.integers(int(info.min), int(info.max)))
    finite = st.sampled_from([0.0, -0.0, 1.5, -2.25, 7, 1e-3, 65504.0])
    special = st.sampled_from([float("inf"), float("-inf"), float("nan")])
    real = st.one_of(finite, special)
    if dt.kind == "c":
        return st.one_of(real, st.builds(complex, finite, finite))
    return real


# ---------------------------------------------------------------- strategy
# Every draw goes through a few module-level integer strategies: building
# strategies per draw costs Hypothesis more time than running a case.
_U16 = st.integers(0, 2**16 - 1)
_SEEDS = st.integers(0, 2**32 - 1)
_PERMS = {r: st.permutations(range(r)) for r in range(8)}


def _below(draw, k: int) -> int:
    """An integer in [0, k), shrinking towards 0."""
    return draw(_U16) % k if k > 1 else 0


def _between(draw, lo: int, hi: int) -> int:
    """An integer in [lo, hi]; hi - lo < 2^16."""
    return lo + _below(draw, hi - lo + 1)


def _choice(draw, seq):
    return seq[_below(draw, len(seq))]


_WEIGHTED_DIMS = [1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 9]


def size(draw, budget: int, allow_long: bool = True) -> int:
    """One dimension: 0 now and then, mostly small, sometimes a long row (<= budget)."""
    pick = _below(draw, 40)
    if pick == 0:
        return 0
    if allow_long and pick <= 3:  # long enough for the chunks kernel's 4 KB rows
        return _between(draw, 0, max(0, min(budget, 1500)))
    return min(_choice(draw, _WEIGHTED_DIMS), budget)


def dims(draw, rank: int, budget: int, allow_long: bool = True) -> tuple:
    """``rank`` sizes (0 and 1 included) whose product stays within ``budget``."""
    out = []
    room = budget
    for _ in range(rank):
        n = size(draw, room, allow_long)
        out.append(n)
        room = room // max(n, 1)
    return tuple(out)


def view(draw, shape_want: tuple, budget: int, plain_bias: int = 2):
    """(base shape, View) whose view has shape ``shape_want``.

    Most views are plain; the rest slice each dim with a start offset, a step
    in {1, 2, 3, -1, -2} and some padding, then permute the axes.
    """
    rank = len(shape_want)
    if _below(draw, plain_bias + 1) != 0 or rank == 0:
        return shape_want, View.plain(rank)
    perm = tuple(draw(_PERMS[rank] if rank in _PERMS else st.permutations(range(rank))))
    # The view is base[slices].transpose(perm): base dim perm[k] becomes view dim k.
    storage = [0] * rank
    for k, p in enumerate(perm):
        storage[p] = shape_want[k]
    base, slices = [], []
    total = 1
    for n in storage:
        step = _choice(draw, (1, 1, 2, 3, -1, -2))
        start_pad = _below(draw, 3)
        end_pad = _below(draw, 3)
        span = (n - 1) * abs(step) + 1 if n else 0
        extent = start_pad + span + end_pad
        if total * max(extent, 1) > budget:  # keep the allocation small
            step, start_pad, end_pad, span, extent = 1, 0, 0, n, n
        total *= max(extent, 1)
        base.append(extent)
        if n == 0:
            slices.append(slice(start_pad, start_pad))
        elif step > 0:
            slices.append(slice(start_pad, start_pad + span, step))
        else:
            first = start_pad + span - 1
            stop = first + step * n
            slices.append(slice(first, stop if stop >= 0 else None, step))
    return tuple(base), View(tuple(slices), perm)


def _others(shape, axis) -> int:
    return math.prod(shape[:axis] + shape[axis + 1:])


def _take_geometry(draw, op):
    """(data shape, axis, index shape) for gather / take / GatherOp."""
    if op == "take" and _below(draw, 8) == 0:
        shape = dims(draw, _between(draw, 0, 6), VIEW_BUDGET)  # flattened: 0-d is fine
        axis = None
        others = 1
    else:
        shape = dims(draw, _between(draw, 1, 6), VIEW_BUDGET)
        axis = _between(draw, -len(shape), len(shape) - 1)
        others = _others(shape, axis)
    index_rank = _between(draw, 0, 6)
    budget = max(1, min(INDEX_BUDGET, OUT_BUDGET // max(others, 1)))
    return shape, axis, dims(draw, index_rank, budget, allow_long=index_rank <= 2)


def _elements_geometry(draw):
    shape = dims(draw, _between(draw, 1, 6), VIEW_BUDGET)
    axis = _between(draw, -len(shape), len(shape) - 1)
    a = axis % len(shape)
    idx = []
    for d, n in enumerate(shape):
        if d == a:
            idx.append(size(draw, INDEX_BUDGET // max(math.prod(idx), 1)))
        else:
            idx.append(n if _below(draw, 4) else _between(draw, 0, n))
    return shape, axis, tuple(idx)


def _along_geometry(draw):
    if _below(draw, 8) == 0:  # axis=None: flattened array, 1-D indices
        shape = dims(draw, _between(draw, 0, 4), VIEW_BUDGET)
        return shape, None, (size(draw, INDEX_BUDGET),)
    shape = dims(draw, _between(draw, 1, 5), VIEW_BUDGET)
    axis = _between(draw, -len(shape), len(shape) - 1)
    a = axis % len(shape)
    idx = []
    for d, n in enumerate(shape):
        room = INDEX_BUDGET // max(math.prod(idx), 1)
        if d == a:
            idx.append(size(draw, room))
        elif n == 1:  # arr broadcasts against any size
            idx.append(size(draw, min(room, 8), allow_long=False))
        else:
            idx.append(_choice(draw, (n, n, 1)))
    return shape, axis, tuple(idx)


def _nd_geometry(draw):
    shape = dims(draw, _between(draw, 1, 6), VIEW_BUDGET)
    r = len(shape)
    b = _between(draw, 0, r - 1)
    m = _between(draw, 1, r - b)
    room = max(1, INDEX_BUDGET // max(math.prod(shape[:b]) * m, 1))
    extra = dims(draw, _between(draw, 0, 3), room, allow_long=False)
    return shape, b, tuple(shape[:b]) + extra + (m,)


_GEOMETRY = {"gather": _take_geometry, "take": _take_geometry, "op": _take_geometry,
             "elements": _elements_geometry, "along": _along_geometry, "nd": _nd_geometry}
_VALUES = ("in", "in", "neg", "neg", "oor", "extreme")


@st.composite
def cases(draw, ops=OPS, index_sources=("device", "numpy", "list", "int"),
          with_out: bool = True, converted_dtypes: bool = True):
    """A case of the gather family; see :class:`Case`."""
    op = _choice(draw, ops)
    dtype = _choice(draw, DTYPES)
    geometry = _GEOMETRY[op]
    shape, axis, index_shape = geometry(draw, op) if op in TAKE_OPS else geometry(draw)
    data_base, data_view = view(draw, shape, DATA_BUDGET)

    choices = list(INDEX_DTYPES) * 4
    if converted_dtypes:
        choices += CONVERTED_INDEX_DTYPES + (["bool"] if op == "take" else [])
    index_dtype = _choice(draw, choices)
    # A list loses empty trailing dimensions ([[], []] is 2 x 0), an int has none.
    sources = [s for s in index_sources
               if (s != "int" or (not index_shape and op in TAKE_OPS))
               and (s != "list" or math.prod(index_shape))]
    index_source = _choice(draw, sources)
    if index_source == "device":
        index_base, index_view = view(draw, index_shape, INDEX_BUDGET * 4, plain_bias=3)
    else:
        index_base, index_view = index_shape, View.plain(len(index_shape))
    values = _choice(draw, _VALUES)
    mode = _choice(draw, MODES_BY_OP[op])
    fill_value = draw(fill_values(dtype)) if mode == "fill" else 0
    out_offset = None
    if with_out and op in OUT_OPS:
        out_offset = _choice(draw, (None, None, 0, 1, 2, 3))
    seed = draw(_SEEDS)
    repeat = _below(draw, 8) == 0
    return Case(op, dtype, data_base, data_view, axis, index_dtype, index_base, index_view,
                index_source, values, mode, fill_value, out_offset, seed, repeat)
