"""cugather's disk cache of compiled kernels: entry names, format, reads and writes.

An entry lives in ``$CUPY_CACHE_DIR/cugather`` (CuPy's cache directory,
default ``~/.cupy/kernel_cache``).  Its name hashes the rendered source, the
target, the options and the NVRTC version; the file carries the metadata,
the binary, the PTX and the source it was built from, under an HMAC-SHA256
keyed by this user's cache key.

What a loaded binary is trusted for: the cache key (``.cugather-key`` in the
folder, 32 random bytes, created 0600 on first write) is readable by this
user alone, so only a process of this user can write an entry that verifies.
A file is read only if it is a regular file (opened without following a
symbolic link and without blocking, so a FIFO or a device cannot hang or
flood the reader), owned by this user, not writable by group or others, and
at most :data:`MAX_ENTRY` bytes; its HMAC covers every byte after the first
line.  Anything else -- a planted file, a link, a damaged or
foreign entry, one built from another source, target or options (its whole
source text is compared, so a renamed entry is caught too) -- is ignored with a
:class:`CacheWarning` and recompiled.  A checksum that anyone can recompute
(SHA-256 alone) would not do: whoever can write the folder could then plant
a binary.  The folder itself is assumed to be the user's own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import stat
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from typing import Any, Optional

from .render import TEMPLATE, Source
from ..plan.keys import KernelKey
from .nvrtc import BASE_OPTIONS, CacheEntryError, CacheWarning, CompiledKernel, nvrtc_version
from .._version import __version__

__all__ = ["ENTRY_SUFFIX", "KEY_NAME", "MAX_ENTRY", "cache_dir", "entry_path", "disk_entries",
           "read_entry", "write_entry", "load_entry"]

#: First line of every disk entry; part of the entry name's hash too, so a
#: format change gives new names instead of unreadable old files.
_FORMAT = b"CUGATHER-KERNEL-3\n"
_DIGEST_LEN = 64  # hex HMAC-SHA256
ENTRY_SUFFIX = ".cgk"
#: The per-user secret that signs entries, in the cache folder.
KEY_NAME = ".cugather-key"
_KEY_BYTES = 32
#: Largest entry read (a cubin, its PTX and source are a few hundred KB).
MAX_ENTRY = 64 << 20
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def cache_dir() -> str:
    """cugather's folder inside CuPy's kernel cache directory (follows ``CUPY_CACHE_DIR``)."""
    root = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return os.path.join(root, "cugather")


def entry_path(source: Source, arch: str, options: tuple = ()) -> str:
    """Disk entry for ``source`` built for ``arch`` with ``options``."""
    h = hashlib.sha256(_FORMAT)
    for part in (source.text, arch, "\0".join(BASE_OPTIONS + tuple(options)),
                 repr(nvrtc_version())):
        h.update(part.encode() + b"\0")
    return os.path.join(cache_dir(), f"{source.entry}.{arch}.{h.hexdigest()[:24]}{ENTRY_SUFFIX}")


def disk_entries() -> list:
    """Paths of cugather's kernel files in the cache directory."""
    folder = cache_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.endswith(ENTRY_SUFFIX))


# ---------------------------------------------------------------- private files
def read_private(path: str, max_size: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of this user's that only this user
    may write, of at most ``max_size`` bytes; FileNotFoundError if there is none,
    :class:`CacheEntryError` saying why otherwise.  Never follows a link, never blocks."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as e:  # ELOOP: a symbolic link; EACCES; a folder on some systems
        raise CacheEntryError("it is a symbolic link" if os.path.islink(path)
                              else f"cannot open it ({e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheEntryError("it is not a regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise CacheEntryError(f"it belongs to user {st.st_uid}, not to this user "
                                  f"({os.getuid()})")
        if st.st_mode & 0o022:
            raise CacheEntryError(f"group or others may write it (mode {st.st_mode & 0o777:o})")
        if st.st_size > max_size:
            raise CacheEntryError(f"it is {st.st_size} bytes, more than {max_size}")
        parts, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_size + 1 - total))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            total += len(chunk)
            if total > max_size:
                raise CacheEntryError(f"it grew past {max_size} bytes while read")
    except OSError as e:
        raise CacheEntryError(f"cannot read it ({e})") from None
    finally:
        os.close(fd)


