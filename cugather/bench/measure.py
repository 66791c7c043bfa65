"""Running one benchmark case: data, correctness check, timings."""

from __future__ import annotations

import numpy

from .cases import Case
from .peers import host_time, ort_style_kernel, time_cupy, time_jax, time_torch

__all__ = ["run_case", "host_overhead", "divmod_comparison", "run_family_case"]


def _make(cp, case: Case, seed=0):
    rng = cp.random.default_rng(seed)
    dtype = numpy.dtype(case.dtype)
    if dtype.kind in "fc":
        data = rng.standard_normal(case.shape, dtype=numpy.float32).astype(dtype)
    else:
        data = rng.integers(0, 255, size=case.shape, dtype=numpy.int32).astype(dtype)
    n = case.shape[case.axis]
    idx = rng.integers(-n, n, size=case.n_indices, dtype=numpy.int64).astype(case.index_dtype)
    return data, idx


def _same(got, ref) -> bool:
    """Bit-exact equality (False, not an error, on a shape or dtype mismatch)."""
    return (got.shape == ref.shape and got.dtype == ref.dtype
            and bool((got.view(numpy.uint8) == ref.view(numpy.uint8)).all()))


def _stats(times_ms, moved: int) -> dict:
    med = float(numpy.median(times_ms))
    st = {"ms": med, "gbps": moved / med / 1e6, "spread": float(numpy.std(times_ms) / med)}
    if getattr(times_ms, "unheld", 0):
        st["unheld"] = times_ms.unheld  # samples that include host time
    return st


def run_case(cp, case: Case, peers: dict, repeat: int) -> dict:
    import cugather

    data, idx = _make(cp, case)
    n = case.shape[case.axis]
    idx_pos = cp.where(idx < 0, idx + n, idx).astype(idx.dtype)  # for peers without negatives
    moved = case.moved_bytes
    ref = cugather.gather(data, idx, case.axis, mode="wrap")
    res = {"name": case.name, "shape": case.shape, "dtype": case.dtype, "indices": case.n_indices,
           "axis": case.axis, "index_dtype": case.index_dtype, "row_bytes": case.row_bytes,
           "moved_bytes": moved, "note": case.note, "impl": {}, "checked": {}}

    src = cp.empty_like(ref)
    dst = cp.empty_like(ref)
    rt = cp.cuda.runtime

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)

    # The ceiling moves 2 x output bytes; compare effective rates.
    t = time_cupy(cp, copy, repeat)
    res["impl"]["copy"] = _stats(t, 2 * ref.nbytes)
    res["impl"]["copy"]["how"] = "cudaMemcpyAsync device to device, CUDA events, held stream"

    ops = {
        "cugather": cugather.GatherOp(case.axis, mode="wrap"),
        "cugather_raise": cugather.GatherOp(case.axis, mode="raise"),
    }
    plan = ops["cugather"].plan(data, idx)
    res["plan"] = plan.describe()
    res["kernel"] = plan.key.entry
    impls = {
        "cugather": lambda: ops["cugather"](data, idx),
        "cugather_raise": lambda: ops["cugather_raise"](data, idx),
        "cupy.take": lambda: cp.take(data, idx, axis=case.axis),
    }
    if case.index_dtype == "int64":
        idx32 = idx.astype(numpy.int32)
        impls["cugather_i32"] = lambda: ops["cugather"](data, idx32)
    ort = ort_style_kernel(cp, data.itemsize, case.index_dtype)
    ort_out = cp.empty_like(ref)
    impls["ort_style"] = lambda: (ort(data.view(_raw_dtype(data)), idx, ort_out.view(
        _raw_dtype(data)), case.axis), ort_out)[1]
    for name, fn in impls.items():
        got = fn()
        res["checked"][name] = _same(got, ref)
        held = name != "cugather_raise"  # raise mode synchronises with the host
        res["impl"][name] = _stats(time_cupy(cp, fn, repeat, hold=held), moved)
        res["impl"][name]["how"] = ("CUDA events on CuPy's stream, held stream" if held else
                                    "CUDA events on CuPy's stream, includes the host's work "
                                    "before the launch and the read-back")
    # Raise mode behind the hold too: the kernel (which checks) plus the host's
    # return from the synchronisation, without the host's work before the launch.
    res["impl"]["cugather_raise_held"] = _stats(
        time_cupy(cp, impls["cugather_raise"], repeat, hold=True, syncs=True), moved)
    res["impl"]["cugather_raise_held"]["how"] = (
        "CUDA events on CuPy's stream, held stream; from the kernel's start to the stop event "
        "recorded after the call returned")
    if "torch" in peers:
        res["impl"]["torch.index_select"] = _torch(cp, peers["torch"], data, idx_pos, case, ref,
                                                   repeat, moved, res)
    if "jax" in peers:
        res["impl"]["jax.numpy.take"] = _jax(cp, peers["jax"], data, idx_pos, case, ref, repeat,
                                             moved, res)
    _ratios(res)
    return res


