"""See and control what cugather compiled: kernels, their cost, the caches.

Every function here works without a GPU (NVRTC is enough), except that CUDA
function attributes are only known for kernels loaded on a device.

Example (no GPU needed)::

    from cugather import jit
    info = jit.compile("rows", "float16", "int64", unit=16, arch="sm_90")
    info.registers, info.spill_bytes     # the ptxas report
    print(info.ptx)                      # also info.source, info.cubin, info.sass
    jit.cache_info()                     # hits, misses, compiles, disk entries

Caches, outermost first: each :class:`~cugather.GatherOp` keeps per-shape
plans holding bound kernels; this process keeps compiled binaries and loaded
modules; cugather's folder ``$CUPY_CACHE_DIR/cugather`` (default
``~/.cupy/kernel_cache/cugather``) keeps binaries across processes.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy

from ..compile import render as _codegen
from ..compile import compiler as _compiler
from ..compile.compiler import CacheWarning, CompileError
from .disasm import SassUnavailableError, find_disassembler
from .disk import ENTRY_STATES, DiskEntry, disk_clear, disk_kernels
from .kernel_info import FUNCTION_ATTRIBUTES, KernelInfo
from ..plan.keys import INDEX_DTYPES, UNITS, KernelKey, kind_spec, kinds
from ..plan.core import unit_for

__all__ = [
    "KernelCacheInfo", "Cleared", "KernelInfo", "DiskEntry", "ENTRY_STATES", "FUNCTION_ATTRIBUTES",
    "SassUnavailableError", "NvrtcUnavailableError", "CacheWarning", "CompileError",
    "cache_info", "kernels", "compile", "compile_key", "cache_clear", "disk_kernels",
    "disk_clear", "find_disassembler", "supported_archs",
]


class KernelCacheInfo(NamedTuple):
    """Kernel-cache statistics of this process and of the disk cache.

    Attributes
    ----------
    hits, misses : int
        Lookups answered from memory / that went to disk or NVRTC.
    disk_hits : int
        Misses answered by the disk cache.
    compiles : int
        NVRTC runs of this process.
    compile_seconds : float
        Their total time.
    in_memory : int
        Compiled kernels held by this process.
    cache_dir : str
        cugather's folder in CuPy's cache directory.
    disk_entries, disk_bytes : int
        cugather kernel files in it and their total size.
    """

    hits: int
    misses: int
    disk_hits: int
    compiles: int
    compile_seconds: float
    in_memory: int
    cache_dir: str
    disk_entries: int
    disk_bytes: int


class Cleared(NamedTuple):
    """What :func:`cache_clear` dropped: kernels, plans and disk files."""

    kernels: int
    plans: int
    disk_entries: int


class NvrtcUnavailableError(RuntimeError):
    """Compiling was asked for, but CuPy or its NVRTC library cannot be loaded.

    The message says what is missing and the pip command that installs it.
    """


# ---------------------------------------------------------------- in process
def cache_info() -> KernelCacheInfo:
    """Counters of this process and the contents of the disk cache."""
    s = _compiler.stats()
    paths = _compiler.disk_entries()
    size = 0
    for p in paths:
        try:
            size += os.path.getsize(p)
        except OSError:  # removed meanwhile
            pass
    return KernelCacheInfo(s["hits"], s["misses"], s["disk_hits"], s["compiles"],
                           s["compile_seconds"], len(_compiler.compiled_kernels()),
                           _compiler.cache_dir(), len(paths), size)


def kernels() -> List[KernelInfo]:
    """Every kernel this process compiled or loaded, as :class:`KernelInfo`.

    A kernel loaded on a device appears once per device, with its CUDA
    function attributes; one compiled but not loaded (for instance by
    :func:`compile`) appears once with ``device=None``.  Sorted by entry name.
    """
    infos: List[KernelInfo] = []
    loaded = set()
    for lk in _compiler.loaded_kernels():
        infos.append(KernelInfo.from_compiled(lk.compiled, lk.device, _attributes(lk)))
        loaded.add(id(lk.compiled))
    infos += [KernelInfo.from_compiled(ck) for ck in _compiler.compiled_kernels()
              if id(ck) not in loaded]
    return sorted(infos, key=lambda i: (i.entry, i.arch, -1 if i.device is None else i.device))


def _attributes(lk: _compiler.LoadedKernel) -> Dict[str, int]:
    import cupy
    from cupy.cuda import driver

    with cupy.cuda.Device(lk.device):
        return {name: int(driver.funcGetAttribute(getattr(driver, enum), lk.handle))
                for name, enum in FUNCTION_ATTRIBUTES.items()}


def cache_clear(disk: bool = False) -> Cleared:
    """Forget cugather's compiled kernels, every GatherOp's plans and the plans of
    gather_elements / take_along_axis / gather_nd.

    Parameters
    ----------
    disk : bool
        Also delete cugather's kernel files (``*.cgk`` in
        ``$CUPY_CACHE_DIR/cugather``, and temp files of interrupted writes).
        Nothing else of CuPy's cache is touched.

    Returns
    -------
    Cleared
        Numbers of in-process kernels, plans and disk files dropped.

    Notes
    -----
    The counters of :func:`cache_info` restart from zero and rendered sources
    are re-read (so an edited header takes effect).  Arrays already returned,
    and launches in flight, are unaffected.
    """
    from ..runtime.cache import clear_all

    plans = clear_all()
    n_kernels = len({id(ck) for ck in _compiler.compiled_kernels()}
                    | {id(lk.compiled) for lk in _compiler.loaded_kernels()})
    _compiler.clear()
    _codegen.render.cache_clear()
    _codegen.sources_digest.cache_clear()
    removed = disk_clear() if disk else 0
    return Cleared(n_kernels, plans, removed)


# ---------------------------------------------------------------- compiling
def supported_archs() -> List[str]:
    """``sm_XX`` targets the installed NVRTC can compile for.

    Raises
    ------
    NvrtcUnavailableError
        CuPy or NVRTC cannot be loaded (the message says how to install them).
    """
    try:
        from cupy_backends.cuda.libs import nvrtc

        return [f"sm_{a}" for a in nvrtc.getSupportedArchs()]
    except Exception as e:  # ImportError, or the library failing to load
        from ..env import probe

        problem = probe().nvrtc_problem or f"NVRTC cannot be used: {type(e).__name__}: {e}"
        raise NvrtcUnavailableError(problem) from e


_ARCH = re.compile(r"(sm|compute)_(\d+)[af]?")


def _check_arch(arch: object) -> str:
    m = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if not isinstance(arch, str) or m is None or f"sm_{m.group(2)}" not in supported_archs():
        raise ValueError(f"arch must be 'sm_XX' or 'compute_XX' with XX a target of NVRTC "
                         f"{'.'.join(map(str, _compiler.nvrtc_version()))} "
                         f"({', '.join(supported_archs())}), got {arch!r}")
    return arch


def _pick(argname: str, value: Any, allowed: Sequence[Any]) -> Any:
    if value not in allowed:
        raise ValueError(f"{argname} must be one of {tuple(allowed)}, got {value!r}")
    return value


def compile(kind: str, dtype: Any, index_dtype: Any, *, mode: str = "raise",
            arch: str = "sm_90", unit: Optional[int] = None, math: Optional[str] = None,
            options: Sequence[str] = (), use_disk: bool = True) -> KernelInfo:
    """Render and compile one gather kernel with NVRTC; no GPU needed.

    Parameters
    ----------
    kind : str
        Kernel variant, one of :func:`cugather.plan.keys.kinds` (``"check"``
        and ``"check_nd"`` are raise mode's bounds checks, which move no data
        and take no dtype or unit).
    dtype : dtype-like or None
        Element type of the table.  Kernels move bytes, not typed values: a
        kernel is built per *unit* (1, 2, 4, 8 or 16 bytes per load/store), and
        every dtype whose rows divide into that unit shares it.  With
        ``unit=None`` the unit is the widest one dividing ``dtype.itemsize``
        (float16 -> 2, complex128 -> 16, a 6-byte record -> 2), the kernel a
        gather of single elements would use; rows of several elements usually
        get a wider unit (see ``GatherOp.plan``).  A dtype no op gathers
        (objects, strings, datetimes) is refused.  Ignored for bounds checks; may
        be None when ``unit`` is given.
    index_dtype : {"int32", "int64"}
        Index type (numpy dtypes are accepted).
    mode : {"raise", "wrap", "clip", "clip_numpy", "fill"}
        Compile-time out-of-range policy (``"clip_numpy"`` is ``take``'s
        clip; bounds checks exist in ``"raise"`` mode only).
    arch : str
        NVRTC target: ``sm_XX`` gives a cubin and a ptxas report,
        ``compute_XX`` PTX only.
    unit : {1, 2, 4, 8, 16}, optional
        Bytes per load/store; overrides the one derived from ``dtype``.
    math : {"fast32", "fast64", "div64"}, optional
        Index math; default ``"fast32"`` (``"fast64"`` for bounds checks).
    options : tuple of str
        Extra NVRTC options.
    use_disk : bool
        Read and write the disk cache.

    Returns
    -------
    KernelInfo

    Raises
    ------
    ValueError
        An argument outside the allowed values (the message names it).
    CompileError
        NVRTC rejected the source (carries the log and the source).
    NvrtcUnavailableError
        CuPy or NVRTC is not installed (the message says how to install them).
    """
    _pick("kind", kind, kinds())
    idx = _index_dtype_name(index_dtype)
    if _moves_no_data(kind):  # a bounds check: no unit, no dtype
        key = KernelKey(kind, 0 if unit is None else unit, idx, math or "fast64", mode)
    else:
        key = KernelKey(kind, _unit(dtype, unit), idx, math or "fast32", mode)
    return compile_key(key, arch=arch, options=options, use_disk=use_disk)


def _moves_no_data(kind: str) -> bool:
    """True for the bounds-check kinds, whose only unit is 0."""
    return not kind_spec(kind).moves_data


def compile_key(key: KernelKey, *, arch: str = "sm_90", options: Sequence[str] = (),
                use_disk: bool = True) -> KernelInfo:
    """Compile (or fetch from the caches) the kernel ``key``; no GPU needed.

    Parameters are those of :func:`compile`; ``key`` is, for instance,
    ``GatherOp(...).plan(...).key``.
    """
    if not isinstance(key, KernelKey):
        raise TypeError(f"key must be a KernelKey, got {type(key).__name__} {key!r}")
    if isinstance(options, str) or not all(isinstance(o, str) for o in options):
        raise TypeError(f"options must be a tuple of str, got {options!r}")
    ck = _compiler.compile_key(key, _check_arch(arch), tuple(options), use_disk=use_disk)
    return KernelInfo.from_compiled(ck)


def _index_dtype_name(index_dtype: Any) -> str:
    name: Optional[str]
    try:
        name = numpy.dtype(index_dtype).name
    except TypeError:
        name = None
    if name is None or name not in INDEX_DTYPES:
        raise ValueError(f"index_dtype must be one of {INDEX_DTYPES}, got {index_dtype!r}")
    return name


#: Kinds of dtype no op gathers (CuPy holds none of them; an object array holds pointers).
_REFUSED_KINDS = {"O": "object", "S": "bytes", "U": "str", "M": "datetime64",
                  "m": "timedelta64"}


def _data_dtype(dtype: Any) -> numpy.dtype[Any]:
    """``dtype`` as a NumPy dtype that some op gathers; ValueError names it otherwise."""
    try:
        dt: numpy.dtype[Any] = numpy.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be a NumPy dtype, got {dtype!r}") from None
    if dt.kind in _REFUSED_KINDS or dt.hasobject:
        raise ValueError(f"dtype must be one that an op gathers (booleans, numbers, records of "
                         f"them), got {dt} ({_REFUSED_KINDS.get(dt.kind, 'holds objects')}): "
                         f"no op accepts it, so no kernel is compiled for it")
    return dt


def _unit(dtype: Any, unit: Optional[int]) -> int:
    if unit is not None:
        if dtype is not None:
            _data_dtype(dtype)
        return int(_pick("unit", unit, UNITS))
    if dtype is None:
        raise ValueError("dtype is None and no unit is given: give one of them")
    itemsize = _data_dtype(dtype).itemsize
    if itemsize == 0:
        raise ValueError(f"dtype must have a non-zero item size, got {dtype!r}")
    return int(unit_for(itemsize))
