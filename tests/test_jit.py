"""cugather.jit: kernel inspection, in-process and disk caches (pure, nvrtc and gpu tiers)."""

import gc
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref

import numpy as np
import pytest

import cugather
from cugather import jit
from cugather.inspect import api as _api
from cugather.compile import compiler as _compiler, render as _codegen
from cugather.inspect import disasm as _disasm
from cugather.plan.keys import KernelKey

ROWS = KernelKey("rows", 16, "int64", "fast32", "raise")
CHECK = KernelKey("check", 0, "int64", "fast64", "raise")
SCALAR = KernelKey("scalar", 4, "int32", "fast32", "wrap")


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


def _compiles():
    return _compiler.stats()["compiles"]


# ---------------------------------------------------------------- pure
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "float64", "complex128",
                                   "complex256", "V6", "V12", "V3", "bool"])
def test_unit_defaults_to_widest_power_of_two_dividing_the_itemsize(dtype):
    itemsize = np.dtype(dtype).itemsize
    expected = min(16, itemsize & -itemsize)  # lowest set bit, capped at the widest unit
    assert _api._unit(dtype, None) == expected


def test_explicit_unit_overrides_dtype_and_is_checked():
    assert _api._unit("float16", 16) == 16
    assert _api._unit(None, 1) == 1
    with pytest.raises(ValueError, match=r"unit must be one of .*got 3"):
        _api._unit("float32", 3)
    with pytest.raises(ValueError, match="dtype is None"):
        _api._unit(None, None)
    with pytest.raises(ValueError, match="dtype must be a NumPy dtype, got 'nope'"):
        _api._unit("nope", None)


def test_compile_names_the_bad_argument():
    with pytest.raises(ValueError, match="kind must be one of .*got 'gatherer'"):
        jit.compile("gatherer", "float32", "int64")
    with pytest.raises(ValueError, match="index_dtype must be one of .*got 'float32'"):
        jit.compile("rows", "float32", "float32")
    with pytest.raises(ValueError, match="mode for kind 'rows' must be one of .*got 'nope'"):
        jit.compile("rows", "float32", "int64", mode="nope")
    with pytest.raises(ValueError, match="math for kind 'rows' must be one of .*got 'div64'"):
        jit.compile("rows", "float32", "int64", math="div64")
    with pytest.raises(TypeError, match="key must be a KernelKey"):
        jit.compile_key("cugather_rows_u16_i64_fast32_raise")
    with pytest.raises(TypeError, match="options must be a tuple of str"):
        jit.compile_key(ROWS, options="-O3")
    assert _compiles() == 0


