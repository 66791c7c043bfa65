"""Differential fuzzing: the gather family against NumPy and ONNX's reference evaluator.

One strategy (``fuzzcases.cases``) feeds two backends:

* GPU (marker ``gpu``): the public API on CuPy arrays -- gather, take,
  GatherOp, gather_elements, take_along_axis, gather_nd -- with the data and
  index views mirrored from the NumPy recipe, host or device indices of any
  integer dtype, with and without ``out=``, on the current or a side stream.
  ``CUGATHER_FUZZ_EXAMPLES`` examples (default 200).
* host execution (marker ``hostsim``): every operation through the rendered
  kernels compiled by the C++ compiler (``tests/hostsim``), with UBSan.
  ``CUGATHER_HOSTSIM_FUZZ_EXAMPLES`` examples (default 100) keep CI within
  its time budget; CI replays the same examples each run unless
  ``CUGATHER_FUZZ_RANDOM=1``.

Every result must equal the NumPy reference byte for byte, and ONNX's
reference evaluator where its operator applies (all indices in range).  Where
the reference raises IndexError the call must raise IndexError naming the
first bad value and its position, and the inputs and the whole ``out``
buffer must be byte-for-byte unchanged.  On success the bytes around ``out``
stay unchanged.  ``CUGATHER_FUZZ_SHRINK=0`` skips shrinking (long runs).
"""

from __future__ import annotations

import collections
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import fuzzcases
from fuzzcases import Case, cases
from reference import assert_same

GPU_EXAMPLES = int(os.environ.get("CUGATHER_FUZZ_EXAMPLES", "200"))
HOST_EXAMPLES = int(os.environ.get("CUGATHER_HOSTSIM_FUZZ_EXAMPLES", "100"))
_PHASES = tuple(p for p in Phase if os.environ.get("CUGATHER_FUZZ_SHRINK", "1") != "0"
                or p is not Phase.shrink)

_API = {"elements": "gather_elements", "along": "take_along_axis", "nd": "gather_nd"}


def available_ops() -> tuple:
    """The fuzzed operations this version of cugather offers."""
    import cugather

    return tuple(op for op in fuzzcases.OPS if op not in _API or hasattr(cugather, _API[op]))


def _settings(n, derandomize=False):
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


# ---------------------------------------------------------------- GPU backend
_KINDS_SEEN: collections.Counter = collections.Counter()
_GPU_RUNS = [0]


class _NoStream:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _record_kind(case: Case, data) -> None:
    """Count the kernel kind cugather plans for a gather/take case (coverage report)."""
    if case.op not in fuzzcases.TAKE_OPS:
        return
    import cugather

    try:
        if case.flat():
            data, axis = data.reshape(-1), 0
        else:
            axis = case.axis
        plan = cugather.GatherOp(axis, mode=case.mode).plan(data, (case.index_shape(), "int64"))
        _KINDS_SEEN[plan.kind] += 1
    except Exception as e:  # the call itself reports real errors
        _KINDS_SEEN[f"plan raised {type(e).__name__}"] += 1


def gpu_call(case: Case, data, indices, out, stream, current):
    """The call, with ``stream=`` or, when ``current``, with ``stream`` made current."""
    if current and stream is not None:
        with stream:
            return gpu_call(case, data, indices, out, None, False)
    import cugather

    fill = case.fill_value
    if case.op == "gather":
        return cugather.gather(data, indices, case.axis, out=out, mode=case.mode,
                               fill_value=fill, stream=stream)
    if case.op == "op":
        op = cugather.GatherOp(case.axis, mode=case.mode, fill_value=fill)
        return op(data, indices, out=out, stream=stream)
    if case.op == "elements":
        return cugather.gather_elements(data, indices, case.axis, out=out, mode=case.mode,
                                        fill_value=fill, stream=stream)
    if case.op == "nd":
        return cugather.gather_nd(data, indices, case.axis, out=out, mode=case.mode,
                                  fill_value=fill, stream=stream)
    with stream if stream is not None else _NoStream():  # the current stream
        if case.op == "take":
            return cugather.take(data, indices, axis=case.axis, out=out, mode=case.mode)
        return cugather.take_along_axis(data, indices, axis=case.axis)


