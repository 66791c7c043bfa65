"""Who is in the job and how ranks find each other: environment, store, host collectives.

One process per GPU reads the variables torchrun sets (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) plus ``CUGATHER_JOB_TOKEN`` (which
``python -m cugather.distributed.run`` generates), ``CUGATHER_TIMEOUT``,
``CUGATHER_ALLOW_WEAK_TOKEN`` and ``CUGATHER_STORE_FD`` (the store's
listening socket, bound by the launcher).  Every one is checked up front; a
bad value raises ValueError naming the variable and the value.  Ranks meet
at a store:

* cugather's own (:mod:`.store`), served by rank 0 on ``MASTER_ADDR`` only,
  with the job token proven both ways on every connection -- the default; a
  token shorter than 16 characters is refused (on loopback
  ``CUGATHER_ALLOW_WEAK_TOKEN=1`` accepts it);
* torchrun's agent store when the script runs under torchrun with
  ``TORCHELASTIC_USE_AGENT_STORE=True`` (the agent already holds
  ``MASTER_PORT``): a ``torch.distributed.TCPStore`` client; values carry an
  HMAC of the job token when one is set, and anything else is refused.

:class:`HostGroup` builds the one collective the rendezvous needs (an
all-gather of small byte strings) on either store, and :class:`ThreadGroup`
the same among threads of one process (single-process mode, tests).  Every
wait is bounded by a timeout.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from .store import StoreClient, StoreError, StoreServer
from .wire import ENV_WEAK_TOKEN, check_seconds, check_token, weak_token_allowed

__all__ = ["JobEnv", "read_env", "HostGroup", "ThreadGroup", "TorchStore", "connect_store",
           "job_timeout", "ENV_TOKEN", "ENV_TIMEOUT", "ENV_STORE_FD", "ENV_WEAK_TOKEN",
           "DEFAULT_TIMEOUT"]

ENV_TOKEN = "CUGATHER_JOB_TOKEN"
ENV_TIMEOUT = "CUGATHER_TIMEOUT"
#: Descriptor of the store's listening socket, which the launcher bound for rank 0.
ENV_STORE_FD = "CUGATHER_STORE_FD"
#: Seconds any rendezvous step waits at most (CUGATHER_TIMEOUT overrides).
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class JobEnv:
    """A rank's view of the job, from the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    token: str = field(repr=False)  # a secret: never in a log line
    agent_store: bool  # torchrun's agent serves a TCPStore on MASTER_PORT
    restart: int = 0
    store_fd: Optional[int] = None  # rank 0: the listening socket the launcher bound
    allow_weak_token: bool = False  # CUGATHER_ALLOW_WEAK_TOKEN=1 (loopback only)


def _int(environ, name: str, default=None, low: int = 0) -> int:
    text = environ.get(name)
    if text is None or text == "":
        if default is None:
            raise ValueError(
                f"{name} is not set: start the script with python -m cugather.distributed.run "
                f"or torchrun, or use cugather.distributed.init_local() in one process")
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def job_timeout(timeout: Optional[float] = None, environ=None) -> float:
    """Seconds a rendezvous step waits: ``timeout``, else ``CUGATHER_TIMEOUT``, else 300.

    Either must be a finite number > 0; ValueError names the one that is not.
    """
    if timeout is not None:
        return check_seconds("timeout", timeout)
    text = (os.environ if environ is None else environ).get(ENV_TIMEOUT, "")
    return check_seconds(ENV_TIMEOUT, text) if text != "" else DEFAULT_TIMEOUT


