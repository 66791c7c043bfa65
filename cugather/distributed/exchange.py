"""The NCCL transport of a sharded gather, written once over an array module.

Every rank calls :func:`exchange_gather` once per gather (it is collective):

1. resolve the indices to global rows with the mode; raise mode notes the
   first bad index, wrap/clip/take's clip fold every index in range, fill
   marks the out-of-range ones (they get no owner and read nothing);
2. find each row's owner by a search over the row offsets and sort the
   positions by (subchunk, owner): the permutation and its inverse;
3. one small all-gather of every rank's status and request counts, read
   back to the host: the only host synchronisation of the call;
4. if any rank had a bad index, every rank raises the same IndexError (the
   lowest such rank's first bad index) before a row moves;
5. one grouped send/recv of row ids (in the owner's own numbering);
6. per round (1, 2, 4 or 8 of them, each a run of subchunks): the owner
   gathers the rows asked of it, one grouped send/recv moves them as bytes
   (CuPy's NCCL wrapper has no bf16/int16), and the requester writes the
   round's positions into the caller's order with one gather over [received
   rows | its own shard] -- its own rows never travel nor get staged.  The
   exchange of one round overlaps the gathers of the next on the GPU.

A pair with nothing to send is skipped on both sides: both read the count
from the same all-gathered matrix.  ``backend`` supplies the array module
and the kernels (NumPy for the fake-communicator tests, cugather on CuPy);
``comm`` the two collectives (:class:`Collectives`).
"""

from __future__ import annotations

from typing import Protocol

import numpy

__all__ = ["Collectives", "NumpyBackend", "ShardedIndexError", "exchange_gather", "resolve",
           "report_failure", "SUBCHUNKS", "ROUNDS"]

# Status row: kind (0 fine, 1 bad index, 2 indices into an empty table, 3
# this rank failed before the exchange), first bad flat position, its value,
# indices, rounds asked for; then the counts per (subchunk, owner).
_HEAD = 5
_FINE, _BAD, _EMPTY, _FAILED = 0, 1, 2, 3
#: Positions are split into this many subchunks; a round moves 1, 2, 4 or 8
#: of them, chosen after the counts are known (so rounds need no extra sync).
SUBCHUNKS = 8
ROUNDS = (1, 2, 4, 8)


class Collectives(Protocol):
    """What the exchange needs of a communicator."""

    rank: int
    size: int

    def allgather_int64(self, row) -> numpy.ndarray:
        """Every rank's 1-D int64 ``row`` (same length everywhere) as a host (size, len) array."""

    def exchange(self, sends, recvs, stream=None) -> None:
        """One group of sends ``[(peer, bytes array)]`` and receives ``[(peer, bytes array)]``."""


class ShardedIndexError(IndexError):
    """An out-of-range index of some rank's gather, raised on every rank alike."""

    agreed = True  # every rank raises it after the same all-gather: nobody waits

    def __init__(self, message: str, rank: int, position: int, value: int, size: int):
        super().__init__(message)
        self.rank, self.position, self.value, self.size = rank, position, value, size


class _AgreedValueError(ValueError):
    agreed = True


class NumpyBackend:
    """Host arrays and numpy.take in place of CuPy and cugather (tests, reference)."""

    xp = numpy

    def take(self, table, idx, *, mode="wrap", fill_value=0, out=None):
        table = numpy.asarray(table)
        if mode == "fill":
            n = table.shape[0]
            ok = (idx >= -n) & (idx < n)
            rows = (numpy.take(table, numpy.where(ok, idx, 0), axis=0) if n
                    else numpy.zeros(idx.shape + table.shape[1:], table.dtype))
            mask = ok.reshape(ok.shape + (1,) * (table.ndim - 1))
            rows = numpy.where(mask, rows, numpy.asarray(fill_value).astype(table.dtype))
        else:
            rows = numpy.take(table, idx, axis=0, mode="wrap" if mode == "wrap" else "raise")
        if out is None:
            return rows
        out[...] = rows
        return out

    def argsort(self, keys):
        return numpy.argsort(keys, kind="stable")

    def take2(self, first, second, idx, *, mode="wrap", fill_value=0, out=None):
        """Rows of ``concatenate([first, second])`` (the sharded kernel on a GPU)."""
        return self.take(numpy.concatenate([first, second]), idx, mode=mode,
                         fill_value=fill_value, out=out)

    def as_bytes(self, arr):
        return arr.reshape(-1).view(numpy.uint8)

    def record(self, stream_name):
        return None

    def wait(self, stream_name, event) -> None:
        pass

    def stream(self, name):
        return None


