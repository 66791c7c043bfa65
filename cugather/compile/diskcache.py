"""cugather's disk cache of compiled kernels: entry names, format, reads and writes.

An entry lives in ``$CUPY_CACHE_DIR/cugather`` (CuPy's cache directory,
default ``~/.cupy/kernel_cache``).  Its name hashes the rendered source, the
target, the options and the NVRTC version; the file carries a SHA-256 of its
contents, the metadata, the binary, the PTX and the source it was built from.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from typing import Optional

from .render import TEMPLATE, Source
from ..plan.keys import KernelKey
from .nvrtc import BASE_OPTIONS, CacheEntryError, CacheWarning, CompiledKernel, nvrtc_version
from .._version import __version__

__all__ = ["ENTRY_SUFFIX", "cache_dir", "entry_path", "disk_entries", "read_entry",
           "write_entry", "load_entry"]

#: First line of every disk entry; part of the entry name's hash too, so a
#: format change gives new names instead of unreadable old files.
_FORMAT = b"CUGATHER-KERNEL-2\n"
_DIGEST_LEN = 64  # hex SHA-256
ENTRY_SUFFIX = ".cgk"


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
    data = _FORMAT + hashlib.sha256(payload).hexdigest().encode() + payload
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cgk-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except OSError as e:
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
        The file is unreadable, truncated, damaged or of an unknown format.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:  # a folder, no permission, an I/O error
        raise CacheEntryError(f"cannot read it ({e})") from None
    head = len(_FORMAT) + _DIGEST_LEN
    if not data.startswith(_FORMAT):
        raise CacheEntryError("it is truncated or not a cugather kernel file"
                              if len(data) < len(_FORMAT) else "unknown format")
    payload = data[head:]
    if data[len(_FORMAT):head] != hashlib.sha256(payload).hexdigest().encode():
        raise CacheEntryError(f"its checksum does not match its contents "
                              f"({len(data)} bytes: damaged or truncated)")
    meta_bytes, _, blobs = payload.partition(b"\0")
    try:
        meta = json.loads(meta_bytes)
        n_bin, n_ptx, n_src = meta["sizes"]
        if n_bin + n_ptx + n_src != len(blobs):
            raise ValueError("section sizes do not add up")
        key = KernelKey(**meta["key"])
        source = Source(key, key.entry, key.spec.args_type, TEMPLATE,
                        blobs[n_bin + n_ptx:].decode(), meta["sources_digest"])
        ck = CompiledKernel(source, meta["arch"], tuple(meta["options"]), blobs[:n_bin],
                            from_disk=True, path=path,
                            ptx=blobs[n_bin:n_bin + n_ptx] or (
                                blobs[:n_bin] if meta["binary_kind"] == "ptx" else None),
                            **{name: meta[name] for name in _META_FIELDS})
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CacheEntryError(f"its metadata is not understood ({type(e).__name__}: {e})") from None
    return meta, ck


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