def test_cache_dir_follows_cupy_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert jit.cache_info().cache_dir == str(tmp_path / "elsewhere" / "cugather")
    monkeypatch.delenv("CUPY_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jit.cache_info().cache_dir == str(tmp_path / "home" / ".cupy" / "kernel_cache" / "cugather")


def test_cache_clear_disk_removes_cugather_files_only(cache):
    cache.mkdir(parents=True)
    ours = [cache / "cugather_x.sm_90.0123.cgk", cache / ".cgk-abc.tmp"]
    theirs = [cache.parent / "0123456789abcdef.cubin",  # CuPy's own cache
              cache / "README", cache / "cgk.tmp"]
    for p in ours + theirs:
        p.write_bytes(b"x")
    cleared = jit.cache_clear(disk=True)
    assert cleared.disk_entries == 2  # an entry and a temp file left by an interrupted write
    assert not any(p.exists() for p in ours)
    assert all(p.exists() for p in theirs)
    with pytest.raises(ValueError, match="refusing to delete"):
        _api._remove_disk_entries([str(theirs[0])])
    assert theirs[0].exists()


def test_cache_clear_reaches_every_plan_cache_and_keeps_none_alive():
    from cugather.runtime import cache as plan_caches

    ops = [cugather.GatherOp(0), cugather.GatherOp(1, mode="wrap")]
    for i, op in enumerate(ops):  # what calls store, without a GPU
        op._runtime.put(("shape", i), object())
        op._runtime.put(("shape", i + 10), object())
        assert op._runtime.get(("shape", i)) is not None
    assert [op.cache_info() for op in ops] == [cugather.CacheInfo(1, 2, 256, 2)] * 2
    cleared = jit.cache_clear()
    assert cleared.plans >= 4
    assert [op.cache_info() for op in ops] == [cugather.CacheInfo(0, 0, 256, 0)] * 2
    caches = [weakref.ref(op._runtime) for op in ops]
    assert all(c() in plan_caches._live for c in caches)
    del ops, op  # the loop variable holds the last one
    gc.collect()
    assert [c() for c in caches] == [None, None]  # the registry keeps nothing alive


def test_whole_cubin_restores_only_a_one_byte_shortfall():
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    # section headers end at 64 + 2*64 = 192; program headers at 192 + 1*56 = 248
    header[32:48] = (192).to_bytes(8, "little") + (64).to_bytes(8, "little")
    header[54:62] = b"".join(v.to_bytes(2, "little") for v in (56, 1, 64, 2))
    full = bytes(header) + bytes(248 - 64)
    assert _compiler.elf_extent(full) == 248
    assert _compiler._whole_cubin(full[:-1]) == full
    assert _compiler._whole_cubin(full) == full
    assert _compiler._whole_cubin(full[:-2]) == full[:-2]  # not ours to guess
    assert _compiler.elf_extent(b"PTX text") is None


def test_sass_without_a_disassembler_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(_disasm, "_wheel_bin_folders", lambda: [])
    assert jit.find_disassembler() is None
    with pytest.raises(jit.SassUnavailableError, match="nvdisasm .* was not found on PATH"):
        _disasm.disassemble(b"\x7fELF", "cugather_x")


# ---------------------------------------------------------------- nvrtc
def _ptxas(log, what):
    m = re.search({"regs": r"Used (\d+) registers", "st": r"(\d+) bytes spill stores",
                   "ld": r"(\d+) bytes spill loads"}[what], log)
    return int(m.group(1))


@pytest.mark.nvrtc
def test_compile_without_gpu_returns_a_full_kernel_info(cache):
    info = jit.compile("rows", "float16", "int64", unit=16, arch="sm_90")
    assert info.key == ROWS and info.entry == "cugather_rows_u16_i64_fast32_raise"
    assert info.source == _codegen.render(ROWS).text
    assert f'extern "C" __global__' in info.source and info.entry in info.source
    assert "--gpu-architecture=sm_90" in info.options and "--ptxas-options=-v" in info.options
    assert info.arch == "sm_90" and info.compile_seconds > 0 and not info.from_disk
    assert info.entry in info.ptxas_log
    assert info.registers == _ptxas(info.ptxas_log, "regs") > 0
    assert (info.spill_stores, info.spill_loads) == (_ptxas(info.ptxas_log, "st"),
                                                     _ptxas(info.ptxas_log, "ld"))
    assert info.spill_bytes == info.spill_stores + info.spill_loads == 0
    assert info.device is None and info.attributes is None
    assert info.cache_path and os.path.dirname(info.cache_path) == str(cache)
    assert f".visible .entry {info.entry}(" in info.ptx and ".target sm_90" in info.ptx
    assert info.cubin[:4] == b"\x7fELF"
    assert _compiler.elf_extent(info.cubin) == len(info.cubin)  # no byte lost on the way
    json.dumps(info.as_dict(source=True))


@pytest.mark.nvrtc
def test_dtype_picks_the_unit_of_one_element():
    assert jit.compile("scalar", "float32", np.int32, mode="wrap").key == SCALAR
    assert jit.compile("rows", "complex128", "int64").key.unit == 16
    assert jit.compile("check", None, "int64").key == CHECK


@pytest.mark.nvrtc
def test_ptx_target_has_ptx_but_no_cubin():
    info = jit.compile("check", None, "int32", arch="compute_80")
    assert info.registers is None and info.arch == "compute_80"
    assert ".target sm_80" in info.ptx and "cugather_check_i32" in info.ptx
    with pytest.raises(ValueError, match="arch='compute_80'.*no cubin"):
        info.cubin


@pytest.mark.nvrtc
def test_unknown_arch_is_refused_before_nvrtc():
    for arch in ("sm_91", "gfx90a", "90", None):
        with pytest.raises(ValueError, match=f"arch must be .*got {arch!r}"):
            jit.compile("rows", "float32", "int64", arch=arch)
    assert _compiles() == 0


@pytest.mark.nvrtc
def test_compile_agrees_with_the_plan_and_hits_memory_the_second_time():
    plan = cugather.GatherOp(0).plan(((1000, 128), "float16"), ((4096,), "int64"))
    first = jit.compile_key(plan.key)
    again = jit.compile("rows", "float16", "int64", unit=plan.key.unit)
    assert again.key == plan.key and again.cubin == first.cubin
    info = jit.cache_info()
    assert (info.hits, info.misses, info.compiles, info.in_memory) == (1, 1, 1, 1)


@pytest.mark.nvrtc
def test_cache_info_counts_and_disk_contents(cache):
    jit.compile_key(ROWS)
    jit.compile_key(ROWS)
    jit.compile_key(CHECK)
    jit.compile_key(CHECK, use_disk=False)
    info = jit.cache_info()
    assert (info.hits, info.misses, info.disk_hits, info.compiles) == (2, 2, 0, 2)
    assert info.compile_seconds == pytest.approx(
        sum(ck.compile_seconds for ck in _compiler.compiled_kernels()))
    assert info.in_memory == 2
    files = sorted(cache.glob("*.cgk"))
    assert info.disk_entries == len(files) == 2
    assert info.disk_bytes == sum(f.stat().st_size for f in files)


@pytest.mark.nvrtc
def test_kernels_lists_what_this_process_compiled():
    assert jit.kernels() == []
    jit.compile_key(SCALAR)
    jit.compile_key(ROWS, arch="sm_80")
    infos = jit.kernels()
    assert [(i.entry, i.arch) for i in infos] == sorted([(ROWS.entry, "sm_80"), (SCALAR.entry, "sm_90")])
    assert all(i.device is None and i.attributes is None for i in infos)
    cleared = jit.cache_clear()
    assert cleared.kernels == 2 and jit.kernels() == [] and jit.cache_info().in_memory == 0


@pytest.mark.nvrtc
def test_cache_clear_disk_then_recompiles(cache):
    jit.compile_key(ROWS)
    jit.compile_key(CHECK)
    foreign = cache.parent / "cupy_kernel.cubin"
    foreign.write_bytes(b"CuPy's")
    cleared = jit.cache_clear(disk=True)
    assert cleared == jit.Cleared(kernels=2, plans=cleared.plans, disk_entries=2)
    assert list(cache.glob("*.cgk")) == [] and foreign.read_bytes() == b"CuPy's"
    assert jit.cache_info()[:6] == (0, 0, 0, 0, 0.0, 0)
    jit.compile_key(ROWS)
    assert _compiles() == 1


_WARM_SCRIPT = textwrap.dedent("""
    import json
    from cugather import jit
    from cugather.compile import compiler as _compiler
    from cugather.plan.keys import KernelKey
    infos = [jit.compile("rows", "float16", "int64", unit=16),
             jit.compile("check", None, "int64"),
             jit.compile_key(KernelKey("scalar", 4, "int32", "fast32", "wrap"), arch="sm_80")]
    ck = _compiler.compile_key(KernelKey("strided", 2, "int64", "fast64", "fill"), "sm_90")
    print(json.dumps({"stats": _compiler.stats(), "from_disk": [i.from_disk for i in infos],
                      "registers": [i.registers for i in infos] + [ck.registers],
                      "cache_dir": jit.cache_info().cache_dir}))
""")


def _run_fresh(script, cache_root):
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache_root))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.nvrtc
def test_warm_start_in_a_new_process_compiles_nothing(cache):
    cold = _run_fresh(_WARM_SCRIPT, cache.parent)
    assert cold["cache_dir"] == str(cache)
    assert cold["stats"]["compiles"] == 4 and cold["stats"]["disk_hits"] == 0
    assert len(list(cache.glob("*.cgk"))) == 4
    warm = _run_fresh(_WARM_SCRIPT, cache.parent)
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["disk_hits"] == 4
    assert warm["from_disk"] == [True, True, True]
    assert warm["registers"] == cold["registers"]