def gpu_run(case: Case, salt: int, side_stream: bool) -> tuple:
    import cupy as cp

    base = case.data_base_array(salt)
    ibase = case.index_base_array(salt)
    d_base = cp.asarray(base)
    data = case.data(d_base)
    given, seen = host_indices(case, ibase)
    d_ibase = None
    if case.index_source == "device":
        d_ibase = cp.asarray(ibase)
        given = case.indices(d_ibase)

    item = np.dtype(case.dtype).itemsize
    out_shape = case.out_shape(case.data(base), seen)
    size = math.prod(out_shape)
    out = outbuf = None
    if case.out_offset is not None:
        raw = case.rng(100 + salt).integers(0, 256, size=(size + case.out_offset + 3) * item,
                                            dtype=np.uint8)
        outbuf = cp.asarray(raw).view(case.dtype)
        out = outbuf[case.out_offset:case.out_offset + size].reshape(out_shape)
    before_out = outbuf.get().tobytes() if outbuf is not None else None

    stream = cp.cuda.Stream(non_blocking=True) if side_stream else None
    cp.cuda.Device().synchronize()  # the uploads are done before a side stream starts
    # Indices that need converting go through stream-as-current: test_streams.py
    # covers conversions under stream= on their own.
    converted = not (case.index_source == "device" and case.index_dtype in ("int32", "int64")
                     and given.flags.c_contiguous)
    event(("side stream made current" if converted else "side stream as stream=")
          if stream is not None else "current stream")
    result = error = None
    try:
        result = gpu_call(case, data, given, out, stream, current=converted)
    except Exception as e:  # judged by check()
        error = e
    if stream is not None:
        stream.synchronize()
    unchanged = {
        "data": (base.tobytes(), d_base.get().tobytes()),
        "indices": (ibase.tobytes(),
                    (d_ibase.get() if d_ibase is not None else ibase).tobytes()),
    }
    if outbuf is not None:
        after_out = outbuf.get().tobytes()
        if error is not None:
            unchanged["out buffer"] = (before_out, after_out)
        else:
            lo, hi = case.out_offset * item, (case.out_offset + size) * item
            unchanged["bytes around out"] = (before_out[:lo] + before_out[hi:],
                                             after_out[:lo] + after_out[hi:])
    kept = True
    if error is None:
        kept = (result is out) if out is not None else (
            isinstance(result, cp.ndarray) and result.data.device_id == d_base.data.device_id)
    host_result = result.get() if isinstance(result, cp.ndarray) else result
    _record_kind(case, data)
    return case.data(base), seen, Outcome(host_result, error, unchanged, kept)


@pytest.mark.gpu
@_settings(GPU_EXAMPLES)
@given(case=cases(ops=available_ops()), side_stream=st.booleans())
def test_gpu_fuzz(case, side_stream):
    describe(case)
    _GPU_RUNS[0] += 1
    for salt in range(2 if case.repeat else 1):  # the second call hits the cached plan
        data, seen, got = gpu_run(case, salt, side_stream)
        check(case, data, seen, got)


@pytest.mark.gpu
def test_gpu_fuzz_reached_every_kernel_kind():
    """The GPU fuzz above must have planned every gather kernel kind."""
    if _GPU_RUNS[0] < 500:
        pytest.skip(f"needs test_gpu_fuzz to run first with >= 500 examples "
                    f"(ran {_GPU_RUNS[0]})")
    from cugather.compile.render import KIND_SPECS

    gather_kinds = {k for k, spec in KIND_SPECS.items()
                    if spec.args_type in ("GatherArgs", "ElemArgs")}
    print("kernel kinds planned by the fuzz:", dict(_KINDS_SEEN))
    missing = (gather_kinds | {"empty"}) - set(_KINDS_SEEN)
    assert not missing, f"the fuzz never planned {sorted(missing)}: {dict(_KINDS_SEEN)}"


# ---------------------------------------------------------------- host-execution backend
def _hostsim_runner():
    try:
        from hostsim import build, runner  # tests/hostsim
    except ImportError as e:
        pytest.skip(f"host-execution tier unavailable: {e}")
    reason = build.no_compiler_reason()
    if reason is not None:
        pytest.skip(reason)
    return runner


