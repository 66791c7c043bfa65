"""GatherBlockQuantized benchmark: a Gemma-size tied embedding, block-quantized.

``python -m cugather bench --quantized`` (alone) or as part of the full
``python -m cugather bench``.  Per case: the table (262144 rows of 2304
values, 4-bit with block 32 or 8-bit, float16 scales), random int64 indices,
and

* ``cugather``: :func:`cugather.gather_block_quantized` in ``wrap`` mode (no
  synchronisation), ``cugather_raise`` (the kernel checks every index, one
  host synchronisation per call);
* ``cupy_composed`` / ``torch_composed``: the same result from library ops
  (gather the packed rows and their scales, unpack the nibbles, subtract the
  zero point, multiply in float32, cast), checked bit for bit against
  cugather before timing;
* ``plain_f16_gather``: ``cugather.gather`` of an unquantized float16 table
  of the same rows (what the model would read without quantization);
* ``copy``: a device-to-device copy moving the case's bytes in the same run.

Effective bandwidth = (packed bytes read + scale bytes read + output bytes
written) / median time (zero-point bytes added where the case has them;
index bytes left out); the copy moves the same total (read + write).
Timing is :func:`cugather.bench.peers.time_cupy` / ``time_torch``: CUDA events
around each call queued behind a holding kernel.
"""

from __future__ import annotations

import sys

import numpy

from .peers import host_time, time_cupy, time_torch

__all__ = ["CASES", "QUICK", "run_quantized", "table", "run_variants", "variants_table",
           "variants_command"]

ROWS, VALUES, BLOCK = 262144, 2304, 32

#: (name, bits, zero points, indices)
CASES = [
    ("q4_gemma_65536", 4, False, 65536),
    ("q4_gemma_8192", 4, False, 8192),
    ("q4_gemma_64", 4, False, 64),
    ("q4_gemma_zp_65536", 4, True, 65536),
    ("q8_gemma_65536", 8, False, 65536),
    ("q8_gemma_8192", 8, False, 8192),
]
QUICK = ("q4_gemma_65536", "q4_gemma_64", "q8_gemma_8192")


def _stats(times_ms, moved: int) -> dict:
    med = float(numpy.median(times_ms))
    return {"ms": med, "gbps": moved / med / 1e6, "spread": float(numpy.std(times_ms) / med)}


def _same(a, b) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and bool((a.view(numpy.uint8) == b.view(numpy.uint8)).all()))


