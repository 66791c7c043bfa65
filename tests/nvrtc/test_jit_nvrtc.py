"""cugather.jit with NVRTC (no GPU): compiling, the ptxas report, the in-process and disk caches."""

import json
import os
import re
import stat
import textwrap
import threading
import warnings

import numpy as np
import pytest

import cugather
from cugather import jit
from cugather.compile import compiler as _compiler, render as _codegen
from cugather.inspect import disasm as _disasm
from cugather.plan.keys import all_kernel_keys, kinds
from support.jit import CHECK, ROWS, SCALAR, compiles, run_fresh

pytestmark = pytest.mark.nvrtc


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


def _ptxas(log, what):
    m = re.search({"regs": r"Used (\d+) registers", "st": r"(\d+) bytes spill stores",
                   "ld": r"(\d+) bytes spill loads"}[what], log)
    return int(m.group(1))


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


def test_dtype_picks_the_unit_of_one_element():
    assert jit.compile("scalar", "float32", np.int32, mode="wrap").key == SCALAR
    assert jit.compile("rows", "complex128", "int64").key.unit == 16
    assert jit.compile("check", None, "int64").key == CHECK


def test_ptx_target_has_ptx_but_no_cubin():
    info = jit.compile("check", None, "int32", arch="compute_80")
    assert info.registers is None and info.arch == "compute_80"
    assert ".target sm_80" in info.ptx and "cugather_check_i32" in info.ptx
    with pytest.raises(ValueError, match="arch='compute_80'.*no cubin"):
        info.cubin


def test_unknown_arch_is_refused_before_nvrtc():
    for arch in ("sm_91", "gfx90a", "90", None):
        with pytest.raises(ValueError, match=f"arch must be .*got {arch!r}"):
            jit.compile("rows", "float32", "int64", arch=arch)
    assert compiles() == 0


def test_compile_agrees_with_the_plan_and_hits_memory_the_second_time():
    plan = cugather.GatherOp(0).plan(((1000, 128), "float16"), ((4096,), "int64"))
    first = jit.compile_key(plan.key)
    again = jit.compile(plan.key.kind, "float16", "int64", unit=plan.key.unit)
    assert again.key == plan.key and again.cubin == first.cubin
    info = jit.cache_info()
    assert (info.hits, info.misses, info.compiles, info.in_memory) == (1, 1, 1, 1)


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


def test_kernels_lists_what_this_process_compiled():
    assert jit.kernels() == []
    jit.compile_key(SCALAR)
    jit.compile_key(ROWS, arch="sm_80")
    infos = jit.kernels()
    assert [(i.entry, i.arch) for i in infos] == sorted([(ROWS.entry, "sm_80"), (SCALAR.entry, "sm_90")])
    assert all(i.device is None and i.attributes is None for i in infos)
    cleared = jit.cache_clear()
    assert cleared.kernels == 2 and jit.kernels() == [] and jit.cache_info().in_memory == 0


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
    assert compiles() == 1


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


def test_warm_start_in_a_new_process_compiles_nothing(cache):
    cold = run_fresh(_WARM_SCRIPT, cache.parent)
    assert cold["cache_dir"] == str(cache)
    assert cold["stats"]["compiles"] == 4 and cold["stats"]["disk_hits"] == 0
    assert len(list(cache.glob("*.cgk"))) == 4
    warm = run_fresh(_WARM_SCRIPT, cache.parent)
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


def test_edited_header_changes_the_key_so_old_binaries_are_not_used(cache, monkeypatch):
    old = jit.compile_key(ROWS)
    old_digest = _codegen.sources_digest()
    real = _edit_header(monkeypatch, "edited header")
    new = jit.compile_key(ROWS)
    assert _codegen.sources_digest() != old_digest
    assert new.source.startswith(f"// cugather") and _codegen.sources_digest()[:16] in new.source
    assert "// edited header" in new.source and "// edited header" not in old.source
    assert new.cache_path != old.cache_path and not new.from_disk and compiles() == 1
    states = {e.path: e.state for e in jit.disk_kernels()}
    assert states == {old.cache_path: "stale", new.cache_path: "current"}
    monkeypatch.setattr(_codegen, "_read", real)  # the header as shipped again
    jit.cache_clear()
    back = jit.compile_key(ROWS)
    assert back.from_disk and back.cache_path == old.cache_path and compiles() == 0


