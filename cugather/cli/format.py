"""Output helpers shared by the ``info``, ``cache`` and ``inspect`` commands:
aligned tables, sizes, JSON, errors, and kernel listings."""

from __future__ import annotations

import json
import sys

from .. import jit


def _table(headers, rows, right=()) -> str:
    """Rows under headers, columns padded; columns in ``right`` right-aligned."""
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _pairs(items, indent: str = "  ") -> str:
    """``name  value`` lines with the values aligned."""
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{indent}{k.ljust(width)}  {'-' if v is None else v}" for k, v in items)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _emit_json(doc) -> None:
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _error(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _json_flag(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _listing(info, what):
    """(text, error message) of the source, PTX or SASS of ``info``."""
    if what is None:
        return None, None
    try:
        return {"source": lambda: info.source, "ptx": lambda: info.ptx,
                "sass": lambda: info.sass}[what](), None
    except (jit.SassUnavailableError, ValueError, RuntimeError) as e:
        return None, str(e)


def _print_listing(text, err, what, info) -> int:
    if err:
        print(f"\nerror: {err}", file=sys.stderr)
        return 1
    if text is not None:
        print(f"\n{what} of {info.entry} ({info.arch})\n")
        print(text.rstrip("\n"))
    return 0
