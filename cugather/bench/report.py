"""Benchmark output: an aligned table and a PNG chart."""

from __future__ import annotations

import math

__all__ = ["table", "chart"]

COLUMNS = ["copy", "cugather", "cugather_i32", "cugather_raise", "cugather_raise_held",
           "cupy.take", "torch.index_select", "jax.numpy.take", "ort_style"]
#: Table headings where the name is too long for a column.
_HEADINGS = {"cugather_raise": "raise", "cugather_raise_held": "raise held",
             "torch.index_select": "torch.index_s", "jax.numpy.take": "jax.take"}


def table(results: dict) -> str:
    cases = results["cases"]
    cols = [c for c in COLUMNS if any(c in r["impl"] for r in cases)]
    head = f"{'case':18s} {'row B':>7s} " + " ".join(f"{_HEADINGS.get(c, c)[:12]:>12s}"
                                                      for c in cols)
    lines = [f"{results['gpu']} -- effective TB/s = (2 x output + index bytes) / median time",
             head, "-" * len(head)]
    for r in cases:
        cells = [f"{r['impl'][c]['gbps'] / 1e3:12.2f}" if c in r["impl"] else f"{'-':>12s}"
                 for c in cols]
        lines.append(f"{r['name']:18s} {r['row_bytes']:7d} " + " ".join(cells))
    lines += ["", f"{'case':18s} {'of ceiling':>10s} {'vs best peer':>12s} {'best peer':>18s}"
                  f" {'vs cupy':>8s} {'i32/i64':>8s} checked  kernel"]
    geo_peer, geo_cupy = [], []
    for r in cases:
        cg = r["impl"]["cugather"]
        vs_cupy = cg["gbps"] / r["impl"]["cupy.take"]["gbps"]
        i32 = (f"{r['impl']['cugather_i32']['gbps'] / cg['gbps']:8.2f}"
               if "cugather_i32" in r["impl"] else f"{'-':>8s}")
        ok = "yes" if all(r["checked"].values()) else "NO: " + ",".join(
            k for k, v in r["checked"].items() if not v)
        lines.append(f"{r['name']:18s} {cg['of_ceiling']:10.0%} {cg['vs_best_peer']:12.2f}"
                     f" {r['best_peer']:>18s} {vs_cupy:8.2f} {i32} {ok:7s}  {r['kernel']}")
        if r["name"] != "tiny":
            geo_peer.append(cg["vs_best_peer"])
            geo_cupy.append(vs_cupy)
    if geo_peer:
        g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
        lines.append(f"\ngeometric mean (without tiny): {g(geo_peer):.2f}x best peer, "
                     f"{g(geo_cupy):.2f}x cupy.take")
    if "host_overhead_us" in results:
        lines.append("\nhost time per call (us, tiny case, asynchronous back-to-back calls):")
        for k, v in results["host_overhead_us"].items():
            lines.append(f"  {k:24s} {v:8.1f}")
    for row in results.get("fallback_divmod", []):
        cells = ", ".join(f"{m} {row[m]['gbps'] / 1e3:.2f} TB/s" for m in ("fast32", "fast64", "div64"))
        lines.append(f"\nfallback kernel on {row['case']}: {cells}")
    if results.get("family"):
        lines.append("\ngather_elements / gather_nd (effective TB/s; cugather x peer):")
    for r in results.get("family", []):
        cells = "  ".join(f"{k} {v['gbps'] / 1e3:.2f}" for k, v in r["impl"].items())
        ratios = ", ".join(f"{v:.2f}x {k}" for k, v in r.get("vs_peers", {}).items())
        of = r["impl"]["cugather"].get("of_ceiling")
        lines.append(f"  {r['name']:20s} {cells}")
        lines.append(f"  {'':20s} cugather {ratios}" + (f"; {of:.0%} of ceiling" if of else ""))
    return "\n".join(lines)


def chart(results: dict, path: str):
    """Bar chart of effective bandwidth per case and implementation; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cases = [r for r in results["cases"] if r["name"] != "tiny"]
    cols = [c for c in COLUMNS if c not in ("cugather_raise", "cugather_raise_held", "cugather_i32")
            and any(c in r["impl"] for r in cases)]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(cases)), 5))
    width = 0.8 / len(cols)
    for j, c in enumerate(cols):
        xs = [i + j * width for i in range(len(cases))]
        ys = [r["impl"].get(c, {}).get("gbps", 0) / 1e3 for r in cases]
        ax.bar(xs, ys, width, label=c)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
    ax.set_xticklabels([r["name"] for r in cases], rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("effective TB/s")
    ax.set_title(f"gather on {results['gpu']} ({results['date'][:10]})")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
