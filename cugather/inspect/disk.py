"""cugather's disk cache as :mod:`cugather.jit` shows it: entries, their state, deletion.

Listing and deleting need no NVRTC.  Reading an entry never follows a link,
never blocks and never raises for what a file holds: an entry that is not a
private regular file of this user's, signed with this user's cache key (see
:mod:`cugather.compile.diskcache`), is ``"damaged"``.  Telling a *current* entry (one this
installation would load) from a *stale* one needs NVRTC's version, which is
part of the entry's name; without NVRTC, intact entries are ``"unknown"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from ..compile import compiler as _compiler
from ..compile import render as _codegen
from ..compile.compiler import CompiledKernel
from .kernel_info import KernelInfo

__all__ = ["DiskEntry", "ENTRY_STATES", "disk_kernels", "disk_clear"]

#: Values of :attr:`DiskEntry.state`.
ENTRY_STATES = ("current", "stale", "damaged", "unknown")


@dataclass(frozen=True)
class DiskEntry:
    """One file of cugather's disk cache.

    Attributes
    ----------
    name : str
        File name without the ``.cgk`` suffix.
    path : str
        Absolute path of the file.
    size : int
        Bytes.
    mtime : float
        Modification time (seconds since the epoch).
    state : {"current", "stale", "damaged", "unknown"}
        ``"current"``: this installation would load it; ``"stale"``: built from
        other sources, options or NVRTC, never used again; ``"damaged"``:
        unreadable (``problem`` says why), it would be rebuilt; ``"unknown"``:
        intact, but NVRTC is not available to tell current from stale.
    problem : str
        Why a damaged entry is damaged; empty otherwise.
    meta : dict
        The entry's metadata (builder versions, creation time, ...).
    info : KernelInfo or None
        The kernel it holds; None when damaged.
    """

    name: str
    path: str
    size: int
    mtime: float
    state: str
    problem: str = ""
    meta: Dict[str, Any] = field(default_factory=dict, repr=False)
    info: Optional[KernelInfo] = field(default=None, repr=False)


def disk_kernels() -> List[DiskEntry]:
    """Every file of cugather's disk cache, as :class:`DiskEntry`, sorted by name.

    Works without NVRTC: intact entries are then in state ``"unknown"``.
    """
    entries = []
    checkable = _nvrtc_loads()
    for path in _compiler.disk_entries():
        try:
            st = os.lstat(path)  # a link's own size: nothing it points to is touched
        except OSError:  # removed meanwhile
            continue
        name = os.path.basename(path)[:-len(_compiler.ENTRY_SUFFIX)]
        try:
            meta, ck = _compiler.read_entry(path)
            state = "unknown" if not checkable else "current" if _is_current(ck, path) else "stale"
            info = KernelInfo.from_compiled(ck)
        except FileNotFoundError:
            continue
        except Exception as e:  # CacheEntryError, or anything else a hostile file provokes
            problem = str(e) if isinstance(e, _compiler.CacheEntryError) else (
                f"it cannot be read ({type(e).__name__}: {str(e)[:200]})")
            entries.append(DiskEntry(name, path, st.st_size, st.st_mtime, "damaged", problem))
            continue
        entries.append(DiskEntry(name, path, st.st_size, st.st_mtime, state, "", meta, info))
    return entries


def disk_clear(stale_only: bool = False) -> int:
    """Delete cugather's kernel files; nothing else of CuPy's cache is touched.

    Parameters
    ----------
    stale_only : bool
        Delete only stale and damaged entries (see :class:`DiskEntry`); keep
        current ones and, without NVRTC, the ones whose state is unknown.
        Otherwise delete every entry and the temp files interrupted writes
        left behind.

    Returns
    -------
    int
        Number of files deleted.
    """
    if stale_only:
        return _remove(e.path for e in disk_kernels() if e.state in ("stale", "damaged"))
    return _remove(_disk_files())


def _nvrtc_loads() -> bool:
    try:
        _compiler.nvrtc_version()
    except Exception:  # no CuPy, no NVRTC library
        return False
    return True


def _is_current(ck: CompiledKernel, path: str) -> bool:
    source = _codegen.render(ck.key)
    return (source.text == ck.source.text
            and _compiler.entry_path(source, ck.arch, ck.options) == path)


def _disk_files() -> List[str]:
    """cugather's entries plus temp files that interrupted writes left behind."""
    folder = _compiler.cache_dir()
    try:
        temps = [os.path.join(folder, n) for n in os.listdir(folder) if _is_temp(n)]
    except OSError:
        temps = []
    return list(_compiler.disk_entries()) + sorted(temps)


def _is_temp(name: str) -> bool:
    return name.startswith(".cgk-") and name.endswith(".tmp")


def _remove(paths: Iterable[str]) -> int:
    """Delete ``paths``, each of which must be a kernel or temp file of cugather's folder."""
    removed = 0
    folder = os.path.abspath(_compiler.cache_dir())
    for path in paths:
        name = os.path.basename(path)
        if os.path.dirname(os.path.abspath(path)) != folder or not (
                name.endswith(_compiler.ENTRY_SUFFIX) or _is_temp(name)):
            raise ValueError(f"refusing to delete {path!r}: not a cugather kernel file in {folder}")
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
