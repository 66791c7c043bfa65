"""Replayable gather cases for the host tier.

A :class:`Case` is a frozen description (shapes, dtypes, layout, axis, mode,
seed, forced plan choices) from which the arrays are rebuilt exactly, so a
failure prints one line that reproduces it::

    python -c "import sys; sys.path[:0] = ['.', 'tests']; from hostsim.cases import Case; Case(...).check()"

(run from the repository root).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from support.reference import assert_same, gather_ref, random_data, random_indices

from . import runner

__all__ = ["Case", "LAYOUTS", "fill_for", "random_cases"]

#: How the data array is laid out in memory.
LAYOUTS = ("c", "reversed", "transposed", "strided", "offset", "sliced")


def fill_for(dtype) -> object:
    """A fill value of ``dtype`` that differs from zero in every byte width."""
    dtype = np.dtype(dtype)
    return {"b": True, "i": -7, "u": 7, "f": 2.5, "c": 1.5 - 2j}[dtype.kind]


def _make_data(rng, shape, dtype, layout: str) -> np.ndarray:
    shape = tuple(shape)
    if layout == "c":
        return runner.device_copy(random_data(rng, shape, dtype))
    if layout == "reversed":  # every stride negative
        base = runner.device_copy(random_data(rng, shape, dtype))
        return base[(slice(None, None, -1),) * len(shape)]
    if layout == "transposed":
        return runner.device_copy(random_data(rng, shape[::-1], dtype)).T
    if layout == "strided":  # every other element of the last axis
        base = runner.device_copy(random_data(rng, shape[:-1] + (2 * shape[-1],), dtype))
        return base[..., ::2]
    if layout == "offset":  # address aligned to the item size only
        itemsize = np.dtype(dtype).itemsize
        n = math.prod(shape)
        raw = runner.device_empty((n + 1,), dtype)
        raw[1:] = random_data(rng, (n,), dtype)
        view = raw[1:].reshape(shape)
        if n and view.ctypes.data % (2 * itemsize) != itemsize:
            raise RuntimeError("the offset layout lost its misalignment")
        return view
    if layout == "sliced":  # a window of a larger array: outer stride != inner extent
        base = runner.device_copy(random_data(rng, tuple(n + 1 for n in shape), dtype))
        return base[tuple(slice(1, None) for _ in shape)]
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


@dataclass(frozen=True)
class Case:
    """One gather, rebuilt from its fields; ``check()`` compares with NumPy."""

    shape: tuple
    dtype: str
    axis: Optional[int]
    index_shape: tuple
    index_dtype: str = "int64"
    mode: str = "raise"
    api: str = "gather"            # "gather" (ONNX, cugather.gather) or "take" (numpy.take)
    layout: str = "c"
    fill_value: object = 0
    out_of_range: bool = False     # draw indices outside [-n, n) as well
    edges: bool = True             # put 0, n-1, -1, -n (and out-of-range edges) first
    seed: int = 0
    force: tuple = ()              # (name, value) pairs for GatherOp.plan
    bad_at: tuple = ()             # flat positions given an out-of-range index
    with_out: bool = False         # pass out= (raise mode then checks before the gather)
    expect_key: Optional[str] = field(default=None, compare=False)  # entry that must run

    # ------------------------------------------------------------ arrays
    def axis_len(self) -> int:
        if self.axis is None:
            return math.prod(self.shape)
        return self.shape[self.axis]

    def arrays(self):
        """(data, indices) exactly as this case describes them."""
        rng = np.random.default_rng(self.seed)
        data = _make_data(rng, self.shape, self.dtype, self.layout)
        n = self.axis_len()
        idx = random_indices(rng, self.index_shape, n, self.index_dtype,
                             out_of_range=self.out_of_range)
        if self.edges and idx.size and n:
            edges = [0, n - 1, -1, -n]
            if self.out_of_range:
                edges += [n, -n - 1, 2 * n + 1, -2 * n - 3]
            flat = idx.reshape(-1)
            spots = np.linspace(0, flat.size - 1, num=min(len(edges), flat.size)).astype(int)
            for spot, value in zip(spots, edges):
                flat[spot] = value
        flat = idx.reshape(-1)
        for j, pos in enumerate(self.bad_at):
            flat[pos] = n + pos if j % 2 else -n - 1 - pos
        return data, idx

    # ------------------------------------------------------------ running
    def run(self, data=None, indices=None) -> np.ndarray:
        if data is None:
            data, indices = self.arrays()
        force = dict(self.force)
        if self.with_out:
            ax = self.axis % data.ndim
            out = runner.guarded_out(data.shape[:ax] + indices.shape + data.shape[ax + 1:],
                                     data.dtype)
            force["out"] = out
            try:
                return self._run(data, indices, force)
            except IndexError:
                if (out.view(np.uint8) != runner.POISON).any():
                    raise AssertionError("raise mode wrote out= before it raised") from None
                raise
        return self._run(data, indices, force)

    def _run(self, data, indices, force) -> np.ndarray:
        if self.api == "take":
            return runner.host_take(data, indices, self.axis, self.mode, **force)
        return runner.host_gather(data, indices, self.axis, self.mode, self.fill_value, **force)

    def expected(self, data, indices) -> np.ndarray:
        if self.api == "take":
            return np.take(data, indices, axis=self.axis, mode=self.mode)
        # gather_ref's fill mask wants a non-negative axis
        return gather_ref(data, indices, self.axis % data.ndim, self.mode, self.fill_value)

    def check(self) -> None:
        """Run on the host and compare with NumPy; AssertionError says how to replay."""
        data, indices = self.arrays()
        try:
            want = self.expected(data, indices)
        except IndexError:
            want = None
        try:
            got = self.run(data, indices)
        except IndexError as e:
            if want is not None:
                raise AssertionError(f"unexpected IndexError: {e}\n{self.describe(data, indices)}")
            self._check_position(e, indices)
            return
        except runner.HostLaunchError as e:
            raise AssertionError(f"{e}\n{self.describe(data, indices)}") from None
        if want is None:
            raise AssertionError(f"expected IndexError, got a result\n{self.describe(data, indices)}")
        assert_same(got, want, "\n" + self.describe(data, indices))
        if self.expect_key is not None:
            ran = [k.entry for k, *_ in runner.last_launches()]
            assert self.expect_key in ran, (
                f"expected {self.expect_key} to run, ran {ran}\n{self.describe(data, indices)}")

    def _check_position(self, error: IndexError, indices) -> None:
        """The error must name the first out-of-range position, as NumPy's order has it."""
        n = self.axis_len()
        if n == 0:
            return  # an empty axis is refused before any index is read
        flat = np.asarray(indices).reshape(-1).astype(np.int64)
        bad = np.flatnonzero((flat < -n) | (flat >= n))
        assert len(bad), f"IndexError without a bad index: {error}\n{self.describe(None, indices)}"
        where = list(np.unravel_index(int(bad[0]), np.shape(indices)))
        text = str(error)
        assert f"index {int(flat[bad[0]])} " in text and f"at indices{[int(w) for w in where]}" in text, (
            f"IndexError should name index {int(flat[bad[0]])} at {where}: {text}\n"
            f"{self.describe(None, indices)}")

    # ------------------------------------------------------------ reporting
    def describe(self, data=None, indices=None) -> str:
        lines = [f"case: {self!r}"]
        if data is not None:
            lines.append(f"data: shape {data.shape} strides {data.strides} dtype {data.dtype} "
                         f"address%256={data.ctypes.data % 256}")
        if indices is not None:
            idx = np.asarray(indices)
            text = np.array2string(idx.reshape(-1), threshold=64, max_line_width=200)
            lines.append(f"indices: shape {idx.shape} dtype {idx.dtype} values {text}")
        launches = runner.last_launches()
        if launches:
            lines.append("launched: " + "; ".join(
                f"{k.entry} grid {g} block {b} shared {s}" for k, g, b, s in launches))
        lines.append("replay (from the repository root): python -c \"import sys; "
                     "sys.path[:0] = ['.', 'tests']; from hostsim.cases import Case; "
                     f"{_replayable(self)}.check()\"")
        return "\n".join(lines)


