"""SASS for compiled kernels: finding cuobjdump or nvdisasm and running it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import List, Optional, Tuple

__all__ = ["SassUnavailableError", "find_disassembler", "disassemble"]

_DISASSEMBLERS = {"cuobjdump": ("-sass",), "nvdisasm": ("--print-code",)}


class SassUnavailableError(RuntimeError):
    """SASS was asked for but no disassembler (cuobjdump, nvdisasm) was found."""


def find_disassembler() -> Optional[Tuple[str, str]]:
    """``(name, path)`` of cuobjdump (preferred) or nvdisasm, or None.

    Looked for on PATH, then in ``$CUDA_PATH/bin`` and ``$CUDA_HOME/bin``, then
    in the ``bin`` folders of NVIDIA's pip wheels (``nvidia-cuda-cuobjdump``,
    ``nvidia-cuda-nvdisasm``).  cuobjdump itself runs nvdisasm, so it is
    returned only when nvdisasm is found too.
    """
    tools = {name: _find_tool(name) for name in ("cuobjdump", "nvdisasm")}
    if tools["nvdisasm"] is None:
        return None
    cuobjdump = tools["cuobjdump"]
    return ("cuobjdump", cuobjdump) if cuobjdump else ("nvdisasm", tools["nvdisasm"])


def _find_tool(name: str) -> Optional[str]:
    folders = [os.path.join(os.environ[v], "bin") for v in ("CUDA_PATH", "CUDA_HOME")
               if os.environ.get(v)]
    found = shutil.which(name)
    for folder in folders + _wheel_bin_folders():
        found = found or shutil.which(name, path=folder)
    return found


def _wheel_bin_folders() -> List[str]:
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
    except ImportError:
        return []
    folders = []
    for root in getattr(nvidia, "__path__", []):
        try:
            subs = sorted(os.listdir(root))
        except OSError:
            continue
        folders += [os.path.join(root, sub, "bin") for sub in subs
                    if os.path.isdir(os.path.join(root, sub, "bin"))]
    return folders


def disassemble(cubin: bytes, entry: str) -> str:
    """SASS text of ``entry`` in ``cubin``, by cuobjdump or nvdisasm."""
    found = find_disassembler()
    if found is None:
        raise SassUnavailableError(
            f"cannot show SASS of {entry}: nvdisasm (which cuobjdump also needs) was not found "
            f"on PATH, in $CUDA_PATH/bin or in NVIDIA's pip wheels; install the CUDA toolkit "
            f"or 'pip install nvidia-cuda-nvdisasm', or read the PTX instead")
    name, tool = found
    env = dict(os.environ)
    # cuobjdump finds nvdisasm through PATH or NVDISASM_PATH
    env["NVDISASM_PATH"] = os.path.dirname(_find_tool("nvdisasm") or tool)
    with tempfile.TemporaryDirectory(prefix="cugather-sass-") as tmp:
        path = os.path.join(tmp, f"{entry}.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run([tool, *_DISASSEMBLERS[name], path], capture_output=True,
                              text=True, timeout=120, env=env)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{name} failed on {entry} (exit {done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout
