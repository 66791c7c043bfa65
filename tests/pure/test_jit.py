"""cugather.jit without NVRTC: arguments, units, the cache folder, deleting files, SASS tools."""

import gc
import weakref

import numpy as np
import pytest

import cugather
from cugather import jit
from cugather.compile import compiler as _compiler
from cugather.inspect import api as _api
from cugather.inspect import disasm as _disasm, disk as _disk
from support.jit import ROWS, compiles, no_disassembler


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


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
    assert compiles() == 0


def test_kernel_and_plan_cache_statistics_have_one_name_each():
    assert isinstance(jit.cache_info(), jit.KernelCacheInfo)
    assert "CacheInfo" not in jit.__all__ and not hasattr(jit, "CacheInfo")
    assert cugather.PlanCacheInfo._fields != jit.KernelCacheInfo._fields


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
        _disk._remove([str(theirs[0])])
    assert theirs[0].exists()


def test_disk_clear_counts_what_it_deleted(cache):
    cache.mkdir(parents=True)
    (cache / "cugather_a.sm_90.1.cgk").write_bytes(b"junk")
    (cache / ".cgk-x.tmp").write_bytes(b"half")
    assert [e.state for e in jit.disk_kernels()] == ["damaged"]
    assert jit.disk_clear(stale_only=True) == 1  # the damaged entry, not the temp file
    assert jit.disk_clear() == 1 and list(cache.iterdir()) == []


def test_cache_clear_reaches_every_plan_cache_and_keeps_none_alive():
    from cugather.runtime import cache as plan_caches

    ops = [cugather.GatherOp(0), cugather.GatherOp(1, mode="wrap")]
    for i, op in enumerate(ops):  # what calls store, without a GPU
        op._runtime.put(("shape", i), object())
        op._runtime.put(("shape", i + 10), object())
        assert op._runtime.get(("shape", i)) is not None
    assert [op.cache_info() for op in ops] == [cugather.PlanCacheInfo(1, 2, 256, 2)] * 2
    cleared = jit.cache_clear()
    assert cleared.plans >= 4
    assert [op.cache_info() for op in ops] == [cugather.PlanCacheInfo(0, 0, 256, 0)] * 2
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
    # Without a symbol table or .nv.info there is no register count to read.
    assert _compiler.cubin_registers(full, "cugather_rows") is None
    assert _compiler.cubin_registers(b"PTX text", "cugather_rows") is None


def test_sass_without_a_disassembler_says_what_is_missing(monkeypatch, tmp_path):
    no_disassembler(monkeypatch, tmp_path)
    assert jit.find_disassembler() is None
    with pytest.raises(jit.SassUnavailableError, match="nvdisasm .* was not found on PATH"):
        _disasm.disassemble(b"\x7fELF", "cugather_x")