def _edit_header(monkeypatch, marker):
    """Make every render see kernels/gather.cuh with one more line; return the real reader."""
    real = _codegen._read

    def edited(package, name):
        text = real(package, name)
        return text + f"\n// {marker}\n" if name == "gather.cuh" else text

    monkeypatch.setattr(_codegen, "_read", edited)
    jit.cache_clear()  # forget rendered sources and the digest
    return real


@pytest.mark.nvrtc
def test_edited_header_changes_the_key_so_old_binaries_are_not_used(cache, monkeypatch):
    old = jit.compile_key(ROWS)
    old_digest = _codegen.sources_digest()
    real = _edit_header(monkeypatch, "edited header")
    new = jit.compile_key(ROWS)
    assert _codegen.sources_digest() != old_digest
    assert new.source.startswith(f"// cugather") and _codegen.sources_digest()[:16] in new.source
    assert "// edited header" in new.source and "// edited header" not in old.source
    assert new.cache_path != old.cache_path and not new.from_disk and _compiles() == 1
    states = {e.path: e.state for e in jit.disk_kernels()}
    assert states == {old.cache_path: "stale", new.cache_path: "current"}
    monkeypatch.setattr(_codegen, "_read", real)  # the header as shipped again
    jit.cache_clear()
    back = jit.compile_key(ROWS)
    assert back.from_disk and back.cache_path == old.cache_path and _compiles() == 0


