"""Pure parts of cugather.distributed: sharded-kernel plans, offsets, transport rules,
shard records, and that importing needs no GPU."""

import json
import subprocess
import time
import sys

import numpy as np
import pytest

from cugather.distributed import shards
from cugather.distributed.plan import MAX_RANKS, plan_sharded, row_offsets
from cugather.distributed.transport import Facts, choose_rounds, choose_transport
from cugather.plan.core import DeviceLimits
from cugather.plan.layout import ARGS_DTYPES, new_args


def test_row_offsets():
    assert row_offsets([3, 0, 5]) == [0, 3, 3, 8]
    assert row_offsets([]) == [0]
    with pytest.raises(ValueError, match="shard 1 has a negative row count"):
        row_offsets([2, -1])


@pytest.mark.parametrize("row_bytes,aligns,out_align,unit", [
    (512, (256, 256), 256, 16), (512, (256, 8), 256, 8), (24, (256,), 256, 8),
    (6, (256, 256), 256, 2), (3, (256,), 256, 1), (512, (256,), 4, 4),
])
def test_unit_divides_row_bytes_every_base_and_the_output(row_bytes, aligns, out_align, unit):
    plan = plan_sharded((row_bytes,), 1, row_offsets([10] * len(aligns)), (100,), "int64",
                        "wrap", base_aligns=aligns, out_align=out_align)
    assert plan.key.unit == unit and plan.key.kind == "sharded"
    assert plan.fields["units"] * unit == row_bytes


def test_grid_covers_rows_and_long_rows_split_into_chunks():
    lim = DeviceLimits(sm_count=132)
    short = plan_sharded((128,), 4, [0, 50, 100], (1000,), "int32", "fill", limits=lim)
    tx, ty, _ = short.block
    assert tx * ty <= 256 and short.fields["units"] == 32 and tx == 32
    assert short.grid[0] * ty * short.fields["row_unroll"] >= 1000
    big = plan_sharded((2048,), 4, [0, 50, 100], (10,), "int64", "raise", limits=lim)
    assert big.block == (256, 1, 1) and big.grid[1] == 2  # 512 units of 16 B: 2 chunks
    assert big.check_key is not None and big.check_key.kind == "check"
    args = new_args("ShardedArgs", **big.fields)
    assert int(args["total"][0]) == 100 and list(args["offsets"][0][:4]) == [0, 50, 100, 100]


def test_empty_outputs_and_shard_limits():
    assert plan_sharded((4,), 4, [0, 3], (0,), "int64", "wrap").key is None
    assert plan_sharded((0,), 4, [0, 3], (5,), "int64", "raise").key is None
    assert plan_sharded((0,), 4, [0, 3], (5,), "int64", "raise").check_key is not None
    plan_sharded((4,), 4, row_offsets([1] * MAX_RANKS), (5,), "int64", "wrap")
    with pytest.raises(ValueError, match=f"1 to {MAX_RANKS} shards"):
        plan_sharded((4,), 4, row_offsets([1] * (MAX_RANKS + 1)), (5,), "int64", "wrap")
    with pytest.raises(ValueError, match="never decrease"):
        plan_sharded((4,), 4, [0, 5, 3], (5,), "int64", "wrap")


def test_argument_block_fits_the_kernel_parameter_limit():
    assert ARGS_DTYPES["ShardedArgs"].itemsize <= 4096


def test_transport_rule():
    assert choose_transport(Facts(2, True, True, True))[0] == "p2p"
    assert choose_transport(Facts(2, False, False, True, "rank 1 runs on another host"))[0] == "nccl"
    assert choose_transport(Facts(MAX_RANKS + 1, True, True, True))[0] == "nccl"
    with pytest.raises(RuntimeError, match="no transport"):
        choose_transport(Facts(2, False, False, False, "x"))


def test_rounds_rule():
    assert choose_rounds(0) == 1
    assert choose_rounds(4096 * 512) == 1
    assert choose_rounds((1 << 20) * 512) == 8
    assert choose_rounds(48 << 20) == 2


def _record(**changes):
    rec = {"v": 1, "rows": 4, "row_shape": [3], "dtype": "<f4", "device": 0, "bus": "0:1",
           "host": "h", "nccl": True, "error": None, "ipc": None, "ptr": 0, "why": ""}
    rec.update(changes)
    return json.dumps(rec).encode()


def test_shard_records_are_checked():
    assert shards.parse(_record(), 0)["dtype"] == np.float32
    for bad in (b"not json", _record(rows=-1), _record(nccl=1), _record(v=2),
                _record(row_shape=[2, "x"]), _record(device=True)):
        with pytest.raises(ValueError, match="rank 3"):
            shards.parse(bad, 3)
    a, b = shards.parse(_record(), 0), shards.parse(_record(row_shape=[4]), 1)
    with pytest.raises(ValueError, match="same row shape and dtype.*rank 1"):
        shards.check_records([a, b])
    with pytest.raises(ValueError, match="rank 1 rejected its local_rows: boom"):
        shards.check_records([a, shards.parse(_record(error="boom"), 1)])


def test_import_needs_no_gpu_or_nccl():
    code = ("import sys, cugather, cugather.distributed as d; "
            "assert 'cupy' not in sys.modules, 'cupy imported'; "
            "d.ShardedTable; d.init; d.PeerGather; d.MAX_RANKS; "
            "assert 'cupy.cuda.nccl' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


class _Event:
    def __init__(self, after):
        self.t = time.monotonic() + after

    @property
    def done(self):
        return time.monotonic() >= self.t


def test_waits_on_the_gpu_are_bounded_and_cancellable():
    from cugather.distributed.comm import wait_event

    wait_event(_Event(0.05), 5, "quick")
    aborted = []
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 0.2 s"):
        wait_event(_Event(60), 0.2, "stuck", lambda: aborted.append(1))
    assert aborted == [1] and time.monotonic() - start < 5
    with pytest.raises(TimeoutError, match="cancelled"):
        wait_event(_Event(60), 30, "other rank failed", None, lambda: True)
