"""``python -m cugather.distributed.run --nproc-per-node N script.py [args]``.

Starts N processes of ``script.py`` (or ``-m module``) with the environment
torchrun gives its workers -- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` (default 127.0.0.1),
``MASTER_PORT`` (default: a free port) -- plus a fresh
``CUGATHER_JOB_TOKEN`` that the rendezvous store checks on every
connection.  So a script written for ``cugather.distributed.init()`` runs
the same under this launcher and under torchrun.  On the host of rank 0 the
launcher itself binds ``--master-addr:--master-port`` and hands the
listening socket to rank 0 (``CUGATHER_STORE_FD``): no other process can
take the port between the launcher choosing it and rank 0 serving it.

If a process fails, the others are stopped (SIGTERM, then SIGKILL after
``--grace`` seconds) and the launcher exits with the failed process's
status; ``--timeout`` stops everything after that many seconds (exit 124).
Workers die with the launcher: a signal to it (SIGINT, SIGTERM, SIGHUP)
goes to each worker's process group, and on Linux a worker is killed when
the launcher dies, even by SIGKILL.  Several hosts: run it on each with
``--nnodes``, ``--node-rank``, the same ``--master-addr``/``--master-port``
and the same ``CUGATHER_JOB_TOKEN`` (at least 16 characters) exported; rank
0 serves the store on ``--master-addr`` only, which must be an address of
the host with ``--node-rank 0``.  Every option and variable is checked
before any worker starts.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Callable, Optional

from .rendezvous import ENV_STORE_FD, ENV_TOKEN, job_timeout
from .wire import MIN_TOKEN, check_seconds, check_token, weak_token_allowed

__all__ = ["main", "worker_env", "listen", "free_port"]

_PR_SET_PDEATHSIG = 1
try:  # loaded before any fork: the child only calls it
    _LIBC: Optional[ctypes.CDLL] = (ctypes.CDLL(None, use_errno=True)
                                    if sys.platform.startswith("linux") else None)
except OSError:
    _LIBC = None


def listen(addr: str, port: int) -> socket.socket:
    """A socket listening on ``addr:port`` (port 0: a free one), for rank 0 to serve the store on.

    Raises SystemExit naming ``--master-addr`` or ``--master-port`` when the
    address does not resolve, is not this host's, or the port is taken.
    """
    try:
        family, _, _, _, address = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise SystemExit(f"--master-addr {addr!r} does not resolve ({e})") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRNOTAVAIL:
            raise SystemExit(f"--master-addr {addr} is not an address of this host: rank 0 "
                             f"serves the store on it, so run --node-rank 0 on the host that "
                             f"owns it") from None
        if e.errno == errno.EADDRINUSE:
            raise SystemExit(f"--master-port {port} is already in use on {addr}") from None
        raise SystemExit(f"cannot listen on {addr}:{port} for the store: {e}") from None
    return sock


def free_port(addr: str) -> int:
    """A port free on ``addr`` right now (racy: :func:`listen` keeps it bound instead)."""
    with listen(addr, 0) as s:
        return s.getsockname()[1]


def worker_env(base: Mapping[str, str], *, rank: int, local_rank: int, nproc: int, nnodes: int,
               node_rank: int, addr: str, port: int, token: str,
               store_fd: Optional[int] = None) -> dict:
    """The environment of one worker (torchrun's variables, plus the job token)."""
    env = dict(base)
    env.pop(ENV_STORE_FD, None)
    env.update(RANK=str(rank), WORLD_SIZE=str(nproc * nnodes), LOCAL_RANK=str(local_rank),
               LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node_rank),
               MASTER_ADDR=addr, MASTER_PORT=str(port), CUGATHER_JOB_TOKEN=token,
               TORCHELASTIC_USE_AGENT_STORE="False")
    if store_fd is not None:
        env[ENV_STORE_FD] = str(store_fd)
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


def _check(args) -> str:
    """Check every option and variable; the job token.  SystemExit names what is wrong."""
    if args.nproc_per_node < 1:
        raise SystemExit(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    if args.nnodes < 1:
        raise SystemExit(f"--nnodes must be >= 1, got {args.nnodes}")
    if not 0 <= args.node_rank < args.nnodes:
        raise SystemExit(f"--node-rank must be in [0, {args.nnodes}), got {args.node_rank}")
    if not 0 <= args.master_port <= 65535:
        raise SystemExit(f"--master-port must be in [1, 65535] (0: a free one), got "
                         f"{args.master_port}")
    try:
        check_seconds("--timeout", args.timeout, zero=True)
        check_seconds("--grace", args.grace, zero=True)
        job_timeout(None)  # CUGATHER_TIMEOUT, checked here rather than in every worker
        weak = weak_token_allowed()
    except ValueError as e:
        raise SystemExit(str(e)) from None
    token = os.environ.get(ENV_TOKEN, "")
    if args.nnodes > 1:
        if not args.master_port:
            raise SystemExit("with --nnodes > 1 give --master-port (the same on every host)")
        if len(token) < MIN_TOKEN:
            raise SystemExit(f"with --nnodes > 1 export the same {ENV_TOKEN} of at least "
                             f"{MIN_TOKEN} characters on every host (it is "
                             f"{'empty' if not token else f'{len(token)} characters long'})")
    if not token:
        return secrets.token_hex(16)
    try:
        return check_token(token, args.master_addr, weak)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _resolves(addr: str) -> None:
    try:
        socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise SystemExit(f"--master-addr {addr!r} does not resolve ({e})") from None


def _die_with_launcher(launcher: int) -> Callable[[], None]:
    """Run in each child before exec: on Linux, SIGKILL it when the launcher dies."""
    def arm() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:  # the launcher died before prctl took hold
            os._exit(1)
    return arm


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


def _spawn(args, token: str) -> tuple:
    """Start the workers; (their Popen objects, the global rank of each)."""
    listener = None
    if args.node_rank == 0:  # rank 0's host: bind now, hand the socket to rank 0
        listener = listen(args.master_addr, args.master_port)
        port = listener.getsockname()[1]
    else:
        _resolves(args.master_addr)
        port = args.master_port
    target = (["-m", args.script] if args.module else [args.script]) + list(args.args)
    procs, ranks = [], []
    try:
        for local in range(args.nproc_per_node):
            rank = args.node_rank * args.nproc_per_node + local
            fd = listener.fileno() if listener is not None and rank == 0 else None
            env = worker_env(os.environ, rank=rank, local_rank=local, nproc=args.nproc_per_node,
                             nnodes=args.nnodes, node_rank=args.node_rank,
                             addr=args.master_addr, port=port, token=token, store_fd=fd)
            procs.append(subprocess.Popen([sys.executable] + target, env=env,
                                          start_new_session=True,
                                          pass_fds=() if fd is None else (fd,),
                                          preexec_fn=_die_with_launcher(os.getpid())))
            ranks.append(rank)
    except BaseException:
        _stop(procs, args.grace)
        raise
    finally:
        if listener is not None:
            listener.close()  # rank 0 holds its own copy
    return procs, ranks


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    token = _check(args)
    procs, ranks = _spawn(args, token)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    forwarded = {}

    def forward(sig, _frame):
        forwarded["signal"] = sig
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in zip(ranks, codes) if c not in (None, 0)]
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
