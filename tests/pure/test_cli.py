"""The command line without NVRTC: arguments, help, info, an empty or damaged cache."""

import numpy as np
import pytest

import cugather
from cugather.cli import format as _format, inspect as _inspect
from cugather.cli.main import main
from cugather.env import probe
from support.jit import run, run_json


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


def test_table_aligns_columns():
    text = _format.table(["NAME", "REGS", "STATE"],
                         [["a_long_name", 48, "current"], ["b", None, "stale"]], right=(1,))
    lines = text.splitlines()
    assert lines == ["NAME         REGS  STATE",
                     "a_long_name    48  current",
                     "b               -  stale"]


def test_shape_and_dtype_arguments_are_checked(capsys):
    assert _inspect._shape("1000,128") == (1000, 128)
    assert _inspect._shape("(7,)") == (7,) and _inspect._shape("") == ()
    for argv in (["inspect", "--shape", "a,b"], ["inspect", "--dtype", "floaty"],
                 ["inspect", "--index-dtype", "int16"], ["inspect", "--ptx", "--sass"],
                 ["cache", "show"]):
        with pytest.raises(SystemExit) as e:
            main(argv, prog="cugather")
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "expected comma-separated sizes" in err and "not a NumPy dtype: 'floaty'" in err


def test_sizes_and_times_read_as_units():
    assert [_format.size(n) for n in (0, 1023, 1024, 1536, 5 * 2**20)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB"]
    assert (_format.ms(None), _format.ms(0.0805)) == ("-", "80 ms")
    assert _format.cuda_version(12090) == "12.9" and _format.cuda_version(13000) == "13.0"


@pytest.mark.parametrize("prog", ["cugather", "python -m cugather"])
def test_help_names_the_program_as_it_was_invoked(capsys, prog):
    with pytest.raises(SystemExit) as e:
        main(["--help"], prog=prog)
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: {prog} [-h] COMMAND ...")
    for command in ("demo", "bench", "info", "cache", "inspect"):
        assert f"\n    {command} " in out
    for argv in (["inspect", "--help"], ["cache", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit):
            main(argv, prog=prog)
        out += capsys.readouterr().out
    assert f"usage: {prog} inspect" in out and f"usage: {prog} cache" in out
    assert "``" not in out  # no reStructuredText markup in help text


def test_console_script_and_module_name_themselves(tmp_path):
    import subprocess
    import sys

    module = subprocess.run([sys.executable, "-m", "cugather", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert module.returncode == 0 and module.stdout.startswith("usage: python -m cugather ")
    script = tmp_path / "cugather"  # what pip's console-script wrapper does
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom cugather.cli.main import main\n"
                      f"sys.exit(main())\n")
    script.chmod(0o755)
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: cugather "), done.stderr


def test_info_reports_versions_driver_nvrtc_and_cache(capsys, cache):
    env = probe()
    code, out, _ = run(capsys, "info")
    assert code == 0
    assert out.startswith(f"cugather {cugather.__version__}\n")
    assert f"numpy         {np.__version__}" in out
    assert f"directory  {cache}" in out
    assert "kernels    0 (0 current, 0 stale, 0 damaged), 0 B" in out
    if env.gpu_problem is None:
        assert "TARGET" in out
    else:
        assert "GPU           none usable (see below)" in out and env.gpu_problem in out
    if env.driver is None:
        assert "CUDA driver   none found" in out


def test_info_json(capsys, cache):
    env = probe()
    code, doc, _ = run_json(capsys, "info")
    assert code == 0 and doc["cugather"] == cugather.__version__
    assert doc["cache"]["dir"] == str(cache) and doc["cache"]["entries"] == 0
    assert doc["problems"] == {"cupy": env.cupy_problem, "nvrtc": env.nvrtc_problem,
                               "gpu": env.gpu_problem}
    assert doc["install_command"] == env.install_command
    assert (doc["gpus"] == []) == (env.gpu_problem is not None)


def test_cache_list_of_an_empty_cache(capsys, cache):
    code, out, _ = run(capsys, "cache", "list")
    problem = probe().nvrtc_problem  # where CuPy or NVRTC is missing, the output ends with it
    assert code == 0 and out == (f"{cache}: 0 cugather kernel file(s), 0 B\n"
                                 + (f"\n{problem}\n" if problem else ""))
    assert run(capsys, "cache") == (0, out, "")  # list is the default action
    code, doc, _ = run_json(capsys, "cache", "list")
    assert doc == {"cache_dir": str(cache), "entries": []}


def test_cache_clear_leaves_the_rest_of_cupys_cache(capsys, cache):
    cache.mkdir(parents=True)
    (cache / "cugather_a.sm_90.1.cgk").write_bytes(b"junk")
    (cache.parent / "cupy_own.cubin").write_bytes(b"CuPy's")
    code, out, _ = run(capsys, "cache", "clear")
    problem = probe().nvrtc_problem  # where CuPy or NVRTC is missing, the output ends with it
    assert code == 0
    assert out == (f"removed 1 cugather kernel file(s) from {cache}; nothing else of CuPy's "
                   f"cache was touched\n") + (f"\n{problem}\n" if problem else "")
    assert (cache.parent / "cupy_own.cubin").read_bytes() == b"CuPy's"
    code, doc, _ = run_json(capsys, "cache", "clear")
    assert doc == {"cache_dir": str(cache), "removed": 0, "stale_only": False, "unchecked": 0}


def test_cache_clear_stale_removes_damaged_files(capsys, cache):
    cache.mkdir(parents=True)
    (cache / "cugather_a.sm_90.1.cgk").write_bytes(b"junk")
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0 and "damaged: it is truncated or not a cugather kernel file" in out
    code, out, _ = run(capsys, "cache", "clear", "--stale")
    assert code == 0 and out.startswith("removed 1 stale or damaged cugather kernel file(s)")
    assert list(cache.iterdir()) == []


def test_cache_show_unknown_name(capsys):
    code, out, err = run(capsys, "cache", "show", "nothing_here")
    problem = probe().nvrtc_problem  # where CuPy or NVRTC is missing, the output ends with it
    assert code == 2 and out == (f"\n{problem}\n" if problem else "")
    assert "NAME 'nothing_here' matches no kernel file" in err




class _CudaError(RuntimeError):
    """Stands for CuPy's CUDARuntimeError (its module is what tells it apart)."""


_CudaError.__module__ = "cupy_backends.cuda.api.runtime"


@pytest.mark.parametrize("error,about_the_machine", [
    (ValueError("a bug in the command"), False),
    (KeyError("state"), False),
    (_CudaError("cudaErrorNoDevice: no CUDA-capable device is detected"), True),
    (OSError("libcuda.so.1: cannot open shared object file"), True),
    (ModuleNotFoundError("No module named 'cupy'", name="cupy"), True),
])
def test_the_no_driver_paragraph_is_only_for_errors_about_the_driver(capsys, monkeypatch, error,
                                                                      about_the_machine):
    from cugather import env as _env
    from cugather.cli import info

    def fail(args):
        raise error

    monkeypatch.setattr(_env, "probe", lambda: _env.Environment())  # no driver, no GPU
    monkeypatch.setattr(info, "run", fail)
    if not about_the_machine:
        with pytest.raises(type(error)):  # the real error, with its traceback
            main(["info"], prog="cugather")
        return
    code, out, err = run(capsys, "info")
    assert code == 1 and "No NVIDIA driver was found" in err and str(error) in err
