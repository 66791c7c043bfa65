"""GPU checks of cugather.distributed, run by tests/gpu/test_distributed_gpu.py.

One process per GPU under the launcher (or torchrun)::

    python -m cugather.distributed.run --nproc-per-node 2 --timeout 240 \\
        tests/gpu/distributed_worker.py JOB OUTDIR [--transports nccl,p2p]

or every GPU of one process (``local``, also what compute-sanitizer runs)::

    python tests/gpu/distributed_worker.py local OUTDIR [--small]

Jobs: ``matrix`` (dtypes, row sizes 1 B - 8 KB, uneven and empty shards,
every mode, gather and take, both transports, all compared byte for byte
with single-GPU cugather.gather on the whole table), ``raise`` (bad
indices on one rank and on every rank), ``graph`` (peer reads captured in a
CUDA graph), ``timeout`` (a rank that skips a call: the other gets
TimeoutError, nobody hangs), ``shared`` (more processes than GPUs, peer
reads only).  Each rank writes OUTDIR/<job>-rank<r>.json: a list of
{"name", "ok", "detail"}; the test reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import cupy as cp  # noqa: E402

import cugather  # noqa: E402
import cugather.distributed as cgd  # noqa: E402
from support.reference import random_data  # noqa: E402

FILLS = {"b": True, "i": -7, "u": 7, "f": 2.5, "c": 1.5 - 2j}
# (name, rows per rank (cycled over ranks), row shape, dtype)
TABLES = [
    ("u8-1B", (1001, 777), (1,), "uint8"),
    ("u8-3B", (13, 0), (3,), "uint8"),
    ("bool-6B", (0, 9), (6,), "bool"),
    ("f16-16B", (55, 33), (8,), "float16"),
    ("f32-scalar", (301, 99), (), "float32"),
    ("i64-40B", (7, 21), (5,), "int64"),
    ("c128-2x3", (11, 5), (2, 3), "complex128"),
    ("u8-512B", (257, 129), (512,), "uint8"),
    ("f32-8KB", (9, 15), (2048,), "float32"),
]
MODES = ["raise", "wrap", "clip", "fill"]


class Report:
    def __init__(self, job, rank, outdir):
        self.path = os.path.join(outdir, f"{job}-rank{rank}.json")
        self.items = []

    def check(self, name, fn):
        try:
            detail = fn()
            self.items.append({"name": name, "ok": True, "detail": detail or ""})
        except Exception as e:
            self.items.append({"name": name, "ok": False, "detail": f"{type(e).__name__}: {e}\n"
                               + traceback.format_exc()[-2000:]})
        self.write()

    def write(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=1)


def _sizes(pattern, world):
    return [pattern[q % len(pattern)] for q in range(world)]


def _table(name, pattern, row_shape, dtype, world, seed):
    sizes = _sizes(pattern, world)
    full = random_data(np.random.default_rng(seed), (sum(sizes),) + row_shape, dtype)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return full, offsets


def _same(got, want, what):
    got, want = cp.asnumpy(got), cp.asnumpy(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: {got.shape} {got.dtype} != {want.shape} {want.dtype}")
    if got.tobytes() != want.tobytes():
        bad = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
        raise AssertionError(f"{what}: {bad.size} bytes differ, first at byte {bad[0]}")


def _indices(rng, total, mode, rank, lo_hi=None, shape=None):
    shape = shape or [(257,), (9, 13), (), (0,)][rank % 4]
    lo, hi = lo_hi or ((-total, total) if mode == "raise" else (-3 * total - 2, 3 * total + 2))
    if total == 0 and mode == "raise":
        return np.zeros((0,), np.int64)
    return rng.integers(lo, hi, size=shape).astype(["int64", "int32"][rank % 2])


def job_matrix(comm, ranks, report, transports, small=False):
    """Every table x mode x transport, gather and take, against single-GPU cugather."""
    tables = TABLES[:3] if small else TABLES
    for t, (name, pattern, row_shape, dtype) in enumerate(tables):
        full, offsets = _table(name, pattern, row_shape, dtype, ranks.size, seed=t)
        table = ranks.table(_shards(ranks, full, offsets), comm)
        total = int(offsets[-1])
        for transport in transports:
            for mode in MODES + ["take-clip", "take-wrap", "owned-by-last", "zipf", "out+stream"]:
                def one(mode=mode, transport=transport):
                    rng = [np.random.default_rng([t, MODES.index(mode) if mode in MODES else 9,
                                                  q]) for q in ranks.mine]
                    kw, fn = {}, "gather"
                    if mode.startswith("take-"):
                        fn, kw["mode"] = "take", mode[5:]
                        idx = [_indices(r, total, "wrap", q) for r, q in zip(rng, ranks.mine)]
                    elif mode == "owned-by-last":
                        lo = int(offsets[-2])
                        idx = [_indices(r, total, "raise", q, (lo, total) if total > lo else None)
                               for r, q in zip(rng, ranks.mine)]
                    elif mode == "zipf":
                        idx = [np.minimum(r.zipf(1.2, size=999) - 1, max(total - 1, 0))
                               for r in rng]
                    else:
                        kw["mode"] = "raise" if mode == "out+stream" else mode
                        idx = [_indices(r, total, kw["mode"], q) for r, q in zip(rng, ranks.mine)]
                    if mode == "fill":
                        kw["fill_value"] = FILLS[np.dtype(dtype).kind]
                    extra = {}
                    if mode == "out+stream":
                        extra["out"] = ranks.each(lambda i, d: cp.empty(i.shape + row_shape, dtype),
                                                  idx)
                        extra["stream"] = ranks.each(lambda i, d: cp.cuda.Stream(), idx)
                    got = ranks.call(getattr(table, fn), idx, transport=transport, **kw, **extra)
                    for q, g, i in zip(ranks.mine, got, idx):
                        with cp.cuda.Device(g.device.id):
                            want = getattr(cugather, fn)(cp.asarray(full), cp.asarray(i), **(
                                dict(axis=0) if fn == "take" else {}), **kw)
                        _same(g, want, f"rank {q}")
                    if mode == "out+stream":
                        assert all(g is o for g, o in zip(got, extra["out"])), "out not returned"
                report.check(f"{name} {transport} {mode}", one)
    report.check("auto picks peer reads on one host with peer access",
                 lambda: f"transport={table.transport} ({table.transport_reason})")


def job_raise(comm, ranks, report, transports):
    full, offsets = _table("raise", (7, 4), (3,), "float32", ranks.size, seed=5)
    table = ranks.table(_shards(ranks, full, offsets), comm)
    total = int(offsets[-1])
    for transport in transports:
        for bad in ([ranks.size - 1], list(range(ranks.size))):
            def one(bad=bad, transport=transport):
                idx = [np.arange(-total, total, 3, dtype=np.int64) for _ in ranks.mine]
                for i, q in zip(idx, ranks.mine):
                    if q in bad:
                        i[4 + q] = total + 10 * q
                errors = ranks.call_errors(table.gather, idx, mode="raise", transport=transport)
                messages = ranks.allgather_text([str(e) if e else "" for e in errors])
                if transport == "nccl" or ranks.local:
                    assert all(isinstance(e, IndexError) for e in errors), errors
                    assert len(set(messages)) == 1, messages
                    assert f"rank {min(bad)}" in messages[0], messages[0]
                else:
                    for e, q in zip(errors, ranks.mine):
                        assert isinstance(e, IndexError) == (q in bad), (q, e)
                # the table still works afterwards
                again = ranks.call(table.gather, [i % max(total, 1) for i in idx],
                                   transport=transport, mode="wrap")
                for g, i in zip(again, idx):
                    with cp.cuda.Device(g.device.id):
                        _same(g, cugather.gather(cp.asarray(full), cp.asarray(i), mode="wrap"),
                              "after raise")
                return messages[0]
            report.check(f"raise on ranks {bad} {transport}", one)


def job_graph(comm, ranks, report, transports):
    full, offsets = _table("graph", (100, 61), (16,), "float32", ranks.size, seed=7)
    table = ranks.table(_shards(ranks, full, offsets), comm)

    def one():
        for q in ranks.mine:
            with cp.cuda.Device(ranks.device(q)):
                idx = cp.asarray(np.random.default_rng(q).integers(-500, 500, size=(4096,)))
                out, stream = cp.empty((4096, 16), cp.float32), cp.cuda.Stream()
                kw = dict(mode="fill", fill_value=-1.0, transport="p2p")
                one_call = dict(out=out, stream=stream)
                table.gather(idx, **kw, **one_call)  # warm: compile, bind
                stream.synchronize()
                out.fill(0)
                stream.begin_capture()
                table.gather(idx, **kw, **one_call)
                graph = stream.end_capture()
                graph.launch(stream)
                stream.synchronize()
                want = cugather.gather(cp.asarray(full), idx, mode="fill", fill_value=-1.0)
                _same(out, want, f"graph replay on rank {q}")
    if "p2p" in transports:
        report.check("p2p gather captured in a CUDA graph", one)


TIMEOUT_JOB_SECONDS = 20  # the communicator timeout of the "timeout" job


def job_timeout(comm, ranks, report, transports):
    full, offsets = _table("timeout", (10, 10), (4,), "int32", ranks.size, seed=9)
    table = ranks.table(_shards(ranks, full, offsets), comm)

    def one():
        if comm.rank == comm.size - 1:
            # Alive but absent: past the others' timeout (20 s), so that they
            # time out rather than see this process exit (a ConnectionError).
            time.sleep(TIMEOUT_JOB_SECONDS + 10)
            return "skipped the call"
        try:
            table.gather(np.arange(5), mode="wrap", transport="nccl")
        except (TimeoutError, ConnectionError) as e:  # absent peer / peer that exited
            assert f"rank {comm.rank}" in str(e), e
            return f"{type(e).__name__}: {e}"
        raise AssertionError("a gather without its peers returned")
    report.check("a rank that skips an NCCL gather: the others stop with an error", one)


JOBS = {"matrix": job_matrix, "raise": job_raise, "graph": job_graph, "timeout": job_timeout,
        "shared": job_matrix}


class ProcessRanks:
    """This process is one rank: per-rank lists hold one item."""

    local = False

    def __init__(self, comm):
        self.comm, self.size, self.mine = comm, comm.size, [comm.rank]

    def device(self, q):
        return self.comm.device

    def table(self, local, comm):
        return cgd.ShardedTable(local[0], comm)

    def each(self, fn, idx):
        return [fn(i, self.comm.device) for i in idx]

    def call(self, method, idx, **kw):
        kw = {k: (v[0] if k in ("out", "stream") else v) for k, v in kw.items()}
        return [method(idx[0], **kw)]

    def call_errors(self, method, idx, **kw):
        try:
            method(idx[0], **kw)
            return [None]
        except IndexError as e:
            return [e]

    def allgather_text(self, texts):
        return [b.decode() for b in self.comm.allgather_bytes(texts[0].encode())]


class LocalRanks:
    """Every GPU of this process is a rank (init_local): per-rank lists hold all."""

    local = True

    def __init__(self, group):
        self.group, self.size, self.mine = group, group.size, list(range(group.size))

    def device(self, q):
        return self.group.devices[q]

    def table(self, local, comm):
        return cgd.ShardedTable(local, comm)

    def each(self, fn, idx):
        out = []
        for q, i in enumerate(idx):
            with cp.cuda.Device(self.device(q)):
                out.append(fn(i, self.device(q)))
        return out

    def call(self, method, idx, **kw):
        return method(idx, **kw)

    def call_errors(self, method, idx, **kw):
        try:
            method(idx, **kw)
            return [None] * self.size
        except IndexError as e:  # one error surfaces: the lowest failing rank's
            return [e] * self.size

    def allgather_text(self, texts):
        return texts


def _shards(ranks, full, offsets):
    """This process's shards, each on its rank's GPU."""
    shards = []
    for q in ranks.mine:
        with cp.cuda.Device(ranks.device(q)):
            shards.append(cp.asarray(full[offsets[q]:offsets[q + 1]]))
    return shards


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="GPU checks of cugather.distributed")
    p.add_argument("job", choices=sorted(JOBS) + ["local"])
    p.add_argument("outdir")
    p.add_argument("--transports", default="nccl,p2p")
    p.add_argument("--small", action="store_true", help="a few tables only (sanitizer runs)")
    args = p.parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    transports = args.transports.split(",")
    if args.job == "local":
        group = cgd.init_local(timeout=60, nccl="nccl" in transports)
        ranks, report = LocalRanks(group), Report("local", 0, args.outdir)
        job_matrix(group, ranks, report, transports, small=args.small)
        job_raise(group, ranks, report, transports)
        group.close()
    else:
        shared = args.job == "shared"
        device = int(os.environ["LOCAL_RANK"]) % cp.cuda.runtime.getDeviceCount()
        comm = cgd.init(device=device, nccl=not shared,
                        timeout=TIMEOUT_JOB_SECONDS if args.job == "timeout" else 60)
        ranks, report = ProcessRanks(comm), Report(args.job, comm.rank, args.outdir)
        JOBS[args.job](comm, ranks, report, ["p2p"] if shared else transports)
        report.write()
        if args.job == "timeout":
            # The aborted communicator may still hold the GPU: leave without tearing
            # it down (the driver reclaims the context); the store closes first.
            comm.host.close()
            os._exit(0 if all(item["ok"] for item in report.items) else 1)
        comm.barrier()
        comm.close()
    return 0 if all(item["ok"] for item in report.items) else 1


if __name__ == "__main__":
    sys.exit(main())
