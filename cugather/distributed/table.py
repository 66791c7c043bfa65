"""ShardedTable: a table whose rows are split over the ranks of a job.

Rank ``q`` holds rows ``offsets[q]:offsets[q+1]`` of the whole table (rank
order, any sizes, empty shards included); the offsets are agreed when the
table is built, together with the row shape, the dtype and the transports
every rank can use.  ``table.gather(indices)`` returns, on each rank's GPU,
exactly ``cugather.gather(whole_table, indices, axis=0)`` for that rank's
indices, through NCCL (:mod:`.exchange`) or peer reads (:mod:`.peer`).
"""

from __future__ import annotations

import json
from typing import Optional, cast

from .. import validate as _arrays
from ..validate import GATHER_MODES, TAKE_MODES
from . import shards as _shards
from .backend import CupyBackend
from .comm import Communicator, LocalGroup
from .exchange import ROUNDS, exchange_gather, report_failure
from .peer import PeerGather, close_shard
from .plan import row_offsets
from .transport import Facts, choose_rounds, choose_transport

__all__ = ["ShardedTable"]

TRANSPORTS = ("auto", "nccl", "p2p")


def _check_rows(local_rows, device: int):
    rows = _arrays.as_data(local_rows, "local_rows")
    if rows.data.device_id != device and rows.size:
        raise ValueError(f"local_rows are on GPU {rows.data.device_id}, this rank's GPU is {device}")
    if rows.ndim == 0:
        raise ValueError("local_rows must have at least one dimension (rows), got a 0-d array")
    if not rows.flags.c_contiguous:
        raise ValueError(f"local_rows must be C-contiguous (strides {rows.strides}): pass "
                         f"cupy.ascontiguousarray(local_rows)")
    return rows


class _Rank:
    """One rank's part of a table (a process holds one; a LocalGroup one per GPU)."""

    def __init__(self, comm: Communicator, local_rows, transport: str):
        self.comm, self.device = comm, comm.device
        rows, error = None, None
        try:
            rows = _check_rows(local_rows, comm.device)
        except (TypeError, ValueError) as e:
            error = f"{type(e).__name__}: {e}"
        records = [_shards.parse(raw, q) for q, raw in enumerate(comm.allgather_bytes(
            _shards.describe(comm, rows, error, comm.local)))]
        _shards.check_records(records)
        self.rows = rows
        self.offsets = tuple(row_offsets([rec["rows"] for rec in records]))
        self.row_shape, self.dtype = tuple(records[0]["row_shape"]), records[0]["dtype"]
        one_host = len({rec["host"] for rec in records}) == 1
        bases, self._opened, why = ([], [], "not requested") if transport == "nccl" else (
            _shards.map_peers(comm, records, comm.local))
        answers = [json.loads(a) for a in comm.allgather_bytes(json.dumps(why).encode())]
        ready = transport != "nccl" and not any(answers)
        if not ready:
            self.close()
        self.facts = Facts(comm.size, one_host, ready, all(r["nccl"] for r in records),
                           "; ".join(a for a in answers if a))
        if transport == "auto":
            self.transport, self.reason = choose_transport(self.facts)
        elif transport == "p2p" and not ready:
            raise ValueError(f"transport='p2p' needs peer access to every shard: "
                             f"{self.facts.why_not_peer}")
        elif transport == "nccl" and not self.facts.nccl:
            raise ValueError("transport='nccl' needs NCCL on every rank (init(nccl=True))")
        else:
            self.transport, self.reason = transport, "requested"
        self._peer: Optional[PeerGather] = (PeerGather(bases, self.offsets, self.row_shape, self.dtype, self.device,
                                 comm.rank) if ready else None)
        self._side = None

    def close(self) -> None:
        for key in self._opened:
            close_shard(key)
        self._opened = []

    def pick(self, transport: str) -> str:
        if transport == "auto":
            return self.transport
        if transport == "p2p" and self._peer is None:
            raise ValueError(f"transport='p2p' is unavailable for this table: "
                             f"{self.facts.why_not_peer}")
        if transport == "nccl" and not self.facts.nccl:
            raise ValueError("transport='nccl' is unavailable: not every rank has NCCL")
        return transport

    def prepare(self, indices, out, take: bool, mode: str, fill_value):
        """Indices on this GPU (int32/int64, C-contiguous) and a checked or new ``out``."""
        cp = _arrays.cupy_module()
        with cp.cuda.Device(self.device):
            idx = _arrays.as_indices(indices, self.device, allow_bool=take)
            shape = tuple(idx.shape) + self.row_shape
            if mode == "fill":
                _arrays.fill_bytes(fill_value, self.dtype)
            if out is None:
                out = cp.ndarray(shape, self.dtype)
            else:
                _arrays.check_out(out, shape, self.dtype, self.device, {"indices": idx})
        return idx, out

    def run(self, transport: str, idx, out, kernel_mode: str, fill_value, rounds: int):
        if transport == "p2p":  # pick() refused p2p without peer reads
            peer = cast(PeerGather, self._peer)
            return peer(idx, mode=kernel_mode, fill_value=fill_value, out=out)
        cp = _arrays.cupy_module()
        if self._side is None:
            with cp.cuda.Device(self.device):
                self._side = cp.cuda.Stream(non_blocking=True)
        backend = CupyBackend(self.device, self._side)
        return exchange_gather(backend, self.comm, self.rows, self.offsets, idx, out,
                               mode=kernel_mode, fill_value=fill_value, rounds=rounds,
                               choose_rounds=choose_rounds)

    def call(self, indices, out, stream, transport, kernel_mode, fill_value, rounds, take):
        """Prepare and run; an NCCL rank whose arguments fail still answers the others."""
        cp = _arrays.cupy_module()
        with cp.cuda.Device(self.device), _stream(stream):
            try:
                idx, out = self.prepare(indices, out, take, kernel_mode, fill_value)
            except (TypeError, ValueError, IndexError):
                if transport == "nccl":
                    report_failure(CupyBackend(self.device), self.comm, rounds)
                raise
            return self.run(transport, idx, out, kernel_mode, fill_value, rounds)


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _stream(stream):
    return _Null() if stream is None else _arrays.current_stream(stream)


