"""The sweep's numbers: ratios per shape, the summary, the worst shapes and why,
a text report and a scatter plot.  Pure Python over the records of
:func:`cugather.bench.sweep_run.run_shape` (no GPU)."""

from __future__ import annotations

import math
from collections import Counter

__all__ = ["PEERS", "score", "why", "chooser", "ratio_stats", "summarize", "sweep_text",
           "sweep_chart", "LAUNCH_BOUND_MS"]

PEERS = ("cupy.take", "torch.index_select", "jax.numpy.take")
LAUNCH_BOUND_MS = 0.010   # a best peer under 10 us is bound by launch latency, not bytes
DRAM_BURST = 64           # bytes the memory moves per random access on H100/H200
SECTOR = 32
DEFAULT_DEVICE = {"sm_count": 132, "l2_bytes": 50 << 20}
_RATIO_TICKS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1, 1.2, 1.5, 2, 3, 5, 7, 10, 20)


def score(rec: dict) -> dict:
    """Add the ratios to a shape record, in place, and return it.

    ``best_peer`` is the peer with the highest effective bandwidth; ``ratio``
    is cugather's effective bandwidth over the best peer's (above 1 is
    faster); every implementation gets ``of_ceiling``, its bandwidth over the
    copy ceiling's; ``mismatch`` lists the implementations whose output
    differs from cugather's.
    """
    impl = rec["impl"]
    peers = [p for p in PEERS if p in impl]
    best = max(peers, key=lambda p: impl[p]["gbps"]) if peers else None
    rec["best_peer"] = best
    rec["ratio"] = impl["cugather"]["gbps"] / impl[best]["gbps"] if best and "cugather" in impl \
        else None
    if "copy" in impl:
        for st in impl.values():
            st["of_ceiling"] = st["gbps"] / impl["copy"]["gbps"]
    rec["mismatch"] = sorted(k for k, ok in rec.get("checked", {}).items() if not ok)
    return rec


def chooser(chosen_by: str) -> str:
    """What chose a plan's kernel, in short, from the plan's ``chosen_by``: ``table
    leaf N`` or ``rules`` and why the table left the geometry to them; "" where
    the record predates it."""
    import re

    m = re.match(r"(sm_\d+) tuning table, leaf (\d+) \(", chosen_by)
    if m:
        return f"{m.group(1)} table leaf {m.group(2)}"
    m = re.search(r"\(the sm_\d+ tuning table leaves this geometry to them: (.*)\)$", chosen_by)
    if m:
        return f"rules: {m.group(1)}"
    m = re.search(r"\(sm_\d+ table (leaf \d+ names .*)\)$", chosen_by)
    if m:
        return f"rules: {m.group(1)}"
    return "rules" if chosen_by else ""


