"""Differential fuzzing on a GPU: the public API on CuPy arrays -- gather, take,
GatherOp, gather_elements, take_along_axis, gather_nd -- with the data and
index views mirrored from the NumPy recipe of ``fuzzcases.cases``, host or
device indices of any integer dtype, with and without ``out=``, on the
current or a side stream.  ``CUGATHER_FUZZ_EXAMPLES`` examples (default 200).
The checks are tests/support/fuzzcheck.py's.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from support import fuzzcases
from support.fuzzcases import Case, cases
from support.fuzzcheck import (GPU_EXAMPLES, Outcome, available_ops, check, describe, fuzz_settings,
                               host_indices)

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


def _forced_twin(case: Case, data, seen, result) -> None:
    """The same gather through a variant the planner did not choose (one per case,
    cycling over the kinds that apply): byte for byte the default call's result.
    Kinds that only a tuning table chooses are reached this way too."""
    import cupy as cp

    import cugather
    from cugather.plan.gather import GATHER_KINDS
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    idx = cp.asarray(np.array(np.asarray(seen), dtype=np.int64, order="C"))  # 0-d stays 0-d
    op = cugather.GatherOp(case.axis, mode=case.mode, fill_value=case.fill_value)
    chosen = op.plan(data, idx).kind
    applicable = []
    for kind in GATHER_KINDS:
        try:
            plan = op.plan(data, idx, kind=kind)
        except ValueError:
            continue
        if kind != chosen and plan.main is not None and not plan.copy_data:
            applicable.append((kind, plan))
    if not applicable:
        return
    kind, plan = applicable[_GPU_RUNS[0] % len(applicable)]
    fill = fill_bytes(case.fill_value, data.dtype) if case.mode == "fill" else None
    got = run_plan(plan, data, idx, fill=fill)
    assert got.shape == result.shape, (kind, plan.describe())
    assert bytes(got.get().tobytes()) == bytes(result.get().tobytes()), (kind, plan.describe())
    _KINDS_SEEN[f"forced {kind}"] += 1


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
    if error is None and case.op in ("gather", "op"):
        _forced_twin(case, data, seen, result)
    return case.data(base), seen, Outcome(host_result, error, unchanged, kept)


@pytest.mark.gpu
@fuzz_settings(GPU_EXAMPLES)
@given(case=cases(ops=available_ops()), side_stream=st.booleans())
def test_gpu_fuzz(case, side_stream):
    describe(case)
    _GPU_RUNS[0] += 1
    for salt in range(2 if case.repeat else 1):  # the second call hits the cached plan
        data, seen, got = gpu_run(case, salt, side_stream)
        check(case, data, seen, got)


@pytest.mark.gpu
def test_gpu_fuzz_reached_every_kernel_kind():
    """The GPU fuzz above must have reached every gather kernel kind (planned, or forced on
    a twin of a case)."""
    if _GPU_RUNS[0] < 500:
        pytest.skip(f"needs test_gpu_fuzz to run first with >= 500 examples "
                    f"(ran {_GPU_RUNS[0]})")
    from cugather.plan.gather import GATHER_KINDS

    gather_kinds = set(GATHER_KINDS)
    print("kernel kinds planned by the fuzz:", dict(_KINDS_SEEN))
    reached = {k.replace("forced ", "") for k in _KINDS_SEEN}  # chosen or forced twins
    missing = (gather_kinds | {"empty"}) - reached
    assert not missing, f"the fuzz never planned {sorted(missing)}: {dict(_KINDS_SEEN)}"