def _key(folder: str, create: bool) -> Optional[bytes]:
    """This user's cache key in ``folder`` (made first if ``create``); None if there is none."""
    path = os.path.join(folder, KEY_NAME)
    try:
        key = read_private(path, _KEY_BYTES)
    except FileNotFoundError:
        return _make_key(folder) if create else None
    except CacheEntryError as e:
        raise CacheEntryError(f"the cache key {path} is unusable: {e}") from None
    if len(key) != _KEY_BYTES:
        raise CacheEntryError(f"the cache key {path} is unusable: it holds {len(key)} bytes, "
                              f"not {_KEY_BYTES}")
    return key


def _make_key(folder: str) -> Optional[bytes]:
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cgk-", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(_KEY_BYTES))
        try:
            os.link(tmp, os.path.join(folder, KEY_NAME))  # whole, and never over another's
        except FileExistsError:
            pass  # another process made one first: use that one
    finally:
        os.unlink(tmp)
    return _key(folder, create=False)


def _mac(key: bytes, payload: bytes) -> bytes:
    # The name is not covered: a renamed entry still holds a binary this user built, and
    # load_entry compares its whole source, target and options with what was asked for.
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode()


# ---------------------------------------------------------------- entries
_META_FIELDS = ("binary_kind", "log", "compile_seconds", "registers", "spill_stores",
                "spill_loads", "stack_frame")
_unwritable: set = set()  # folders already warned about


def write_entry(path: str, ck: CompiledKernel) -> None:
    """Store ``ck`` at ``path`` atomically; warn once per folder that cannot be written."""
    text = ck.source.text.encode()
    ptx = b"" if ck.binary_kind == "ptx" else ck.ptx or b""  # PTX binaries are their own PTX
    meta = {name: getattr(ck, name) for name in _META_FIELDS}
    meta.update(key=asdict(ck.key), arch=ck.arch, options=list(ck.options),
                cugather=__version__, nvrtc=list(nvrtc_version()),
                sources_digest=ck.source.digest, created=time.time(),
                sizes=[len(ck.binary), len(ptx), len(text)])
    payload = json.dumps(meta).encode() + b"\0" + ck.binary + ptx + text
    folder = os.path.dirname(path)
    tmp = None
    try:
        key = _key(folder, create=True)
        if key is None:
            raise CacheEntryError(f"its {KEY_NAME} vanished as it was made")
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cgk-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_FORMAT + _mac(key, payload) + payload)
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except (OSError, CacheEntryError) as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if folder not in _unwritable:
            _unwritable.add(folder)
            warnings.warn(f"cugather: cannot write kernel cache in {folder} ({e}); kernels "
                          f"will be recompiled in every process", CacheWarning, stacklevel=4)


def read_entry(path: str) -> tuple:
    """``(meta, CompiledKernel)`` stored in the disk entry ``path``.

    Raises
    ------
    FileNotFoundError
        No such entry.
    CacheEntryError
        Not a private regular file of this user's, too big, not signed with
        this user's cache key, truncated, damaged or of an unknown format --
        whatever the file holds, nothing else escapes.
    """
    data = read_private(path, MAX_ENTRY)
    head = len(_FORMAT) + _DIGEST_LEN
    if not data.startswith(_FORMAT):
        raise CacheEntryError("it is truncated or not a cugather kernel file"
                              if len(data) < len(_FORMAT) else "unknown format")
    key = _key(os.path.dirname(path), create=False)
    if key is None:
        raise CacheEntryError(f"there is no cache key ({KEY_NAME}) to check it against")
    payload = data[head:]
    if not hmac.compare_digest(data[len(_FORMAT):head], _mac(key, payload)):
        raise CacheEntryError(f"it is not signed with this user's cache key ({len(data)} "
                              f"bytes: damaged, truncated or not written here)")
    try:
        return _parse(path, payload)
    except CacheEntryError:
        raise
    except Exception as e:  # RecursionError, MemoryError, ...: the file's fault, never ours
        raise CacheEntryError(f"its metadata is not understood ({type(e).__name__}: "
                              f"{str(e)[:200]})") from None