def _size(n: int) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def why(rec: dict, device: dict = None) -> str:
    """A one-line, computed explanation of a shape's result.

    The first two reasons that apply, in this order: a wrong result or an
    error; launch-bound (best peer under :data:`LAUNCH_BOUND_MS`); the kernel
    kind's limit (scalar picks, staging, the generic kernel); row bytes not
    a multiple of 16 or a unit narrower than the row allows; rows shorter
    than a DRAM burst from a table larger than L2; fewer blocks than SMs.
    Then cugather's and the best peer's share of the copy ceiling.
    """
    dev = dict(DEFAULT_DEVICE, **(device or {}))
    if rec.get("mismatch"):
        return "WRONG RESULT: differs from cugather in " + ", ".join(rec["mismatch"])
    for name in ("setup", "cugather"):
        if name in rec.get("errors", {}):
            return f"{name} failed: " + rec["errors"][name]
    impl, plan = rec.get("impl", {}), rec.get("plan") or {}
    kind, unit = plan.get("kind", "?"), plan.get("unit") or rec["itemsize"]
    rb, table = rec["row_bytes"], rec["table_bytes"]
    in_l2 = table <= dev["l2_bytes"]
    best = rec.get("best_peer")
    reasons = []
    if best and impl[best]["ms"] < LAUNCH_BOUND_MS:
        reasons.append(f"launch-bound: best peer {impl[best]['ms'] * 1e3:.1f} us, "
                       f"cugather {impl['cugather']['ms'] * 1e3:.1f} us")
    if kind == "scalar":
        reasons.append(f"scalar picks: one {unit} B unit per index, random {SECTOR} B sectors"
                       + ("" if in_l2 else " from DRAM"))
    elif kind == "inner":
        reasons.append(f"staging: a {_size(rec['axis_len'] * rb)} axis row per block for "
                       f"{rec['n_indices']} picks")
    elif kind == "strided":
        reasons.append(f"strided fallback: per-unit index math, {unit} B units")
    elif kind == "window":
        reasons.append(f"window: {rb} B rows as 16 B chunks, each part two aligned loads")
    if rb > unit and rb % 16 and kind != "window":
        reasons.append(f"row bytes not a multiple of 16 ({rb} B, unit {unit} B)")
    elif rb > unit and unit < 16:
        reasons.append(f"unit {unit} B on {rb} B rows (a base or stride is not 16 B aligned)")
    if kind != "scalar" and rb < DRAM_BURST and not in_l2:
        reasons.append(f"{rb} B rows from a table larger than L2 ({_size(table)}): "
                       f"each random row costs a {DRAM_BURST} B burst")
    blocks = math.prod(plan.get("grid") or [0])
    if 0 < blocks < dev["sm_count"]:
        reasons.append(f"{blocks} blocks for {dev['sm_count']} SMs")
    tail = ""
    if "of_ceiling" in impl.get("cugather", {}) and best:
        tail = (f"cugather {impl['cugather']['of_ceiling']:.0%} of copy, {best} "
                f"{impl[best]['of_ceiling']:.0%}")
    return "; ".join(reasons[:2] + ([tail] if tail else [])) or "no ratio (no peer ran)"


def ratio_stats(ratios) -> dict:
    """Share at >= 1.0x and >= 0.9x, minimum, geometric mean and median of ratios."""
    rs = sorted(ratios)
    if not rs:
        return {"n": 0, "share_ge_1": None, "share_ge_0_9": None, "min": None,
                "geomean": None, "median": None}
    mid = len(rs) // 2
    return {"n": len(rs), "share_ge_1": sum(r >= 1.0 for r in rs) / len(rs),
            "share_ge_0_9": sum(r >= 0.9 for r in rs) / len(rs), "min": rs[0],
            "geomean": math.exp(sum(math.log(r) for r in rs) / len(rs)),
            "median": rs[mid] if len(rs) % 2 else (rs[mid - 1] + rs[mid]) / 2}


