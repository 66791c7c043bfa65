"""NVRTC itself: options, the ptxas report, and what a compile produces.

Pure helpers and types shared by the compiler (:mod:`cugather.compile.compiler`)
and the disk cache (:mod:`cugather.compile.diskcache`); calling NVRTC needs its
library, not a GPU.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Optional

from .render import Source
from ..plan.keys import KernelKey

__all__ = ["BASE_OPTIONS", "CompileError", "CacheWarning", "CacheEntryError",
           "CompiledKernel", "nvrtc_version", "nvrtc_options", "parse_ptxas", "elf_extent",
           "cubin_registers"]

BASE_OPTIONS = ("--std=c++17",)


class CompileError(RuntimeError):
    """NVRTC rejected a rendered source; carries the key, log and source."""

    def __init__(self, key: KernelKey, arch: str, log: str, source: str):
        super().__init__(f"NVRTC failed to compile {key.entry} for {arch}:\n{log}\n"
                         f"--- source ---\n{source}")
        self.key, self.arch, self.log, self.source = key, arch, log, source


class CacheWarning(UserWarning):
    """A cached kernel binary was unusable (damaged, truncated, mismatched) and is rebuilt."""


class CacheEntryError(ValueError):
    """A disk entry cannot be used; the message says why."""


@dataclass(frozen=True)
class CompiledKernel:
    """An NVRTC result: the binary, its PTX and what ptxas reported."""

    source: Source
    arch: str
    options: tuple       # options given on top of nvrtc_options(arch)
    binary: bytes        # cubin for sm_XX, PTX text (bytes) for compute_XX
    binary_kind: str     # "cubin" or "ptx"
    log: str
    compile_seconds: float
    registers: Optional[int] = None
    spill_stores: Optional[int] = None
    spill_loads: Optional[int] = None
    stack_frame: Optional[int] = None
    from_disk: bool = False
    ptx: Optional[bytes] = field(default=None, repr=False)
    path: Optional[str] = None  # disk entry it was read from or written to

    @property
    def key(self) -> KernelKey:
        return self.source.key

    @property
    def nvrtc_options(self) -> list:
        """The complete NVRTC command line this binary was built with."""
        return nvrtc_options(self.arch, self.options)


def _nvrtc():
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


def nvrtc_version() -> tuple:
    return tuple(_nvrtc().getVersion())


def nvrtc_options(arch: str, options: tuple = ()) -> list:
    """NVRTC options for ``arch``: the base ones, the target, ``options``, ptxas -v."""
    opts = list(BASE_OPTIONS) + [f"--gpu-architecture={arch}"] + list(options)
    if arch.startswith("sm_"):
        opts.append("--ptxas-options=-v")
    return opts


_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
}


def parse_ptxas(log: str) -> dict:
    """Registers, spills and stack frame from a ``--ptxas-options=-v`` log."""
    found = {}
    for name, pattern in _PTXAS.items():
        m = pattern.search(log)
        found[name] = int(m.group(1)) if m else None
    return found


_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04


def cubin_registers(image: bytes, entry: str) -> Optional[int]:
    """Registers per thread of kernel ``entry``, read from the cubin (its
    ``.nv.info`` attributes); None if ``image`` is not an ELF64 cubin that says.

    The ptxas report is the usual source; this one holds when NVRTC skipped
    ptxas for a program it had compiled before.
    """
    if elf_extent(image) is None:
        return None
    try:
        shoff, = struct.unpack_from("<Q", image, 40)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 58)
        sections = [struct.unpack_from("<IIQQQQII", image, shoff + i * shentsize)
                    for i in range(shnum)]
        names_at = sections[shstrndx][4]

        def cstr(at: int) -> str:
            return image[at:image.index(b"\0", at)].decode()

        symbols: list = []
        for _name, kind, _flags, _addr, off, size, link, _info in sections:
            if kind == 2:  # SHT_SYMTAB: 24-byte entries, names in section `link`
                strtab = sections[link][4]
                symbols = [cstr(strtab + struct.unpack_from("<I", image, at)[0])
                           for at in range(off, off + size, 24)]
        for name, _kind, _flags, _addr, off, size, _link, _info in sections:
            if cstr(names_at + name) != ".nv.info":
                continue
            at, end = off, off + size
            while at + 4 <= end:  # records: format, attribute, then a u16 (size or value)
                fmt, attr, half = struct.unpack_from("<BBH", image, at)
                at += 4
                if fmt != _EIFMT_SVAL:
                    continue
                if attr == _EIATTR_REGCOUNT and half == 8:
                    sym, count = struct.unpack_from("<II", image, at)
                    if sym < len(symbols) and symbols[sym] == entry:
                        return int(count)
                at += half
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return None
    return None


def _as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def elf_extent(image: bytes) -> Optional[int]:
    """Bytes an ELF64 image spans up to the end of its header tables; None if not ELF64."""
    if len(image) < 64 or image[:4] != b"\x7fELF" or image[4] != 2:
        return None
    phoff, shoff = struct.unpack_from("<QQ", image, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 54)
    return max(phoff + phentsize * phnum, shoff + shentsize * shnum)


def _whole_cubin(image: bytes) -> bytes:
    # CuPy's getCUBIN drops the last byte as if the cubin were a C string.
    # The driver reads past the end into Python's terminating NUL and loads
    # it, but cuobjdump and nvdisasm reject the short file.  The image ends
    # with the program header table, whose last byte (the top of p_align) is 0.
    if elf_extent(image) == len(image) + 1:
        image += b"\0"
    return image
