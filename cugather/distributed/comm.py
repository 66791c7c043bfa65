"""Communicators: one rank's GPU, its host collectives and its NCCL communicator.

:func:`init` builds the :class:`Communicator` of this process (one process
per GPU, configured from the environment); :func:`init_local` builds a
:class:`LocalGroup` driving every GPU of this process (one communicator per
GPU from ``NcclCommunicator.initAll``, each rank's work on its own thread).

A communicator offers what the sharded table needs: an all-gather of small
byte strings on the host (construction), an all-gather of a small int64
row on the GPU read back to the host, and one group of NCCL sends and
receives.  Waits on the GPU are bounded too: a collective that does not
finish within ``timeout`` seconds aborts the NCCL communicator and raises
TimeoutError, so a dead peer cannot hang the job.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

import numpy

from .rendezvous import (DEFAULT_TIMEOUT, HostGroup, ThreadGroup, connect_store, job_timeout,
                         read_env)

__all__ = ["Communicator", "LocalGroup", "init", "init_local", "wait_event"]


def _nccl():
    from cupy.cuda import nccl

    if not getattr(nccl, "available", False):
        raise ImportError("CuPy cannot load NCCL: pip install nvidia-nccl-cu12 (CUDA 12) or "
                          "nvidia-nccl-cu13 (CUDA 13), or pass nccl=False for peer reads only")
    return nccl


def wait_event(event, timeout: float, what: str, on_timeout=None, cancelled=None) -> None:
    """Wait for a CUDA event, polling; after ``timeout`` s call ``on_timeout`` and
    raise TimeoutError.  Once ``cancelled()`` is true the wait gets one more
    second (a collective the others already finished completes in that time)."""
    deadline = time.monotonic() + timeout
    pause, cut = 0.0, False
    while not event.done:
        now = time.monotonic()
        if not cut and cancelled is not None and cancelled():
            deadline, cut = min(deadline, now + 1.0), True
        if now > deadline:
            if on_timeout is not None:
                on_timeout()
            why = ("was cancelled: another rank of this process failed" if cut else
                   f"did not finish within {timeout:g} s (a rank stopped calling, or died)")
            raise TimeoutError(f"{what} {why}; the NCCL communicator was aborted")
        time.sleep(pause)
        pause = min(2 * pause + 1e-5, 1e-3)


class Communicator:
    """One rank: ``rank`` of ``size``, its GPU ``device`` and collectives.

    Build with :func:`init` or :func:`init_local`, not directly.
    """

    def __init__(self, rank: int, size: int, device: int, host, nccl_comm=None,
                 timeout: float = DEFAULT_TIMEOUT, local: bool = False):
        self.rank, self.size, self.device, self.timeout = rank, size, device, timeout
        self.host, self._nccl, self.local = host, nccl_comm, local
        self._broken: Optional[str] = None
        self._pinned: Any = None
        # Single-process mode: whether another rank of the process failed.
        self._cancelled: Optional[Callable[[], bool]] = None

    def __repr__(self):
        kind = "single-process" if self.local else "process"
        return (f"Communicator(rank={self.rank}, size={self.size}, device={self.device}, "
                f"{kind}, nccl={'yes' if self._nccl is not None else 'no'})")

    @property
    def has_nccl(self) -> bool:
        return self._nccl is not None and self._broken is None

    def allgather_bytes(self, value: bytes) -> list:
        """Every rank's ``value`` (a few KB at most), through the host store."""
        return self.host.allgather(bytes(value))

    def _comm(self):
        if self._broken is not None:
            raise RuntimeError(f"rank {self.rank}'s NCCL communicator is unusable: {self._broken}")
        if self._nccl is None:
            raise RuntimeError("this communicator has no NCCL (init(nccl=False)); use "
                               "transport='p2p' or init with NCCL")
        return self._nccl

    def _abort(self, why: str) -> None:
        self._broken = why
        try:
            self._nccl.abort()
        except Exception:  # already torn down
            pass

    @contextlib.contextmanager
    def _nccl_errors(self, what: str):
        """NCCL's errors from ``what`` as ConnectionError naming the rank; the
        communicator is aborted (a peer that exited leaves nothing to wait for)."""
        try:
            yield
        except _nccl().NcclError as e:
            self._abort(f"{what} failed")
            raise ConnectionError(f"rank {self.rank}: {what} failed: {e} (a peer exited or "
                                  f"the network failed); the NCCL communicator was "
                                  f"aborted") from None

    def allgather_int64(self, row) -> numpy.ndarray:
        """Every rank's 1-D int64 ``row`` (a CuPy array) as a host ``(size, len)`` array.

        Runs on CuPy's current stream and waits for it (bounded by ``timeout``).
        """
        import cupy as cp

        nccl = _nccl()
        comm = self._comm()
        k = int(row.size)
        row = cp.ascontiguousarray(row, dtype=cp.int64)
        got = cp.empty(self.size * k, cp.int64)
        stream = cp.cuda.get_current_stream()
        with self._nccl_errors("the all-gather of request counts"):
            comm.allGather(row.data.ptr, got.data.ptr, k, nccl.NCCL_INT64, stream.ptr)
        nbytes = got.nbytes
        if self._pinned is None or self._pinned.size() < nbytes:
            self._pinned = cp.cuda.alloc_pinned_memory(max(nbytes, 4096))
        host = numpy.frombuffer(self._pinned, numpy.int64, self.size * k)
        cp.cuda.runtime.memcpyAsync(host.ctypes.data, got.data.ptr, nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        done = stream.record()
        wait_event(done, self.timeout, f"rank {self.rank}'s all-gather of request counts",
                   lambda: self._abort("an all-gather timed out"), self._cancelled)
        return host.reshape(self.size, k).copy()

    def exchange(self, sends, recvs, stream=None) -> None:
        """One NCCL group: ``sends`` and ``recvs`` are ``[(peer, uint8 CuPy array)]``."""
        import cupy as cp

        nccl = _nccl()
        comm = self._comm()
        ptr = (stream or cp.cuda.get_current_stream()).ptr
        with self._nccl_errors("a send/recv group"):
            nccl.groupStart()
            try:
                for peer, buf in sends:
                    comm.send(buf.data.ptr, buf.size, nccl.NCCL_UINT8, peer, ptr)
                for peer, buf in recvs:
                    comm.recv(buf.data.ptr, buf.size, nccl.NCCL_UINT8, peer, ptr)
            finally:
                nccl.groupEnd()

    def connect(self) -> None:
        """Set up NCCL's connections to every peer now, while every rank is in :func:`init`.

        NCCL connects lazily, inside the first all-gather and the first
        send/recv with each peer, and that setup waits on the host for the
        peer with no bound of ours: a rank that never calls would hold the
        others there.  Once connected, a collective only waits on the GPU,
        where :func:`wait_event` bounds it by ``timeout``.
        """
        import cupy as cp

        self.allgather_int64(cp.zeros(1, cp.int64))
        peers = [q for q in range(self.size) if q != self.rank]
        if peers:
            out, got = cp.zeros(self.size, cp.uint8), cp.empty(self.size, cp.uint8)
            stream = cp.cuda.get_current_stream()
            self.exchange([(q, out[q:q + 1]) for q in peers], [(q, got[q:q + 1]) for q in peers],
                          stream)
            wait_event(stream.record(), self.timeout, f"rank {self.rank}'s first send/recv",
                       lambda: self._abort("the first send/recv timed out"), self._cancelled)

    def barrier(self) -> None:
        """Wait (at most ``timeout`` s) until every rank arrives."""
        self.allgather_bytes(b"")

    def close(self) -> None:
        """Release NCCL and the store connection (rank 0 also stops serving the store)."""
        if self._nccl is not None and self._broken is None:
            self._nccl.destroy()
        self._broken = self._broken or "closed"
        self.host.close()


def _unique_id(host, rank: int) -> bytes:
    nccl = _nccl()
    raw = bytes(b & 0xFF for b in nccl.get_unique_id()) if rank == 0 else b""
    raw = host.allgather(raw)[0]
    if len(raw) != 128:
        raise ValueError(f"rank 0 published an NCCL unique id of {len(raw)} bytes, not 128")
    return raw


def _communicator(n_ranks: int, uid: bytes, rank: int):
    """NcclCommunicator from the id's bytes: CuPy 14 takes bytes, earlier
    versions a tuple of the C chars."""
    nccl = _nccl()
    try:
        return nccl.NcclCommunicator(n_ranks, uid, rank)
    except TypeError:
        return nccl.NcclCommunicator(n_ranks, tuple(b - 256 if b > 127 else b for b in uid),
                                     rank)


def init(*, device: Optional[int] = None, timeout: Optional[float] = None, nccl: bool = True,
         store: str = "auto", environ=None) -> Communicator:
    """Join the job this process belongs to (one process per GPU).

    Parameters
    ----------
    device : int, optional
        GPU of this rank (default ``LOCAL_RANK``); made CuPy's current device.
    timeout : float, optional
        Seconds any rendezvous or collective step waits at most (default
        ``CUGATHER_TIMEOUT`` or 300); finite and > 0, or ValueError naming it.
    nccl : bool
        Create the NCCL communicator (needed by ``transport="nccl"``);
        without it only peer reads work, e.g. for two ranks on one GPU.
    store : {"auto", "cugather", "torch"}
        The rendezvous store: cugather's own on ``MASTER_ADDR`` (token
        checked on every connection), or torchrun's agent store; ``"auto"``
        takes torchrun's when it serves one.
    environ : mapping, optional
        Read instead of ``os.environ`` (tests).

    Returns
    -------
    Communicator
    """
    import os

    environ = os.environ if environ is None else environ
    env = read_env(environ)  # every variable checked before anything starts
    timeout = job_timeout(timeout, environ)

    import cupy as cp

    device = env.local_rank if device is None else int(device)
    count = cp.cuda.runtime.getDeviceCount()
    if not 0 <= device < count:
        raise ValueError(f"device {device} (LOCAL_RANK={env.local_rank}) is not one of this "
                         f"process's {count} GPUs")
    cp.cuda.Device(device).use()
    host: HostGroup = connect_store(env, timeout, store)
    # Rank 0 serves the store: at exit it waits (briefly) until the others have left.
    atexit.register(host.close)
    try:
        comm = None
        if nccl:
            uid = _unique_id(host, env.rank)
            comm = _communicator(env.world_size, uid, env.rank)
        result = Communicator(env.rank, env.world_size, device, host, comm, timeout)
        if comm is not None:
            result.connect()
        return result
    except BaseException:
        host.close()
        raise


class LocalGroup:
    """Every GPU of this process as the ranks of one job (notebooks, tests).

    ``group.comms[i]`` is rank ``i`` on GPU ``group.devices[i]``; :meth:`run`
    calls a function once per rank, each on its own thread with its GPU
    current, and returns the results in rank order.
    """

    def __init__(self, devices: Sequence[int], timeout: float, nccl: bool):
        import cupy as cp

        self.devices = [int(d) for d in devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {self.devices}")
        count = cp.cuda.runtime.getDeviceCount()
        for d in self.devices:
            if not 0 <= d < count:
                raise ValueError(f"device {d} is not one of this process's {count} GPUs")
        comms = _nccl().NcclCommunicator.initAll(self.devices) if nccl else [None] * len(devices)
        self._threads = ThreadGroup(len(self.devices), timeout)
        self.comms = [Communicator(i, len(self.devices), d, self._threads.view(i), c, timeout,
                                   local=True) for i, (d, c) in enumerate(zip(self.devices, comms))]
        self._pool = ThreadPoolExecutor(len(self.devices), thread_name_prefix="cugather-rank")
        self._failed = threading.Event()
        for c in self.comms:
            c._cancelled = self._failed.is_set

    @property
    def size(self) -> int:
        return len(self.devices)

    def run(self, fn, *per_rank) -> list:
        """``[fn(comm_i, *args_i)]`` over the ranks, concurrently; the lowest rank's error wins."""
        import cupy as cp

        def one(i):
            with cp.cuda.Device(self.devices[i]):
                try:
                    return fn(self.comms[i], *(a[i] for a in per_rank))
                except BaseException as e:
                    if not getattr(e, "agreed", False):  # every rank raises those alike
                        self._failed.set()  # the others stop waiting for this rank
                        self._threads.abort()
                    raise

        futures = [self._pool.submit(one, i) for i in range(self.size)]
        results, errors = [], []
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as e:
                errors.append(e)
        if errors:
            self._failed.clear()
            self._threads.reset()
            # A rank's own error beats the others' "cancelled" that it caused.
            errors.sort(key=lambda e: isinstance(e, TimeoutError))
            raise errors[0]
        return results

    def close(self) -> None:
        for c in self.comms:
            c.close()
        self._pool.shutdown(wait=False)


def init_local(devices: Optional[Sequence[int]] = None, *, timeout: Optional[float] = None,
               nccl: bool = True) -> LocalGroup:
    """Drive every GPU of this process (default: all visible ones) as one job.

    Parameters
    ----------
    devices : sequence of int, optional
        The GPUs, rank ``i`` on ``devices[i]``.
    timeout : float, optional
        Seconds a collective step waits for the other ranks at most.
    nccl : bool
        Create NCCL communicators (``NcclCommunicator.initAll``).
    """
    seconds = job_timeout(timeout, {})  # checked before anything starts

    import cupy as cp

    if devices is None:
        devices = range(cp.cuda.runtime.getDeviceCount())
    return LocalGroup(list(devices), seconds, nccl)