@pytest.mark.nvrtc
def test_entry_built_from_other_sources_is_never_loaded(cache, monkeypatch):
    old = jit.compile_key(ROWS)
    _edit_header(monkeypatch, "same name, other text")
    new_path = _compiler.entry_path(_codegen.render(ROWS), "sm_90")
    os.makedirs(os.path.dirname(new_path), exist_ok=True)
    with open(old.cache_path, "rb") as src, open(new_path, "wb") as dst:
        dst.write(src.read())  # an intact file under the name the edited source hashes to
    with pytest.warns(jit.CacheWarning, match="another source"):
        new = jit.compile_key(ROWS)
    assert not new.from_disk and _compiles() == 1
    assert "same name, other text" in new.source
    _, stored = _compiler.read_entry(new_path)  # rewritten with the right source
    assert stored.source.text == new.source


def _truncate_half(data):
    return data[:len(data) // 2]


def _flip_middle(data):
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]


@pytest.mark.nvrtc
@pytest.mark.parametrize("damage", [
    pytest.param(lambda d: b"", id="empty"),
    pytest.param(lambda d: d[:10], id="truncated-header"),
    pytest.param(_truncate_half, id="truncated-half"),
    pytest.param(lambda d: d[:-1], id="truncated-one-byte"),
    pytest.param(_flip_middle, id="flipped-byte"),
    pytest.param(lambda d: b"\x7fELF" + d[4:], id="foreign-header"),
    pytest.param(lambda d: d + b"trailing", id="appended"),
])
def test_damaged_entry_is_recompiled_with_a_warning(cache, damage):
    good = jit.compile_key(ROWS)
    path = good.cache_path
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damage(data))
    jit.cache_clear()
    with pytest.warns(jit.CacheWarning, match="unusable"):
        again = jit.compile_key(ROWS)
    assert not again.from_disk and _compiles() == 1
    assert again.registers == good.registers and again.cache_path == path
    assert [e.state for e in jit.disk_kernels()] == ["current"]
    jit.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.CacheWarning)
        third = jit.compile_key(ROWS)  # the rewritten entry is whole again
    assert third.from_disk and _compiles() == 0 and third.cubin == again.cubin


