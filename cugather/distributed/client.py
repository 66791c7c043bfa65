"""One rank's connection to the rendezvous store (:class:`StoreClient`)."""

from __future__ import annotations

import hmac
import operator
import os
import socket
import threading
import time
from typing import Optional

from . import wire
from .wire import (ADD, AUTH, ERROR, GET, HELLO, MAX_KEY, MAX_VALUE, NONCE, OK, SET, VALUE,
                   Hangup, StoreError, check_seconds, check_token, proof)

__all__ = ["StoreClient"]

#: Error kinds the server names (``Kind: message``), raised as what they are.
_KINDS = {"OverflowError": OverflowError, "ValueError": ValueError, "StoreError": StoreError}


class StoreClient:
    """One rank's connection to a :class:`~.store.StoreServer` (thread-safe).

    Connecting retries until ``connect_timeout`` (the server may start after
    the client, or be busy with strangers); a server that cannot prove it
    holds the job token, or refuses this one, raises PermissionError at once;
    a stalled handshake or request raises TimeoutError naming host and port,
    anything malformed or refused :class:`~.wire.StoreError`.

    Parameters
    ----------
    host, port
        The store's address (``MASTER_ADDR``, ``MASTER_PORT``).
    token : str
        The job token.
    connect_timeout : float
        Seconds to keep trying to connect and authenticate.
    io_timeout : float
        Seconds the store may take to answer one request (on top of the wait
        a ``get`` asks for).
    allow_weak_token : bool, optional
        Accept an empty or short token on loopback (default:
        ``CUGATHER_ALLOW_WEAK_TOKEN=1``).
    """

    def __init__(self, host: str, port: int, token: str, connect_timeout: float = 300.0,
                 io_timeout: float = 30.0, *, allow_weak_token: Optional[bool] = None):
        check_token(token, host, allow_weak_token)
        connect_timeout = check_seconds("connect_timeout", connect_timeout, zero=True)
        self._io_timeout = check_seconds("io_timeout", io_timeout)
        self.host, self.port = host, port
        self._where = f"{host}:{port}"
        self._lock = threading.Lock()
        self._broken: Optional[str] = None
        deadline = time.monotonic() + connect_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                self._sock = self._connect(token, min(self._io_timeout, max(left, 0.1)))
                return
            except (PermissionError, _Malformed):
                raise
            except OSError as e:  # refused, dropped, stalled: the server may not be up yet
                if time.monotonic() + 0.1 > deadline:
                    raise TimeoutError(f"no rendezvous store answered at {self._where} within "
                                       f"{connect_timeout:g} s ({e})") from None
                time.sleep(0.1)

    def _connect(self, token: str, seconds: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=seconds)
        try:
            op, _, nonce_s = self._handshake_frame(sock, seconds, NONCE)
            if op != HELLO or len(nonce_s) != NONCE:
                raise _Malformed(f"malformed greeting from {self._where} (operation {op})")
            nonce_c = os.urandom(NONCE)
            wire.send(sock, AUTH, value=nonce_c + proof(token, b"client", nonce_s, nonce_c))
            op, _, answer = self._handshake_frame(sock, seconds, 4096)
            if op == ERROR:
                self._raise(answer, "")
            if op != OK or not hmac.compare_digest(answer, proof(token, b"server", nonce_s,
                                                                 nonce_c)):
                raise PermissionError(
                    f"the process serving {self._where} could not prove that it holds the job "
                    f"token: it is not this job's rank 0 (another job, or a process squatting "
                    f"on MASTER_PORT); nothing was sent to it")
            return sock
        except BaseException:
            sock.close()
            raise

    def _handshake_frame(self, sock: socket.socket, seconds: float, max_value: int) -> tuple:
        try:
            return wire.recv(sock, seconds, max_key=0, max_value=max_value)
        except TimeoutError:
            raise TimeoutError(f"the rendezvous store at {self._where} did not complete the "
                               f"handshake within {seconds:g} s") from None
        except Hangup:
            raise ConnectionResetError(f"{self._where} closed the connection during the "
                                       f"handshake") from None
        except StoreError as e:
            raise _Malformed(f"{self._where} is not a cugather store of this version: {e}") from None

    def close(self) -> None:
        self._sock.close()

    def _raise(self, answer: bytes, key: str, wait: float = 0.0):
        text = answer.decode(errors="replace")
        kind, sep, message = text.partition(": ")
        if kind == "PermissionError":
            raise PermissionError(f"the rendezvous store at {self._where} refused this "
                                  f"process's job token (CUGATHER_JOB_TOKEN differs from the "
                                  f"job's)")
        if kind == "TimeoutError":
            raise TimeoutError(f"no rank published {key!r} within {wait:g} s")
        cls = _KINDS.get(kind) if sep else None
        raise (cls or StoreError)(f"rendezvous store at {self._where}: "
                                  f"{message if cls else text}")

    def _request(self, op: int, key: str, value: bytes, wait: float = 0.0) -> bytes:
        k = key.encode()
        if len(k) > MAX_KEY or len(value) > MAX_VALUE:
            raise ValueError(f"store key {key!r} or its value ({len(value)} B) is too long "
                             f"(at most {MAX_KEY} / {MAX_VALUE} B)")
        with self._lock:
            if self._broken is not None:
                raise StoreError(f"the connection to the rendezvous store at {self._where} "
                                 f"was lost earlier: {self._broken}")
            try:
                self._sock.settimeout(self._io_timeout)
                wire.send(self._sock, op, k, value)
                rop, _, answer = wire.recv(self._sock, self._io_timeout + wait)
            except TimeoutError:
                self._lost(f"no answer about {key!r}")
                raise TimeoutError(f"the rendezvous store at {self._where} did not answer "
                                   f"about {key!r} within {self._io_timeout + wait:g} s") from None
            except (Hangup, ConnectionResetError, BrokenPipeError):
                self._lost("closed")
                raise StoreError(f"the rendezvous store at {self._where} closed the "
                                 f"connection (did rank 0 exit?)") from None
            except StoreError as e:
                self._lost(str(e))
                raise StoreError(f"the rendezvous store at {self._where} sent {e}") from None
        if rop == ERROR:
            self._raise(answer, key, wait)
        if rop not in (OK, VALUE):
            raise StoreError(f"malformed reply from the store (operation {rop})")
        return answer

    def _lost(self, why: str) -> None:
        # A late answer would be read as the next request's: never reuse this connection.
        self._broken = why
        self._sock.close()

    def set(self, key: str, value: bytes) -> None:
        self._request(SET, key, bytes(value))

    def get(self, key: str, timeout: float) -> bytes:
        """The value of ``key``, waiting up to ``timeout`` seconds (finite, >= 0) for a rank to set it."""
        seconds = check_seconds("timeout", timeout, zero=True)
        ms = min(int(seconds * 1e3), (1 << 64) - 1)
        return self._request(GET, key, ms.to_bytes(8, "little"), wait=seconds)

    def add(self, key: str, delta: int) -> int:
        """Add ``delta`` (an int64) to the integer under ``key``; the new value."""
        try:
            d = operator.index(delta)
        except TypeError:
            raise TypeError(f"delta must be an integer, got {type(delta).__name__}") from None
        if not -(1 << 63) <= d < 1 << 63:
            raise ValueError(f"delta must fit in int64, got {d}")
        return int.from_bytes(self._request(ADD, key, d.to_bytes(8, "little", signed=True)),
                              "little", signed=True)


class _Malformed(StoreError):
    """The other side speaks no (or another version of the) store protocol: no retry."""
