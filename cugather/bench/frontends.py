"""torch front door benchmarks: host cost per call, float8 bandwidth, a compiled embedding.

    python -m cugather.bench.frontends --out DIR [--batches 15] [--calls 2000]

writes ``DIR/frontends.json`` and prints a table.  Three parts, each timed
with its contenders interleaved in one process (A B C A B C ...), since the
spread between machine instances is larger than the differences measured:

* ``host``: CPU time per call on the tiny case (a (1000, 64) float32 table,
  10 int64 ids, mode ``wrap``), ``batches`` batches of ``calls`` back-to-back
  calls, median and spread: ``torch.index_select``, ``cugather.gather`` on
  torch tensors, ``cugather.torch.gather``, ``torch.ops.cugather.gather``,
  and the parts a call is made of (``torch.empty`` of the output, the views of
  the operands) to say where the time goes;
* ``float8``: a float8_e4m3fn gather against a uint8 gather of the same bytes,
  CUDA events, effective bandwidth ``(2 x output + index bytes) / time``;
* ``compiled``: ``torch.compile`` of a module embedding through
  ``torch.ops.cugather.gather`` against the same module with
  ``torch.nn.functional.embedding``, the (50000, 512) float32 table and
  (256, 300) int64 ids (the fixed suite's emb512 shape): device time per call
  on a held stream (:func:`held_times`, the fixed suite's method) and host
  time per call beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

__all__ = ["host_times", "event_times", "held_times", "run", "main"]


def _summary(samples: List[float], unit: str) -> Dict[str, Any]:
    med = statistics.median(samples)
    return {f"median_{unit}": med, f"min_{unit}": min(samples), f"max_{unit}": max(samples),
            "spread_pct": 100.0 * (max(samples) - min(samples)) / med if med else 0.0,
            "samples": samples}


def host_times(contenders: Dict[str, Callable[[], Any]], sync: Callable[[], Any],
               batches: int = 15, calls: int = 2000) -> Dict[str, Dict[str, Any]]:
    """Host microseconds per call of each contender, batches interleaved."""
    for fn in contenders.values():
        for _ in range(50):
            fn()
    sync()
    samples: Dict[str, List[float]] = {name: [] for name in contenders}
    for _ in range(batches):
        for name, fn in contenders.items():
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return {name: _summary(s, "us") for name, s in samples.items()}


def event_times(torch: Any, contenders: Dict[str, Callable[[], Any]], batches: int = 15,
                calls: int = 10) -> Dict[str, Dict[str, Any]]:
    """Device milliseconds per call (CUDA events around ``calls`` calls), interleaved."""
    for fn in contenders.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples: Dict[str, List[float]] = {name: [] for name in contenders}
    for _ in range(batches):
        for name, fn in contenders.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / calls)
    return {name: _summary(s, "ms") for name, s in samples.items()}


def _host_part(torch: Any, batches: int, calls: int) -> Dict[str, Any]:
    import cugather
    import cugather.torch as ct
    from cugather.frontends import torch as fe

    table = torch.randn(1000, 64, device="cuda")
    ids = torch.randint(0, 1000, (10,), device="cuda")
    want = torch.index_select(table, 0, ids)
    try:
        public: Any = cugather.gather(table, ids, mode="wrap")
    except Exception as e:  # reported, and the other contenders still timed
        public = e
    checks = {"cugather.torch.gather": bool(torch.equal(ct.gather(table, ids, mode="wrap"), want)),
              "torch.ops.cugather.gather": bool(torch.equal(
                  torch.ops.cugather.gather(table, ids, 0, "wrap", 0), want)),
              "cugather.gather returns a torch tensor": isinstance(public, torch.Tensor)}
    if isinstance(public, Exception):
        checks["cugather.gather error"] = f"{type(public).__name__}: {public}"
    gather_op = torch.ops.cugather.gather
    dev = torch.device("cuda", table.get_device())
    contenders = {
        "torch.index_select": lambda: torch.index_select(table, 0, ids),
        "cugather.gather": lambda: cugather.gather(table, ids, mode="wrap"),
        "cugather.torch.gather": lambda: ct.gather(table, ids, mode="wrap"),
        "torch.ops.cugather.gather": lambda: gather_op(table, ids, 0, "wrap", 0),
        "part: torch.empty of the output": lambda: torch.empty((10, 64), dtype=torch.float32,
                                                               device=dev),
        "part: views of data and indices": lambda: (
            fe.view_of(table), fe.FRONTEND.prepare_indices(ids, 0)),
    }
    if isinstance(public, Exception):
        del contenders["cugather.gather"]
    times = host_times(contenders, torch.cuda.synchronize, batches, calls)
    base = times["torch.index_select"]["median_us"]
    med = {k: v["median_us"] for k, v in times.items()}
    med.setdefault("cugather.gather", float("nan"))
    targets = {
        "cugather.gather / index_select <= 1.3": med["cugather.gather"] / base,
        "cugather.torch.gather - index_select <= 3 us": med["cugather.torch.gather"] - base,
        "torch.ops.cugather.gather - index_select <= 6 us":
            med["torch.ops.cugather.gather"] - base,
    }
    return {"case": "(1000, 64) float32, 10 int64 ids, mode wrap", "batches": batches,
            "calls": calls, "checks": checks, "times": times, "targets": targets}


def _float8_part(torch: Any, batches: int) -> Dict[str, Any]:
    import cugather.torch as ct

    rows, width, n = 500_000, 256, 1_000_000  # a 128 MB table, a 256 MB output
    raw = torch.randint(0, 256, (rows, width), dtype=torch.uint8, device="cuda")
    f8 = raw.view(torch.float8_e4m3fn)
    ids = torch.randint(0, rows, (n,), device="cuda")
    same = bool(torch.equal(ct.gather(f8, ids, mode="wrap").view(torch.uint8),
                            ct.gather(raw, ids, mode="wrap")))
    times = event_times(torch, {"float8_e4m3fn": lambda: ct.gather(f8, ids, mode="wrap"),
                                "uint8": lambda: ct.gather(raw, ids, mode="wrap")}, batches)
    moved = 2 * n * width + ids.numel() * 8
    bandwidth = {k: moved / (v["median_ms"] * 1e-3) / 1e12 for k, v in times.items()}
    return {"case": f"({rows}, {width}) 1-byte table, {n} int64 ids, mode wrap",
            "same_bytes": same, "times": times, "tb_per_s": bandwidth,
            "targets": {"float8 / uint8 bandwidth >= 0.95":
                        bandwidth["float8_e4m3fn"] / bandwidth["uint8"]}}


def _compiled_part(torch: Any, batches: int) -> Dict[str, Any]:
    import cugather.torch  # noqa: F401  (registers the operator)

    class Embed(torch.nn.Module):
        def __init__(self, table: Any, through_cugather: bool) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(table, requires_grad=False)
            self.through_cugather = through_cugather

        def forward(self, ids: Any) -> Any:
            if self.through_cugather:
                return torch.ops.cugather.gather(self.table, ids, 0, "clip", 0)
            return torch.nn.functional.embedding(ids, self.table)

    table = torch.randn(50_000, 512, device="cuda")
    ids = torch.randint(0, 50_000, (256, 300), device="cuda")
    mine = torch.compile(Embed(table, True), fullgraph=True)
    theirs = torch.compile(Embed(table, False), fullgraph=True)
    contenders = {"torch.ops.cugather.gather": lambda: mine(ids),
                  "nn.functional.embedding": lambda: theirs(ids)}
    with torch.no_grad():
        same = bool(torch.equal(mine(ids), theirs(ids)))
        device = held_times(torch, contenders, batches)
        host = host_times(contenders, torch.cuda.synchronize, max(3, batches // 3), 200)
    med = {k: v["median_ms"] for k, v in device.items()}
    return {"case": "(50000, 512) float32 table, (256, 300) int64 ids, torch.compile",
            "same_result": same, "times": device, "host_us_per_call": host,
            "targets": {"cugather / embedding time <= 1.0":
                        med["torch.ops.cugather.gather"] / med["nn.functional.embedding"]}}


def held_times(torch: Any, contenders: Dict[str, Callable[[], Any]], batches: int = 15,
               calls: int = 5) -> Dict[str, Dict[str, Any]]:
    """Device milliseconds per call, each call timed with CUDA events on a stream held
    by a spinning kernel until every call of the batch is queued (the fixed suite's
    method: no host time in it), contenders interleaved batch by batch."""
    from .peers import time_torch

    samples: Dict[str, List[float]] = {name: [] for name in contenders}
    for fn in contenders.values():
        time_torch(torch, fn, 2, 2)
    for _ in range(batches):
        for name, fn in contenders.items():
            samples[name].extend(time_torch(torch, fn, calls, 0))
    return {name: _summary(s, "ms") for name, s in samples.items()}


def run(batches: int = 15, calls: int = 2000) -> Dict[str, Any]:
    """All three parts; a JSON-ready dict."""
    import torch

    import cugather

    return {"cugather": cugather.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "host": _host_part(torch, batches, calls),
            "float8": _float8_part(torch, batches), "compiled": _compiled_part(torch, batches)}


def _table(result: Dict[str, Any]) -> str:
    lines = [f"cugather {result['cugather']}, torch {result['torch']}, {result['device']}"]
    for part, unit in (("host", "us"), ("float8", "ms"), ("compiled", "ms")):
        r = result[part]
        lines.append(f"\n{part}: {r['case']}")
        for name, t in r["times"].items():
            lines.append(f"  {name:<36} {t[f'median_{unit}']:10.3f} {unit}  "
                         f"(min {t[f'min_{unit}']:.3f}, max {t[f'max_{unit}']:.3f})")
        for name, t in r.get("host_us_per_call", {}).items():
            lines.append(f"  host time {name:<26} {t['median_us']:10.3f} us per call")
        for name, value in r["targets"].items():
            lines.append(f"  target {name:<48} {value:8.3f}")
        for key in ("checks", "same_bytes", "same_result", "tb_per_s"):
            if key in r:
                lines.append(f"  {key}: {r[key]}")
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", required=True, help="folder for frontends.json")
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    result = run(args.batches, args.calls)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "frontends.json").write_text(json.dumps(result, indent=1) + "\n")
    print(_table(result))
    print(f"\nwrote {out / 'frontends.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
