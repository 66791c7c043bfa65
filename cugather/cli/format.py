"""Output helpers of the commands: aligned tables, sizes, JSON, errors, listings."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterable, Optional, Sequence, Tuple

from .. import jit


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Rows under headers, columns padded; columns in ``right`` right-aligned; None is '-'."""
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def pairs(items: Sequence[Tuple[str, Any]], indent: str = "  ") -> str:
    """``name  value`` lines with the values aligned; None is '-'."""
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{indent}{k.ljust(width)}  {'-' if v is None else v}" for k, v in items)


def size(n: float) -> str:
    """Bytes as ``123 B``, ``4.5 KiB`` or ``6.7 MiB``."""
    if n < 1024:
        return f"{int(n)} B"
    n /= 1024
    return f"{n:.1f} KiB" if n < 1024 else f"{n / 1024:.1f} MiB"


def ms(seconds: Optional[float]) -> str:
    """Seconds as whole milliseconds; '-' for None."""
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


def cuda_version(v: int) -> str:
    """CUDA's integer version (12090) as text (12.9)."""
    return f"{v // 1000}.{v % 1000 // 10}"


def emit_json(doc: Any) -> None:
    """Print ``doc`` as one indented JSON document."""
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def error(message: str, code: int = 2) -> int:
    """Print ``error: message`` on stderr; return ``code`` (the exit status)."""
    print(f"error: {message}", file=sys.stderr)
    return code


def json_flag(p: argparse.ArgumentParser) -> None:
    """Add ``--json``."""
    p.add_argument("--json", action="store_true", help="print one JSON document")


def listing(info: Optional[jit.KernelInfo], what: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(text, error message) of the source, PTX or SASS of ``info``."""
    if what is None or info is None:
        return None, None
    try:
        text = {"source": lambda: info.source, "ptx": lambda: info.ptx,
                "sass": lambda: info.sass}[what]()
        return text, None
    except (jit.SassUnavailableError, ValueError, RuntimeError) as e:
        return None, str(e)


def print_listing(text: Optional[str], err: Optional[str], what: Optional[str],
                  info: Optional[jit.KernelInfo]) -> int:
    """Print a listing under a heading, or its error on stderr; return the exit status."""
    if err:
        print(f"\nerror: {err}", file=sys.stderr)
        return 1
    if text is not None and info is not None:
        print(f"\n{what} of {info.entry} ({info.arch})\n")
        print(text.rstrip("\n"))
    return 0
