"""The NCCL transport's logic on 1-16 ranks, through an in-process fake communicator.

``exchange_gather`` -- the function the GPU path runs -- runs here with NumPy
arrays (``NumpyBackend``) and ``tests/support/distributed_fake.py``'s communicator,
one thread per rank: bucketing by owner, the count all-gather, the row-id
and row exchanges (checked pair by pair against NCCL's matching rules),
rounds, and the write-back into the caller's order.  Every result is
compared byte for byte with ``reference.gather_ref`` / ``numpy.take`` over
the whole table.
"""

import numpy as np
import pytest

from cugather.distributed.exchange import (ROUNDS, NumpyBackend, ShardedIndexError,
                                           exchange_gather, report_failure)
from cugather.distributed.plan import row_offsets
from support.distributed_fake import DeferredBackend, FakeWorld, ProtocolError, run_ranks
from support.reference import assert_same, gather_ref, random_data

KERNEL_MODES = ["raise", "wrap", "clip", "clip_numpy", "fill"]


def _shard_sizes(rng, size, total_hint):
    """Uneven sizes, some empty (never all of them unless asked)."""
    sizes = rng.integers(0, 2 * total_hint // size + 2, size=size)
    sizes[rng.random(size) < 0.25] = 0
    return [int(s) for s in sizes]


def _reference(full, idx, mode, fill):
    if mode == "clip_numpy":
        return np.take(full, idx, axis=0, mode="clip")
    return gather_ref(full, idx, 0, mode, fill)


def _run(full, sizes, indices, mode, *, fill=0, rounds=0, choose=None, world=None,
         out_value=None, backend=NumpyBackend):
    """exchange_gather on every rank; [(status, result or exception)] and the outs."""
    size = len(sizes)
    offsets = row_offsets(sizes)
    shards = [np.ascontiguousarray(full[offsets[q]:offsets[q + 1]]) for q in range(size)]
    world = world or FakeWorld(size, timeout=10)
    outs = []
    for idx in indices:
        out = np.empty(idx.shape + full.shape[1:], full.dtype)
        if out_value is not None:
            out.view(np.uint8)[...] = out_value
        outs.append(out)

    def rank(q):
        return exchange_gather(backend(), world.comm(q), shards[q], offsets, indices[q],
                               outs[q], mode=mode, fill_value=fill, rounds=rounds,
                               choose_rounds=choose)

    return run_ranks(size, rank, timeout=60), outs, world


def _check(results, full, indices, mode, fill):
    for q, (status, got) in enumerate(results):
        if status == "error":
            raise AssertionError(f"rank {q} raised {got!r}") from got
        assert_same(got, _reference(full, indices[q], mode, fill), f"(rank {q}, mode {mode})")


CASES = [  # (ranks, rows per rank, row shape, dtype)
    (1, 9, (3,), "float32"),
    (2, 7, (), "int64"),
    (2, 5, (4, 3), "float16"),
    (3, 11, (5,), "bool"),
    (4, 6, (2,), "complex128"),
    (5, 3, (7,), "int8"),
    (7, 9, (1,), "uint16"),
    (8, 4, (3, 2), "float64"),
    (16, 5, (2,), "int32"),
]


@pytest.mark.parametrize("mode", KERNEL_MODES)
@pytest.mark.parametrize("ranks,rows,row_shape,dtype", CASES)
def test_matches_numpy_over_uneven_and_empty_shards(ranks, rows, row_shape, dtype, mode):
    rng = np.random.default_rng([ranks, rows, KERNEL_MODES.index(mode)])
    sizes = _shard_sizes(rng, ranks, rows * ranks)
    if not sum(sizes):
        sizes[-1] = 3
    total = sum(sizes)
    full = random_data(rng, (total,) + row_shape, dtype)
    lo, hi = (-total, total) if mode == "raise" else (-3 * total - 2, 3 * total + 2)
    indices = []
    for q in range(ranks):
        shape = [(rng.integers(0, 40),), (), (0,), (3, 4)][(q + rows) % 4]
        idx = rng.integers(lo, hi, size=shape).astype(["int32", "int64"][q % 2])
        if idx.size > 2:
            idx.reshape(-1)[1] = idx.reshape(-1)[0]  # a duplicate
        indices.append(idx)
    fill = random_data(rng, (), dtype)[()] if mode == "fill" else 0
    results, _, world = _run(full, sizes, indices, mode, fill=fill)
    _check(results, full, indices, mode, fill)
    assert world.zero_size == 0, "a zero-size message was posted"


@pytest.mark.parametrize("rounds", (0,) + ROUNDS)
def test_rounds_split_the_exchange_without_changing_the_result(rounds):
    rng = np.random.default_rng(rounds)
    sizes = [13, 0, 29, 8]
    full = random_data(rng, (sum(sizes), 6), "float32")
    indices = [rng.integers(-50, 50, size=n).astype(np.int64) for n in (300, 1, 0, 77)]
    # choose_rounds is only asked when rounds=0; pretend every request is big.
    results, _, world = _run(full, sizes, indices, "wrap", rounds=rounds, choose=lambda b: 8)
    _check(results, full, indices, "wrap", 0)
    expected_groups = 1 + (rounds or 8)  # row ids, then one group per round
    assert world.groups == expected_groups
    assert world.allgathers == 1  # the only host synchronisation


@pytest.mark.parametrize("rounds", ROUNDS)
def test_received_rows_are_read_only_after_their_round_arrives(rounds):
    """Receives land late (as on a second stream): reading early would read poison."""
    rng = np.random.default_rng(10 + rounds)
    sizes = [17, 23, 0, 11]
    full = random_data(rng, (sum(sizes), 5), "int16")
    indices = [rng.integers(-51, 51, size=n) for n in (400, 250, 3, 0)]
    results, _, _ = _run(full, sizes, indices, "fill", fill=-9, rounds=rounds,
                         backend=DeferredBackend)
    _check(results, full, indices, "fill", -9)


def test_every_row_owned_by_one_rank():
    rng = np.random.default_rng(3)
    sizes = [0, 0, 50, 0]
    full = random_data(rng, (50, 8), "uint8")
    indices = [rng.integers(0, 50, size=200) for _ in sizes]
    results, _, _ = _run(full, sizes, indices, "raise")
    _check(results, full, indices, "raise", 0)


def test_skewed_indices_zipf_like():
    rng = np.random.default_rng(4)
    sizes = [40, 25, 35]
    full = random_data(rng, (100, 4), "int32")
    indices = [np.minimum(rng.zipf(1.3, size=500) - 1, 99) for _ in sizes]
    results, _, _ = _run(full, sizes, indices, "wrap")
    _check(results, full, indices, "wrap", 0)


@pytest.mark.parametrize("bad_ranks", [(0,), (2,), (1, 3), (0, 1, 2, 3)])
def test_raise_mode_every_rank_raises_the_same_error_before_rows_move(bad_ranks):
    rng = np.random.default_rng(len(bad_ranks))
    sizes = [5, 0, 9, 6]
    total = sum(sizes)
    full = random_data(rng, (total, 3), "float32")
    indices = [rng.integers(-total, total, size=30) for _ in sizes]
    for q in bad_ranks:
        indices[q][7 + q] = total + q      # the first bad one of rank q
        indices[q][20] = -total - 1
    results, outs, world = _run(full, sizes, indices, "raise", out_value=0xA5)
    errors = [value for status, value in results]
    assert all(isinstance(e, ShardedIndexError) for e in errors), errors
    first = min(bad_ranks)
    assert len({str(e) for e in errors}) == 1, [str(e) for e in errors]
    e = errors[0]
    assert (e.rank, e.position, e.value, e.size) == (first, 7 + first, total + first, total)
    assert f"rank {first}" in str(e) and f"[{-total}, {total - 1}]" in str(e)
    assert world.groups == 0, "rows moved before the error"
    assert all((o.view(np.uint8) == 0xA5).all() for o in outs), "out was written"


def test_indices_into_an_empty_table():
    full = np.zeros((0, 2), np.float32)
    indices = [np.array([0, 5]), np.array([], np.int64)]
    results, _, _ = _run(full, [0, 0], indices, "wrap")
    assert all(status == "error" and isinstance(e, IndexError) for status, e in results)
    results, _, _ = _run(full, [0, 0], indices, "fill", fill=2.5)
    _check(results, full, indices, "fill", 2.5)


def test_rows_of_zero_bytes_move_nothing():
    full = np.zeros((6, 0), np.int16)
    indices = [np.array([1, -1, 5]), np.array([0])]
    results, _, world = _run(full, [2, 4], indices, "raise")
    _check(results, full, indices, "raise", 0)
    assert world.groups == 0


def test_ranks_asking_for_different_rounds_all_raise():
    world = FakeWorld(2, timeout=10)
    full = np.arange(8, dtype=np.int32)
    shards = [full[:3], full[3:]]

    def rank(q):
        return exchange_gather(NumpyBackend(), world.comm(q), shards[q], [0, 3, 8],
                               np.array([1, 6]), np.empty(2, np.int32), mode="wrap",
                               rounds=[1, 2][q])

    results = run_ranks(2, rank)
    assert all(s == "error" and isinstance(e, ValueError) and "same rounds" in str(e)
               for s, e in results)


def test_a_rank_that_cannot_start_makes_the_others_raise_not_wait():
    world = FakeWorld(3, timeout=10)
    full = np.arange(12, dtype=np.int64)
    offsets = [0, 4, 8, 12]

    def rank(q):
        if q == 1:
            report_failure(NumpyBackend(), world.comm(q))
            raise TypeError("indices must be integers")
        return exchange_gather(NumpyBackend(), world.comm(q), full[offsets[q]:offsets[q + 1]],
                               offsets, np.array([3, 9]), np.empty(2, np.int64), mode="wrap")

    results = run_ranks(3, rank, timeout=20)
    assert isinstance(results[1][1], TypeError)
    for q in (0, 2):
        assert results[q][0] == "error" and "rank 1 could not start" in str(results[q][1])


def test_a_rank_that_never_calls_fails_the_others_with_a_timeout():
    world = FakeWorld(2, timeout=0.5)
    full = np.arange(4, dtype=np.int64)

    def rank(q):
        if q == 1:
            return None  # skipped the collective call
        return exchange_gather(NumpyBackend(), world.comm(0), full[:2], [0, 2, 4],
                               np.array([3]), np.empty(1, np.int64), mode="wrap")

    results = run_ranks(2, rank, timeout=10)
    assert results[0][0] == "error" and isinstance(results[0][1], TimeoutError)


def test_the_fake_rejects_unmatched_and_one_sided_messages():
    """The matching check can fail: a send nobody receives, a one-sided zero-size send."""
    for sends1 in ([(0, np.zeros(4, np.uint8))], [(0, np.zeros(0, np.uint8))]):
        world = FakeWorld(2, timeout=5)

        def rank(q, sends1=sends1):
            comm = world.comm(q)
            comm.exchange(sends1 if q == 1 else [], [])

        results = run_ranks(2, rank)
        assert all(s == "error" and isinstance(e, ProtocolError) for s, e in results), results
