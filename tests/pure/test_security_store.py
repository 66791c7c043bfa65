"""The rendezvous store against strangers: what a bad connection can and cannot do.

Loopback only; every connection has a short timeout and every loop a bound
in count and time, so a regression fails instead of hanging.
"""

import errno
import math
import os
import socket
import struct
import threading
import time

import pytest

from cugather.distributed import store as store_module
from cugather.distributed import wire
from cugather.distributed.rendezvous import read_env
from cugather.distributed.store import StoreClient, StoreError, StoreServer

TOKEN = "a-secret-job-token-for-tests"
HEAD = struct.Struct("!4sBBHI")


@pytest.fixture
def server():
    srv = StoreServer("127.0.0.1", 0, TOKEN, io_timeout=5, handshake_timeout=1)
    yield srv
    srv.close()


def _client(srv, token=TOKEN, **kw):
    kw.setdefault("connect_timeout", 5)
    return StoreClient("127.0.0.1", srv.port, token, io_timeout=5, **kw)


def _raw(port, greet=True):
    sock = socket.create_connection(("127.0.0.1", port), timeout=3)
    if greet:
        op, _, nonce = wire.recv(sock, 3)
        assert op == wire.HELLO and len(nonce) == wire.NONCE
        return sock, nonce
    return sock, None


def _authenticated(port):
    """A raw socket past the handshake, as a rank's client would be."""
    sock, nonce_s = _raw(port)
    nonce_c = os.urandom(wire.NONCE)
    wire.send(sock, wire.AUTH, value=nonce_c + wire.proof(TOKEN, b"client", nonce_s, nonce_c))
    op, _, answer = wire.recv(sock, 3)
    assert op == wire.OK and answer == wire.proof(TOKEN, b"server", nonce_s, nonce_c)
    return sock


def _closed_within(sock, seconds):
    """Whether the peer closed ``sock`` within ``seconds`` (reads at most 100 times)."""
    deadline = time.monotonic() + seconds
    for _ in range(100):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if not sock.recv(4096):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    return False


# ---------------------------------------------------------------- finding 1
@pytest.mark.parametrize("payload", [
    b"\x00",                                       # one stray byte
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",           # a port scanner
    HEAD.pack(b"XXXX", 2, 2, 0, 0),                 # a malformed header
    HEAD.pack(wire.MAGIC, 2, wire.AUTH, 0, 64) + bytes(64),  # a wrong token
    HEAD.pack(wire.MAGIC, 2, wire.SET, 1, 1) + b"kv",        # a request before authenticating
])
def test_a_stranger_cannot_stop_the_store(server, payload):
    good = _client(server)
    good.set("k", b"v")
    sock, _ = _raw(server.port)
    with sock:
        sock.sendall(payload)
        assert _closed_within(sock, 3)
    assert server.failure is None and server.dropped >= 1
    assert good.get("k", timeout=1) == b"v"
    assert _client(server).get("k", timeout=1) == b"v"


def test_only_an_authenticated_rank_can_stop_the_store(server):
    good = _client(server)
    with _authenticated(server.port) as rank:
        wire.send(rank, 77)  # not an operation
        op, _, reason = wire.recv(rank, 3)
    assert op == wire.ERROR and b"unknown operation" in reason
    assert "unknown operation" in server.failure
    with pytest.raises(StoreError, match="store stopped.*unknown operation"):
        good.get("k", timeout=1)


# ---------------------------------------------------------------- finding 2
def test_the_accept_loop_survives_when_no_thread_can_start(server, monkeypatch):
    start, failures = threading.Thread.start, {"left": 2}

    def start_or_fail(thread):
        if getattr(thread, "_target", None) == server._client and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("can't start new thread")
        return start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_or_fail)
    for _ in range(2):
        sock, _ = _raw(server.port, greet=False)
        with sock:
            assert _closed_within(sock, 3)
    assert failures["left"] == 0
    c = _client(server)  # the listener is still served
    c.set("k", b"v")
    assert c.get("k", timeout=1) == b"v"


# ---------------------------------------------------------------- finding 3
def test_a_slow_handshake_is_cut_at_the_whole_frame_deadline(server):
    sock, _ = _raw(server.port)
    frame = HEAD.pack(wire.MAGIC, 2, wire.AUTH, 0, 64) + bytes(64)
    start = time.monotonic()
    with sock:
        for byte in frame[:40]:  # one byte every 0.1 s: each recv alone is quick
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if time.monotonic() - start > 3:
                break
            time.sleep(0.1)
        assert _closed_within(sock, 3)
    assert time.monotonic() - start < 2.5  # the 1 s handshake deadline, not 40 x 0.1 s
    assert server.failure is None


def test_strangers_are_capped_and_a_rank_still_gets_in():
    srv = StoreServer("127.0.0.1", 0, TOKEN, io_timeout=5, handshake_timeout=0.5,
                      max_pending=3)
    before = threading.active_count()
    socks = []
    try:
        for _ in range(10):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=3))
        time.sleep(0.2)
        assert threading.active_count() - before <= 3  # one thread per pending stranger
        shut = sum(_closed_within(s, 0.3) for s in socks[3:])
        assert shut >= 6 and srv.dropped >= 6
        c = _client(srv)  # retries until the silent strangers' deadline frees a slot
        c.set("k", b"v")
        assert c.get("k", timeout=1) == b"v" and srv.failure is None
    finally:
        for s in socks:
            s.close()
        srv.close()


