"""``python -m cugather bench --distributed``: the sharded gather on every GPU of a job.

Run it under the launcher (one process per GPU)::

    python -m cugather.distributed.run --nproc-per-node 2 -m cugather bench --distributed --out DIR

Per rank and per transport, beside anchors measured in the same run on the
same bytes: the bandwidth of remote rows and the end-to-end gather rate of
uniform random indices (``--indices`` per rank, 512-byte rows by default),
a Zipf-like skewed case (hot rows all on rank 0), and the p50 latency of
4096 indices.  Anchors: ``cudaMemcpyPeerAsync`` of the remote bytes from
each peer (every rank copying at once, as in the gather), one NCCL group of
send/recv of exactly the bytes the gather moves, and single-GPU cugather on
the same number of local rows.  Targets: peer reads >= 85% of the
peer-copy bandwidth on the remote share; NCCL end to end (host sync
included) >= 70% of the bound its send/recv anchor implies.  Rank 0 writes
``distributed.json`` in ``--out`` and prints the table.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy

__all__ = ["add_arguments", "run_distributed"]


def add_arguments(p) -> None:
    p.add_argument("--indices", type=int, default=1 << 20, help="indices per rank (default 1M)")
    p.add_argument("--rows-per-rank", type=int, default=2 << 20,
                   help="table rows per rank (default 2M)")
    p.add_argument("--row-bytes", type=int, default=512, help="bytes per row (default 512)")


class _Timer:
    """Aligned, timed calls on this rank's stream; ranks meet at an NCCL barrier first."""

    def __init__(self, cp, comm):
        self.cp, self.comm = cp, comm
        self.stream = cp.cuda.get_current_stream()

    def barrier(self):
        self.comm.allgather_int64(self.cp.zeros(1, self.cp.int64))

    def wall(self, fn, repeat: int, warmup: int = 3) -> list:
        """Milliseconds per call, host clock, call plus stream synchronisation."""
        for _ in range(warmup):
            fn()
        self.stream.synchronize()
        times = []
        for _ in range(repeat):
            self.barrier()
            t0 = time.perf_counter()
            fn()
            self.stream.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    def events(self, fn, repeat: int, warmup: int = 3) -> list:
        """Milliseconds per call, CUDA events (for calls that never synchronise)."""
        cp = self.cp
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            self.barrier()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop))
        return times


def _stat(times, nbytes, what: str) -> dict:
    """Median milliseconds and ``nbytes`` (described by ``what``) per median time."""
    med = float(numpy.median(times))
    return {"ms": med, "gbps": nbytes / med / 1e6 if med else 0.0, "bytes": int(nbytes),
            "bytes_are": what, "p90_ms": float(numpy.percentile(times, 90))}


def _peer_copy(cp, comm, table, remote_bytes_from):
    """cudaMemcpyPeerAsync of ``remote_bytes_from[q]`` bytes from each peer's shard."""
    rank = table._ranks[0]
    if rank._peer is None:
        return None
    rt = cp.cuda.runtime
    bases = rank._peer.bases
    dst = cp.empty(max(1, int(sum(remote_bytes_from))), cp.uint8)
    stream = cp.cuda.get_current_stream().ptr
    offsets, row_bytes = table.offsets, table.dtype.itemsize * int(numpy.prod(table.row_shape))
    peers = []
    for q, nbytes in enumerate(remote_bytes_from):
        shard = (offsets[q + 1] - offsets[q]) * row_bytes
        while q != comm.rank and nbytes > 0 and shard:  # repeat the shard if asked for more
            peers.append((q, bases[q], int(min(nbytes, shard))))
            nbytes -= shard
    devices = {q: rt.pointerGetAttributes(b).device for q, b, _ in peers}

    def copy():
        at = 0
        for q, src, nbytes in peers:
            rt.memcpyPeerAsync(dst.data.ptr + at, comm.device, src, devices[q], nbytes, stream)
            at += nbytes
    return copy


def _sendrecv(cp, comm, send_bytes, recv_bytes):
    """One NCCL group moving exactly these byte counts to and from each peer."""
    sbuf = cp.empty(max(1, int(sum(send_bytes))), cp.uint8)
    rbuf = cp.empty(max(1, int(sum(recv_bytes))), cp.uint8)

    def pieces(buf, counts):
        out, at = [], 0
        for q, n in enumerate(counts):
            if q != comm.rank and n:
                out.append((q, buf[at:at + int(n)]))
                at += int(n)
        return out

    sends, recvs = pieces(sbuf, send_bytes), pieces(rbuf, recv_bytes)
    return lambda: comm.exchange(sends, recvs)


