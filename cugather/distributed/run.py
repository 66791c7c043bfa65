"""``python -m cugather.distributed.run --nproc-per-node N script.py [args]``.

Starts N processes of ``script.py`` (or ``-m module``) with the environment
torchrun gives its workers -- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` (default 127.0.0.1),
``MASTER_PORT`` (default: a free port) -- plus a fresh
``CUGATHER_JOB_TOKEN`` that the rendezvous store checks on every
connection.  So a script written for ``cugather.distributed.init()`` runs
the same under this launcher and under torchrun.

If a process fails, the others are stopped (SIGTERM, then SIGKILL after
``--grace`` seconds) and the launcher exits with the failed process's
status; ``--timeout`` stops everything after that many seconds (exit 124).
Several hosts: run it on each with ``--nnodes``, ``--node-rank``, the same
``--master-addr``/``--master-port`` and the same ``CUGATHER_JOB_TOKEN``
exported (rank 0 serves the store on ``--master-addr`` only).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping

__all__ = ["main", "worker_env", "free_port"]


def free_port(addr: str) -> int:
    """A port free on ``addr`` right now (the store binds it moments later)."""
    with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def worker_env(base: Mapping[str, str], *, rank: int, local_rank: int, nproc: int, nnodes: int,
               node_rank: int, addr: str, port: int, token: str) -> dict:
    """The environment of one worker (torchrun's variables, plus the job token)."""
    env = dict(base)
    env.update(RANK=str(rank), WORLD_SIZE=str(nproc * nnodes), LOCAL_RANK=str(local_rank),
               LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node_rank),
               MASTER_ADDR=addr, MASTER_PORT=str(port), CUGATHER_JOB_TOKEN=token,
               TORCHELASTIC_USE_AGENT_STORE="False")
    return env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cugather.distributed.run",
                                description=__doc__.splitlines()[0].strip("`. "))
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True,
                   help="processes on this host (one per GPU)")
    p.add_argument("--nnodes", type=int, default=1, help="hosts in the job (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0,
                   help="this host's number (default 0)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                   help="address rank 0 serves the rendezvous store on (default 127.0.0.1)")
    p.add_argument("--master-port", "--master_port", type=int, default=0,
                   help="port of the store (default: a free one; give one with --nnodes > 1)")
    p.add_argument("--timeout", type=float, default=0,
                   help="stop every process after this many seconds (exit 124); 0: never")
    p.add_argument("--grace", type=float, default=5.0,
                   help="seconds between SIGTERM and SIGKILL when stopping processes")
    p.add_argument("-m", dest="module", action="store_true",
                   help="run the script argument as a module (python -m)")
    p.add_argument("script", help="the script (or module with -m) every process runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _check(args) -> None:
    if args.nproc_per_node < 1 or args.nnodes < 1:
        raise SystemExit("--nproc-per-node and --nnodes must be >= 1")
    if not 0 <= args.node_rank < args.nnodes:
        raise SystemExit(f"--node-rank must be in [0, {args.nnodes}), got {args.node_rank}")
    if args.nnodes > 1 and (not args.master_port or "CUGATHER_JOB_TOKEN" not in os.environ):
        raise SystemExit("with --nnodes > 1 give --master-port and export the same "
                         "CUGATHER_JOB_TOKEN on every host")


def _stop(procs, grace: float) -> None:
    """SIGTERM to each live child's process group, SIGKILL to any left after ``grace`` s."""
    live = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in live:
            try:
                os.killpg(p.pid, sig)  # its own group: the processes this child started
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            live = [p for p in live if p.poll() is None]
            time.sleep(0.05)
        if not live:
            return


def _status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal s: 128 + s, as a shell says


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    _check(args)
    port = args.master_port or free_port(args.master_addr)
    token = os.environ.get("CUGATHER_JOB_TOKEN") or secrets.token_hex(16)
    target = (["-m", args.script] if args.module else [args.script]) + list(args.args)
    procs = []
    for local in range(args.nproc_per_node):
        env = worker_env(os.environ, rank=args.node_rank * args.nproc_per_node + local,
                         local_rank=local, nproc=args.nproc_per_node, nnodes=args.nnodes,
                         node_rank=args.node_rank, addr=args.master_addr, port=port,
                         token=token)
        procs.append(subprocess.Popen([sys.executable] + target, env=env,
                                      start_new_session=True))
    deadline = time.monotonic() + args.timeout if args.timeout else None
    forwarded = {}

    def forward(sig, _frame):
        forwarded["signal"] = sig
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, sig)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                print(f"cugather.distributed.run: rank {rank} exited with status "
                      f"{_status(code)}; stopping the others", file=sys.stderr, flush=True)
                _stop(procs, args.grace)
                return _status(code)
            if all(c == 0 for c in codes):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                print(f"cugather.distributed.run: --timeout of {args.timeout:g} s reached; "
                      f"stopping every rank", file=sys.stderr, flush=True)
                _stop(procs, args.grace)
                return 124
            time.sleep(0.05)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if forwarded:
            _stop(procs, args.grace)


if __name__ == "__main__":
    sys.exit(main())