def resolve(xp, indices, total: int, mode: str):
    """Global rows of ``indices`` under ``mode``: (rows int64, valid mask or None, status).

    ``status`` is a 1-D int64 array ``[kind, first bad position, its value]``
    computed on the array module's device (no host synchronisation).
    Kernel modes as in kernels/common.cuh: ``clip_numpy`` is numpy.take's clip.
    """
    i = indices.reshape(-1).astype(xp.int64, copy=False)
    n = i.size
    fine = xp.asarray(numpy.array([_FINE, -1, 0], dtype=numpy.int64))
    valid = None
    if mode == "fill":
        g = xp.where(i < 0, i + total, i)
        valid = (g >= 0) & (g < total)
        return g, valid, fine
    if total == 0 and n:  # nothing to take from: raise mode reports the first index
        kind = _BAD if mode == "raise" else _EMPTY
        return i, None, xp.concatenate([xp.asarray(numpy.array([kind, 0], numpy.int64)), i[:1]])
    if mode == "raise":
        g = xp.where(i < 0, i + total, i)
        if not n:
            return g, None, fine
        bad = (i < -total) | (i >= total)
        pos = xp.min(xp.where(bad, xp.arange(n, dtype=xp.int64), n)).reshape(1)  # first bad
        any_bad = pos < n
        status = xp.concatenate([xp.where(any_bad, _BAD, _FINE).astype(xp.int64),
                                 xp.where(any_bad, pos, -1), i[xp.minimum(pos, n - 1)]])
        return g, None, status
    if mode == "wrap":
        return (xp.mod(i, total) if n else i), None, fine
    if mode == "clip":
        return xp.clip(xp.where(i < 0, i + total, i), 0, max(total - 1, 0)), None, fine
    if mode == "clip_numpy":
        return xp.clip(i, 0, max(total - 1, 0)), None, fine
    raise ValueError(f"mode must be one of ('raise', 'wrap', 'clip', 'clip_numpy', 'fill'), "
                     f"got {mode!r}")


def _agree(matrix: numpy.ndarray, total: int, row_bytes: int, mode: str, rounds: int,
           choose_rounds) -> int:
    """Raise the same error on every rank from the all-gathered status rows,
    or return the number of rounds every rank will run."""
    asked = matrix[:, 4]
    if (asked != rounds).any():
        raise _AgreedValueError(f"every rank must gather with the same rounds; ranks asked for "
                         f"{asked.tolist()}")
    for q, row in enumerate(matrix):
        if row[0] == _FAILED:
            raise _AgreedValueError(f"rank {q} could not start this gather (its arguments were "
                             f"rejected there; see that rank's error)")
    for q, row in enumerate(matrix):
        kind, pos, value, n = (int(v) for v in row[:4])
        if kind == _BAD:
            raise ShardedIndexError(
                f"index {value} is out of bounds for axis 0 with size {total} (rank {q}, "
                f"indices.flat[{pos}]; valid range [{-total}, {total - 1}])", q, pos, value, total)
        if kind == _EMPTY and row_bytes:
            raise ShardedIndexError(
                f"cannot take {n} indices from axis 0 of size 0 (rank {q}, mode={mode!r})",
                q, 0, 0, 0)
    if rounds:
        return rounds
    largest = int(matrix[:, 3].max(initial=0)) * row_bytes
    return choose_rounds(largest) if choose_rounds is not None else 1


def _starts(counts: numpy.ndarray) -> numpy.ndarray:
    flat = counts.reshape(-1)
    return (numpy.cumsum(flat) - flat).reshape(counts.shape)