def _raw_dtype(a):
    return {1: numpy.uint8, 2: numpy.uint16, 4: numpy.uint32, 8: numpy.uint64,
            16: numpy.complex128}[a.itemsize]


def _torch(cp, torch, data, idx, case, ref, repeat, moved, res):
    td = torch.from_dlpack(data) if data.dtype != numpy.bool_ else torch.from_dlpack(data)
    ti = torch.from_dlpack(idx)
    cp.cuda.Device().synchronize()
    fn = (lambda: torch.index_select(td, case.axis, ti.reshape(-1)).reshape(case.out_shape))
    got = cp.from_dlpack(fn().contiguous())
    res["checked"]["torch.index_select"] = _same(got, ref)
    s = _stats(time_torch(torch, fn, repeat), moved)
    s["how"] = "torch.cuda events on torch's current stream, held stream; non-negative indices"
    return s


def _jax(cp, jax, data, idx, case, ref, repeat, moved, res):
    import jax.numpy as jnp

    jd = jax.dlpack.from_dlpack(data)
    ji = jax.dlpack.from_dlpack(idx)
    take = jax.jit(lambda d, i: jnp.take(d, i, axis=case.axis, mode="clip"))
    cp.cuda.Device().synchronize()
    got = cp.from_dlpack(take(jd, ji))
    res["checked"]["jax.numpy.take"] = _same(got, ref)
    s = _stats(time_jax(lambda: take(jd, ji), repeat), moved)
    s["how"] = ("jitted jnp.take(mode='clip'), back-to-back calls closed by block_until_ready; "
                "non-negative indices")
    return s


def _ratios(res) -> None:
    impl = res["impl"]
    ceiling = impl["copy"]["gbps"]
    peers = [k for k in impl if k in ("cupy.take", "torch.index_select", "jax.numpy.take",
                                      "ort_style")]
    best = max(peers, key=lambda k: impl[k]["gbps"])
    res["best_peer"] = best
    for name, s in impl.items():
        s["of_ceiling"] = s["gbps"] / ceiling
        s["vs_best_peer"] = s["gbps"] / impl[best]["gbps"]


def host_overhead(cp, case: Case, peers: dict) -> dict:
    """Host microseconds per call on the tiny case (asynchronous back-to-back calls)."""
    import cugather

    data, idx = _make(cp, case)
    n = case.shape[case.axis]
    idx_pos = cp.where(idx < 0, idx + n, idx)
    sync = cp.cuda.Device().synchronize
    out = {}
    for mode in ("wrap", "clip", "fill", "raise"):
        op = cugather.GatherOp(case.axis, mode=mode)
        out[f"GatherOp {mode}"] = host_time(lambda: op(data, idx), sync)
    out.update(_bare_launch(cp, data, idx, case.axis, sync))
    out["gather() wrap"] = host_time(lambda: cugather.gather(data, idx, mode="wrap"), sync)
    out["gather() raise"] = host_time(lambda: cugather.gather(data, idx), sync)
    out["take() wrap"] = host_time(lambda: cugather.take(data, idx, axis=0, mode="wrap"), sync)
    out["cupy.take"] = host_time(lambda: cp.take(data, idx, axis=0), sync)
    if "torch" in peers:
        torch = peers["torch"]
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx_pos)
        out["torch.index_select"] = host_time(lambda: torch.index_select(td, 0, ti),
                                              torch.cuda.synchronize)
    if "jax" in peers:
        jax = peers["jax"]
        import jax.numpy as jnp

        jd, ji = jax.dlpack.from_dlpack(data), jax.dlpack.from_dlpack(idx_pos)
        take = jax.jit(lambda d, i: jnp.take(d, i, axis=0, mode="clip"))
        out["jax.numpy.take (jit)"] = host_time(lambda: take(jd, ji),
                                                lambda: take(jd, ji).block_until_ready())
    return out