def read_env(environ=None) -> JobEnv:
    """The job as torchrun (or cugather's launcher) describes it; ValueError names a bad variable.

    cugather's own store (no agent store) needs ``CUGATHER_JOB_TOKEN`` of at
    least 16 characters; on a loopback ``MASTER_ADDR`` an empty or shorter one
    is accepted only with ``CUGATHER_ALLOW_WEAK_TOKEN=1``.
    """
    environ = os.environ if environ is None else environ
    world = _int(environ, "WORLD_SIZE", low=1)
    rank = _int(environ, "RANK")
    if rank >= world:
        raise ValueError(f"RANK must be in [0, WORLD_SIZE={world}), got {rank}")
    local_world = _int(environ, "LOCAL_WORLD_SIZE", world, low=1)
    local_rank = _int(environ, "LOCAL_RANK", rank % local_world)
    port = _int(environ, "MASTER_PORT", low=1)
    if port > 65535:
        raise ValueError(f"MASTER_PORT must be in [1, 65535], got {port}")
    addr = environ.get("MASTER_ADDR") or "127.0.0.1"
    agent = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    token = environ.get(ENV_TOKEN, "")
    weak = weak_token_allowed(environ)
    job_timeout(None, environ)  # a bad CUGATHER_TIMEOUT fails here, before anything starts
    if not agent:  # cugather's store: rank 0 binds MASTER_ADDR
        check_token(token, addr, weak)
    fd = _int(environ, ENV_STORE_FD, -1, low=0) if environ.get(ENV_STORE_FD) else None
    if fd is not None and rank != 0:
        raise ValueError(f"{ENV_STORE_FD} is for rank 0 only, and RANK is {rank}")
    return JobEnv(rank, world, local_rank, local_world, addr, port, token, agent,
                  _int(environ, "TORCHELASTIC_RESTART_COUNT", 0), fd, weak)


# ---------------------------------------------------------------- torch's store
_SEAL = b"CGv1"


class TorchStore:
    """``set``/``get`` over a ``torch.distributed.Store``, values sealed with the job token."""

    def __init__(self, store, token: str):
        self._store, self._token = store, token.encode()

    def add(self, key: str, delta: int) -> int:
        return int(self._store.add(key, delta))

    def _mac(self, key: str, value: bytes) -> bytes:
        return hmac.new(self._token, key.encode() + b"\0" + value, hashlib.sha256).digest()

    def set(self, key: str, value: bytes) -> None:
        self._store.set(key, _SEAL + self._mac(key, value) + bytes(value))

    def get(self, key: str, timeout: float) -> bytes:
        from datetime import timedelta

        try:
            self._store.wait([key], timedelta(seconds=timeout))
        except RuntimeError as e:  # torch reports a wait timeout as RuntimeError
            raise TimeoutError(f"no rank published {key!r} within {timeout:g} s ({e})") from None
        raw = bytes(self._store.get(key))
        if len(raw) < 36 or raw[:4] != _SEAL:
            raise StoreError(f"malformed value under {key!r} in the torch store ({len(raw)} B)")
        value = raw[36:]
        if not hmac.compare_digest(raw[4:36], self._mac(key, value)):
            raise PermissionError(f"the value under {key!r} was not written with this job's "
                                  f"token ({ENV_TOKEN} differs between ranks?)")
        return value


# ---------------------------------------------------------------- collectives
class HostGroup:
    """All-gather of small byte strings among the ranks of a job, through a store.

    Every rank must call :meth:`allgather` the same number of times (the
    calls are numbered); each waits at most ``timeout`` seconds for the others.
    """

    def __init__(self, store, rank: int, size: int, timeout: float = DEFAULT_TIMEOUT,
                 prefix: str = "cugather", server: Optional[StoreServer] = None):
        self.store, self.rank, self.size, self.timeout = store, rank, size, timeout
        self._prefix, self._seq, self._server = prefix, 0, server
        self._lock = threading.Lock()
        self._closed = False

    def allgather(self, value: bytes) -> list:
        with self._lock:
            seq = self._seq
            self._seq += 1
        key = f"{self._prefix}/ag{seq}/"
        self.store.set(key + str(self.rank), bytes(value))
        return [bytes(value) if q == self.rank else self.store.get(key + str(q), self.timeout)
                for q in range(self.size)]

    def close(self, wait: float = 30.0) -> None:
        """Leave the store; rank 0 serves it until every rank has left (``wait`` s at most)."""
        if self._closed:
            return
        self._closed = True
        key = f"{self._prefix}/left"
        try:
            left = self.store.add(key, 1) if hasattr(self.store, "add") else self.size
            deadline = time.monotonic() + wait
            while self._server is not None and left < self.size and time.monotonic() < deadline:
                time.sleep(0.02)
                left = self.store.add(key, 0)
        except (OSError, TimeoutError):  # the store is gone already: nothing to wait for
            pass
        close = getattr(self.store, "close", None)
        if close is not None:
            close()
        if self._server is not None:
            self._server.close()


