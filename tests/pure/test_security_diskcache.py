"""The kernel disk cache against planted and hostile files: only what this user wrote loads.

No NVRTC: entries are written by cugather's own writer from a constructed
CompiledKernel, and the compile path runs with NVRTC replaced by a stand-in
that counts its calls.  A reader that hangs would hang in a worker thread
with a deadline, so a regression fails instead of blocking the suite.
"""

import hashlib
import json
import os
import stat
import threading
import warnings

import pytest

from cugather.compile import compiler, diskcache
from cugather.compile.nvrtc import CacheEntryError, CacheWarning, CompiledKernel
from cugather.compile.render import render
from cugather.inspect.disk import disk_kernels
from support.jit import ROWS, run

BINARY = b"\x7fELF genuine"
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def cache(private_kernel_cache, monkeypatch):
    monkeypatch.setattr(diskcache, "nvrtc_version", lambda: (1, 0))
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: (1, 0))
    return private_kernel_cache


def _kernel(binary=BINARY, **meta):
    fields = dict(binary_kind="cubin", log="ptxas info    : Used 40 registers",
                  compile_seconds=0.05, registers=40, spill_stores=0, spill_loads=0,
                  stack_frame=0)
    fields.update(meta)
    return CompiledKernel(render(ROWS), "sm_90", (), binary, ptx=b".version 8.0\n", **fields)


def _write(binary=BINARY):
    ck = _kernel(binary)
    path = diskcache.entry_path(ck.source, "sm_90")
    diskcache.write_entry(path, ck)
    return path


def _load(path, seconds=5):
    """load_entry(path) in a thread: (result, warnings); fails if it does not return in time."""
    got = {}

    def load():
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got["ck"] = diskcache.load_entry(path, render(ROWS), "sm_90", ())
            got["warnings"] = [str(w.message) for w in record if w.category is CacheWarning]

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive() and stat.S_ISFIFO(os.lstat(path).st_mode):
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # frees a reader blocked in open
        os.close(fd)
    assert not thread.is_alive(), f"load_entry({path}) did not return within {seconds} s"
    return got["ck"], got["warnings"]


def _signed(path, payload):
    """Write ``payload`` at ``path`` signed with this user's key, as the writer would."""
    key = diskcache._key(os.path.dirname(path), create=True)
    with open(path, "wb") as f:
        f.write(diskcache._FORMAT + diskcache._mac(key, payload) + payload)
    os.chmod(path, 0o600)


def _payload(meta_bytes, blobs=b""):
    return meta_bytes + b"\0" + blobs


def test_a_genuine_entry_loads_and_the_key_is_private(cache):
    path = _write()
    ck, seen = _load(path)
    assert ck is not None and ck.binary == BINARY and seen == []
    key = cache / diskcache.KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


# ---------------------------------------------------------------- finding 6
def test_a_planted_binary_with_a_recomputed_checksum_is_not_loaded(cache):
    path = _write()
    with open(path, "rb") as f:
        data = f.read()
    payload = data[len(diskcache._FORMAT) + 64:]
    meta_bytes, _, blobs = payload.partition(b"\0")
    meta = json.loads(meta_bytes)
    evil = b"\x7fELF planted"
    meta["sizes"][0] = len(evil)
    planted = _payload(json.dumps(meta).encode(), evil + blobs[len(BINARY):])
    with open(path, "wb") as f:  # what anyone who can write the folder can compute
        f.write(diskcache._FORMAT + hashlib.sha256(planted).hexdigest().encode() + planted)
    ck, seen = _load(path)
    assert ck is None and any("not signed with this user's cache key" in w for w in seen)


def test_a_world_writable_entry_is_not_loaded(cache):
    path = _write()
    os.chmod(path, 0o666)
    ck, seen = _load(path)
    assert ck is None and any("group or others may write it" in w for w in seen)


@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
def test_entries_and_keys_of_another_user_are_not_trusted(cache):
    path = _write()
    os.chown(path, 65534, 65534)
    ck, seen = _load(path)
    assert ck is None and any("belongs to user 65534" in w for w in seen)
    os.chown(path, os.getuid(), os.getgid())
    os.chown(cache / diskcache.KEY_NAME, 65534, 65534)  # a key planted by someone else
    ck, seen = _load(path)
    assert ck is None and any("cache key" in w and "unusable" in w for w in seen)


def test_the_compile_path_recompiles_a_planted_entry(cache, monkeypatch):
    built = []

    def nvrtc_stand_in(source, arch="sm_90", options=()):
        built.append(arch)
        return _kernel(b"\x7fELF rebuilt")

    monkeypatch.setattr(compiler, "compile_source", nvrtc_stand_in)
    path = _write()
    os.chmod(path, 0o622)
    with pytest.warns(CacheWarning, match="group or others"):
        ck = compiler.compile_key(ROWS, "sm_90")
    assert built == ["sm_90"] and ck.binary == b"\x7fELF rebuilt"
    compiler.clear()
    assert compiler.compile_key(ROWS, "sm_90").from_disk and built == ["sm_90"]


# ---------------------------------------------------------------- finding 7
def _fifo(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)


def _symlink_to_dev_zero(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink("/dev/zero", path)


def _huge(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GB to read, nothing on disk


def _nested_json(path):
    _signed(path, _payload(b"[" * 200_000 + b"]" * 200_000))


def _slow_compile(path):
    ck = _kernel()
    text = ck.source.text.encode()
    meta = {name: getattr(ck, name) for name in diskcache._META_FIELDS}
    meta.update(key=dict(kind="rows", unit=16, index_dtype="int64", math="fast32",
                         mode="raise"), arch="sm_90", options=[], cugather="0", nvrtc=[1, 0],
                sources_digest=ck.source.digest, created=0.0,
                sizes=[len(BINARY), 0, len(text)], compile_seconds="slow")
    _signed(path, _payload(json.dumps(meta).encode(), BINARY + text))


HOSTILE = {"fifo": _fifo, "symlink to /dev/zero": _symlink_to_dev_zero, "3 GB": _huge,
           "nested JSON": _nested_json, "compile_seconds slow": _slow_compile}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symbolic links")
@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_entries_neither_hang_nor_crash_any_reader(cache, capsys, make):
    diskcache._key(str(cache), create=True)
    path = diskcache.entry_path(render(ROWS), "sm_90")
    make(path)
    ck, seen = _load(path)
    assert ck is None and len(seen) == 1 and "is unusable" in seen[0]
    with pytest.raises(CacheEntryError):
        diskcache.read_entry(path)
    [entry] = disk_kernels()
    assert entry.state == "damaged" and entry.problem and entry.info is None
    for argv in (["cache", "list"], ["cache", "show", entry.name], ["cache", "list", "--json"]):
        code, out, err = run(capsys, *argv)
        assert code == 0 and "damaged" in out, (argv, out, err)
    code, out, _ = run(capsys, "cache", "clear", "--stale")
    assert code == 0 and not os.path.lexists(path)
    assert os.path.exists("/dev/zero")  # the link was removed, never its target


def test_an_entry_without_a_key_is_not_trusted(cache):
    path = _write()
    os.unlink(cache / diskcache.KEY_NAME)
    with pytest.raises(CacheEntryError, match="no cache key"):
        diskcache.read_entry(path)
    ck, seen = _load(path)
    assert ck is None and seen