def _bare_launch(cp, data, idx, axis, sync) -> dict:
    """What a cached call cannot go below from Python: CuPy's cuLaunchKernel of
    the same kernel with its parameters packed beforehand, alone and with the
    one output allocation a call makes."""
    import cugather
    from cupy.cuda import driver

    from ..runtime import bind

    plan = cugather.GatherOp(axis, mode="wrap").plan(data, idx)
    bound = bind(plan, data.data.device_id, out_dtype=data.dtype)
    kernel = bound.main
    result = cp.ndarray(plan.out_shape, data.dtype)
    kernel.launch(0, data.data.ptr, idx.data.ptr, result.data.ptr, 0)  # pointers written once
    sync()
    fn, params = kernel.kernel.handle, kernel.args.ctypes.data
    holder = numpy.array([params], numpy.uint64)
    pptr = holder.ctypes.data
    (g0, g1, g2), (b0, b1, b2) = kernel.grid, kernel.block
    stream = cp.cuda.get_current_stream().ptr
    shape, dtype = plan.out_shape, data.dtype

    def launch():
        driver.launchKernel(fn, g0, g1, g2, b0, b1, b2, 0, stream, pptr, 0)

    def alloc_launch():
        cp.ndarray(shape, dtype)
        driver.launchKernel(fn, g0, g1, g2, b0, b1, b2, 0, stream, pptr, 0)

    return {"bare cuLaunchKernel": host_time(launch, sync),
            "bare cuLaunchKernel + cupy.ndarray": host_time(alloc_launch, sync)}


def divmod_comparison(cp, repeat: int) -> list:
    """The strided fallback kernel with 32-bit fast_divmod, 64-bit fast_divmod
    and plain 64-bit division, on two cases."""
    import cugather
    from ..runtime import bind, execute
    from .cases import by_name

    rows = []
    for name in ("emb512_f32_i64", "rows64B_f32"):
        case = by_name(name)
        data, idx = _make(cp, case)
        ref = cugather.gather(data, idx, case.axis, mode="wrap")
        op = cugather.GatherOp(case.axis, mode="wrap")
        row = {"case": name}
        for math_name in ("fast32", "fast64", "div64"):
            plan = op.plan(data, idx, kind="strided", math_name=math_name)
            device = data.data.device_id
            bound = bind(plan, device, out_dtype=data.dtype)

            def call(bound=bound, device=device):
                return execute(bound, data, data.data.ptr, idx, None, None, device)
            if not _same(call(), ref):
                raise AssertionError(f"{name}: the strided kernel with {math_name} differs "
                                     f"from the default plan")
            row[math_name] = _stats(time_cupy(cp, call, repeat), case.moved_bytes)
        rows.append(row)
    return rows


def run_family_case(cp, c: dict, repeat: int) -> dict:
    """A gather_elements / gather_nd case from cugather.bench.elements_nd: the copy
    ceiling, cugather (wrap), its variants (raise) and the peers."""
    rng = cp.random.default_rng(1)
    state = c["setup"](cp, rng)  # checks cugather against every peer once
    res = {"name": c["name"], "moved_bytes": c["bytes"], "note": c.get("note", ""), "impl": {}}
    if "ceiling" in c:
        copy_fn, copy_bytes = c["ceiling"]
        res["impl"]["copy"] = _stats(time_cupy(cp, lambda: copy_fn(state), repeat), copy_bytes)
    runs = [("cugather", c["cugather"])] + list(c.get("variants", {}).items())
    for name, fn in runs + list(c["peers"].items()):
        held = name != "cugather_raise"  # raise mode synchronises with the host
        res["impl"][name] = _stats(time_cupy(cp, lambda: fn(state), repeat, hold=held), c["bytes"])
    cg = res["impl"]["cugather"]["gbps"]
    peers = [k for k in c["peers"] if k in res["impl"]]
    for name, st in res["impl"].items():
        if "copy" in res["impl"]:
            st["of_ceiling"] = st["gbps"] / res["impl"]["copy"]["gbps"]
    if peers:
        best = max(peers, key=lambda k: res["impl"][k]["gbps"])
        res["best_peer"] = best
        res["vs_peers"] = {k: cg / res["impl"][k]["gbps"] for k in peers}
    return res
