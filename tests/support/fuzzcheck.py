"""Checking fuzz outcomes: settings, the NumPy and ONNX references, what a
backend did with a case.  Shared by tests/gpu/test_fuzz_gpu.py and
tests/hostsim/test_fuzz_host.py (see their docstrings for the backends).

Every result must equal the NumPy reference byte for byte, and ONNX's
reference evaluator where its operator applies (all indices in range).  Where
the reference raises IndexError the call must raise IndexError naming the
first bad value and its position, and the inputs and the whole ``out``
buffer must be byte-for-byte unchanged.  On success the bytes around ``out``
stay unchanged.  ``CUGATHER_FUZZ_SHRINK=0`` skips shrinking (long runs).
"""

from __future__ import annotations

import os
import re

import numpy as np
from hypothesis import HealthCheck, Phase, event, settings

from . import fuzzcases
from .fuzzcases import Case
from .reference import assert_same

GPU_EXAMPLES = int(os.environ.get("CUGATHER_FUZZ_EXAMPLES", "200"))
HOST_EXAMPLES = int(os.environ.get("CUGATHER_HOSTSIM_FUZZ_EXAMPLES", "100"))
_PHASES = tuple(p for p in Phase if os.environ.get("CUGATHER_FUZZ_SHRINK", "1") != "0"
                or p is not Phase.shrink)

_API = {"elements": "gather_elements", "along": "take_along_axis", "nd": "gather_nd"}


def available_ops() -> tuple:
    """The fuzzed operations this version of cugather offers."""
    import cugather

    return tuple(op for op in fuzzcases.OPS if op not in _API or hasattr(cugather, _API[op]))


def fuzz_settings(n, derandomize=False):
    return settings(max_examples=n, deadline=None, phases=_PHASES, print_blob=True,
                    derandomize=derandomize, suppress_health_check=list(HealthCheck))


# CI replays the same host-tier examples on every run (CUGATHER_FUZZ_RANDOM=1
# draws new ones); the long GPU runs pass --hypothesis-seed instead.
HOST_DERANDOMIZE = os.environ.get("CUGATHER_FUZZ_RANDOM", "0") != "1"


# ---------------------------------------------------------------- ONNX reference
_onnx_evaluators: dict = {}


def onnx_reference(case: Case, data: np.ndarray, indices: np.ndarray):
    """ONNX's reference evaluator for the case's node, or None where it does not apply."""
    idx = np.asarray(indices)
    if case.op in ("gather", "op"):
        node = ("Gather", "axis", case.axis)
    elif case.op == "elements":
        axis = case.axis % data.ndim
        if any(k != n for d, (k, n) in enumerate(zip(idx.shape, data.shape)) if d != axis):
            return None  # ONNX's evaluator wants equal shapes off the axis
        if data.shape[axis] > 64:
            return None  # its numpy.choose takes at most 64 choices
        node = ("GatherElements", "axis", axis)  # its shape check mishandles axis < 0
    elif case.op == "nd":
        if not idx.size or not data.size:
            return None  # its reshape(..., -1, ...) fails on empty arrays
        node = ("GatherND", "batch_dims", case.axis)
    else:
        return None
    ev = _onnx_evaluators.get(node)
    if ev is None:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        ev = ReferenceEvaluator(helper.make_node(node[0], ["data", "indices"], ["out"],
                                                 **{node[1]: node[2]}))
        _onnx_evaluators[node] = ev
    if idx.dtype not in (np.int32, np.int64):
        idx = idx.astype(np.int64)
    (out,) = ev.run(None, {"data": np.ascontiguousarray(data), "indices": idx})
    return out


# ---------------------------------------------------------------- checking
class Outcome:
    """What a backend did with one case."""

    def __init__(self, result=None, error=None, unchanged=None, out_kept=True):
        self.result = result              # NumPy copy of the result
        self.error = error                # the exception raised, if any
        self.unchanged = unchanged or {}  # name -> (bytes before, bytes after)
        self.out_kept = out_kept          # the result is out= (or on data's device)


def host_indices(case: Case, index_base: np.ndarray):
    """The indices as the call gets them (view, list or int), and as NumPy sees them."""
    view = case.indices(index_base)
    if case.index_source == "list":
        given = view.tolist()
        seen = np.asarray(given)
        if seen.size == 0:
            seen = seen.astype(np.int64)  # [] is float64 to NumPy
        return given, seen
    if case.index_source == "int":
        return int(view), np.asarray(view)
    return view, view


def check(case: Case, data: np.ndarray, indices_seen: np.ndarray, got: Outcome,
          use_onnx: bool = True, check_message: bool = True) -> None:
    expected = case.expected(data, indices_seen)
    for name, (before, after) in got.unchanged.items():
        assert before == after, f"{name} changed by the call"
    if expected is IndexError:
        assert isinstance(got.error, IndexError), (
            f"expected IndexError, got {got.error!r} / result {got.result!r}")
        bad = case.first_bad(indices_seen)
        if check_message and bad is not None and all(case.bounds()):
            value, pos = bad
            msg = str(got.error)
            assert re.search(rf"(?<![\d-]){value}(?!\d)", msg), f"{msg!r} does not name {value}"
            assert f"indices{list(pos)}" in msg, f"{msg!r} does not name position {list(pos)}"
        event("raised IndexError")
        return
    if got.error is not None:
        raise AssertionError(f"unexpected {type(got.error).__name__}: {got.error}") from got.error
    assert got.out_kept, "the result is not the out= array (or not on data's device)"
    assert_same(got.result, expected, "vs NumPy")
    if use_onnx and case.in_range(indices_seen):
        ref = onnx_reference(case, data, indices_seen)
        if ref is not None:
            assert_same(got.result, ref, "vs ONNX reference evaluator")
            event("checked against ONNX")


def describe(case: Case) -> None:
    event(f"op={case.op} mode={case.mode}")
    event(f"values={case.values}")
    event(f"index dtype={case.index_dtype} source={case.index_source}")
    event("out=" if case.out_offset is not None else "no out=")
    event("data view" if not case.data_view.trivial else "data contiguous")


