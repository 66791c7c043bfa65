"""A small TCP key-value store for the rendezvous: a job token, limits, timeouts.

Rank 0 serves it on ``MASTER_ADDR:MASTER_PORT`` -- that address only, never
every interface -- and every rank (rank 0 included) talks to it through a
:class:`StoreClient`.  It carries a few hundred bytes per rank (the NCCL
unique id, shard metadata, CUDA IPC handles), so it favours checks over
speed:

* both sides prove they hold the job token before anything else is said
  (:mod:`.wire`); a client refuses a server that cannot prove it;
* a connection that has not authenticated is a stranger: its handshake has
  one deadline for the whole frame, its frames are size-capped, at most
  ``max_pending`` strangers are served at once (any more are closed at
  once), and whatever it does -- a wrong token, junk, a port scanner's
  ``GET /``, one byte a second -- closes that connection only (logged and
  counted in :attr:`StoreServer.dropped`); the store carries on;
* only an authenticated rank can stop the store: a malformed frame from it
  stops it, and every later request of any rank fails with the reason;
* a request that cannot be done (an ``ADD`` overflowing int64) is answered
  with its error, as what it is, to that client alone;
* every wait has a deadline: connecting, each whole frame, waiting for a key.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import socket
import threading
import time
from typing import Optional

from . import wire
from .client import StoreClient
from .wire import (MAGIC, ADD, AUTH, ERROR, HELLO, MAX_KEY, MAX_VALUE, NONCE, OK, PRE_AUTH_VALUE,
                   REQUESTS, SET, VALUE, Hangup, StoreError, check_seconds, check_token, proof)

__all__ = ["StoreServer", "StoreClient", "StoreError", "MAX_KEY", "MAX_VALUE", "MAGIC"]

_log = logging.getLogger(__name__)
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: accept() errors that mean "out of descriptors or memory": back off instead of spinning.
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class _Violation(StoreError):
    """An authenticated rank broke the protocol: the store stops."""


class _RequestError(Exception):
    """A request that cannot be done; its text goes back to the client as ``Kind: message``."""


class StoreServer:
    """Serve a store on ``(host, port)`` (port 0: any free one) for one job.

    Parameters
    ----------
    host : str
        The address to listen on (``MASTER_ADDR``); nothing else is bound.
    port : int
    token : str
        The job token clients must prove they hold (see
        :func:`.wire.check_token` for the length rule).
    io_timeout : float
        Seconds an authenticated rank may take to send one whole frame.
    handshake_timeout : float, optional
        Seconds a new connection has for the whole handshake (default
        ``min(io_timeout, 10)``).
    max_pending : int
        Connections authenticating at once; any more are closed at once.
    max_clients : int
        Authenticated connections at once.
    sock : socket.socket, optional
        A listening socket bound to ``(host, port)`` already (the launcher
        binds it, so no other process can take the port in between).
    allow_weak_token : bool, optional
        Accept an empty or short token on loopback (default:
        ``CUGATHER_ALLOW_WEAK_TOKEN=1``).
    """

    def __init__(self, host: str, port: int, token: str, io_timeout: float = 30.0, *,
                 handshake_timeout: Optional[float] = None, max_pending: int = 32,
                 max_clients: int = 4096, sock: Optional[socket.socket] = None,
                 allow_weak_token: Optional[bool] = None):
        self._token = check_token(token, host, allow_weak_token)
        self._io_timeout = check_seconds("io_timeout", io_timeout)
        self._handshake_timeout = check_seconds(
            "handshake_timeout", min(self._io_timeout, 10.0) if handshake_timeout is None
            else handshake_timeout)
        for name, value in (("max_pending", max_pending), ("max_clients", max_clients)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self._listener = sock if sock is not None else _listen(host, port)
        self._listener.settimeout(0.2)
        self.address = self._listener.getsockname()[:2]
        self._data: dict = {}
        self._cond = threading.Condition()
        self._failure: Optional[str] = None
        self._stop = threading.Event()
        self._pending = threading.BoundedSemaphore(max_pending)
        self._clients = threading.BoundedSemaphore(max_clients)
        self.dropped = 0  # connections dropped before they authenticated
        self._thread = threading.Thread(target=self._serve, name="cugather-store", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def failure(self) -> Optional[str]:
        """Why the store stopped (an authenticated rank broke the protocol), or None."""
        return self._failure

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._listener.close()
        with self._cond:
            self._cond.notify_all()

    def _fail(self, reason: str) -> None:
        with self._cond:
            if self._failure is None:
                self._failure = reason
            self._cond.notify_all()

    def _drop(self, where: str, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 100 == 0:  # a flood must not flood the log too
            _log.warning("cugather store on %s:%s: dropped the connection from %s, which %s "
                         "(%d dropped so far)", *self.address, where, why, self.dropped)

    # ------------------------------------------------------------ accepting
    def _accept(self):
        return self._listener.accept()

    def _serve(self) -> None:
        pause = 0.0
        while not self._stop.is_set():
            try:
                sock, peer = self._accept()
            except TimeoutError:
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                # Out of descriptors: the pending connection stays queued; wait, do not spin.
                pause = min(max(2 * pause, 0.05), 1.0) if e.errno in _EXHAUSTED else 0.01
                if pause == 0.05:
                    _log.warning("cugather store: accept failed (%s); backing off", e)
                self._stop.wait(pause)
                continue
            pause = 0.0
            self._start(sock, f"{peer[0]}:{peer[1]}")

    def _start(self, sock: socket.socket, where: str) -> None:
        if not self._pending.acquire(blocking=False):
            sock.close()
            self._drop(where, "came while too many connections were authenticating")
            return
        try:
            threading.Thread(target=self._client, args=(sock, where), daemon=True).start()
        except BaseException as e:  # RuntimeError at the thread limit: drop it, keep serving
            self._pending.release()
            sock.close()
            self._drop(where, f"could not be given a thread ({e})")
            self._stop.wait(0.05)

    def _client(self, sock: socket.socket, where: str) -> None:
        with sock:
            try:
                ok = self._handshake(sock, where)
            finally:
                self._pending.release()
            if not ok:
                return
            if not self._clients.acquire(blocking=False):
                _try_send(sock, ERROR, b"StoreError: too many ranks are connected")
                return
            try:
                self._session(sock, where)
            except Exception:  # a bug must not kill the thread silently
                _log.exception("cugather store: serving %s failed", where)
            finally:
                self._clients.release()

    def _handshake(self, sock: socket.socket, where: str) -> bool:
        """Both sides prove they hold the token; False (logged) for anything else."""
        nonce_s = os.urandom(NONCE)
        try:
            sock.settimeout(self._handshake_timeout)
            wire.send(sock, HELLO, value=nonce_s)
            op, _, value = wire.recv(sock, self._handshake_timeout, max_key=0,
                                     max_value=PRE_AUTH_VALUE)
            if op != AUTH or len(value) != PRE_AUTH_VALUE:
                raise StoreError(f"malformed handshake: operation {op} with {len(value)} B, "
                                 f"expected AUTH with {PRE_AUTH_VALUE} B")
            nonce_c = value[:NONCE]
            if not hmac.compare_digest(value[NONCE:], proof(self._token, b"client", nonce_s,
                                                            nonce_c)):
                self._drop(where, "presented a wrong job token")
                _try_send(sock, ERROR, b"PermissionError: wrong job token")
                return False
            wire.send(sock, OK, value=proof(self._token, b"server", nonce_s, nonce_c))
            return True
        except Hangup:
            return False  # connected and closed: a health check, not an attack
        except StoreError as e:
            self._drop(where, f"sent {e}")
            _try_send(sock, ERROR, f"StoreError: {e}".encode())
        except TimeoutError:
            self._drop(where, f"did not finish the handshake within {self._handshake_timeout:g} s")
        except OSError as e:
            self._drop(where, f"failed ({e})")
        return False

    # ------------------------------------------------------------ serving a rank
    def _session(self, sock: socket.socket, where: str) -> None:
        while not self._stop.is_set():
            if not wire.wait_readable(sock, 0.5):
                continue  # a rank may idle between frames for as long as it likes
            try:
                op, key, value = wire.recv(sock, self._io_timeout)
                reply = self._answer(op, key, value)
            except Hangup:
                return
            except (StoreError, TimeoutError) as e:  # a rank broke the protocol: stop the job
                self._fail(f"the rank connected from {where} sent {e}")
                _try_send(sock, ERROR, f"StoreError: {e}".encode())
                return
            except OSError:  # reset: the rank exited
                return
            except _RequestError as e:
                reply = ERROR, b"", str(e).encode()[:MAX_VALUE]
            except Exception as e:  # the store's own bug: tell that client what it is
                _log.exception("cugather store: a request of %s failed", where)
                reply = ERROR, b"", f"StoreError: {type(e).__name__}: {e}".encode()[:MAX_VALUE]
            try:
                sock.settimeout(self._io_timeout)
                wire.send(sock, *reply)
            except OSError:
                return

    def _answer(self, op: int, key: bytes, value: bytes) -> tuple:
        if op not in REQUESTS:
            raise _Violation(f"malformed frame: operation {op} is not a request")
        if op != SET and len(value) != 8:
            raise _Violation(f"malformed frame: {'ADD' if op == ADD else 'GET'} takes 8 bytes, "
                             f"got {len(value)}")
        with self._cond:
            if self._failure is not None:
                return ERROR, b"", f"StoreError: the store stopped: {self._failure}".encode()
            if op == SET:
                self._data[key] = value
                self._cond.notify_all()
                return OK, b"", b""
            if op == ADD:
                old = int.from_bytes(self._data.get(key, bytes(8)), "little", signed=True)
                delta = int.from_bytes(value, "little", signed=True)
                if not _INT64[0] <= old + delta <= _INT64[1]:
                    raise _RequestError(f"OverflowError: ADD of {delta} to {_text(key)!r} (holding "
                                        f"{old}) overflows int64; the value is unchanged")
                self._data[key] = (old + delta).to_bytes(8, "little", signed=True)
                self._cond.notify_all()
                return VALUE, b"", self._data[key]
            return self._wait(key, int.from_bytes(value, "little") / 1e3)

    def _wait(self, key: bytes, seconds: float) -> tuple:
        deadline = time.monotonic() + seconds
        while key not in self._data and self._failure is None and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return ERROR, b"", b"TimeoutError: timeout"
            self._cond.wait(min(left, 0.5))
        if self._failure is not None:
            return ERROR, b"", f"StoreError: the store stopped: {self._failure}".encode()
        if key not in self._data:
            return ERROR, b"", b"StoreError: the store is shutting down"
        return VALUE, b"", self._data[key]


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``(host, port)``; OSError names both."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(f"MASTER_ADDR {host!r} does not resolve ({e})") from None
    family, _, _, _, address = infos[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen(128)
    except OSError as e:
        listener.close()
        raise OSError(f"cannot serve the rendezvous store on {host}:{port}: {e}") from e
    return listener


def _text(key: bytes) -> str:
    return key.decode(errors="replace")


def _try_send(sock: socket.socket, op: int, value: bytes) -> None:
    try:
        sock.settimeout(1.0)
        wire.send(sock, op, value=value[:MAX_VALUE])
    except OSError:
        pass
