"""The rendezvous: cugather's TCP store, the torch-store seal, the environment.

Runs in-process on the loopback interface (no GPU): tokens, malformed
frames, timeouts, the listening address, the all-gather built on the store.
"""

import socket
import struct
import threading
import time

import pytest

from cugather.distributed.rendezvous import (HostGroup, ThreadGroup, TorchStore, read_env)
from cugather.distributed.store import MAGIC, StoreClient, StoreError, StoreServer

TOKEN = "s3cret-job-token"


@pytest.fixture
def server():
    srv = StoreServer("127.0.0.1", 0, TOKEN, io_timeout=5)
    yield srv
    srv.close()


def _client(srv, token=TOKEN, **kw):
    return StoreClient("127.0.0.1", srv.port, token, connect_timeout=5, io_timeout=5, **kw)


def test_set_get_add_and_blocking_get(server):
    a, b = _client(server), _client(server)
    a.set("k", b"value")
    assert b.get("k", timeout=1) == b"value"
    assert a.add("n", 2) == 2 and b.add("n", 3) == 5
    threading.Timer(0.2, lambda: a.set("late", b"x")).start()
    start = time.monotonic()
    assert b.get("late", timeout=5) == b"x"
    assert time.monotonic() - start < 4


def test_get_times_out_with_the_key_named(server):
    c = _client(server)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="'never'"):
        c.get("never", timeout=0.3)
    assert time.monotonic() - start < 3


def test_wrong_token_is_refused_and_the_store_carries_on(server):
    good = _client(server)
    good.set("before", b"1")
    with pytest.raises(PermissionError, match="job token"):
        _client(server, token="another-job-token")
    assert server.failure is None and server.dropped == 1
    assert good.get("before", timeout=1) == b"1"


def _raw(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.recv(64)  # the greeting
    return sock


@pytest.mark.parametrize("frame,reason", [
    (b"XXXX" + bytes(8), "magic"),
    (struct.pack("!4sBBHI", MAGIC, 9, 2, 0, 0), "version"),
    (struct.pack("!4sBBHI", MAGIC, 2, 77, 0, 0), "unknown operation"),
    (struct.pack("!4sBBHI", MAGIC, 2, 2, 0, 1 << 30), "exceeds"),
])
def test_a_strangers_malformed_frame_is_answered_and_dropped(server, frame, reason):
    good = _client(server)
    with _raw(server) as sock:
        sock.sendall(frame)
        reply = sock.recv(4096)
    assert reason.encode() in reply
    assert server.failure is None
    good.set("k", b"v")
    assert good.get("k", timeout=1) == b"v"


def test_a_silent_or_closed_connection_is_not_an_attack(server):
    socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    time.sleep(0.2)
    assert server.failure is None
    _client(server).set("k", b"v")


def test_listens_on_master_addr_only(server):
    assert server.address[0] == "127.0.0.1"
    other = _other_local_address()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    with pytest.raises(OSError):
        socket.create_connection((other, server.port), timeout=2).close()


def _other_local_address():
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent
        addr = probe.getsockname()[0]
        probe.close()
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_client_waits_for_a_late_server_then_times_out():
    port = _free_port()
    found = {}

    def late():
        time.sleep(0.3)
        found["srv"] = StoreServer("127.0.0.1", port, TOKEN)

    starter = threading.Thread(target=late)
    starter.start()
    c = StoreClient("127.0.0.1", port, TOKEN, connect_timeout=5)
    c.set("k", b"v")
    starter.join(5)  # the server answers before its constructor has returned to `late`
    found["srv"].close()
    with pytest.raises(TimeoutError, match="no rendezvous store answered"):
        StoreClient("127.0.0.1", _free_port(), TOKEN, connect_timeout=0.3)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_host_group_allgather_over_the_store(server):
    size = 4
    groups = [HostGroup(_client(server), q, size, timeout=5) for q in range(size)]
    results = [None] * size

    def rank(q):
        results[q] = [groups[q].allgather(f"r{q}-{i}".encode()) for i in range(3)]

    threads = [threading.Thread(target=rank, args=(q,)) for q in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for q in range(size):
        assert results[q] == [[f"r{p}-{i}".encode() for p in range(size)] for i in range(3)]


def test_host_group_times_out_when_a_rank_is_missing(server):
    g = HostGroup(_client(server), 0, 2, timeout=0.3)
    with pytest.raises(TimeoutError):
        g.allgather(b"alone")


def test_thread_group_breaks_instead_of_hanging():
    group = ThreadGroup(2, timeout=0.3)
    with pytest.raises(TimeoutError, match="not every rank arrived"):
        group.view(0).allgather(b"x")


class _DictStore:
    """The part of torch.distributed.Store that TorchStore uses."""

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = bytes(value)

    def get(self, key):
        return self.data[key]

    def wait(self, keys, timeout):
        if any(k not in self.data for k in keys):
            raise RuntimeError("Wait timeout")


def test_torch_store_values_are_sealed_with_the_token():
    raw = _DictStore()
    ours, theirs = TorchStore(raw, TOKEN), TorchStore(raw, "other")
    ours.set("k", b"payload")
    assert ours.get("k", 1) == b"payload"
    with pytest.raises(PermissionError, match="token"):
        theirs.get("k", 1)
    raw.data["bad"] = b"junk"
    with pytest.raises(StoreError, match="malformed"):
        ours.get("bad", 1)
    with pytest.raises(TimeoutError):
        ours.get("missing", 0.1)


def test_environment_is_read_and_checked():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500", "CUGATHER_JOB_TOKEN": TOKEN}
    job = read_env(env)
    assert (job.rank, job.world_size, job.local_rank, job.master_port, job.token) == (
        1, 2, 1, 29500, TOKEN)
    assert TOKEN not in repr(job)  # a secret stays out of log lines
    with pytest.raises(ValueError, match="RANK must be in"):
        read_env(dict(env, RANK="2"))
    with pytest.raises(ValueError, match="MASTER_PORT must be an integer"):
        read_env(dict(env, MASTER_PORT="http"))
    with pytest.raises(ValueError, match="WORLD_SIZE is not set"):
        read_env({k: v for k, v in env.items() if k != "WORLD_SIZE"})
    with pytest.raises(ValueError, match="CUGATHER_JOB_TOKEN is empty.*10.1.2.3"):
        read_env(dict({k: v for k, v in env.items() if k != "CUGATHER_JOB_TOKEN"},
                      MASTER_ADDR="10.1.2.3"))
    assert read_env(dict(env, TORCHELASTIC_USE_AGENT_STORE="True")).agent_store
