"""The command line with NVRTC (no GPU): cache list/show/clear of real kernels, inspect."""

import json
import os
import subprocess
import sys

import pytest

import cugather
from cugather import jit
from cugather.plan.fastdiv import make_divisor
from support.jit import CHECK, ROWS, no_disassembler, run, run_json

pytestmark = pytest.mark.nvrtc


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


def _compile_two():
    return jit.compile_key(ROWS), jit.compile_key(CHECK, arch="sm_80")


def test_cache_list_table_and_json(capsys, cache):
    rows, check = _compile_two()
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{cache}: 2 cugather kernel file(s)")
    header, body = lines[2], lines[3:]
    assert header.split() == ["NAME", "ARCH", "REGS", "SPILL", "ST/LD", "SIZE", "COMPILE", "STATE"]
    assert len(body) == 2
    col = header.index("ARCH")
    by_arch = {line[col:].split()[0]: line for line in body}  # every row aligned under ARCH
    assert set(by_arch) == {"sm_90", "sm_80"}
    for info in (rows, check):
        line = by_arch[info.arch]
        assert line.startswith(os.path.basename(info.cache_path)[:-4])
        assert f" {info.registers} " in line and line.rstrip().endswith("current")
    code, doc, _ = run_json(capsys, "cache", "list")
    got = {e["entry"]: e for e in doc["entries"]}
    assert set(got) == {ROWS.entry, CHECK.entry}
    assert got[ROWS.entry]["registers"] == rows.registers
    assert got[CHECK.entry]["arch"] == "sm_80" and got[CHECK.entry]["state"] == "current"
    assert got[ROWS.entry]["size"] == os.path.getsize(rows.cache_path)


def test_cache_show_by_prefix_with_source_and_ptx(capsys):
    rows, _ = _compile_two()
    code, out, _ = run(capsys, "cache", "show", "cugather_rows")
    assert code == 0
    assert f"kernel       {ROWS.entry}" in out
    assert "key          kind=rows unit=16 index=int64 math=fast32 mode=raise" in out
    assert f"registers    {rows.registers}\n" in out and "state        current" in out
    assert rows.ptxas_log in out
    code, out, _ = run(capsys, "cache", "show", ROWS.entry, "--source")
    assert code == 0 and rows.source.rstrip("\n") in out
    code, out, _ = run(capsys, "cache", "show", os.path.basename(rows.cache_path), "--ptx")
    assert code == 0 and f".entry {ROWS.entry}(" in out
    code, doc, _ = run_json(capsys, "cache", "show", "cugather_check", "--ptx")
    assert code == 0 and doc["entry"] == CHECK.entry and ".target sm_80" in doc["ptx"]
    code, out, err = run(capsys, "cache", "show", "cugather_")
    assert code == 2 and "matches 2 kernel files" in err


def test_cache_show_and_clear_stale_or_damaged(capsys, cache):
    rows, _ = _compile_two()
    junk = cache / "cugather_junk.sm_90.0.cgk"
    junk.write_bytes(b"\0" * 10)
    code, out, _ = run(capsys, "cache", "show", "cugather_junk")
    assert code == 0 and "state  damaged: it is truncated or not a cugather kernel file" in out
    code, out, _ = run(capsys, "cache", "clear", "--stale")
    assert code == 0 and out.startswith("removed 1 stale or damaged cugather kernel file(s)")
    assert not junk.exists() and os.path.exists(rows.cache_path)


def test_inspect_shows_plan_report_and_source(capsys):
    code, out, err = run(capsys, "inspect", "--dtype", "float16", "--index-dtype", "int64",
                         "--shape", "1000,128", "--indices-shape", "4096", "--axis", "0",
                         "--arch", "sm_90")
    assert code == 0, err
    plan = cugather.GatherOp(0).plan(((1000, 128), "float16"), ((4096,), "int64"))
    assert out.startswith("gather(data (1000, 128) float16, indices (4096,) int64, axis=0, "
                          "mode='raise')\n\n" + plan.describe() + "\n")
    report = out[out.index("ptxas report (NVRTC, sm_90)"):]
    rows = {line.split()[0]: line.split() for line in report.splitlines()[2:5] if line.strip()}
    for key in (plan.key, plan.check_key):
        info = jit.compile_key(key)
        assert rows[key.entry][1:5] == [str(info.registers), "0", "0", "0"]
    assert f"source of {plan.key.entry} (sm_90)" in out
    assert jit.compile_key(plan.key).source.rstrip("\n") in out