def _table_of(cp, bits: int, with_zp: bool) -> dict:
    """A random quantized table on the GPU: packed bytes, float16 scales, zero points."""
    nb = VALUES // BLOCK
    packed = cp.random.randint(0, 256, (ROWS, VALUES * bits // 8), dtype=cp.int32).astype(cp.uint8)
    scales = (cp.random.standard_normal((ROWS, nb), dtype=cp.float32) * 0.02).astype(cp.float16)
    zp = None
    if with_zp:
        width = (nb + 1) // 2 if bits == 4 else nb
        zp = cp.random.randint(0, 256, (ROWS, width), dtype=cp.int32).astype(cp.uint8)
    return {"data": packed, "scales": scales, "zp": zp, "bits": bits}


def _cupy_composed(cp, t: dict):
    """The dequantizing gather from CuPy ops."""
    data, scales, zp, bits = t["data"], t["scales"], t["zp"], t["bits"]
    nb = VALUES // BLOCK

    def run(idx):
        n = idx.shape[0]
        rows = cp.take(data, idx, axis=0)
        s = cp.take(scales, idx, axis=0).astype(cp.float32)
        q = cp.stack((rows & 15, rows >> 4), axis=-1) if bits == 4 else rows
        v = q.reshape(n, nb, BLOCK).astype(cp.float32)
        if zp is None:
            z = cp.float32(1 << (bits - 1))
        else:
            zr = cp.take(zp, idx, axis=0)
            zu = cp.stack((zr & 15, zr >> 4), axis=-1).reshape(n, -1)[:, :nb] if bits == 4 else zr
            z = zu.astype(cp.float32)[:, :, None]
        return ((v - z) * s[:, :, None]).astype(cp.float16).reshape(n, VALUES)
    return run


def _torch_composed(torch, t: dict):
    """The same from torch ops, on the same memory (DLPack)."""
    data, scales = torch.from_dlpack(t["data"]), torch.from_dlpack(t["scales"])
    zp = None if t["zp"] is None else torch.from_dlpack(t["zp"])
    bits, nb = t["bits"], VALUES // BLOCK

    def run(ti):
        n = ti.shape[0]
        rows = torch.index_select(data, 0, ti)
        s = torch.index_select(scales, 0, ti).float()
        q = torch.stack((rows & 15, rows >> 4), dim=-1) if bits == 4 else rows
        v = q.reshape(n, nb, BLOCK).float()
        if zp is None:
            z = float(1 << (bits - 1))
            d = v - z
        else:
            zr = torch.index_select(zp, 0, ti)
            zu = torch.stack((zr & 15, zr >> 4), dim=-1).reshape(n, -1)[:, :nb] if bits == 4 else zr
            d = v - zu.float()[:, :, None]
        return (d * s[:, :, None]).half().reshape(n, VALUES)
    return run


def _moved(t: dict, n: int) -> int:
    packed = n * t["data"].shape[1]
    scales = n * t["scales"].shape[1] * 2
    zp = 0 if t["zp"] is None else n * t["zp"].shape[1]
    return packed + scales + zp + n * VALUES * 2


def _case(cp, torch, name, t, table16, n, repeat) -> dict:
    import cugather

    idx = cp.random.randint(0, ROWS, n, dtype=cp.int64)
    moved = _moved(t, n)
    res = {"name": name, "bits": t["bits"], "zero_points": t["zp"] is not None, "indices": n,
           "table": [ROWS, VALUES], "block_size": BLOCK, "moved_bytes": moved, "impl": {},
           "checked": {}}
    args = (t["data"], idx, t["scales"], t["zp"])
    kw = dict(block_size=BLOCK, bits=t["bits"])
    impls = {
        "cugather": lambda: cugather.gather_block_quantized(*args, mode="wrap", **kw),
        "cugather_raise": lambda: cugather.gather_block_quantized(*args, **kw),
    }
    ref = impls["cugather"]()
    cupy_fn = _cupy_composed(cp, t)
    impls["cupy_composed"] = lambda: cupy_fn(idx)
    for key, fn in impls.items():
        res["checked"][key] = _same(fn(), ref)
    half = -(-moved // 2)  # a copy of half the bytes moves all of them (read + write)
    src, dst = cp.empty(half, cp.uint8), cp.empty(half, cp.uint8)
    rt = cp.cuda.runtime

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, half, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)
    res["impl"]["copy"] = _stats(time_cupy(cp, copy, repeat), 2 * half)
    for key, fn in impls.items():
        res["impl"][key] = _stats(time_cupy(cp, fn, repeat, hold=key != "cugather_raise"), moved)
    plain = lambda: cugather.gather(table16, idx, mode="wrap")  # noqa: E731
    res["impl"]["plain_f16_gather"] = _stats(time_cupy(cp, plain, repeat),
                                             2 * n * VALUES * 2)
    if torch is not None:
        torch_fn = _torch_composed(torch, t)
        ti = torch.from_dlpack(idx)
        got = torch_fn(ti)
        torch.cuda.synchronize()
        res["checked"]["torch_composed"] = _same(cp.from_dlpack(got), ref)
        res["impl"]["torch_composed"] = _stats(time_torch(torch, lambda: torch_fn(ti), repeat),
                                               moved)
    impl = res["impl"]
    cg = impl["cugather"]
    cg["of_copy"] = cg["gbps"] / impl["copy"]["gbps"]
    composed = [k for k in ("cupy_composed", "torch_composed") if k in impl and res["checked"][k]]
    if composed:
        best = min(composed, key=lambda k: impl[k]["ms"])
        res["best_composed"] = best
        res["vs_best_composed"] = impl[best]["ms"] / cg["ms"]
    res["vs_plain_f16_gather"] = impl["plain_f16_gather"]["ms"] / cg["ms"]
    res["plan"] = _describe(t, idx)
    return res


def _describe(t: dict, idx) -> str:
    from ..ops import quantized as quantized_op

    return quantized_op.plan_of(t["data"], idx, t["scales"], t["zp"], block_size=BLOCK,
                                bits=t["bits"], mode="wrap").describe()


def _host(cp, t: dict, table16) -> dict:
    """Host microseconds per cached call (64 indices), against cugather.gather."""
    import cugather

    idx = cp.random.randint(0, ROWS, 64, dtype=cp.int64)
    sync = cp.cuda.Device().synchronize
    args = (t["data"], idx, t["scales"], t["zp"])
    kw = dict(block_size=BLOCK, bits=t["bits"])
    return {
        "gather_block_quantized wrap": host_time(
            lambda: cugather.gather_block_quantized(*args, mode="wrap", **kw), sync),
        "gather wrap (float16 table)": host_time(
            lambda: cugather.gather(table16, idx, mode="wrap"), sync),
        "gather_block_quantized raise": host_time(
            lambda: cugather.gather_block_quantized(*args, **kw), sync),
        "gather raise (float16 table)": host_time(lambda: cugather.gather(table16, idx), sync),
    }


def run_quantized(cp, quick: bool, repeat: int, peers: dict) -> dict:
    """Every case (the QUICK subset with ``quick``); one dict for the JSON."""
    torch = peers.get("torch")
    names = QUICK if quick else tuple(c[0] for c in CASES)
    table16 = cp.random.standard_normal((ROWS, VALUES), dtype=cp.float32).astype(cp.float16)
    out: dict = {"cases": [], "count": "packed + scale (+ zero-point) bytes read + output "
                                      "bytes written; copy: the same total"}
    tables: dict = {}
    for name, bits, with_zp, n in CASES:
        if name not in names:
            continue
        if (bits, with_zp) not in tables:
            tables.clear()  # one table at a time on the device
            cp.get_default_memory_pool().free_all_blocks()
            tables[(bits, with_zp)] = _table_of(cp, bits, with_zp)
        print(f"[quantized] {name}", file=sys.stderr, flush=True)
        out["cases"].append(_case(cp, torch, name, tables[(bits, with_zp)], table16, n, repeat))
    first = tables.get((4, False)) or _table_of(cp, 4, False)
    out["host_us"] = _host(cp, first, table16)
    return out


def table(res: dict) -> str:
    """The quantized results as text: TB/s per contender, the targets' ratios."""
    cols = ["copy", "cugather", "cugather_raise", "cupy_composed", "torch_composed",
            "plain_f16_gather"]
    head = f"{'case':20s} {'MB':>7s} " + " ".join(f"{c[:14]:>14s}" for c in cols)
    lines = ["GatherBlockQuantized -- effective TB/s (" + res["count"] + ")", head,
             "-" * len(head)]
    for r in res["cases"]:
        cells = [f"{r['impl'][c]['gbps'] / 1e3:14.2f}" if c in r["impl"] else f"{'-':>14s}"
                 for c in cols]
        lines.append(f"{r['name']:20s} {r['moved_bytes'] / 1e6:7.1f} " + " ".join(cells))
    lines += ["", f"{'case':20s} {'of copy':>8s} {'x composed':>11s} {'best composed':>15s} "
                  f"{'x plain f16':>11s} {'us':>8s} checked"]
    for r in res["cases"]:
        cg = r["impl"]["cugather"]
        ok = "yes" if all(r["checked"].values()) else "NO: " + ",".join(
            k for k, v in r["checked"].items() if not v)
        vs = f"{r['vs_best_composed']:11.2f}" if "vs_best_composed" in r else f"{'-':>11s}"
        lines.append(f"{r['name']:20s} {cg['of_copy']:8.0%} {vs} "
                     f"{r.get('best_composed', '-'):>15s} {r['vs_plain_f16_gather']:11.2f} "
                     f"{cg['ms'] * 1e3:8.1f} {ok}")
    lines.append("\nhost time per cached call (us, 64 indices, back-to-back):")
    for k, v in res.get("host_us", {}).items():
        lines.append(f"  {k:32s} {v:8.1f}")
    return "\n".join(lines)


def moved_bytes(bits: int, n: int, zero_points: bool = False) -> int:
    """The byte count of a case without a GPU (for tests and the docs)."""
    nb = VALUES // BLOCK
    zp = ((nb + 1) // 2 if bits == 4 else nb) if zero_points else 0
    return n * (VALUES * bits // 8 + 2 * nb + zp + 2 * VALUES)



# ---------------------------------------------------------------- plan variants
#: The cases ``--variants`` times, and the compile options' minimum resident blocks
#: it tries on top of each key's own (``None``).
VARIANT_CASES = ("q4_gemma_65536", "q4_gemma_zp_65536", "q8_gemma_65536")
VARIANT_MIN_BLOCKS = (None, 3, 4, 5, 6)


def variants(bits: int) -> list:
    """``(values_per_thread, rows_per_thread, min_blocks)`` of every candidate plan of a
    ``bits``-bit case (min_blocks None: the key's own ``__launch_bounds__``)."""
    from ..plan import tuning

    widths = (tuning.QUANT_WIDE_VALUES, tuning.QUANT_VALUES) if bits == 4 else (
        tuning.QUANT_VALUES,)
    return [(v, ru, mb) for v in widths for ru in (1, 2, 4) for mb in VARIANT_MIN_BLOCKS]


def _variant_kernel(cp, plan, min_blocks, device: int):
    """The plan's main launch bound to its kernel compiled with ``-DCG_MIN_BLOCKS``
    (None: the default options); (bound kernel, compiled kernel)."""
    from ..compile.compiler import load_kernel
    from ..runtime.binding import BoundKernel

    options = () if min_blocks is None else (f"-DCG_MIN_BLOCKS={min_blocks}",)
    lk = load_kernel(plan.main.key, device, options)
    return BoundKernel(lk, plan.main), lk.compiled


def _variant_case(cp, name: str, t: dict, n: int, repeat: int) -> dict:
    from ..ops import quantized as quantized_op

    device = cp.cuda.Device().id
    idx = cp.random.randint(0, ROWS, n, dtype=cp.int64)
    moved = _moved(t, n)
    half = -(-moved // 2)
    src, dst = cp.empty(half, cp.uint8), cp.empty(half, cp.uint8)
    rt = cp.cuda.runtime

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, half, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)
    copy_gbps = _stats(time_cupy(cp, copy, repeat), 2 * half)["gbps"]
    kw = dict(block_size=BLOCK, bits=t["bits"], mode="wrap")
    default = quantized_op.plan_of(t["data"], idx, t["scales"], t["zp"], **kw)
    zp_ptr = 0 if t["zp"] is None else t["zp"].data.ptr
    ptrs = (t["data"].data.ptr, idx.data.ptr)
    tail = (0, t["scales"].data.ptr, zp_ptr)
    ref = None
    rows = []
    for v, ru, mb in [(None, None, None)] + variants(t["bits"]):
        plan = default if v is None else quantized_op.plan_of(
            t["data"], idx, t["scales"], t["zp"], values_per_thread=v, rows_per_thread=ru, **kw)
        bk, ck = _variant_kernel(cp, plan, mb, device)
        out = cp.empty(plan.out_shape, cp.float16)

        def call(bk=bk, out=out):
            bk.launch(cp.cuda.get_current_stream().ptr, *ptrs, out.data.ptr, *tail)
        call()
        cp.cuda.get_current_stream().synchronize()
        if ref is None:
            ref = out.copy()
        same = _same(out, ref)
        st = _stats(time_cupy(cp, call, repeat), moved) if same else None
        f = plan.main.fields
        rows.append({"default": v is None, "values": f["values"], "rows": f["row_unroll"],
                     "min_blocks": "key" if mb is None else mb, "block": list(plan.block),
                     "grid": list(plan.grid), "registers": ck.registers,
                     "spill_bytes": (ck.spill_stores or 0) + (ck.spill_loads or 0),
                     "checked": same, "ms": st and st["ms"], "gbps": st and st["gbps"],
                     "of_copy": st and st["gbps"] / copy_gbps})
    return {"name": name, "indices": n, "moved_bytes": moved, "copy_gbps": copy_gbps,
            "default_plan": default.describe(), "variants": rows}


def run_variants(cp, repeat: int = 30) -> dict:
    """Every candidate plan of the VARIANT_CASES timed side by side (CUDA events
    after warm-up, median), each checked bit for bit against the default plan's
    output first.  One dict for the JSON."""
    out: dict = {"cases": [], "count": "packed + scale (+ zero-point) bytes read + output "
                                      "bytes written; copy: the same total"}
    tables: dict = {}
    for name, bits, with_zp, n in CASES:
        if name not in VARIANT_CASES:
            continue
        if (bits, with_zp) not in tables:
            tables.clear()
            cp.get_default_memory_pool().free_all_blocks()
            tables[(bits, with_zp)] = _table_of(cp, bits, with_zp)
        print(f"[quantized variants] {name}", file=sys.stderr, flush=True)
        out["cases"].append(_variant_case(cp, name, tables[(bits, with_zp)], n, repeat))
    return out


def variants_table(res: dict) -> str:
    """The variants as text: TB/s and % of copy per candidate, fastest first per case."""
    lines = ["GatherBlockQuantized plan variants -- effective TB/s (" + res["count"] + ")"]
    for c in res["cases"]:
        lines += ["", f"{c['name']}: {c['moved_bytes'] / 1e6:.1f} MB, copy "
                      f"{c['copy_gbps'] / 1e3:.2f} TB/s; default: {c['default_plan']}",
                  f"  {'values':>6s} {'rows':>4s} {'minblk':>6s} {'block':>10s} {'grid':>7s} "
                  f"{'regs':>4s} {'spill':>5s} {'TB/s':>6s} {'of copy':>7s} {'us':>7s}"]
        ranked = sorted(c["variants"], key=lambda r: (r["gbps"] is None, -(r["gbps"] or 0)))
        for r in ranked:
            tag = "  <- default" if r["default"] else ""
            if r["gbps"] is None:
                perf = f"{'MISMATCH vs default':>22s}"
            else:
                perf = f"{r['gbps'] / 1e3:6.2f} {r['of_copy']:7.0%} {r['ms'] * 1e3:7.1f}"
            block = "x".join(str(b) for b in r["block"][:2])
            lines.append(f"  {r['values']:6d} {r['rows']:4d} {str(r['min_blocks']):>6s} "
                         f"{block:>10s} {r['grid'][0]:7d} {str(r['registers']):>4s} "
                         f"{r['spill_bytes']:5d} {perf}{tag}")
    return "\n".join(lines)


def variants_command(cp, args) -> int:
    """``python -m cugather bench --quantized --variants``: quantized-variants.json and
    the table."""
    import json
    import os

    res = run_variants(cp, args.repeat or 30)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "quantized-variants.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(variants_table(res))
    print(f"\nresults: {path}")
    return 0