def _replayable(case: Case) -> str:
    text = repr(case)
    return re.sub(r"np\.\w+\(([^()]*)\)", r"\1", text)  # plain Python literals


# ---------------------------------------------------------------- random cases
_DTYPES = ["bool", "int8", "uint8", "int16", "float16", "int32", "float32", "uint32",
           "int64", "float64", "uint64", "complex64", "complex128"]


def random_cases(seed: int, count: int):
    """``count`` varied cases: ranks 1-4, every layout, api and mode, some forced."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        ndim = int(rng.integers(1, 5))
        shape = [int(rng.integers(1, 7)) for _ in range(ndim)]
        big = int(rng.integers(0, ndim))
        shape[big] = int(rng.integers(1, 40))       # one longer axis
        if rng.random() < 0.04:
            shape[int(rng.integers(0, ndim))] = 0    # empty data
        dtype = str(rng.choice(_DTYPES))
        layout = str(rng.choice(LAYOUTS))
        api = "take" if rng.random() < 0.25 else "gather"
        axis = int(rng.integers(-ndim, ndim))
        if api == "take" and rng.random() < 0.2:
            axis = None
        modes = ["raise", "wrap", "clip"] + (["fill"] if api == "gather" else [])
        mode = str(rng.choice(modes))
        irank = int(rng.integers(0, 3))
        index_shape = tuple(int(rng.integers(0 if rng.random() < 0.05 else 1, 12))
                            for _ in range(irank))
        out_of_range = mode != "raise" or rng.random() < 0.15
        force = []
        r = rng.random()
        if r < 0.15:
            force.append(("math_name", "fast64"))
        elif r < 0.2:
            force += [("kind", "strided"), ("math_name", "div64")]
        elif r < 0.3:
            force.append(("kind", "strided"))
        if rng.random() < 0.3:
            force.append(("max_grid", int(rng.integers(1, 3))))
        rest = 1 if axis is None else math.prod(s for j, s in enumerate(shape) if j != axis % ndim)
        if rest * math.prod(index_shape) > 60000:
            index_shape = (3,)
        fill = fill_for(dtype) if mode == "fill" else 0
        yield Case(tuple(shape), dtype, axis, index_shape, str(rng.choice(["int32", "int64"])),
                   mode, api, layout, fill, out_of_range, bool(rng.random() < 0.7),
                   seed * 100003 + i, tuple(force))
