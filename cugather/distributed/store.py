"""A small TCP key-value store for the rendezvous: a job token, limits, timeouts.

Rank 0 serves it on ``MASTER_ADDR:MASTER_PORT`` -- that address only, never
every interface -- and every rank (rank 0 included) talks to it through a
:class:`StoreClient`.  It carries a few hundred bytes per rank (the NCCL
unique id, shard metadata, CUDA IPC handles), so it favours checks over
speed:

* every connection starts with a challenge: the server sends a random nonce
  and the client answers with HMAC-SHA256(job token, nonce); a wrong answer
  is refused;
* every frame is checked (magic, version, operation, key and value sizes);
* a wrong token or a malformed frame stops the store: the offending client
  gets the reason, and every later request of any rank fails with it, so the
  job stops with a clear error instead of mixing with a stranger;
* every wait has a deadline: connecting, reading a frame, waiting for a key.

Frames: ``!4sBBHI`` (magic, version, operation, key bytes, value bytes),
then the key and the value.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import threading
import time
from typing import Optional

__all__ = ["StoreServer", "StoreClient", "StoreError", "MAX_KEY", "MAX_VALUE"]

MAGIC = b"CGST"
VERSION = 1
MAX_KEY = 512
MAX_VALUE = 1 << 20
_HEAD = struct.Struct("!4sBBHI")
HELLO, AUTH, SET, GET, ADD, OK, VALUE, ERROR = range(1, 9)
_REQUESTS = (SET, GET, ADD)


class StoreError(ConnectionError):
    """The store refused a request, stopped, or sent something malformed."""


class _Hangup(StoreError):
    """The peer closed the connection between frames."""


def _proof(token: str, nonce: bytes) -> bytes:
    return hmac.new(token.encode(), b"cugather-store/" + nonce, hashlib.sha256).digest()


def _send(sock, op: int, key: bytes = b"", value: bytes = b"") -> None:
    sock.sendall(_HEAD.pack(MAGIC, VERSION, op, len(key), len(value)) + key + value)


def _recv_exact(sock, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            if left == n:
                raise _Hangup("connection closed")
            raise StoreError(f"connection closed after {n - left} of {n} bytes")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _recv(sock) -> tuple:
    """(op, key, value) of one frame; StoreError names what is malformed."""
    magic, version, op, klen, vlen = _HEAD.unpack(_recv_exact(sock, _HEAD.size))
    if magic != MAGIC:
        raise StoreError(f"malformed frame: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise StoreError(f"malformed frame: protocol version {version}, expected {VERSION}")
    if not HELLO <= op <= ERROR:
        raise StoreError(f"malformed frame: unknown operation {op}")
    if klen > MAX_KEY or vlen > MAX_VALUE:
        raise StoreError(f"malformed frame: key of {klen} B or value of {vlen} B exceeds "
                         f"{MAX_KEY} / {MAX_VALUE} B")
    try:
        return op, _recv_exact(sock, klen), _recv_exact(sock, vlen)
    except _Hangup:
        raise StoreError(f"malformed frame: closed before its {klen + vlen} bytes") from None


class StoreServer:
    """Serve a store on ``(host, port)`` (port 0: any free one) for one job.

    Parameters
    ----------
    host : str
        The address to listen on (``MASTER_ADDR``); nothing else is bound.
    port : int
    token : str
        The job token clients must prove they hold.
    io_timeout : float
        Seconds a connection may take to send a whole frame.
    """

    def __init__(self, host: str, port: int, token: str, io_timeout: float = 30.0):
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"MASTER_ADDR {host!r} resolves to no address")
        family, _, _, _, address = infos[0]
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(address)
        except OSError as e:
            self._listener.close()
            raise OSError(f"cannot serve the rendezvous store on {host}:{port}: {e}") from e
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.address = self._listener.getsockname()[:2]
        self._token, self._io_timeout = token, io_timeout
        self._data: dict = {}
        self._cond = threading.Condition()
        self._failure: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cugather-store", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def failure(self):
        """Why the store stopped (a wrong token or a malformed frame), or None."""
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

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                sock, peer = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._client, args=(sock, peer), daemon=True).start()

    def _client(self, sock, peer) -> None:
        where = f"{peer[0]}:{peer[1]}"
        with sock:
            sock.settimeout(self._io_timeout)
            try:
                nonce = os.urandom(32)
                _send(sock, HELLO, value=nonce)
                op, _, proof = _recv(sock)
                if op != AUTH or not hmac.compare_digest(proof, _proof(self._token, nonce)):
                    reason = f"a connection from {where} presented a wrong job token"
                    self._fail(reason)
                    _send(sock, ERROR, value=b"wrong job token")
                    return
                while not self._stop.is_set():
                    op, key, value = _recv(sock)
                    _send(sock, *self._answer(op, key, value))
            except _Hangup:
                return  # closed between frames (or before proving anything): not an attack
            except StoreError as e:
                self._fail(f"{where} sent {e}")
                try:
                    _send(sock, ERROR, value=str(e).encode()[:MAX_VALUE])
                except OSError:
                    pass
            except (OSError, struct.error):
                return

    def _answer(self, op: int, key: bytes, value: bytes) -> tuple:
        if op not in _REQUESTS:
            raise StoreError(f"malformed frame: operation {op} is not a request")
        with self._cond:
            if self._failure is not None:
                return ERROR, b"", f"the store stopped: {self._failure}".encode()
            if op == SET:
                self._data[key] = value
                self._cond.notify_all()
                return OK, b"", b""
            if op == ADD:
                if len(value) != 8:
                    raise StoreError("malformed frame: ADD takes an 8-byte integer")
                total = int.from_bytes(self._data.get(key, bytes(8)), "little", signed=True)
                total += int.from_bytes(value, "little", signed=True)
                self._data[key] = total.to_bytes(8, "little", signed=True)
                self._cond.notify_all()
                return VALUE, b"", self._data[key]
            if len(value) != 8:
                raise StoreError("malformed frame: GET takes an 8-byte timeout")
            deadline = time.monotonic() + int.from_bytes(value, "little") / 1e3
            while key not in self._data and self._failure is None and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return ERROR, b"", b"timeout"
                self._cond.wait(min(left, 0.5))
            if self._failure is not None:
                return ERROR, b"", f"the store stopped: {self._failure}".encode()
            if key not in self._data:
                return ERROR, b"", b"the store is shutting down"
            return VALUE, b"", self._data[key]


class StoreClient:
    """One rank's connection to a :class:`StoreServer` (thread-safe).

    Connecting retries until ``connect_timeout`` (the server may start after
    the client); a wrong token raises PermissionError, anything malformed or
    refused :class:`StoreError`, a missing key TimeoutError.
    """

    def __init__(self, host: str, port: int, token: str, connect_timeout: float = 300.0,
                 io_timeout: float = 30.0):
        self.host, self.port, self._io_timeout = host, port, io_timeout
        self._lock = threading.Lock()
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=io_timeout)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no rendezvous store answered at {host}:{port} within "
                                       f"{connect_timeout:g} s ({e})") from None
                time.sleep(0.1)
        self._sock = sock
        try:
            op, _, nonce = _recv(sock)
            if op != HELLO or len(nonce) != 32:
                raise StoreError(f"malformed greeting from {host}:{port} (operation {op})")
            _send(sock, AUTH, value=_proof(token, nonce))
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def _request(self, op: int, key: str, value: bytes, wait: float = 0.0) -> bytes:
        k = key.encode()
        if len(k) > MAX_KEY or len(value) > MAX_VALUE:
            raise ValueError(f"store key {key!r} or its value ({len(value)} B) is too long")
        with self._lock:
            self._sock.settimeout(self._io_timeout + wait)
            try:
                _send(self._sock, op, k, value)
                rop, _, answer = _recv(self._sock)
            except socket.timeout:
                raise TimeoutError(f"the rendezvous store did not answer about {key!r}") from None
            except (_Hangup, ConnectionResetError, BrokenPipeError):
                raise StoreError(f"the rendezvous store at {self.host}:{self.port} closed the "
                                 f"connection (did rank 0 exit?)") from None
        if rop == ERROR:
            text = answer.decode(errors="replace")
            if text == "wrong job token":
                raise PermissionError(
                    f"the rendezvous store at {self.host}:{self.port} refused this process's "
                    f"job token (CUGATHER_JOB_TOKEN differs from the job's)")
            if text == "timeout":
                raise TimeoutError(f"no rank published {key!r} within {wait:g} s")
            raise StoreError(f"rendezvous store at {self.host}:{self.port}: {text}")
        if rop not in (OK, VALUE):
            raise StoreError(f"malformed reply from the store (operation {rop})")
        return answer

    def set(self, key: str, value: bytes) -> None:
        self._request(SET, key, bytes(value))

    def get(self, key: str, timeout: float) -> bytes:
        """The value of ``key``, waiting up to ``timeout`` seconds for a rank to set it."""
        return self._request(GET, key, int(timeout * 1e3).to_bytes(8, "little"), wait=timeout)

    def add(self, key: str, delta: int) -> int:
        return int.from_bytes(self._request(ADD, key, int(delta).to_bytes(8, "little", signed=True)),
                              "little", signed=True)