def _counts(offsets, idx_host, P):
    owners = numpy.searchsorted(numpy.asarray(offsets[1:P]), idx_host, side="right")
    return numpy.bincount(owners, minlength=P)


def _rows_of(cp, g, row_bytes):
    """Row contents that depend on the global row number only (so any rank can check)."""
    g = g.astype(cp.int64)
    a, b, c = (((g >> s) & 255).astype(cp.uint8)[:, None] for s in (0, 8, 16))
    j = (cp.arange(row_bytes) % 256).astype(cp.uint8)[None, :]
    return a * cp.uint8(31) + j * cp.uint8(7) + b + c * cp.uint8(13)


def _case(cp, cugather, comm, table, timer, idx, row_bytes, repeat, transports) -> dict:
    P, r = comm.size, comm.rank
    offsets = table.offsets
    n = int(idx.size)
    mine = _counts(offsets, cp.asnumpy(idx), P)             # rows this rank asks of each owner
    matrix = numpy.array([json.loads(b) for b in comm.allgather_bytes(
        json.dumps(mine.tolist()).encode())])
    asked = matrix[:, r]                                    # rows each peer asks of this rank
    remote = int(n - mine[r])
    out = cp.empty((n, row_bytes), cp.uint8)
    want = _rows_of(cp, idx, row_bytes)
    res = {"indices": n, "remote_rows": remote, "remote_share": remote / max(n, 1),
           "rows_asked_of_each_rank": mine.tolist(), "impl": {}}
    runs = [(t, t, 0) for t in transports]
    if "nccl" in transports:  # the rounds rule's choice against one round
        runs.append(("nccl_1_round", "nccl", 1))
    for name, transport, rounds in runs:
        kw = dict(rounds=rounds) if transport == "nccl" else {}
        fn = lambda t=transport, kw=kw: table.gather(idx, mode="wrap", out=out,  # noqa: E731
                                                     transport=t, **kw)
        fn()
        res.setdefault("checked", {})[name] = bool(cp.array_equal(out, want))
        times = timer.events(fn, repeat) if transport == "p2p" else timer.wall(fn, repeat)
        st = _stat(times, remote * row_bytes, "remote rows")
        st["output_gbps"] = n * row_bytes / st["ms"] / 1e6
        st["rows_per_s"] = n / st["ms"] * 1e3
        st["how"] = ("CUDA events, no host sync" if transport == "p2p"
                     else "host clock, call + stream sync (one host sync inside)")
        res["impl"][name] = st
    copy = _peer_copy(cp, comm, table, [int(c) * row_bytes for c in mine])
    if copy is not None:
        res["impl"]["cudaMemcpyPeerAsync"] = _stat(timer.events(copy, repeat), remote * row_bytes,
                                                    "remote rows, contiguous, from each peer")
    if "nccl" in transports:
        sr = _sendrecv(cp, comm, [int(c) * row_bytes for c in asked],
                       [int(c) * row_bytes for c in mine])
        res["impl"]["nccl_sendrecv"] = _stat(timer.wall(sr, repeat), remote * row_bytes,
                                             "remote rows, one group both ways")
    local = table.local_rows
    if local.shape[0]:
        lidx = cp.asarray(numpy.random.default_rng(7 + r).integers(0, local.shape[0], size=n))
        res["impl"]["single_gpu_cugather"] = _stat(
            timer.events(lambda: cugather.gather(local, lidx, mode="wrap", out=out), repeat),
            n * row_bytes, "output rows, all local")
    impl = res["impl"]
    if "p2p" in impl and "cudaMemcpyPeerAsync" in impl:
        res["p2p_vs_peer_copy"] = impl["p2p"]["gbps"] / impl["cudaMemcpyPeerAsync"]["gbps"]
    if "nccl" in impl and "nccl_sendrecv" in impl:
        res["nccl_vs_sendrecv_bound"] = impl["nccl_sendrecv"]["ms"] / impl["nccl"]["ms"]
    return res