class ThreadGroup:
    """All-gather among ``size`` threads of one process (single-process mode, tests).

    A thread that does not arrive within ``timeout`` seconds breaks the
    barrier: every waiting thread gets TimeoutError instead of hanging.
    """

    def __init__(self, size: int, timeout: float = DEFAULT_TIMEOUT):
        self.size, self.timeout = size, timeout
        self._barrier = threading.Barrier(size)
        self._slots: list = [None] * size

    def view(self, rank: int) -> "_ThreadRank":
        return _ThreadRank(self, rank)

    def abort(self) -> None:
        """Break the barrier: every waiting and arriving thread gets TimeoutError."""
        self._barrier.abort()

    def reset(self) -> None:
        self._barrier.reset()

    def _wait(self, what: str) -> None:
        try:
            self._barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            raise TimeoutError(f"{what}: not every rank arrived within {self.timeout:g} s "
                               f"(a rank failed or is not calling)") from None


class _ThreadRank:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.size = group, rank, group.size

    def allgather(self, value) -> list:
        g = self.group
        g._wait("allgather")          # nobody still reads the previous round's slots
        g._slots[self.rank] = value
        g._wait("allgather")
        return list(g._slots)

    def close(self) -> None:
        pass


def connect_store(env: JobEnv, timeout: float = DEFAULT_TIMEOUT, kind: str = "auto") -> HostGroup:
    """The job's :class:`HostGroup`: serve (rank 0) and join the store.

    ``kind``: ``"cugather"`` (own store on MASTER_ADDR:MASTER_PORT),
    ``"torch"`` (torchrun's agent store, as a client), or ``"auto"``
    (torch's when torchrun's agent serves one, else cugather's).
    """
    timeout = job_timeout(timeout)
    if kind == "auto":
        kind = "torch" if env.agent_store else "cugather"
    if kind == "torch":
        from datetime import timedelta

        import torch.distributed as dist

        if not env.agent_store:
            raise ValueError("store='torch' joins torchrun's agent store, and this process was "
                             "not started by torchrun with TORCHELASTIC_USE_AGENT_STORE=True")
        client = dist.TCPStore(env.master_addr, env.master_port, env.world_size, False,
                               timedelta(seconds=timeout))
        return HostGroup(TorchStore(client, env.token), env.rank, env.world_size, timeout,
                         prefix=f"cugather/attempt_{env.restart}")
    if kind != "cugather":
        raise ValueError(f"store must be 'auto', 'cugather' or 'torch', got {kind!r}")
    server = (StoreServer(env.master_addr, env.master_port, env.token, io_timeout=timeout,
                          sock=_inherited_listener(env), allow_weak_token=env.allow_weak_token)
              if env.rank == 0 else None)
    try:
        store = StoreClient(env.master_addr, env.master_port, env.token,
                            connect_timeout=timeout, io_timeout=min(timeout, 60.0),
                            allow_weak_token=env.allow_weak_token)
    except BaseException:
        if server is not None:
            server.close()
        raise
    return HostGroup(store, env.rank, env.world_size, timeout, server=server)


def _inherited_listener(env: JobEnv) -> Optional[socket.socket]:
    """The listening socket the launcher bound on MASTER_ADDR:MASTER_PORT, if it passed one."""
    if env.store_fd is None:
        return None
    try:
        sock = socket.socket(fileno=env.store_fd)
    except OSError as e:
        raise ValueError(f"{ENV_STORE_FD}={env.store_fd} is not an open socket ({e})") from None
    listening = sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_ACCEPTCONN", 30))
    port = sock.getsockname()[1] if sock.family in (socket.AF_INET, socket.AF_INET6) else None
    if sock.type != socket.SOCK_STREAM or not listening or port != env.master_port:
        sock.detach()
        raise ValueError(f"{ENV_STORE_FD}={env.store_fd} is not a TCP socket listening on "
                         f"MASTER_PORT={env.master_port}")
    return sock
