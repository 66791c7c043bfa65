"""``cugather info``: versions, the NVIDIA driver, GPUs, NVRTC and the kernel cache.

It never fails: what is missing is reported in the table and, below it, in
one paragraph per problem with the pip command that fixes it.
"""

from __future__ import annotations

import argparse
import platform
from typing import Any, Dict, List, Optional

import numpy

from .. import jit
from .._version import __version__
from ..env import Environment, probe
from .format import emit_json, json_flag, pairs, size, table

__all__ = ["add_arguments", "run", "collect"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``info``."""
    json_flag(p)


def collect(env: Optional[Environment] = None) -> Dict[str, Any]:
    """Everything ``info`` reports, as a JSON-ready dict."""
    from ..compile import compiler as _compiler

    env = probe() if env is None else env
    d: Dict[str, Any] = {
        "cugather": __version__, "python": platform.python_version(),
        "numpy": numpy.__version__, "packages": dict(env.packages),
        "cupy": env.cupy_version, "cuda_runtime": _ver(env.cuda_runtime),
        "cuda_driver": _ver(env.driver), "nvrtc": _ver(env.nvrtc), "nvrtc_archs": [],
        "gpus": [], "install_command": env.install_command,
        "problems": {"cupy": env.cupy_problem, "nvrtc": env.nvrtc_problem,
                     "gpu": env.gpu_problem},
    }
    if env.nvrtc_problem is None:
        d["nvrtc_archs"] = jit.supported_archs()
    if env.gpu_problem is None:
        d["gpus"] = _gpus(env.nvrtc_problem is None)
    tool = jit.find_disassembler()
    d["disassembler"] = None if tool is None else {"name": tool[0], "path": tool[1]}
    entries = jit.disk_kernels()
    d["cache"] = {"dir": _compiler.cache_dir(), "entries": len(entries),
                  "bytes": sum(e.size for e in entries),
                  **{state: sum(e.state == state for e in entries)
                     for state in jit.ENTRY_STATES}}
    return d


def _ver(v: Any) -> Optional[str]:
    return None if v is None else f"{v[0]}.{v[1]}"


def _gpus(with_nvrtc: bool) -> List[Dict[str, Any]]:
    import cupy

    from ..compile.compiler import arch_for_device

    gpus = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        prop = cupy.cuda.runtime.getDeviceProperties(i)
        name = prop["name"]
        gpus.append({"id": i, "name": name.decode() if isinstance(name, bytes) else name,
                     "compute_capability": f"{prop['major']}.{prop['minor']}",
                     "sms": prop["multiProcessorCount"],
                     "memory_bytes": prop["totalGlobalMem"],
                     "nvrtc_target": arch_for_device(i) if with_nvrtc else None})
    return gpus


def run(args: argparse.Namespace) -> int:
    """Print the report (or its JSON); exit status 0."""
    env = probe()
    d = collect(env)
    if args.json:
        emit_json(d)
        return 0
    problems = d["problems"]
    nvrtc = d["nvrtc"] or "not available (see below)"
    if d["nvrtc"] and d["nvrtc_archs"]:
        nvrtc = f"{d['nvrtc']} (targets {d['nvrtc_archs'][0]} .. {d['nvrtc_archs'][-1]})"
    cupy = "not available (see below)"
    if d["cupy"]:
        name = next((n for n, _ in env.cupy_packages), "cupy")
        cupy = f"{d['cupy']} ({name})"
    tool = d["disassembler"]
    print(f"cugather {d['cugather']}")
    print(pairs([
        ("python", d["python"]), ("numpy", d["numpy"]), ("cupy", cupy),
        ("CUDA runtime", d["cuda_runtime"]),
        ("CUDA driver", d["cuda_driver"] or "none found"),
        ("NVRTC", nvrtc),
        ("disassembler", f"{tool['name']} ({tool['path']})" if tool
         else "none found (cuobjdump or nvdisasm; needed for SASS only)"),
        ("GPU", f"{len(d['gpus'])} found" if d["gpus"] else "none usable (see below)"),
    ]))
    if d["gpus"]:
        print()
        print(table(["GPU", "NAME", "CC", "SMS", "MEMORY", "TARGET"],
                    [[g["id"], g["name"], g["compute_capability"], g["sms"],
                      f"{g['memory_bytes'] / 2**30:.0f} GiB", g["nvrtc_target"]]
                     for g in d["gpus"]], right=(0, 3, 4)))
    c = d["cache"]
    states = ", ".join(f"{c[s]} {s}" for s in jit.ENTRY_STATES if c[s] or s != "unknown")
    print()
    print("kernel cache")
    print(pairs([("directory", c["dir"]),
                 ("kernels", f"{c['entries']} ({states}), {size(c['bytes'])}")]))
    for paragraph in dict.fromkeys(p for p in problems.values() if p):
        print()
        print(paragraph)
    return 0