@pytest.mark.nvrtc
def test_damaged_entries_are_listed_as_such(cache):
    jit.compile_key(ROWS)
    (cache / "cugather_junk.sm_90.000.cgk").write_bytes(b"not a kernel")
    entries = {e.name: e for e in jit.disk_kernels()}
    junk = entries["cugather_junk.sm_90.000"]
    assert junk.state == "damaged" and "not a cugather kernel file" in junk.problem
    assert junk.info is None
    good = [e for e in entries.values() if e.state == "current"]
    assert len(good) == 1 and good[0].info.key == ROWS and good[0].meta["cugather"] == cugather.__version__


@pytest.mark.nvrtc
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files whatever their permissions")
def test_unreadable_entry_is_recompiled(cache):
    good = jit.compile_key(ROWS)
    os.chmod(good.cache_path, 0)
    jit.cache_clear()
    try:
        with pytest.warns(jit.CacheWarning):
            again = jit.compile_key(ROWS)
    finally:
        os.chmod(good.cache_path, stat.S_IRUSR | stat.S_IWUSR)
    assert not again.from_disk and _compiles() == 1


@pytest.mark.nvrtc
def test_entry_path_taken_by_a_folder_warns_and_still_compiles(cache):
    good = jit.compile_key(ROWS)
    os.unlink(good.cache_path)
    os.mkdir(good.cache_path)
    jit.cache_clear()
    with pytest.warns(jit.CacheWarning) as record:
        again = jit.compile_key(ROWS)
    messages = " | ".join(str(w.message) for w in record)
    assert "is unusable" in messages and "cannot write kernel cache" in messages
    assert again.registers == good.registers and _compiles() == 1


@pytest.mark.nvrtc
@pytest.mark.parametrize("use_disk", [True, False])
def test_threads_asking_for_one_kernel_compile_it_once(use_disk):
    n = 8
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def first_call(i):
        try:
            barrier.wait()
            if i % 2:
                results[i] = _compiler.compile_key(ROWS, "sm_90", (), use_disk=use_disk)
            else:
                results[i] = jit.compile("rows", "float16", "int64", unit=16,
                                         use_disk=use_disk)._compiled
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = _compiler.stats()
    assert s["compiles"] == 1 and (s["hits"], s["misses"]) == (n - 1, 1)
    assert all(r is results[0] for r in results)