def test_inspect_json_describes_the_plan(capsys):
    code, doc, _ = run_json(capsys, "inspect", "--shape", "64,1024", "--axis", "1",
                            "--indices-shape", "512", "--mode", "wrap", "--index-dtype",
                            "int32", "--arch", "sm_80")
    assert code == 0
    plan = cugather.GatherOp(1, mode="wrap").plan(((64, 1024), "float16"), ((512,), "int32"))
    p = doc["plan"]
    assert p["kernel"] == plan.key.entry and p["variant"] == plan.kind
    assert p["check_kernel"] is None and p["unit"] == plan.key.unit
    assert (tuple(p["grid"]), tuple(p["block"])) == (plan.grid, plan.block)
    assert p["shared_mem"] == plan.shared_mem and p["out_shape"] == [64, 512]
    assert p["fast_divmod"]["n_div"] == make_divisor(512, 32)._asdict()
    assert [k["entry"] for k in doc["kernels"]] == [plan.key.entry]
    assert doc["kernels"][0]["arch"] == "sm_80" and doc["arch"] == "sm_80"
    assert doc["listing"]["what"] == "source" and "// cugather" in doc["listing"]["text"]


def _inspected(mode="raise", indices_shape=(4096,)):
    """The kernel key ``cugather inspect`` plans with its defaults ((1000, 128) float16,
    int64 indices, axis 0): an H200's plan, the tuning table's choice included."""
    return cugather.GatherOp(0, mode=mode).plan(((1000, 128), "float16"),
                                                (indices_shape, "int64")).key


def test_inspect_ptx_replaces_the_source(capsys):
    code, out, _ = run(capsys, "inspect", "--ptx", "--mode", "fill", "--indices-shape", "7,3",
                         "--arch", "sm_90")
    assert code == 0
    assert f"ptx of {_inspected('fill', (7, 3)).entry} (sm_90)" in out and ".version" in out
    assert "// ---- kernels/" not in out
    code, out, _ = run(capsys, "inspect", "--no-source", "--indices-shape", "")
    assert code == 0 and "ptxas report" in out and "source of" not in out
    assert "output      (128,)" in out  # a scalar index drops the axis


def test_inspect_sass_without_tools_fails_clearly(capsys, monkeypatch, tmp_path):
    no_disassembler(monkeypatch, tmp_path)
    code, out, err = run(capsys, "inspect", "--sass")
    assert code == 1 and "ptxas report" in out
    assert f"cannot show SASS of {_inspected().entry}: nvdisasm" in err
    code, doc, _ = run_json(capsys, "inspect", "--sass")
    assert code == 1 and doc["listing"]["text"] is None and "nvdisasm" in doc["listing"]["error"]


def test_inspect_reports_bad_requests(capsys):
    code, out, err = run(capsys, "inspect", "--axis", "2")
    assert code == 2 and out == "" and "axis 2 is out of bounds" in err
    code, out, err = run(capsys, "inspect", "--arch", "sm_1")
    assert code == 2 and "arch must be" in err and "got 'sm_1'" in err


def test_module_entry_point_runs_in_a_fresh_process(cache):
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache.parent))
    for argv in (["info", "--json"], ["inspect", "--no-source", "--json"], ["cache", "list", "--json"]):
        done = subprocess.run([sys.executable, "-m", "cugather", *argv], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
    assert [e["entry"] for e in doc["entries"]] == sorted([_inspected().entry, CHECK.entry])