def test_an_oversized_frame_before_authentication_is_refused_unread(server):
    sock, _ = _raw(server.port)
    with sock:
        sock.sendall(HEAD.pack(wire.MAGIC, 2, wire.AUTH, 0, 1 << 20))  # 1 MiB announced
        op, _, reason = wire.recv(sock, 2)
        assert op == wire.ERROR and b"exceeds" in reason
        assert _closed_within(sock, 2)
    assert server.failure is None


def test_accept_backs_off_when_descriptors_run_out(monkeypatch):
    calls = []

    def exhausted(self):
        calls.append(time.monotonic())
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(StoreServer, "_accept", exhausted)
    srv = StoreServer("127.0.0.1", 0, TOKEN, io_timeout=5)
    time.sleep(1.0)
    srv.close()
    assert 1 <= len(calls) <= 20  # a spinning loop makes thousands of calls a second


# ---------------------------------------------------------------- finding 4
def test_short_or_empty_tokens_are_refused_off_loopback_always():
    for host in ("0.0.0.0", "10.1.2.3"):
        for token in ("", "short"):
            with pytest.raises(ValueError, match="not a loopback address"):
                StoreServer(host, 0, token, allow_weak_token=True)
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "0.0.0.0", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_USE_AGENT_STORE": "False"}
    with pytest.raises(ValueError, match="CUGATHER_JOB_TOKEN is empty"):
        read_env(env)
    with pytest.raises(ValueError, match="only 5 characters"):
        read_env(dict(env, CUGATHER_JOB_TOKEN="short", CUGATHER_ALLOW_WEAK_TOKEN="1"))


def test_on_loopback_a_weak_token_needs_an_explicit_opt_out(monkeypatch):
    monkeypatch.delenv("CUGATHER_ALLOW_WEAK_TOKEN", raising=False)
    with pytest.raises(ValueError, match="CUGATHER_ALLOW_WEAK_TOKEN=1"):
        StoreServer("127.0.0.1", 0, "")
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    with pytest.raises(ValueError, match="CUGATHER_JOB_TOKEN is empty"):
        read_env(env)
    with pytest.raises(ValueError, match="CUGATHER_ALLOW_WEAK_TOKEN must be 0 or 1, got 'yes'"):
        read_env(dict(env, CUGATHER_ALLOW_WEAK_TOKEN="yes"))
    assert read_env(dict(env, CUGATHER_ALLOW_WEAK_TOKEN="1")).allow_weak_token
    monkeypatch.setenv("CUGATHER_ALLOW_WEAK_TOKEN", "1")
    srv = StoreServer("127.0.0.1", 0, "")
    try:
        StoreClient("127.0.0.1", srv.port, "", connect_timeout=5).set("k", b"v")
    finally:
        srv.close()


# ---------------------------------------------------------------- finding 5
def _fake_server(answer):
    """A listener that greets like a store, reads the AUTH frame and answers ``answer(proof)``;
    records whatever the client sends after that."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    seen = {}

    def serve():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            wire.send(conn, wire.HELLO, value=os.urandom(wire.NONCE))
            _, _, auth = wire.recv(conn, 3)
            wire.send(conn, wire.OK, value=answer(auth[wire.NONCE:]))
            conn.settimeout(1)
            try:
                seen["after"] = conn.recv(4096)
            except OSError:
                seen["after"] = b""

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread, seen


@pytest.mark.parametrize("answer", [lambda p: os.urandom(32), lambda p: p],
                         ids=["random proof", "the client's own proof"])
def test_a_client_refuses_a_server_that_cannot_prove_the_token(answer):
    listener, thread, seen = _fake_server(answer)
    with listener:
        with pytest.raises(PermissionError, match="could not prove"):
            StoreClient("127.0.0.1", listener.getsockname()[1], TOKEN, connect_timeout=3,
                        io_timeout=3)
        thread.join(5)
    assert seen.get("after") == b""  # nothing (no record, no key) reached the impostor


# ---------------------------------------------------------------- finding 9
def test_an_add_overflow_reaches_that_client_and_the_store_carries_on(server):
    c = _client(server)
    c.add("n", (1 << 63) - 1)
    with pytest.raises(OverflowError, match="overflows int64"):
        c.add("n", 1)
    assert c.add("n", 0) == (1 << 63) - 1 and server.failure is None
    with pytest.raises(ValueError, match="delta must fit in int64"):
        c.add("n", 1 << 63)


@pytest.mark.parametrize("timeout", [-1, math.inf, math.nan, "soon"])
def test_get_timeouts_are_checked(server, timeout):
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds >= 0"):
        _client(server).get("k", timeout=timeout)


def test_a_stalled_handshake_names_host_and_port():
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never speaks
    port = listener.getsockname()[1]
    start = time.monotonic()
    with listener:
        with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}.*handshake"):
            StoreClient("127.0.0.1", port, TOKEN, connect_timeout=0.5, io_timeout=0.3)
    assert time.monotonic() - start < 3


def test_an_internal_error_reaches_the_client_and_the_store_carries_on(server, monkeypatch):
    c = _client(server)

    def broken(key, seconds):
        raise KeyError("a bug")

    monkeypatch.setattr(server, "_wait", broken)
    with pytest.raises(StoreError, match="KeyError"):
        c.get("k", timeout=1)
    monkeypatch.undo()
    c2 = _client(server)
    c2.set("k", b"v")
    assert c2.get("k", timeout=1) == b"v" and server.failure is None


def test_the_store_module_keeps_its_names():
    assert store_module.StoreClient is StoreClient and store_module.MAGIC == wire.MAGIC