def _host_outcome(runner, case: Case, call) -> tuple:
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


def hostsim_run(runner, case: Case) -> tuple:
    def call(data, seen):
        if case.op == "take":
            return runner.host_take(data, seen, case.axis, case.mode)
        return runner.host_gather(data, seen, case.axis, case.mode, case.fill_value)
    return _host_outcome(runner, case, call)


@pytest.mark.hostsim
@_settings(HOST_EXAMPLES, HOST_DERANDOMIZE)
@given(case=cases(ops=fuzzcases.TAKE_OPS, index_sources=("numpy",), with_out=False))
def test_hostsim_fuzz(case):
    runner = _hostsim_runner()
    describe(case)
    data, seen, got = hostsim_run(runner, case)
    check(case, data, seen, got)


def _hostsim_family():
    _hostsim_runner()  # skips when the host tier cannot run
    try:
        from hostsim import test_family_host as family  # host launches of the family's plans
    except ImportError as e:
        pytest.skip(f"host execution of gather_elements / gather_nd unavailable: {e}")
    return family


def hostsim_family_run(family, case: Case) -> tuple:
    from hostsim import runner

    def call(data, seen):
        if case.op == "elements":
            return family.host_elements(data, seen, case.axis, case.mode, case.fill_value)[0]
        if case.op == "along":
            a, axis = (data.reshape(-1), 0) if case.flat() else (data, case.axis)
            return family.host_elements(a, seen, axis, "raise", 0, broadcast=True)[0]
        return family.host_nd(data, seen, case.axis, case.mode, case.fill_value)[0]
    return _host_outcome(runner, case, call)


@pytest.mark.hostsim
@_settings(HOST_EXAMPLES, HOST_DERANDOMIZE)
@given(case=cases(ops=fuzzcases.FAMILY_OPS, index_sources=("numpy",), with_out=False))
def test_hostsim_fuzz_family(case):
    family = _hostsim_family()
    describe(case)
    data, seen, got = hostsim_family_run(family, case)
    check(case, data, seen, got)


# ---------------------------------------------------------------- found by the fuzz
_I64_MAX = np.iinfo(np.int64).max


def _fill_mode_extreme_index_case(kind):
    """A fill-mode call whose out-of-range index times the axis stride passes 2^63."""
    from hostsim import runner

    rng = np.random.default_rng(5)
    if kind == "scalar":  # one element per row, few indices
        data = runner.device_copy(rng.standard_normal((2, 50)).astype(np.float32))
        return ("gather", data, np.array([_I64_MAX - 3, 7], np.int64), 1)
    if kind == "elem":  # gathering rows of a transposed array: the strided kernel
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
    from hostsim import runner

    op, data, idx, axis = _fill_mode_extreme_index_case(kind)
    if op == "gather":
        import cugather

        assert cugather.GatherOp(axis, mode="fill").plan(data, idx).kind == kind
        got = runner.host_gather(data, idx, axis, "fill", -1.0)
        want = fuzzcases.gather_ref(data, idx, axis, "fill", -1.0)
    elif op == "elements":
        got, _ = _hostsim_family().host_elements(data, idx, axis, "fill", -1.0)
        want = fuzzcases.elements_ref(data, idx, axis, "fill", -1.0)
    else:
        got, _ = _hostsim_family().host_nd(data, idx, axis, "fill", -1.0)
        want = fuzzcases.nd_ref(data, idx, axis, "fill", -1.0)
    assert_same(got, want)


@pytest.mark.hostsim
@pytest.mark.parametrize("kind", ["scalar", "elem", "elements", "nd"])
def test_hostsim_fill_mode_extreme_index_has_no_undefined_behaviour(kind):
    """Each case in a fresh process: UBSan reports a source location once per process."""
    import subprocess
    import sys

    from hostsim import build

    _hostsim_runner()
    if not build.ubsan_enabled():
        pytest.skip("the host tier runs without UBSan (CUGATHER_HOSTSIM_UBSAN=0)")
    tests = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path[:0] = [{os.path.dirname(tests)!r}, {tests!r}]; "
            f"import test_fuzz; test_fuzz.run_extreme_index_case({kind!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
