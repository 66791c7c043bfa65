"""``cugather cache list | show NAME | clear [--stale]``: cugather's kernel files.

Everything here works without a GPU and without NVRTC; without NVRTC an intact
file's state (current or stale) is unknown, and every action ends with the
paragraph that says what is missing and how to install it.  A hostile or
damaged file is listed as ``damaged``; nothing a file holds makes a command
fail.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import jit
from ..env import probe
from .format import emit_json, error, json_flag, listing, ms, pairs, print_listing, size, table

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Actions and options of ``cache``."""
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    p.set_defaults(action="list", json=False)
    lst = sub.add_parser("list", help="list cugather's kernel files (default)")
    json_flag(lst)
    show = sub.add_parser("show", help="describe one kernel file")
    show.add_argument("name", metavar="NAME",
                      help="a name from 'cache list', a unique prefix of one, or a kernel entry")
    g = show.add_mutually_exclusive_group()
    g.add_argument("--source", dest="listing", action="store_const", const="source",
                   help="print the CUDA source it was built from")
    g.add_argument("--ptx", dest="listing", action="store_const", const="ptx",
                   help="print the PTX")
    g.add_argument("--sass", dest="listing", action="store_const", const="sass",
                   help="print the SASS (needs cuobjdump or nvdisasm)")
    json_flag(show)
    clear = sub.add_parser("clear", help="delete cugather's kernel files (nothing else)")
    clear.add_argument("--stale", action="store_true",
                       help="delete only stale and damaged files")
    json_flag(clear)


def run(args: argparse.Namespace) -> int:
    """Run the action; exit status 0, 1 (a listing or --stale fell short) or 2 (bad NAME)."""
    if args.action == "clear":
        code = _clear(args)
    else:
        entries = jit.disk_kernels()
        code = (_show if args.action == "show" else _list)(args, entries)
    problem = probe().nvrtc_problem
    if problem and not args.json:  # every command says what is missing and how to install it
        print(f"\n{problem}")
    return code


def _list(args: argparse.Namespace, entries: List[jit.DiskEntry]) -> int:
    folder = jit.cache_info().cache_dir
    if args.json:
        emit_json({"cache_dir": folder, "entries": [_entry_dict(e) for e in entries]})
        return 0
    print(f"{folder}: {len(entries)} cugather kernel file(s), "
          f"{size(sum(e.size for e in entries))}")
    if entries:
        print()
        print(table(
            ["NAME", "ARCH", "REGS", "SPILL ST/LD", "SIZE", "COMPILE", "STATE"],
            [[e.name, e.info.arch if e.info else None, e.info.registers if e.info else None,
              _spill(e.info), size(e.size), ms(e.info.compile_seconds) if e.info else None,
              _state(e)] for e in entries],
            right=(2, 3, 4, 5)))
    _explain_unknown(entries)
    return 0


def _show(args: argparse.Namespace, entries: List[jit.DiskEntry]) -> int:
    e, problem = _find(args.name, entries)
    if e is None:
        return error(problem or "")
    text, err = listing(e.info, args.listing)
    if args.json:
        doc = _entry_dict(e)
        if e.info is not None:
            doc["ptxas_log"] = e.info.ptxas_log
        if args.listing:
            doc[args.listing] = text
            doc["listing_error"] = err
        emit_json(doc)
        return 1 if err else 0
    rows: List[Tuple[str, Any]] = [("name", e.name), ("path", e.path), ("size", size(e.size)),
                                   ("state", _state(e))]
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
                 ("compile", ms(i.compile_seconds)),
                 ("registers", i.registers), ("spill", f"{_spill(i)} B (stores/loads)"),
                 ("stack frame", None if i.stack_frame is None else f"{i.stack_frame} B")]
    print(pairs(rows, indent=""))
    if e.info is not None and e.info.ptxas_log:
        print("\nptxas log\n" + e.info.ptxas_log)
    _explain_unknown([e])
    return print_listing(text, err, args.listing, e.info)


def _clear(args: argparse.Namespace) -> int:
    """(exit status, whether there were kernel files)."""
    folder = jit.cache_info().cache_dir
    if args.stale:
        removed = jit.disk_clear(stale_only=True)
        unknown = [e for e in jit.disk_kernels() if e.state == "unknown"]
    else:
        removed, unknown = jit.cache_clear(disk=True).disk_entries, []
    if args.json:
        emit_json({"cache_dir": folder, "removed": removed, "stale_only": args.stale,
                   "unchecked": len(unknown)})
    else:
        what = "stale or damaged " if args.stale else ""
        print(f"removed {removed} {what}cugather kernel file(s) from {folder}; "
              f"nothing else of CuPy's cache was touched")
        if unknown:
            print(f"\nkept {len(unknown)} intact file(s) whose state is unknown: without NVRTC "
                  f"current and stale files cannot be told apart.")
    return 1 if unknown else 0


def _entry_dict(e: jit.DiskEntry) -> Dict[str, Any]:
    d: Dict[str, Any] = {"name": e.name, "path": e.path, "size": e.size, "mtime": e.mtime,
                         "state": e.state, "problem": e.problem or None}
    if e.info is not None:
        d.update(e.info.as_dict())
        d.update(cugather=e.meta.get("cugather"), nvrtc=e.meta.get("nvrtc"),
                 created=e.meta.get("created"))
    return d


def _spill(info: Optional[jit.KernelInfo]) -> str:
    if info is None or info.spill_stores is None:
        return "-"
    return f"{info.spill_stores}/{info.spill_loads}"


def _state(e: jit.DiskEntry) -> str:
    return f"{e.state}: {e.problem}" if e.problem else e.state


def _explain_unknown(entries: Sequence[jit.DiskEntry]) -> None:
    if any(e.state == "unknown" for e in entries):
        print("\nstate unknown: without NVRTC current and stale files cannot be told apart.")


def _find(name: str, entries: List[jit.DiskEntry]) -> Tuple[Optional[jit.DiskEntry], Optional[str]]:
    stem = name[:-4] if name.endswith(".cgk") else name
    exact = [e for e in entries if e.name == stem or e.path == name]
    prefix = [e for e in entries if e.name.startswith(stem)]
    entry = [e for e in entries if e.info is not None and e.info.entry == stem]
    for found in (exact, prefix, entry):
        if len(found) == 1:
            return found[0], None
        if found:
            return None, (f"NAME {name!r} matches {len(found)} kernel files: "
                          + ", ".join(e.name for e in found))
    return None, f"NAME {name!r} matches no kernel file (see 'cache list')"