def summarize(records: list, worst_count: int = 10) -> dict:
    """The sweep's summary: ratio statistics overall and per kernel kind, the best
    peers, every mismatch and error, and the ``worst_count`` lowest ratios."""
    timed = [r for r in records if r.get("ratio") is not None]
    kinds = sorted({(r.get("plan") or {}).get("kind", "?") for r in timed})
    return {
        **ratio_stats([r["ratio"] for r in timed]),
        "shapes": len(records),
        "per_kind": {k: ratio_stats([r["ratio"] for r in timed
                                     if (r.get("plan") or {}).get("kind", "?") == k])
                     for k in kinds},
        "best_peer_counts": dict(Counter(r["best_peer"] for r in timed).most_common()),
        "mismatches": [[r["i"], name] for r in records for name in r.get("mismatch", [])],
        "errors": [[r["i"], name, msg] for r in records
                   for name, msg in sorted(r.get("errors", {}).items())],
        "worst": [r["i"] for r in sorted(timed, key=lambda r: (r["ratio"], r["i"]))[:worst_count]],
    }


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def sweep_text(results: dict) -> str:
    """The printed report of a sweep (``results`` as written to sweep.json)."""
    s, recs = results["summary"], {r["i"]: r for r in results["records"]}
    lines = [f"sweep: {s['shapes']} shapes (seed {results['seed']}) on {results['gpu']}, "
             f"{results['elapsed_s']:.0f} s (JAX compiles {results.get('jax_compile_s', 0):.0f} s)"
             + ("" if results.get("complete", True) else ", INCOMPLETE"),
             "cugather (wrap) vs the best peer, effective bandwidth (2 x output + index bytes):",
             f"  shapes with a ratio   {s['n']}",
             f"  >= 1.0x best peer     {_pct(s['share_ge_1'])}",
             f"  >= 0.9x best peer     {_pct(s['share_ge_0_9'])}",
             f"  minimum               {_x(s['min'])}",
             f"  geometric mean        {_x(s['geomean'])}",
             f"  median                {_x(s['median'])}",
             "  best peer             " + (", ".join(f"{k} {v}" for k, v in
                                                      s["best_peer_counts"].items()) or "-")]
    lines += [f"  note: {n}" for n in results.get("notes", [])]
    bad = ", ".join(f"#{i} {k}" for i, k in s["mismatches"])
    lines.append("  checks: " + (f"MISMATCHES: {bad}" if bad else
                                 "every result bit-exact with cugather"))
    for i, name, msg in s["errors"]:
        lines.append(f"  error: #{i} {name}: {msg}")
    lines += ["", f"{'kernel kind':12s} {'shapes':>6s} {'>=1.0x':>7s} {'min':>6s} {'geomean':>8s}"]
    for kind, k in s["per_kind"].items():
        lines.append(f"{kind:12s} {k['n']:6d} {_pct(k['share_ge_1']):>7s} {_x(k['min']):>6s}"
                     f" {_x(k['geomean']):>8s}")
    lines += ["", f"the {len(s['worst'])} worst shapes:"]
    for i in s["worst"]:
        r = recs[i]
        lines.append(f"  #{i:<4d} {r['ratio']:.2f}x {r['best_peer']}  {r['row_bytes']} B rows,"
                     f" out {_size(r['out_bytes'])}, table {_size(r['table_bytes'])}: "
                     f"({'x'.join(map(str, r['shape']))}) {r['dtype']} axis {r['axis']}, "
                     f"idx ({'x'.join(map(str, r['indices'])) or 'scalar'}) {r['index_dtype']}")
        by = chooser(r["plan"].get("chosen_by", ""))
        lines.append(f"        {r['plan']['entry']}{f' ({by})' if by else ''}: {r['why']}")
    return "\n".join(lines)


def sweep_chart(results: dict, path: str):
    """Scatter of cugather / best peer against output bytes, coloured by kernel
    kind, both axes logarithmic, a line at 1.0; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    timed = [r for r in results["records"] if r.get("ratio") is not None]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for kind in sorted({r["plan"]["kind"] for r in timed}):
        pts = [r for r in timed if r["plan"]["kind"] == kind]
        ax.scatter([r["out_bytes"] for r in pts], [r["ratio"] for r in pts], s=18, alpha=0.8,
                   label=f"{kind} ({len(pts)})")
    bad = [r for r in timed if r.get("mismatch")]
    if bad:
        ax.scatter([r["out_bytes"] for r in bad], [r["ratio"] for r in bad], s=80,
                   facecolors="none", edgecolors="red", label="result differs")
    ax.axhline(1.0, color="black", lw=1)
    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator([t for t in _RATIO_TICKS if lo <= t <= hi]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_locator(FixedLocator([1 << k for k in range(10, 32, 2)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _size(int(v)).replace(" ", "")))
    ax.set_xlabel("output bytes")
    ax.set_ylabel("cugather / best peer (effective bandwidth)")
    s = results["summary"]
    ax.set_title(f"{s['shapes']} random gathers, seed {results['seed']}, {results['gpu']}: "
                 f"{_pct(s['share_ge_1'])} >= 1.0x, min {_x(s['min'])}, "
                 f"geomean {_x(s['geomean'])}", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, title="kernel kind", title_fontsize=8)
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