def _kernel_mode(mode, take: bool) -> str:
    if take:
        _arrays.check_mode(mode, TAKE_MODES)
        return "clip_numpy" if mode == "clip" else mode
    _arrays.check_mode(mode, GATHER_MODES)
    return mode


class ShardedTable:
    """A row-sharded table: each rank holds a contiguous block of rows.

    Parameters
    ----------
    local_rows : cupy.ndarray, or a sequence of them with a :class:`LocalGroup`
        This rank's rows, shape ``(rows, *row_shape)``, C-contiguous, on this
        rank's GPU; any dtype and row shape (the same on every rank), any
        number of rows (zero included).  Rank ``q``'s rows come after rank
        ``q - 1``'s in the whole table.
    comm : Communicator or LocalGroup
        From :func:`cugather.distributed.init` (one process per GPU) or
        :func:`cugather.distributed.init_local` (every GPU of this process).
    transport : {"auto", "nccl", "p2p"}
        Default transport of the calls.  ``"p2p"``: every rank reads remote
        rows directly through peer access (one host; the shards are mapped
        now, by CUDA IPC between processes).  ``"nccl"``: indices and rows
        travel by NCCL send/recv (any number of hosts).  ``"auto"``:
        :func:`cugather.distributed.transport.choose_transport`.

    Construction is collective: every rank builds its table at the same
    point, and a problem on any rank (bad ``local_rows``, mismatched row
    shape or dtype) raises the same ValueError on every rank.  The table
    keeps ``local_rows`` alive; do not modify them while gathers run.
    """

    def __init__(self, local_rows, comm, *, transport: str = "auto"):
        _arrays.check_mode(transport, TRANSPORTS, "transport")
        self._group = comm if isinstance(comm, LocalGroup) else None
        if self._group is not None:
            shards = list(local_rows) if isinstance(local_rows, (list, tuple)) else None
            if shards is None or len(shards) != comm.size:
                raise ValueError(f"with a LocalGroup of {comm.size} GPUs, local_rows must be a "
                                 f"list of {comm.size} arrays, one per GPU")
            self._ranks = comm.run(lambda c, rows: _Rank(c, rows, transport), shards)
        elif isinstance(comm, Communicator):
            self._ranks = [_Rank(comm, local_rows, transport)]
        else:
            raise TypeError(f"comm must be a Communicator (cugather.distributed.init()) or a "
                            f"LocalGroup (init_local()), got {type(comm).__name__}")
        first = self._ranks[0]
        self.offsets = first.offsets
        self.row_shape, self.dtype = first.row_shape, first.dtype
        self.transport, self.transport_reason = first.transport, first.reason

    def __repr__(self):
        return (f"ShardedTable(shape={self.shape}, dtype={self.dtype}, ranks="
                f"{len(self.offsets) - 1}, transport={self.transport!r})")

    @property
    def shape(self) -> tuple:
        """Shape of the whole table."""
        return (self.offsets[-1],) + self.row_shape

    @property
    def local_rows(self):
        """This rank's rows (a list, one per GPU, with a LocalGroup)."""
        rows = [r.rows for r in self._ranks]
        return rows if self._group is not None else rows[0]

    def gather(self, indices, *, mode: str = "raise", fill_value=0, out=None, stream=None,
               transport: str = "auto", rounds: int = 0):
        """Rows ``indices`` of the whole table, on this rank's GPU.

        Bit-identical to ``cugather.gather(whole_table, indices, axis=0,
        mode=mode, fill_value=fill_value)``.

        Parameters
        ----------
        indices : cupy.ndarray or array_like of int (a list of them with a LocalGroup)
            Global row numbers; ``[-n, n)`` is valid, negative ones counting
            from the end of the whole table.
        mode : {"raise", "wrap", "clip", "fill"}
            Out-of-range policy, as :func:`cugather.gather`.  With
            ``"raise"`` and the NCCL transport, a bad index on any rank makes
            every rank raise the same IndexError (naming that rank, the
            position and the valid range) before any row moves; with peer
            reads each rank checks its own indices.  Raise mode costs a host
            synchronisation.
        fill_value : scalar
            Written for out-of-range indices when ``mode="fill"``.
        out : cupy.ndarray, optional
            C-contiguous, shape ``indices.shape + row_shape``, this GPU.
        stream : cupy.cuda.Stream, optional
            Stream to run on (default: CuPy's current stream).
        transport : {"auto", "nccl", "p2p"}
            ``"auto"``: the table's transport.  NCCL calls are collective
            (every rank calls with the same mode and ``rounds``) and
            synchronise with the host once; peer reads are not collective,
            never synchronise outside raise mode and can be captured in a
            CUDA graph (pass ``out``).
        rounds : {0, 1, 2, 4, 8}
            NCCL only: split the row exchange in rounds that overlap
            transfers with gathers; 0 chooses by size
            (:func:`~cugather.distributed.transport.choose_rounds`).

        Returns
        -------
        cupy.ndarray (a list of them with a LocalGroup)
        """
        return self._call(indices, out, stream, transport, _kernel_mode(mode, False),
                          fill_value, rounds, False)

    def take(self, indices, *, mode: str = "raise", out=None, stream=None,
             transport: str = "auto", rounds: int = 0):
        """``numpy.take(whole_table, indices, axis=0, mode=mode)``: ``"clip"``
        clamps to ``[0, n-1]`` (negative indices become 0); bool indices are
        taken as integers.  Otherwise as :meth:`gather`."""
        return self._call(indices, out, stream, transport, _kernel_mode(mode, True), 0,
                          rounds, True)

    def _call(self, indices, out, stream, transport, kernel_mode, fill_value, rounds, take):
        _arrays.check_mode(transport, TRANSPORTS, "transport")
        if rounds not in (0,) + ROUNDS:
            raise ValueError(f"rounds must be 0 (by size) or one of {ROUNDS}, got {rounds!r}")
        picked = [r.pick(transport) for r in self._ranks]
        if self._group is None:
            return self._ranks[0].call(indices, out, stream, picked[0], kernel_mode,
                                       fill_value, rounds, take)
        n = self._group.size
        indices, outs, streams = (_per_rank(indices, n, "indices"), _per_rank(out, n, "out"),
                                  _per_rank(stream, n, "stream"))
        # Every rank's arguments are checked here first, so no rank starts a
        # collective that another would not join.
        prepared = [r.prepare(i, o, take, kernel_mode, fill_value)
                    for r, i, o in zip(self._ranks, indices, outs)]

        def one(comm, rank, args, stream, transport):
            with _stream(stream):
                return rank.run(transport, args[0], args[1], kernel_mode, fill_value, rounds)

        return self._group.run(one, self._ranks, prepared, streams, picked)

    def close(self) -> None:
        """Unmap the peers' shards (collective in spirit: do it after the last gather)."""
        for r in self._ranks:
            r.close()


def _per_rank(value, n: int, name: str) -> list:
    if value is None:
        return [None] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = (f"a {type(value).__name__} of {len(value)}" if isinstance(value, (list, tuple))
               else type(value).__name__)
        raise ValueError(f"with a LocalGroup of {n} GPUs, {name} must be a list of {n} "
                         f"(one per GPU), got {got}")
    return list(value)
