"""Build rendered kernel sources into host shared libraries.

Each library is one translation unit: ``cuda_shim.h``, then the rendered
sources of a group of kernel keys exactly as the library renders them (their
headers carry include guards, so concatenation is safe), then one exported
launcher per entry point.  Libraries are cached on disk by the sha256 of
everything that goes into them (shim, sources, compiler, flags) and in
process by that digest.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cugather.compile.render import render
from cugather.plan.keys import KernelKey, all_kernel_keys

__all__ = ["compiler", "no_compiler_reason", "group_of", "Library", "library_for",
           "load_source", "translation_unit", "launcher", "prebuild", "cache_dir",
           "ubsan_enabled", "ubsan_log", "BuildError"]

SHIM = Path(__file__).with_name("cuda_shim.h")
# -O0: the libraries are small and run briefly; compile time dominates.
BASE_FLAGS = ("-std=c++17", "-O0", "-fPIC", "-shared", "-fvisibility=hidden",
              "-fno-strict-aliasing", "-pthread")
# Misaligned vector accesses, signed overflow, bad shifts: what a GPU would
# fault on or silently get wrong.  Reports go to a log that launch() reads.
UBSAN_FLAGS = ("-fsanitize=undefined", "-fno-sanitize=vptr")


def _ubsan_log_base() -> Path:
    return cache_dir() / "ubsan-report"


def ubsan_log() -> Path:
    """This process's UBSan report file (UBSan appends the process id)."""
    return Path(f"{_ubsan_log_base()}.{os.getpid()}")


class BuildError(RuntimeError):
    """The host compiler rejected a translation unit."""


def cache_dir() -> Path:
    """Where built libraries live: $CUGATHER_HOSTSIM_CACHE or a per-user tmp folder."""
    root = os.environ.get("CUGATHER_HOSTSIM_CACHE") or os.path.join(
        tempfile.gettempdir(), f"cugather-hostsim-{os.getuid()}")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=1)
def compiler():
    """(path, version line) of the C++ compiler, or None."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        path = shutil.which(name) if name else None
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0:
                return path, out.stdout.splitlines()[0] if out.stdout else name
    return None


def no_compiler_reason():
    """None when a C++ compiler was found, else why the host tier cannot run."""
    if compiler() is None:
        return "no C++ compiler found (tried $CXX, g++, c++, clang++)"
    return None


def _compile(src: Path, lib: Path, flags) -> subprocess.CompletedProcess:
    return subprocess.run([compiler()[0], *flags, "-o", str(lib), str(src)],
                          capture_output=True, text=True)


@functools.lru_cache(maxsize=1)
def ubsan_enabled() -> bool:
    """Whether libraries are built with UBSan (off with CUGATHER_HOSTSIM_UBSAN=0).

    The sanitizer runtime sets its report file from the options it reads at
    its first report, so a probe triggers one report (into /dev/null) before
    any library redirects the reports to :func:`ubsan_log`.
    """
    if os.environ.get("CUGATHER_HOSTSIM_UBSAN", "1") == "0" or compiler() is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp, "probe.cpp"), Path(tmp, "probe.so")
        src.write_text('extern "C" __attribute__((visibility("default"))) int probe(int s)\n'
                       '{ volatile int one = 1; return one << s; }\n')
        if _compile(src, lib, BASE_FLAGS + UBSAN_FLAGS).returncode != 0:
            return False
        try:
            probe = ctypes.CDLL(str(lib)).probe
        except OSError:
            return False
        saved = os.dup(2)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.close(null)
            probe(40)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return True


def flags() -> tuple:
    return BASE_FLAGS + (UBSAN_FLAGS if ubsan_enabled() else ())


def group_of(key: KernelKey) -> tuple:
    """Keys of one group share a library: same kind, index dtype and math."""
    return (key.kind, key.index_dtype, key.math)


@functools.lru_cache(maxsize=1)
def _groups() -> dict:
    groups: dict = {}
    for key in all_kernel_keys():
        groups.setdefault(group_of(key), []).append(key)
    return groups


def keys_in_group(key: KernelKey) -> tuple:
    """The keys built together with ``key`` (only ``key`` if the library does not list it)."""
    keys = _groups().get(group_of(key), [])
    return tuple(keys) if key in keys else (key,)


_BOUNDS = re.compile(r"__launch_bounds__\(([^()]*(?:\([^()]*\))?[^()]*)\)\s*(\w+)\s*\(")


def launcher(entry: str, args_type: str, text: str) -> str:
    """C++ of an exported ``cgsim_launch_<entry>`` that runs ``entry`` over a grid.

    ``args_type`` is the C++ type the entry takes by value; ``text`` is the
    source defining the entry (its ``__launch_bounds__`` is enforced).
    """
    bound = next((m.group(1).split(",")[0] for m in _BOUNDS.finditer(text)
                  if m.group(2) == entry), None)
    bound_check = "" if bound is None else f"""
    if ((unsigned long long)block[0] * block[1] * block[2] > (unsigned long long)({bound})) {{
        snprintf(err, err_bytes, "block (%u,%u,%u) exceeds __launch_bounds__({bound}) of {entry}",
                 block[0], block[1], block[2]);
        return 1;
    }}"""
    return f"""
