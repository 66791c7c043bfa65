"""An in-process fake of the communicator the sharded gather's NCCL transport uses.

``FakeWorld(size)`` stands for ``size`` ranks, each run on its own thread
(:func:`run_ranks`).  Its communicators implement the collectives of
``cugather.distributed.exchange.Collectives`` with NumPy, and hold the
transport to NCCL's rules:

* ``exchange`` is one group of sends and receives: every rank posts its
  list, the world checks that each send from ``a`` to ``b`` meets a receive
  posted by ``b`` from ``a`` of the same size, in the same order (a
  zero-size message must be posted on both sides or on neither -- NCCL hangs
  otherwise), then copies the bytes;
* every collective waits at a barrier with a timeout, so a rank that does
  not arrive (it raised, or it skipped a call) fails the others with
  TimeoutError instead of hanging the test.

Nothing here is transport logic: the code under test is
``exchange_gather`` itself, run with ``NumpyBackend``.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["FakeWorld", "FakeComm", "run_ranks", "ProtocolError", "DeferredBackend"]


class ProtocolError(RuntimeError):
    """The ranks' posted sends and receives do not match."""


class FakeWorld:
    def __init__(self, size: int, timeout: float = 20.0):
        self.size, self.timeout = size, timeout
        self._barrier = threading.Barrier(size)
        self._slots = [None] * size
        self.groups = 0          # exchange groups completed
        self.messages = 0        # matched send/recv pairs
        self.zero_size = 0       # matched pairs of zero bytes (legal, but should not occur)
        self.allgathers = 0

    def comm(self, rank: int) -> "FakeComm":
        return FakeComm(self, rank)

    def _wait(self, what: str) -> None:
        try:
            self._barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            raise TimeoutError(f"{what}: a rank did not arrive within {self.timeout} s") from None

    def _round(self, rank: int, value, what: str) -> list:
        self._wait(what)
        self._slots[rank] = value
        self._wait(what)
        return list(self._slots)

    def abort(self) -> None:
        self._barrier.abort()


def _check_group(posts: list) -> None:
    """Every send must meet its receive, pair by pair, in order."""
    size = len(posts)
    for a in range(size):
        for b in range(size):
            sent = [buf.nbytes for peer, buf in posts[a][0] if peer == b]
            wanted = [buf.nbytes for peer, buf in posts[b][1] if peer == a]
            if sent != wanted:
                raise ProtocolError(f"rank {a} sends {sent} bytes to rank {b}, which receives "
                                    f"{wanted} bytes from rank {a}")
    for a, (sends, recvs) in enumerate(posts):
        for peer, _ in sends + recvs:
            if not 0 <= peer < size or peer == a:
                raise ProtocolError(f"rank {a} posted a message with peer {peer}")


class FakeComm:
    """One rank of a :class:`FakeWorld` (``rank``, ``size``, ``device=None``)."""

    device = None
    local = True

    def __init__(self, world: FakeWorld, rank: int):
        self.world, self.rank, self.size = world, rank, world.size

    def allgather_int64(self, row) -> np.ndarray:
        row = np.asarray(row)
        if row.dtype != np.int64 or row.ndim != 1:
            raise ProtocolError(f"allgather_int64 takes a 1-D int64 row, got {row.dtype} "
                                f"{row.shape}")
        rows = self.world._round(self.rank, row.copy(), "allgather_int64")
        if len({r.shape for r in rows}) != 1:
            raise ProtocolError(f"ranks all-gathered rows of lengths {[r.size for r in rows]}")
        if self.rank == 0:
            self.world.allgathers += 1
        return np.stack(rows)

    def allgather_bytes(self, value: bytes) -> list:
        return self.world._round(self.rank, bytes(value), "allgather_bytes")

    def exchange(self, sends, recvs, stream=None) -> None:
        for _, buf in list(sends) + list(recvs):
            if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1:
                raise ProtocolError("exchange moves 1-D uint8 arrays (rows travel as bytes)")
        posts = self.world._round(self.rank, (list(sends), list(recvs)), "exchange")
        _check_group(posts)
        seen: dict = {}
        copies = []
        for q, buf in recvs:  # the k-th receive from q takes q's k-th send to this rank
            k = seen[q] = seen.get(q, -1) + 1
            copies.append((buf, [b for peer, b in posts[q][0] if peer == self.rank][k].copy()))
        self.world._wait("exchange (copies taken)")
        for buf, data in copies:
            if stream is not None:  # a DeferredBackend's queue: lands when the work waits
                stream.append((buf, data))
            else:
                buf[...] = data
        if self.rank == 0:
            w = self.world
            w.groups += 1
            pairs = [b for s, _ in posts for _, b in s]
            w.messages += len(pairs)
            w.zero_size += sum(1 for b in pairs if b.nbytes == 0)


def run_ranks(size: int, fn, timeout: float = 60.0) -> list:
    """``[fn(rank)]`` on ``size`` threads; each result or the exception it raised.

    A thread still running after ``timeout`` seconds fails the caller
    (a hang is a bug, never a wait).
    """
    results = [None] * size

    def one(rank):
        try:
            results[rank] = ("ok", fn(rank))
        except BaseException as e:  # collected and inspected by the test
            results[rank] = ("error", e)

    threads = [threading.Thread(target=one, args=(q,), daemon=True) for q in range(size)]
    for t in threads:
        t.start()
    for q, t in enumerate(threads):
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"rank {q} still running after {timeout} s: a hang")
    return results


class _PoisonedNumpy:
    """numpy, except that ``empty`` returns memory filled with 0xA5 bytes."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float):
        out = np.empty(shape, dtype)
        out.view(np.uint8)[...] = 0xA5
        return out


class DeferredBackend:
    """NumpyBackend whose received bytes land only when the work stream waits for them.

    It models the GPU's two streams: a receive posted on the "comm" stream
    completes when ``wait("work", event)`` is called with an event recorded
    after it.  A gather that reads received rows before waiting for their
    round finds poison (fresh buffers are filled with 0xA5).
    """

    def __init__(self):
        from cugather.distributed.exchange import NumpyBackend

        self._plain = NumpyBackend()
        self.xp = _PoisonedNumpy()
        self._queue: list = []
        self._landed = 0

    def take(self, *args, **kwargs):
        return self._plain.take(*args, **kwargs)

    def take2(self, *args, **kwargs):
        return self._plain.take2(*args, **kwargs)

    def argsort(self, keys):
        return self._plain.argsort(keys)

    def as_bytes(self, arr):
        return self._plain.as_bytes(arr)

    def stream(self, name):
        return self._queue if name == "comm" else None

    def record(self, name):
        return len(self._queue) if name == "comm" else None

    def wait(self, name, event) -> None:
        if name == "work" and event is not None:
            for buf, data in self._queue[self._landed:event]:
                buf[...] = data
            self._landed = max(self._landed, event)
