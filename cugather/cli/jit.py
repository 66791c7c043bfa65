"""Command line: ``python -m cugather info | cache`` (``inspect`` is in _cli_inspect).

Everything here runs without a GPU except what needs one (device names,
function attributes).  Each command prints aligned tables, or one JSON
document with ``--json``.
"""

from __future__ import annotations

import time

import numpy

from .. import jit
from ..inspect import api as _api
from .format import (_cuda_version, _emit_json, _error, _json_flag, _listing, _ms, _pairs,
                          _print_listing, _size, _table)
from .._version import __version__


# ---------------------------------------------------------------- info
def add_info_arguments(p) -> None:
    _json_flag(p)


def _info() -> dict:
    import platform

    from ..compile import compiler as _compiler
    from ..env import no_gpu_reason, nvrtc_available

    d = {"cugather": __version__, "python": platform.python_version(),
         "numpy": numpy.__version__, "cupy": None, "cuda_runtime": None, "cuda_driver": None,
         "nvrtc": None, "nvrtc_archs": [], "gpus": [], "no_gpu_reason": no_gpu_reason()}
    try:
        import cupy

        d["cupy"] = cupy.__version__
        d["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        driver = cupy.cuda.runtime.driverGetVersion()
        d["cuda_driver"] = _cuda_version(driver) if driver else None
    except Exception as e:  # no CuPy, or a CuPy that cannot load its runtime
        d["cupy_problem"] = f"{type(e).__name__}: {e}"
    why = nvrtc_available()
    if why is None:
        d["nvrtc"] = ".".join(map(str, _compiler.nvrtc_version()))
        d["nvrtc_archs"] = jit.supported_archs()
    else:
        d["nvrtc_problem"] = why
    if d["no_gpu_reason"] is None:
        d["gpus"] = _gpus(why is None)
    tool = jit.find_disassembler()
    d["disassembler"] = None if tool is None else {"name": tool[0], "path": tool[1]}
    entries = jit.disk_kernels()
    d["cache"] = {"dir": _compiler.cache_dir(), "entries": len(entries),
                  "bytes": sum(e.size for e in entries),
                  **{state: sum(e.state == state for e in entries)
                     for state in ("current", "stale", "damaged")}}
    return d


def _gpus(with_nvrtc: bool) -> list:
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


def run_info(args) -> int:
    d = _info()
    if args.json:
        _emit_json(d)
        return 0
    nvrtc = d["nvrtc"] or d.get("nvrtc_problem")
    if d["nvrtc"]:
        nvrtc = f"{d['nvrtc']} (targets {d['nvrtc_archs'][0]} .. {d['nvrtc_archs'][-1]})"
    tool = d["disassembler"]
    print(f"cugather {d['cugather']}")
    print(_pairs([
        ("python", d["python"]), ("numpy", d["numpy"]),
        ("cupy", d["cupy"] or d.get("cupy_problem")),
        ("CUDA runtime", d["cuda_runtime"]),
        ("CUDA driver", d["cuda_driver"] or "none found"),
        ("NVRTC", nvrtc),
        ("disassembler", f"{tool['name']} ({tool['path']})" if tool
         else "none found (cuobjdump or nvdisasm; needed for SASS only)"),
        ("GPU", f"{len(d['gpus'])} found" if d["gpus"]
         else f"no GPU found: {d['no_gpu_reason']}"),
    ]))
    if d["gpus"]:
        print()
        print(_table(["GPU", "NAME", "CC", "SMS", "MEMORY", "TARGET"],
                     [[g["id"], g["name"], g["compute_capability"], g["sms"],
                       f"{g['memory_bytes'] / 2**30:.0f} GiB", g["nvrtc_target"]]
                      for g in d["gpus"]], right=(0, 3, 4)))
    c = d["cache"]
    print()
    print("kernel cache")
    print(_pairs([("directory", c["dir"]),
                  ("kernels", f"{c['entries']} ({c['current']} current, {c['stale']} stale,"
                              f" {c['damaged']} damaged), {_size(c['bytes'])}")]))
    return 0


# ---------------------------------------------------------------- cache
def add_cache_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    p.set_defaults(action="list", json=False)
    lst = sub.add_parser("list", help="list cugather's kernel files (default)")
    _json_flag(lst)
    show = sub.add_parser("show", help="describe one kernel file")
    show.add_argument("name", metavar="NAME",
                      help="a name from 'cache list', a unique prefix of one, or a kernel entry")
    _listing_flags(show, source_help="print the CUDA source it was built from")
    _json_flag(show)
    clear = sub.add_parser("clear", help="delete cugather's kernel files (nothing else)")
    clear.add_argument("--stale", action="store_true",
                       help="delete only stale and damaged files")
    _json_flag(clear)


def _listing_flags(p, source_help: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--source", dest="listing", action="store_const", const="source",
                   help=source_help)
    g.add_argument("--ptx", dest="listing", action="store_const", const="ptx",
                   help="print the PTX")
    g.add_argument("--sass", dest="listing", action="store_const", const="sass",
                   help="print the SASS (needs cuobjdump or nvdisasm)")


def _entry_dict(e: jit.DiskEntry) -> dict:
    d = {"name": e.name, "path": e.path, "size": e.size, "mtime": e.mtime, "state": e.state,
         "problem": e.problem or None}
    if e.info is not None:
        d.update(e.info.as_dict())
        d.update(cugather=e.meta.get("cugather"), nvrtc=e.meta.get("nvrtc"),
                 created=e.meta.get("created"))
    return d


def _spill(info) -> str:
    if info is None or info.spill_stores is None:
        return "-"
    return f"{info.spill_stores}/{info.spill_loads}"


def run_cache(args) -> int:
    from ..compile import compiler as _compiler

    if args.action == "clear":
        return _cache_clear(args)
    entries = jit.disk_kernels()
    if args.action == "show":
        return _cache_show(args, entries)
    if args.json:
        _emit_json({"cache_dir": _compiler.cache_dir(), "entries": [_entry_dict(e) for e in entries]})
        return 0
    print(f"{_compiler.cache_dir()}: {len(entries)} cugather kernel file(s), "
          f"{_size(sum(e.size for e in entries))}")
    if entries:
        print()
        print(_table(
            ["NAME", "ARCH", "REGS", "SPILL ST/LD", "SIZE", "COMPILE", "STATE"],
            [[e.name, e.info.arch if e.info else None, e.info.registers if e.info else None,
              _spill(e.info), _size(e.size), _ms(e.info.compile_seconds) if e.info else None,
              e.state if not e.problem else f"{e.state}: {e.problem}"] for e in entries],
            right=(2, 3, 4, 5)))
    return 0


def _find_entry(name: str, entries: list):
    stem = name[:-4] if name.endswith(".cgk") else name
    for pick in (lambda e: e.name == stem or e.path == name,
                 lambda e: e.name.startswith(stem),
                 lambda e: e.info is not None and e.info.entry == stem):
        found = [e for e in entries if pick(e)]
        if len(found) == 1:
            return found[0], None
        if found:
            return None, (f"NAME {name!r} matches {len(found)} kernel files: "
                          + ", ".join(e.name for e in found))
    return None, f"NAME {name!r} matches no kernel file (see 'python -m cugather cache list')"


def _cache_show(args, entries) -> int:
    e, problem = _find_entry(args.name, entries)
    if e is None:
        return _error(problem)
    listing, err = _listing(e.info, args.listing) if e.info else (None, None)
    if args.json:
        doc = _entry_dict(e)
        if e.info is not None:
            doc["ptxas_log"] = e.info.ptxas_log
        if args.listing:
            doc[args.listing] = listing
            doc["listing_error"] = err
        _emit_json(doc)
        return 1 if err else 0
    rows = [("name", e.name), ("path", e.path), ("size", _size(e.size)),
            ("state", e.state if not e.problem else f"{e.state}: {e.problem}")]
    if e.info is not None:
        i, k = e.info, e.info.key
        rows += [("kernel", i.entry),
                 ("key", f"kind={k.kind} unit={k.unit} index={k.index_dtype} math={k.math}"
                         f" mode={k.mode}"),
                 ("arch", i.arch), ("options", " ".join(i.options)),
                 ("built by", f"cugather {e.meta.get('cugather')}, NVRTC "
                              f"{'.'.join(map(str, e.meta.get('nvrtc', ())))}"),
                 ("created", time.strftime("%Y-%m-%d %H:%M:%S",
                                           time.localtime(e.meta.get("created", e.mtime)))),
                 ("compile", _ms(i.compile_seconds)),
                 ("registers", i.registers), ("spill", f"{_spill(i)} B (stores/loads)"),
                 ("stack frame", None if i.stack_frame is None else f"{i.stack_frame} B")]
    print(_pairs(rows, indent=""))
    if e.info is not None and e.info.ptxas_log:
        print("\nptxas log\n" + e.info.ptxas_log)
    return _print_listing(listing, err, args.listing, e.info)


def _cache_clear(args) -> int:
    from ..compile import compiler as _compiler

    if args.stale:
        doomed = [e.path for e in jit.disk_kernels() if e.state != "current"]
        removed = _api._remove_disk_entries(doomed)
    else:
        removed = jit.cache_clear(disk=True).disk_entries
    if args.json:
        _emit_json({"cache_dir": _compiler.cache_dir(), "removed": removed,
                    "stale_only": args.stale})
    else:
        what = "stale or damaged " if args.stale else ""
        print(f"removed {removed} {what}cugather kernel file(s) from {_compiler.cache_dir()}; "
              f"nothing else of CuPy's cache was touched")
    return 0


def add_arguments(p) -> None:
    """Fallback of ``python -m cugather``'s lookup; each command here has its own."""
    raise TypeError(f"use add_info_arguments or add_cache_arguments for parser {p.prog!r}")