CGSIM_EXPORT int cgsim_launch_{entry}(const void* args, size_t args_bytes, const unsigned* grid,
    const unsigned* block, size_t shared, const unsigned long long* ranges, int n_read,
    int n_write, char* err, size_t err_bytes)
{{
    if (args_bytes != sizeof({args_type})) {{
        snprintf(err, err_bytes, "argument block of %zu bytes; {entry} takes {args_type} of %zu",
                 args_bytes, sizeof({args_type}));
        return 1;
    }}{bound_check}
    return cgsim::launch([](const void* p) {{ {entry}(*static_cast<const {args_type}*>(p)); }},
                         args, grid, block, shared, ranges, n_read, n_write, err, err_bytes);
}}
"""


def translation_unit(sources, entries) -> str:
    """The C++ text of one library: shim, sources, launchers.

    ``sources``: (title, text) pairs; ``entries``: (entry, C++ argument type).
    """
    parts = [f"// hostsim translation unit: {len(entries)} kernel(s)\n", SHIM.read_text(), "\n"]
    for title, text in sources:
        parts.append(f"\n// ======== {title} ========\n")
        parts.append(text)
    everything = "".join(parts)
    parts.append("\n// ======== host launchers ========\n")
    parts.extend(launcher(entry, args_type, everything) for entry, args_type in entries)
    return "".join(parts)


def key_translation_unit(keys) -> str:
    """The translation unit of a group of kernel keys, rendered by the library."""
    sources = [(f"rendered source of {k.entry}", render(k).text) for k in keys]
    entries = [(k.entry, f"cg::{k.spec.args_type}") for k in keys]
    return translation_unit(sources, entries)


@dataclass
class Library:
    """A loaded host library and its launchers by entry name."""

    path: Path
    cdll: ctypes.CDLL
    launchers: dict


_LAUNCH_ARGTYPES = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
                    ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t,
                    ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int, ctypes.c_int,
                    ctypes.c_char_p, ctypes.c_size_t]

_lock = threading.Lock()
_loaded: dict = {}       # digest -> Library
_digest_locks: dict = {}
stats = {"built": 0, "disk_hits": 0, "build_seconds": 0.0}


def _digest(text: str, build_flags: tuple) -> str:
    h = hashlib.sha256()
    for part in (text, repr(compiler()), "\0".join(build_flags)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def load_source(text: str, entries) -> Library:
    """Build (or find in the caches) and load a translation unit.

    ``entries`` are the entry names whose ``cgsim_launch_<entry>`` to bind.
    """
    import time

    if compiler() is None:
        raise BuildError(no_compiler_reason())
    entries = list(entries)
    build_flags = flags()
    digest = _digest(text, build_flags)
    with _lock:
        lib = _loaded.get(digest)
        if lib is not None:
            return lib
        digest_lock = _digest_locks.setdefault(digest, threading.Lock())
    with digest_lock:
        with _lock:
            lib = _loaded.get(digest)
        if lib is not None:
            return lib
        folder = cache_dir()
        so = folder / f"{digest}.so"
        src = folder / f"{digest}.cpp"
        if so.exists():
            for path in (so, src):  # mark as used, for prune()
                try:
                    os.utime(path)
                except OSError:
                    pass
            with _lock:
                stats["disk_hits"] += 1
        else:
            start = time.perf_counter()
            tmp = f"{digest}.{os.getpid()}.{threading.get_ident()}"
            src_tmp, so_tmp = folder / f"{tmp}.cpp", folder / f"{tmp}.so"
            src_tmp.write_text(text)
            os.replace(src_tmp, src)  # reports and compiler errors name this file
            result = _compile(src, so_tmp, build_flags)
            if result.returncode != 0:
                raise BuildError(
                    f"{compiler()[0]} failed on {len(entries)} kernel(s) "
                    f"({', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}); "
                    f"source kept at {src}\n{result.stderr[:6000]}")
            os.replace(so_tmp, so)  # atomic: other processes see all of it or nothing
            with _lock:
                stats["built"] += 1
                stats["build_seconds"] += time.perf_counter() - start
        cdll = ctypes.CDLL(str(so))
        launchers = {}
        for entry in entries:
            fn = getattr(cdll, f"cgsim_launch_{entry}")
            fn.argtypes = _LAUNCH_ARGTYPES
            fn.restype = ctypes.c_int
            launchers[entry] = fn
        if ubsan_enabled():  # the sanitizer runtime is shared: one report file per process
            cdll.cgsim_report_to(str(_ubsan_log_base()).encode())
        lib = Library(so, cdll, launchers)
        with _lock:
            _loaded[digest] = lib
        return lib


def _build(keys: tuple) -> Library:
    return load_source(key_translation_unit(keys), [k.entry for k in keys])


def library_for(key: KernelKey) -> Library:
    """The loaded library holding ``key`` (built with the rest of its group)."""
    return _build(keys_in_group(key))


def prune(max_age_days: float = 7.0) -> None:
    """Delete cached libraries not used for ``max_age_days`` (headers change often)."""
    import time

    limit = time.time() - max_age_days * 86400
    for path in cache_dir().iterdir():
        try:
            if path.suffix in (".so", ".cpp") and path.stat().st_mtime < limit:
                path.unlink()
        except OSError:
            pass


def prebuild(keys=None, workers=None) -> None:
    """Build the groups of ``keys`` (default: every key) in parallel."""
    prune()
    keys = list(all_kernel_keys()) if keys is None else list(keys)
    groups = list(dict.fromkeys(keys_in_group(k) for k in keys))
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(_build, groups):
            pass
