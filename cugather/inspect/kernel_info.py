"""KernelInfo: one compiled kernel as :mod:`cugather.jit` reports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..compile import compiler as _compiler
from ..compile.compiler import CompiledKernel
from .disasm import disassemble
from ..plan.keys import KernelKey

__all__ = ["KernelInfo", "FUNCTION_ATTRIBUTES"]

#: CUDA function attributes reported for loaded kernels (name -> driver enum name).
FUNCTION_ATTRIBUTES = {
    "max_threads_per_block": "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "num_regs": "CU_FUNC_ATTRIBUTE_NUM_REGS",
    "local_size_bytes": "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
    "shared_size_bytes": "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
    "const_size_bytes": "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES",
    "max_dynamic_shared_size_bytes": "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    "ptx_version": "CU_FUNC_ATTRIBUTE_PTX_VERSION",
    "binary_version": "CU_FUNC_ATTRIBUTE_BINARY_VERSION",
}


@dataclass(frozen=True, eq=False)
class KernelInfo:
    """One compiled kernel: what it is, how it was built, what it costs.

    Attributes
    ----------
    key : KernelKey
        kind, unit (bytes per load/store), index dtype, index math, mode.
    entry : str
        Name of the ``extern "C"`` entry point.
    source : str
        The rendered CUDA source NVRTC compiled.
    options : tuple of str
        The complete NVRTC options.
    arch : str
        ``sm_XX`` (cubin) or ``compute_XX`` (PTX, compiled by the driver at load).
    compile_seconds : float
        NVRTC time when it was compiled (possibly in an earlier process).
    registers, spill_stores, spill_loads, stack_frame : int or None
        ptxas report (bytes for the last three); None for ``compute_XX``.
    ptxas_log : str
        NVRTC's log.
    from_disk : bool
        Whether this process read it from the disk cache.
    cache_path : str or None
        Its disk cache entry, if any.
    device : int or None
        Device it is loaded on; None when only compiled.
    attributes : dict or None
        CUDA function attributes (see ``FUNCTION_ATTRIBUTES``) when loaded.

    ``ptx``, ``cubin`` and ``sass`` are produced on first access.
    """

    key: KernelKey
    entry: str
    source: str = field(repr=False)
    options: Tuple[str, ...]
    arch: str
    compile_seconds: float
    registers: Optional[int]
    spill_stores: Optional[int]
    spill_loads: Optional[int]
    stack_frame: Optional[int]
    ptxas_log: str = field(repr=False)
    from_disk: bool
    cache_path: Optional[str] = None
    device: Optional[int] = None
    attributes: Optional[Dict[str, int]] = None
    _compiled: CompiledKernel = field(repr=False, kw_only=True)
    _lazy: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_compiled(cls, ck: CompiledKernel, device: Optional[int] = None,
                      attributes: Optional[Dict[str, int]] = None) -> "KernelInfo":
        """The description of ``ck``, loaded on ``device`` with ``attributes`` if given."""
        return cls(ck.key, ck.key.entry, ck.source.text, tuple(ck.nvrtc_options), ck.arch,
                   ck.compile_seconds, ck.registers, ck.spill_stores, ck.spill_loads,
                   ck.stack_frame, ck.log, ck.from_disk, ck.path, device, attributes,
                   _compiled=ck)

    @property
    def spill_bytes(self) -> Optional[int]:
        """Spill stores plus spill loads, in bytes (None without a ptxas report)."""
        if self.spill_stores is None or self.spill_loads is None:
            return None
        return self.spill_stores + self.spill_loads

    @property
    def ptx(self) -> str:
        """PTX text (kept from the compile; recompiled once if it was not)."""
        ck = self._compiled
        if ck.ptx is None and "ptx" not in self._lazy:
            self._lazy["ptx"] = _compiler.compile_source(ck.source, ck.arch, ck.options).ptx
        return (ck.ptx or self._lazy["ptx"]).decode().rstrip("\0")

    @property
    def cubin(self) -> bytes:
        """The cubin (only for ``sm_XX`` targets)."""
        ck = self._compiled
        if ck.binary_kind != "cubin":
            raise ValueError(f"{self.entry} was compiled for arch={self.arch!r}, which yields "
                             f"PTX and no cubin; compile it for an sm_XX arch to get one")
        return ck.binary

    @property
    def sass(self) -> str:
        """SASS disassembly by cuobjdump or nvdisasm.

        Raises
        ------
        SassUnavailableError
            Neither tool is found (PATH, ``$CUDA_PATH/bin``, NVIDIA wheels).
        """
        if "sass" not in self._lazy:
            self._lazy["sass"] = disassemble(self.cubin, self.entry)
        return str(self._lazy["sass"])

    def as_dict(self, *, source: bool = False) -> Dict[str, Any]:
        """JSON-ready description (without binaries; the source if asked)."""
        d = dict(entry=self.entry, kind=self.key.kind, unit=self.key.unit,
                 index_dtype=self.key.index_dtype, math=self.key.math, mode=self.key.mode,
                 arch=self.arch, options=list(self.options),
                 compile_seconds=self.compile_seconds, registers=self.registers,
                 spill_stores=self.spill_stores, spill_loads=self.spill_loads,
                 stack_frame=self.stack_frame, from_disk=self.from_disk,
                 cache_path=self.cache_path, device=self.device, attributes=self.attributes,
                 ptxas_log=self.ptxas_log)
        if source:
            d["source"] = self.source
        return d