@pytest.mark.nvrtc
def test_threads_with_different_keys_do_not_serialise_each_other_into_one():
    keys = [ROWS, CHECK, SCALAR] * 3
    barrier = threading.Barrier(len(keys))
    out = {}

    def first_call(i, key):
        barrier.wait()
        out[i] = jit.compile_key(key, use_disk=False)

    threads = [threading.Thread(target=first_call, args=(i, k)) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _compiles() == 3 and len(out) == len(keys)
    assert {out[i].key for i in out} == {ROWS, CHECK, SCALAR}


@pytest.mark.nvrtc
def test_sass_runs_the_disassembler_on_the_whole_cubin(monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("cuobjdump", "nvdisasm"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $1 NVDISASM_PATH=$NVDISASM_PATH"\n'
                          f'cp "$2" "$CG_FAKE_COPY"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/bin{os.pathsep}/usr/bin")
    monkeypatch.setenv("CG_FAKE_COPY", str(tmp_path / "copy.cubin"))
    monkeypatch.setattr(_disasm, "_wheel_bin_folders", lambda: [])
    for var in ("CUDA_PATH", "CUDA_HOME"):  # a real toolkit must not stand in for the fakes
        monkeypatch.delenv(var, raising=False)
    assert jit.find_disassembler() == ("cuobjdump", str(bin_dir / "cuobjdump"))
    info = jit.compile_key(ROWS)
    assert info.sass.strip() == f"cuobjdump -sass NVDISASM_PATH={bin_dir}"
    assert (tmp_path / "copy.cubin").read_bytes() == info.cubin
    (bin_dir / "cuobjdump").unlink()
    assert jit.find_disassembler() == ("nvdisasm", str(bin_dir / "nvdisasm"))
    assert jit.compile_key(ROWS).sass.startswith("nvdisasm --print-code")
    (bin_dir / "nvdisasm").write_text('#!/bin/sh\necho "bad cubin" >&2\nexit 3\n')
    with pytest.raises(RuntimeError, match=r"nvdisasm failed on .* \(exit 3\): bad cubin"):
        jit.compile_key(CHECK).sass


# ---------------------------------------------------------------- gpu
@pytest.fixture
def cp():
    import cupy

    return cupy


def _table(cp, rows=1000, cols=128, dtype="float16"):
    rng = np.random.default_rng(0)
    host = rng.standard_normal((rows, cols)).astype(dtype)
    idx = rng.integers(-rows, rows, size=4096).astype(np.int64)
    return host, idx, cp.asarray(host), cp.asarray(idx)


@pytest.mark.gpu
def test_kernels_after_a_real_gather_carry_function_attributes(cp):
    from cugather.compile.compiler import arch_for_device
    from cugather.plan.tuning import MAX_THREADS

    host, idx, table, d_idx = _table(cp)
    got = cugather.gather(table, d_idx, axis=0)
    np.testing.assert_array_equal(got.get(), np.take(host, idx, axis=0))
    plan = cugather.GatherOp(0).plan(table, d_idx)
    device = table.data.device_id
    loaded = {i.entry: i for i in jit.kernels() if i.device == device}
    assert set(loaded) >= {plan.key.entry, plan.check_key.entry}
    arch = arch_for_device(device)
    cc = cp.cuda.Device(device).compute_capability
    for entry in (plan.key.entry, plan.check_key.entry):
        info = loaded[entry]
        assert info.arch == arch and info.attributes is not None
        attrs = info.attributes
        assert set(attrs) == set(jit.FUNCTION_ATTRIBUTES)
        assert attrs["max_threads_per_block"] == MAX_THREADS  # __launch_bounds__
        assert attrs["num_regs"] > 0
        if arch.startswith("sm_"):  # the driver loaded our own cubin
            assert attrs["num_regs"] == info.registers
            assert attrs["binary_version"] == int(cc)
        json.dumps(info.as_dict())


@pytest.mark.gpu
def test_a_second_op_finds_loaded_kernels_in_memory(cp):
    _, _, table, d_idx = _table(cp)
    cugather.GatherOp(0)(table, d_idx)
    before = _compiler.stats()
    cugather.GatherOp(0)(table, d_idx)  # new plan cache, same kernels
    after = _compiler.stats()
    assert after["hits"] - before["hits"] == 2  # gather and bounds check
    assert after["misses"] == before["misses"] and after["compiles"] == before["compiles"]


@pytest.mark.gpu
def test_cache_clear_drops_plans_and_kernels_and_calls_still_work(cp):
    host, idx, table, d_idx = _table(cp)
    op = cugather.GatherOp(0, mode="wrap")
    op(table, d_idx)
    assert op.cache_info().currsize == 1 and jit.kernels()
    cleared = jit.cache_clear()
    assert cleared.plans >= 1 and cleared.kernels >= 1
    assert op.cache_info().currsize == 0 and jit.kernels() == []
    got = op(table, d_idx)  # rebinds from the disk cache
    np.testing.assert_array_equal(got.get(), np.take(host, idx, axis=0, mode="wrap"))
    s = _compiler.stats()
    assert s["compiles"] == 0 and s["disk_hits"] == 1 and op.cache_info().misses == 1


_GPU_WARM_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import cupy
    import cugather
    from cugather.compile import compiler as _compiler
    host = np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64)
    idx = np.array([3, -1, 999, 0, 512] * 100, dtype=np.int64)
    got = cugather.gather(cupy.asarray(host), cupy.asarray(idx), axis=0).get()
    print(json.dumps({"stats": _compiler.stats(),
                      "ok": bool((got == np.take(host, idx, axis=0)).all())}))
""")


@pytest.mark.gpu
def test_warm_start_through_load_kernel_compiles_nothing(cache):
    cold = _run_fresh(_GPU_WARM_SCRIPT, cache.parent)
    assert cold["ok"] and cold["stats"]["compiles"] == 2 and cold["stats"]["disk_hits"] == 0
    warm = _run_fresh(_GPU_WARM_SCRIPT, cache.parent)
    assert warm["ok"] and warm["stats"]["compiles"] == 0 and warm["stats"]["disk_hits"] == 2
