"""The rendezvous store's wire: frames, deadlines, the two-way handshake, token rules.

A frame is ``!4sBBHI`` (magic, version, operation, key bytes, value bytes)
followed by the key and the value.  Every read of a frame has one deadline
for the whole frame (not one per ``recv``), and every frame is checked
before its body is read: magic, version, operation and sizes, with a far
smaller size limit before the peer has authenticated.

The handshake proves to *both* sides that the other holds the job token::

    server -> HELLO  nonce_s (32 B)
    client -> AUTH   nonce_c (32 B) + HMAC(token, "client" | nonce_s | nonce_c)
    server -> OK     HMAC(token, "server" | nonce_s | nonce_c)   (or ERROR, then close)

The server answers only after the client's proof holds, so a stranger learns
nothing; the client checks the server's proof before it sends anything else,
so a process squatting on the port cannot pose as rank 0.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import select
import struct
import time
from typing import Mapping, Optional, Tuple

__all__ = ["MAGIC", "VERSION", "MAX_KEY", "MAX_VALUE", "NONCE", "MIN_TOKEN", "ENV_WEAK_TOKEN",
           "StoreError", "Hangup", "check_token", "check_seconds", "is_loopback",
           "weak_token_allowed", "proof", "send", "recv", "wait_readable"]

MAGIC = b"CGST"
VERSION = 2
MAX_KEY = 512
MAX_VALUE = 1 << 20
NONCE = 32
#: Shortest job token accepted (launcher tokens are 32 hex digits, 128 bits).
MIN_TOKEN = 16
#: Set to 1 to allow an empty or short token on a loopback address (never elsewhere).
ENV_WEAK_TOKEN = "CUGATHER_ALLOW_WEAK_TOKEN"
HEAD = struct.Struct("!4sBBHI")
HELLO, AUTH, SET, GET, ADD, OK, VALUE, ERROR = range(1, 9)
REQUESTS = (SET, GET, ADD)
#: Largest frame a connection may send before it has authenticated (the AUTH frame).
PRE_AUTH_VALUE = NONCE + hashlib.sha256().digest_size


class StoreError(ConnectionError):
    """The store refused a request, stopped, or sent something malformed."""


class Hangup(StoreError):
    """The peer closed the connection between frames."""


def is_loopback(addr: str) -> bool:
    """Whether ``addr`` names this host's loopback interface only."""
    import ipaddress

    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def check_seconds(name: str, value: object, *, zero: bool = False) -> float:
    """``value`` as a finite number of seconds, > 0 (>= 0 with ``zero``); ValueError names it."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0 or (
            seconds == 0 and not zero):
        raise ValueError(f"{name} must be a finite number of seconds {'>=' if zero else '>'} 0, "
                         f"got {value!r}")
    return seconds


def weak_token_allowed(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``CUGATHER_ALLOW_WEAK_TOKEN`` opts out of the token length rule (loopback only)."""
    text = (os.environ if environ is None else environ).get(ENV_WEAK_TOKEN, "")
    if text not in ("", "0", "1"):
        raise ValueError(f"{ENV_WEAK_TOKEN} must be 0 or 1, got {text!r}")
    return text == "1"


def check_token(token: object, host: str, allow_weak: Optional[bool] = None,
                environ: Optional[Mapping[str, str]] = None) -> str:
    """``token`` if it may guard a store on ``host``, else ValueError saying why.

    An empty or short token (fewer than :data:`MIN_TOKEN` characters) is
    refused off loopback always, and on loopback unless ``allow_weak`` (default:
    ``CUGATHER_ALLOW_WEAK_TOKEN=1``) says the user accepts that any local
    process may join.
    """
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    if len(token) >= MIN_TOKEN:
        return token
    what = "empty" if not token else f"only {len(token)} characters long"
    if not is_loopback(host):
        raise ValueError(
            f"CUGATHER_JOB_TOKEN is {what} and the store address {host} is not a loopback "
            f"address: give every rank the same secret token of at least {MIN_TOKEN} "
            f"characters (python -m cugather.distributed.run makes one)")
    if allow_weak is None:
        allow_weak = weak_token_allowed(environ)
    if not allow_weak:
        raise ValueError(
            f"CUGATHER_JOB_TOKEN is {what}: every local user could join the store on {host}. "
            f"Give every rank the same secret token of at least {MIN_TOKEN} characters "
            f"(python -m cugather.distributed.run makes one), or set {ENV_WEAK_TOKEN}=1 to "
            f"accept that")
    return token


def proof(token: str, side: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    """HMAC-SHA256 of the job token over who proves (``b"client"``/``b"server"``) and both nonces."""
    return hmac.new(token.encode(), b"cugather-store/" + side + b"/" + nonce_s + nonce_c,
                    hashlib.sha256).digest()


def send(sock, op: int, key: bytes = b"", value: bytes = b"") -> None:
    sock.sendall(HEAD.pack(MAGIC, VERSION, op, len(key), len(value)) + key + value)


def wait_readable(sock, seconds: float) -> bool:
    """Whether ``sock`` has data (or a hangup) within ``seconds``."""
    if hasattr(select, "poll"):  # select() cannot watch descriptors past FD_SETSIZE
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(max(0, int(seconds * 1e3))))
    return bool(select.select([sock], [], [], max(0.0, seconds))[0])


def _recv_exact(sock, n: int, deadline: float) -> bytes:
    parts, left = [], n
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"a frame did not arrive whole in time ({n - left} of {n} bytes)")
        sock.settimeout(min(remaining, 3600.0))  # settimeout refuses the largest floats
        try:
            chunk = sock.recv(min(left, 1 << 16))
        except TimeoutError:
            continue  # the loop's own deadline decides
        if not chunk:
            if left == n:
                raise Hangup("connection closed")
            raise StoreError(f"connection closed after {n - left} of {n} bytes")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def recv(sock, seconds: float, max_key: int = MAX_KEY,
         max_value: int = MAX_VALUE) -> Tuple[int, bytes, bytes]:
    """(op, key, value) of one frame, all of it within ``seconds``.

    Raises TimeoutError when the frame is not whole in time, :class:`Hangup`
    when the peer closed before the frame began, and :class:`StoreError`
    naming what is malformed (checked before the body is read).
    """
    deadline = time.monotonic() + seconds
    magic, version, op, klen, vlen = HEAD.unpack(_recv_exact(sock, HEAD.size, deadline))
    if magic != MAGIC:
        raise StoreError(f"malformed frame: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise StoreError(f"malformed frame: protocol version {version}, expected {VERSION}")
    if not HELLO <= op <= ERROR:
        raise StoreError(f"malformed frame: unknown operation {op}")
    if klen > max_key or vlen > max_value:
        raise StoreError(f"malformed frame: key of {klen} B or value of {vlen} B exceeds "
                         f"{max_key} / {max_value} B")
    try:
        return op, _recv_exact(sock, klen, deadline), _recv_exact(sock, vlen, deadline)
    except Hangup:
        raise StoreError(f"malformed frame: closed before its {klen + vlen} bytes") from None