def exchange_gather(backend, comm: Collectives, shard, offsets, indices, out, *, mode: str,
                    fill_value=0, rounds: int = 0, choose_rounds=None):
    """Gather rows ``indices`` of the table whose rank-``q`` rows start at ``offsets[q]``.

    ``shard`` is this rank's rows (C-contiguous, ``(rows, *row_shape)``),
    ``offsets`` the agreed host list of ``size + 1`` row offsets, ``out`` a
    C-contiguous array of shape ``indices.shape + row_shape`` that receives
    the result, ``mode`` a kernel mode.  ``rounds`` (1, 2, 4 or 8; 0 picks
    ``choose_rounds(largest request in bytes)``) splits the row exchange so
    that the GPU overlaps one round's transfer with the next round's
    gathers; every rank must pass the same value.  Collective: on a bad
    index every rank raises the same :class:`ShardedIndexError` and nothing
    is written.
    """
    xp, P, r = backend.xp, comm.size, comm.rank
    total, n_local = int(offsets[-1]), int(offsets[r + 1] - offsets[r])
    n, S = int(indices.size), SUBCHUNKS
    L = max(1, -(-n // S))
    row_shape = tuple(shard.shape[1:])
    row_bytes = int(numpy.prod(row_shape, dtype=numpy.int64)) * shard.dtype.itemsize
    g, valid, status = resolve(xp, indices, total, mode)

    owner = (xp.searchsorted(xp.asarray(numpy.asarray(offsets[1:P], numpy.int64)), g,
                             side="right") if P > 1 and n else xp.zeros(n, xp.int64))
    if valid is not None:
        owner = xp.where(valid, owner, P)  # out-of-range fill slots: a dummy owner, no rows
    key = ((xp.arange(n, dtype=xp.int64) // L) * (P + 1) + owner).astype(xp.int32)
    perm = backend.argsort(key)
    counts = xp.bincount(key, minlength=S * (P + 1)) if n else xp.zeros(S * (P + 1), xp.int64)
    head = xp.asarray(numpy.array([n, rounds], dtype=numpy.int64))
    matrix = comm.allgather_int64(xp.concatenate([status, head, counts.astype(xp.int64)]))
    R = _agree(matrix, total, row_bytes, mode, rounds, choose_rounds)
    if row_bytes == 0:  # rows of no bytes: every rank knows there is nothing to move
        return out

    id_dtype = xp.int32 if max(numpy.diff(offsets), default=0) < 2**31 else xp.int64
    first = xp.asarray(numpy.asarray(list(offsets), numpy.int64))
    local = (g - first[owner]).astype(id_dtype)  # the dummy owner reads offsets[P]: unused
    ids = backend.take(local, perm)  # row ids in (subchunk, owner) order

    mine = matrix[r, _HEAD:].reshape(S, P + 1)
    asked = numpy.stack([matrix[q, _HEAD:].reshape(S, P + 1)[:, r] for q in range(P)], axis=1)
    asked[:, r] = 0  # this rank's own rows never travel
    remote = mine.copy()
    remote[:, r] = remote[:, P] = 0
    my_start, asked_start, in_start = _starts(mine), _starts(asked), _starts(remote)
    n_in = int(remote.sum())

    # Where each position reads in [incoming rows | own shard]: a remote row
    # at its slot in the incoming buffer, an own row straight from the shard,
    # a fill slot past the end.
    inv = xp.empty(n, xp.int64)
    inv[perm] = xp.arange(n, dtype=xp.int64)
    shift = xp.asarray((in_start - my_start).reshape(-1).astype(numpy.int64))
    src = xp.where(owner == r, n_in + local.astype(xp.int64), inv + shift[key])
    if valid is not None:
        src = xp.where(valid, src, n_in + n_local)

    got_ids = xp.empty(int(asked.sum()), id_dtype)
    backend.wait("comm", backend.record("work"))
    sends, recvs = _pairs(backend, P, r, range(S), ids, my_start, mine, got_ids, asked_start,
                          asked)
    comm.exchange(sends, recvs, backend.stream("comm"))
    backend.wait("work", backend.record("comm"))

    outgoing = xp.empty((int(asked.sum()),) + row_shape, shard.dtype)
    incoming = xp.empty((n_in,) + row_shape, shard.dtype)
    flat_out = out.reshape((n,) + row_shape)
    final_mode = "fill" if mode == "fill" else "wrap"
    per, pending = S // R, []
    for j in range(R + 1):
        if j < R:  # the rows others asked for in round j, then their exchange
            subs = range(j * per, (j + 1) * per)
            lo = asked_start[subs[0], 0]
            hi = asked_start[subs[-1], P - 1] + asked[subs[-1], P - 1]
            if hi > lo:
                backend.take(shard, got_ids[lo:hi], out=outgoing[lo:hi])
            backend.wait("comm", backend.record("work"))
            sends, recvs = _pairs(backend, P, r, subs, outgoing, asked_start, asked, incoming,
                                  in_start, remote)
            comm.exchange(sends, recvs, backend.stream("comm"))
            pending.append(backend.record("comm"))
        if j >= 1:  # the previous round into the caller's order, once its rows are in
            backend.wait("work", pending[j - 1])
            lo, hi = min((j - 1) * per * L, n), min(j * per * L, n)
            if hi > lo:
                backend.take2(incoming, shard, src[lo:hi], mode=final_mode,
                              fill_value=fill_value, out=flat_out[lo:hi])
    return out


def _pairs(backend, P, r, subs, send_buf, send_start, send_count, recv_buf, recv_start,
           recv_count):
    """(sends, recvs) of one group: per subchunk and peer, only non-empty ones.

    Rank r sends to q exactly what q expects from r (both read the same
    all-gathered counts), in the same subchunk order, so the pairs match.
    """
    sends = [(q, backend.as_bytes(send_buf[send_start[s, q]:send_start[s, q] + send_count[s, q]]))
             for s in subs for q in range(P) if q != r and send_count[s, q]]
    recvs = [(q, backend.as_bytes(recv_buf[recv_start[s, q]:recv_start[s, q] + recv_count[s, q]]))
             for s in subs for q in range(P) if q != r and recv_count[s, q]]
    return sends, recvs


def report_failure(backend, comm: Collectives, rounds: int = 0) -> None:
    """Take part in the status all-gather for a rank whose gather could not start.

    The other ranks then raise ValueError instead of waiting for this one;
    the caller raises its own error afterwards.
    """
    xp = backend.xp
    row = numpy.zeros(_HEAD + SUBCHUNKS * (comm.size + 1), numpy.int64)
    row[0], row[4] = _FAILED, rounds
    comm.allgather_int64(xp.asarray(row))
