"""Differential fuzzing on the host: every operation through the rendered
kernels compiled by the C++ compiler and run by the library's own runtime
with the host backend (tests/hostsim/runner.py), with UBSan.
``CUGATHER_HOSTSIM_FUZZ_EXAMPLES`` examples (default 100) keep CI within its
time budget; CI replays the same examples each run unless
``CUGATHER_FUZZ_RANDOM=1``.  The checks are tests/support/fuzzcheck.py's.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given

from support import fuzzcases
from support.fuzzcases import Case, cases
from support.fuzzcheck import (HOST_DERANDOMIZE, HOST_EXAMPLES, Outcome, check, describe,
                               fuzz_settings, host_indices)
from support.reference import assert_same

from . import build, runner

pytestmark = [pytest.mark.hostsim,
              pytest.mark.skipif(build.no_compiler_reason() is not None,
                                 reason=build.no_compiler_reason() or "")]


def _host_outcome(case: Case, call) -> tuple:
    """(data, seen indices, Outcome) of ``call(data, seen)`` on host copies of the
    case's operands, with the bytes of both before and after."""
    base = runner.device_copy(case.data_base_array())  # 256-byte aligned, as on a GPU
    ibase = case.index_base_array()
    base_before, ibase_before = base.tobytes(), ibase.tobytes()
    data = case.data(base)
    _, seen = host_indices(case, ibase)
    result = error = None
    try:
        result = call(data, seen)
    except IndexError as e:  # judged by check(); anything else fails the test
        error = e
    unchanged = {"data": (base_before, base.tobytes()),
                 "indices": (ibase_before, ibase.tobytes())}
    return data, seen, Outcome(result, error, unchanged)


def host_run(case: Case) -> tuple:
    """One fuzz case through the operator it names, on the host backend."""
    def call(data, seen):
        if case.op == "take":
            return runner.host_take(data, seen, case.axis, case.mode)
        if case.op in ("gather", "op"):
            return runner.host_gather(data, seen, case.axis, case.mode, case.fill_value)
        if case.op == "elements":
            return runner.host_elements(data, seen, case.axis, case.mode, case.fill_value)[0]
        if case.op == "along":
            a, axis = (data.reshape(-1), 0) if case.flat() else (data, case.axis)
            return runner.host_elements(a, seen, axis, "raise", 0, broadcast=True)[0]
        return runner.host_nd(data, seen, case.axis, case.mode, case.fill_value)[0]
    return _host_outcome(case, call)


@fuzz_settings(HOST_EXAMPLES, HOST_DERANDOMIZE)
@given(case=cases(ops=fuzzcases.TAKE_OPS, index_sources=("numpy",), with_out=False))
def test_host_fuzz_gather_take(case):
    describe(case)
    data, seen, got = host_run(case)
    check(case, data, seen, got)


@fuzz_settings(HOST_EXAMPLES, HOST_DERANDOMIZE)
@given(case=cases(ops=fuzzcases.ELEMENTS_ND_OPS, index_sources=("numpy",), with_out=False))
def test_host_fuzz_elements_nd(case):
    describe(case)
    data, seen, got = host_run(case)
    check(case, data, seen, got)


# ---------------------------------------------------------------- found by the fuzz
_I64_MAX = np.iinfo(np.int64).max


def _fill_mode_extreme_index_case(kind):
    """A fill-mode call whose out-of-range index times the axis stride passes 2^63."""
    rng = np.random.default_rng(5)
    if kind == "scalar":  # one element per row, few indices
        data = runner.device_copy(rng.standard_normal((2, 50)).astype(np.float32))
        return ("gather", data, np.array([_I64_MAX - 3, 7], np.int64), 1)
    if kind == "strided":  # gathering rows of a transposed array
        base = runner.device_copy(rng.standard_normal((50, 2)).astype(np.float32))
        return ("gather", base.T, np.array([1 << 62, 1], np.int64), 0)
    if kind == "elements":
        data = runner.device_copy(rng.standard_normal((6, 5)).astype(np.float32))
        idx = np.full((4, 5), 2, np.int64)
        idx[1, 3] = _I64_MAX - 1
        return ("elements", data, idx, 0)
    data = runner.device_copy(rng.standard_normal((5, 6, 3)).astype(np.float32))
    return ("nd", data, np.array([[_I64_MAX - 2, 0], [1, 2]], np.int64), 0)


def run_extreme_index_case(kind: str) -> None:
    """Run :func:`_fill_mode_extreme_index_case` on the host and compare with NumPy."""
    import cugather

    op, data, idx, axis = _fill_mode_extreme_index_case(kind)
    if op == "gather":
        assert cugather.GatherOp(axis, mode="fill").plan(data, idx, kind=kind).kind == kind
        got = runner.host_gather(data, idx, axis, "fill", -1.0, kind=kind)
        want = fuzzcases.gather_ref(data, idx, axis, "fill", -1.0)
    elif op == "elements":
        got, _ = runner.host_elements(data, idx, axis, "fill", -1.0)
        want = fuzzcases.elements_ref(data, idx, axis, "fill", -1.0)
    else:
        got, _ = runner.host_nd(data, idx, axis, "fill", -1.0)
        want = fuzzcases.nd_ref(data, idx, axis, "fill", -1.0)
    assert_same(got, want)


@pytest.mark.parametrize("kind", ["scalar", "strided", "elements", "nd"])
def test_fill_mode_extreme_index_has_no_undefined_behaviour(kind):
    """Each case in a fresh process: UBSan reports a source location once per process."""
    import subprocess
    import sys

    if not build.ubsan_enabled():
        pytest.skip("the host tier runs without UBSan (CUGATHER_HOSTSIM_UBSAN=0)")
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import sys; sys.path[:0] = [{os.path.dirname(tests)!r}, {tests!r}]; "
            f"from hostsim import test_fuzz_host; "
            f"test_fuzz_host.run_extreme_index_case({kind!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