def test_entry_built_from_other_sources_is_never_loaded(cache, monkeypatch):
    old = jit.compile_key(ROWS)
    _edit_header(monkeypatch, "same name, other text")
    new_path = _compiler.entry_path(_codegen.render(ROWS), "sm_90")
    os.makedirs(os.path.dirname(new_path), exist_ok=True)
    with open(old.cache_path, "rb") as src, open(new_path, "wb") as dst:
        dst.write(src.read())  # an intact file under the name the edited source hashes to
    with pytest.warns(jit.CacheWarning, match="another source"):
        new = jit.compile_key(ROWS)
    assert not new.from_disk and compiles() == 1
    assert "same name, other text" in new.source
    _, stored = _compiler.read_entry(new_path)  # rewritten with the right source
    assert stored.source.text == new.source


def _truncate_half(data):
    return data[:len(data) // 2]


def _flip_middle(data):
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]


def test_disk_clear_stale_only_keeps_current_entries(cache, monkeypatch):
    old = jit.compile_key(ROWS)
    _edit_header(monkeypatch, "makes the first entry stale")
    new = jit.compile_key(ROWS)
    junk = cache / "cugather_junk.sm_90.000.cgk"
    junk.write_bytes(b"not a kernel")
    states = {e.path: e.state for e in jit.disk_kernels()}
    assert states == {old.cache_path: "stale", new.cache_path: "current", str(junk): "damaged"}
    assert jit.disk_clear(stale_only=True) == 2
    assert [e.path for e in jit.disk_kernels()] == [new.cache_path]
    assert jit.disk_clear() == 1 and jit.disk_kernels() == []


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
    assert not again.from_disk and compiles() == 1
    assert again.registers == good.registers and again.cache_path == path
    assert [e.state for e in jit.disk_kernels()] == ["current"]
    jit.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", jit.CacheWarning)
        third = jit.compile_key(ROWS)  # the rewritten entry is whole again
    assert third.from_disk and compiles() == 0 and third.cubin == again.cubin


def test_damaged_entries_are_listed_as_such(cache):
    jit.compile_key(ROWS)
    (cache / "cugather_junk.sm_90.000.cgk").write_bytes(b"not a kernel")
    entries = {e.name: e for e in jit.disk_kernels()}
    junk = entries["cugather_junk.sm_90.000"]
    assert junk.state == "damaged" and "not a cugather kernel file" in junk.problem
    assert junk.info is None
    good = [e for e in entries.values() if e.state == "current"]
    assert len(good) == 1 and good[0].info.key == ROWS and good[0].meta["cugather"] == cugather.__version__


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
    assert not again.from_disk and compiles() == 1


def test_entry_path_taken_by_a_folder_warns_and_still_compiles(cache):
    good = jit.compile_key(ROWS)
    os.unlink(good.cache_path)
    os.mkdir(good.cache_path)
    jit.cache_clear()
    with pytest.warns(jit.CacheWarning) as record:
        again = jit.compile_key(ROWS)
    messages = " | ".join(str(w.message) for w in record)
    assert "is unusable" in messages and "cannot write kernel cache" in messages
    assert again.registers == good.registers and compiles() == 1


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
    assert compiles() == 3 and len(out) == len(keys)
    assert {out[i].key for i in out} == {ROWS, CHECK, SCALAR}


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




@pytest.mark.parametrize("kind", kinds())
def test_every_kind_compiles_through_the_library(kind):
    key = next(k for k in all_kernel_keys() if k.kind == kind and k.index_dtype == "int64")
    info = jit.compile_key(key, use_disk=False)
    assert info.entry == key.entry and info.cubin[:4] == b"\x7fELF"
    assert key.entry.encode() in info.cubin and info.spill_bytes == 0