def _latency(cp, table, timer, total, r, transports) -> dict:
    idx = cp.asarray(numpy.random.default_rng(11 + r).integers(0, total, size=4096))
    out = cp.empty((4096,) + table.row_shape, table.dtype)
    lat = {}
    for transport in transports:
        times = timer.wall(lambda t=transport: table.gather(idx, mode="wrap", out=out,
                                                            transport=t), 200, warmup=10)
        lat[transport] = {"p50_us": statistics.median(times) * 1e3,
                          "p90_us": float(numpy.percentile(times, 90)) * 1e3}
    return lat


def run_distributed(args) -> int:
    import cupy as cp

    import cugather
    import cugather.distributed as cgd

    comm = cgd.init()
    P, r = comm.size, comm.rank
    rows, rb = args.rows_per_rank, args.row_bytes
    n = args.indices // 16 if args.quick else args.indices
    repeat = args.repeat or (5 if args.quick else 20)
    offset = r * rows
    local = _rows_of(cp, cp.arange(offset, offset + rows), rb)
    table = cgd.ShardedTable(local, comm)
    transports = ["p2p", "nccl"] if table._ranks[0]._peer is not None else ["nccl"]
    timer = _Timer(cp, comm)
    total = table.shape[0]
    rng = numpy.random.default_rng(100 + r)
    uniform = cp.asarray(rng.integers(0, total, size=n))
    zipf = cp.asarray((rng.zipf(1.2, size=n) - 1) % total)  # hot rows: the first ones, rank 0's
    props = cp.cuda.runtime.getDeviceProperties(comm.device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    mine = {"rank": r, "device": comm.device, "gpu": name, "auto_transport": table.transport,
            "auto_reason": table.transport_reason,
            "uniform": _case(cp, cugather, comm, table, timer, uniform, rb, repeat, transports),
            "zipf": _case(cp, cugather, comm, table, timer, zipf, rb, repeat, transports),
            "latency_4096": _latency(cp, table, timer, total, r, transports)}
    everyone = [json.loads(b) for b in comm.allgather_bytes(json.dumps(mine).encode())]
    if r == 0:
        results = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "ranks": P,
                   "rows_per_rank": rows, "row_bytes": rb, "indices_per_rank": n,
                   "repeat": repeat, "command": "python -m cugather.distributed.run "
                   f"--nproc-per-node {P} -m cugather bench --distributed",
                   "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                   "per_rank": everyone}
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "distributed.json")
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
        print(_table(results))
        print(f"\nresults: {path}")
    comm.barrier()
    comm.close()
    ok = all(c["checked"].get(t, True) for m in everyone for c in (m["uniform"], m["zipf"])
             for t in c["checked"])
    return 0 if ok else 1


def _table(results) -> str:
    lines = [f"{results['ranks']} ranks, {results['indices_per_rank']} indices of "
             f"{results['row_bytes']} B rows per rank, {results['rows_per_rank']} rows per rank",
             f"{'rank':>4} {'case':8} {'impl':22} {'ms':>8} {'GB/s':>8} {'output GB/s':>12} "
             f"{'ok':>4}  GB/s of"]
    for m in results["per_rank"]:
        for case in ("uniform", "zipf"):
            c = m[case]
            for name, st in c["impl"].items():
                ok = {True: "yes", False: "NO"}.get(c.get("checked", {}).get(name), "")
                lines.append(f"{m['rank']:>4} {case:8} {name:22} {st['ms']:8.3f} "
                             f"{st['gbps']:8.1f} {st.get('output_gbps', 0):12.1f} {ok:>4}  "
                             f"{st['bytes_are']}")
            for ratio, target in (("p2p_vs_peer_copy", 0.85), ("nccl_vs_sendrecv_bound", 0.70)):
                if ratio in c:
                    verdict = "meets" if c[ratio] >= target else "MISSES"
                    lines.append(f"{'':>4} {case:8} {ratio:22} {c[ratio]:8.2f}  "
                                 f"(target >= {target:.2f}: {verdict})")
        for t, lat in m["latency_4096"].items():
            lines.append(f"{m['rank']:>4} {'4096 idx':8} {t:22} p50 {lat['p50_us']:8.1f} us  "
                         f"p90 {lat['p90_us']:8.1f} us")
    return "\n".join(lines)