def _parse(path: str, payload: bytes) -> tuple:
    meta_bytes, _, blobs = payload.partition(b"\0")
    meta = _check_meta(json.loads(meta_bytes))
    n_bin, n_ptx, n_src = meta["sizes"]
    if n_bin + n_ptx + n_src != len(blobs):
        raise CacheEntryError("its section sizes do not add up")
    key = KernelKey(**meta["key"])
    source = Source(key, key.entry, key.spec.args_type, TEMPLATE,
                    blobs[n_bin + n_ptx:].decode(), meta["sources_digest"])
    ck = CompiledKernel(source, meta["arch"], tuple(meta["options"]), blobs[:n_bin],
                        from_disk=True, path=path,
                        ptx=blobs[n_bin:n_bin + n_ptx] or (
                            blobs[:n_bin] if meta["binary_kind"] == "ptx" else None),
                        **{name: meta[name] for name in _META_FIELDS})
    return meta, ck


_TYPES: dict = {  # field -> (accepted types, what to say)
    "arch": (str,), "log": (str,), "sources_digest": (str,), "cugather": (str,),
    "compile_seconds": (int, float), "created": (int, float),
    "registers": (int, type(None)), "spill_stores": (int, type(None)),
    "spill_loads": (int, type(None)), "stack_frame": (int, type(None)),
}
_KEY_TYPES = {"kind": str, "unit": int, "index_dtype": str, "math": str, "mode": str}


def _check_meta(meta: Any) -> dict:
    """``meta`` if every field has the type and range the readers rely on."""
    def bad(name: str, value: Any) -> CacheEntryError:
        return CacheEntryError(f"its metadata field {name!r} is {str(value)[:80]!r}")

    if not isinstance(meta, dict):
        raise CacheEntryError("its metadata is not a JSON object")
    for name, types in _TYPES.items():
        value = meta.get(name)
        if isinstance(value, bool) or not isinstance(value, types) or (
                isinstance(value, (int, float)) and not (math.isfinite(value) and value >= 0)):
            raise bad(name, value)
    if meta.get("binary_kind") not in ("cubin", "ptx"):
        raise bad("binary_kind", meta.get("binary_kind"))
    for name, item, count in (("sizes", int, 3), ("options", str, None), ("nvrtc", int, None)):
        value = meta.get(name)
        if not isinstance(value, list) or (count is not None and len(value) != count) or any(
                isinstance(v, bool) or not isinstance(v, item) or (item is int and v < 0)
                for v in value):
            raise bad(name, value)
    key = meta.get("key")
    if not isinstance(key, dict) or set(key) != set(_KEY_TYPES) or any(
            isinstance(key[k], bool) or not isinstance(key[k], t) for k, t in _KEY_TYPES.items()):
        raise bad("key", key)
    return meta


def load_entry(path: str, source: Source, arch: str, options: tuple) -> Optional[CompiledKernel]:
    """The entry at ``path`` if it holds ``source`` built for ``arch`` with ``options``;
    None if there is none, and None with a :class:`CacheWarning` if it is unusable."""
    try:
        _, ck = read_entry(path)
    except FileNotFoundError:
        return None
    except CacheEntryError as e:
        warnings.warn(f"cugather: cached kernel {path} is unusable: {e}; recompiling",
                      CacheWarning, stacklevel=4)
        return None
    if ck.source.text != source.text or ck.arch != arch or ck.options != tuple(options):
        warnings.warn(f"cugather: cached kernel {path} was built from another source or "
                      f"target than its name says; recompiling", CacheWarning, stacklevel=4)
        return None
    return replace(ck, source=source)
