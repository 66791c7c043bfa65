"""What the command line says when CuPy, NVRTC, the driver or a GPU is missing.

Each situation runs every command in a fresh Python whose start-up code takes
away what the situation lacks: CuPy (its imports fail and pip's records of it
are hidden), NVRTC (CuPy's library finder cannot find it), the driver, or the
GPU (the driver answers but has no device).  Every command must exit with the
expected status, print the diagnosis with the right pip command, and never a
traceback.  The message logic itself is checked on constructed environments.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from cugather import env as _env
from cugather.env import Environment, probe
from support.jit import ROWS, run

HERE = probe()
HAVE_NVRTC = HERE.nvrtc_problem is None
# A driver new enough for the installed CuPy (CUDA 12.4 or 13.4), for the no-GPU cases.
DRIVER = (max(12, HERE.cuda_runtime[0]) if HERE.cuda_runtime else 12, 4)

# Runs each argv of sys.argv[2] (a JSON list) through cugather's main and prints one
# JSON list of {code, out, err}; an exception escaping main is recorded with its traceback.
_RUNNER = textwrap.dedent('''
    import contextlib, io, json, sys, traceback
    situation, commands = sys.argv[1], json.loads(sys.argv[2])
    if situation == "no-cupy":
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in ("cupy", "cupy_backends", "cupyx"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, Hide())
        import importlib.metadata as md
        listed = md.distributions
        md.distributions = lambda **kw: [d for d in listed(**kw) if not (
            d.metadata["Name"] or "").lower().startswith(("cupy", "nvidia-"))]
    elif situation == "no-nvrtc":
        import cuda.pathfinder as pf
        find = pf.load_nvidia_dynamic_lib
        def load(name, *args, **kwargs):
            if name == "nvrtc":
                raise pf.DynamicLibNotFoundError(
                    'Failure finding "libnvrtc.so.12": No such file: libnvrtc.so.12')
            return find(name, *args, **kwargs)
        pf.load_nvidia_dynamic_lib = load
    import cugather.env as env
    if situation == "no-driver" and env._driver_version(None) is not None:
        class InsufficientDriver(RuntimeError):
            status = 35
        env._driver_version = lambda cupy: None
        def no_driver(cupy):
            raise InsufficientDriver("cudaErrorInsufficientDriver: CUDA driver version is "
                                     "insufficient for CUDA runtime version")
        env._device_count = no_driver
    elif situation == "no-gpu":
        class NoDevice(RuntimeError):
            status = 100
        def no_device(cupy):
            raise NoDevice("cudaErrorNoDevice: no CUDA-capable device is detected")
        driver = tuple(int(v) for v in sys.argv[3].split("."))
        env._driver_version = lambda cupy: driver
        env._device_count = no_device
    from cugather.cli.main import main
    results = []
    for argv in commands:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv, prog="cugather")
            except SystemExit as e:
                code = e.code
            except BaseException:
                code = "raised"
                traceback.print_exc()
        results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
    sys.__stdout__.write(json.dumps(results) + "\\n")
''')

# In this order: the cache holds one entry until inspect and the demo add theirs.
COMMANDS = {
    "cache list": ["cache", "list"], "cache show": ["cache", "show", "cugather_rows"],
    "info": ["info"], "cache clear --stale": ["cache", "clear", "--stale"],
    "inspect": ["inspect", "--no-source"], "demo": [], "cache clear": ["cache", "clear"],
}


def _intact_entry(folder, monkeypatch):
    """Write an intact disk entry for ROWS (no NVRTC needed), built by an NVRTC 1.0
    that does not exist, so no real NVRTC takes it for its own."""
    from cugather.compile import diskcache
    from cugather.compile.nvrtc import CompiledKernel
    from cugather.compile.render import render

    monkeypatch.setattr(diskcache, "nvrtc_version", lambda: (1, 0))
    source = render(ROWS)
    ck = CompiledKernel(source, "sm_90", (), b"\x7fELF not really", "cubin",
                        "ptxas info    : Used 40 registers", 0.05, registers=40,
                        spill_stores=0, spill_loads=0, stack_frame=0, ptx=b".version 8.0\n")
    monkeypatch.setattr(diskcache, "cache_dir", lambda: str(folder))
    diskcache.write_entry(diskcache.entry_path(source, "sm_90"), ck)


@pytest.fixture
def cache_with_entry(private_kernel_cache, monkeypatch):
    _intact_entry(private_kernel_cache, monkeypatch)
    assert len(list(private_kernel_cache.glob("*.cgk"))) == 1
    return private_kernel_cache


def _run_all(situation, cache):
    """{command: (code, stdout + stderr)} of every command run in ``situation``."""
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache.parent))
    done = subprocess.run([sys.executable, "-c", _RUNNER, situation,
                           json.dumps(list(COMMANDS.values())), "%d.%d" % DRIVER],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: (r["code"], r["out"] + r["err"]) for name, r in zip(COMMANDS, results)}


def _check(outputs, expected_codes, diagnosis, command, diagnosis_everywhere=False):
    for name, (code, text) in outputs.items():
        where = f"'cugather {' '.join(COMMANDS[name])}':\n{text}"
        assert "Traceback" not in text, where
        assert code == expected_codes[name], where
    for name in expected_codes if diagnosis_everywhere else ("demo", "info", "inspect"):
        text = outputs[name][1]
        assert diagnosis in text and command in text, f"'{name}' lacks the diagnosis:\n{text}"


CANNOT_COMPILE = {"demo": 1, "info": 0, "cache list": 0, "cache show": 0,
                  "cache clear --stale": 1, "inspect": 1, "cache clear": 0}


def test_without_cupy_every_command_says_to_install_it(cache_with_entry):
    outputs = _run_all("no-cupy", cache_with_entry)
    _check(outputs, CANNOT_COMPILE, "CuPy is not installed", "pip install 'cugather[cuda",
           diagnosis_everywhere=True)
    assert re.search(r"kernel      cugather_\w+_u16_i64_fast32_raise", outputs["inspect"][1])
    listing = outputs["cache list"][1]
    assert "1 cugather kernel file(s)" in listing and listing.count("unknown") >= 1
    assert "CuPy is not installed" in listing
    assert "state        unknown" in outputs["cache show"][1]
    assert "kept 1 intact file(s) whose state is unknown" in outputs["cache clear --stale"][1]
    assert "removed 1 cugather kernel file(s)" in outputs["cache clear"][1]


@pytest.mark.skipif(HERE.cupy_problem is not None, reason=f"needs CuPy: {HERE.cupy_problem}")
def test_without_nvrtc_every_command_says_to_install_the_wheel(cache_with_entry):
    pytest.importorskip("cuda.pathfinder", reason="the simulation hides NVRTC from CuPy 14's finder")
    outputs = _run_all("no-nvrtc", cache_with_entry)
    _check(outputs, CANNOT_COMPILE, "cannot load NVRTC", HERE.install_command,
           diagnosis_everywhere=True)
    assert "libnvrtc.so.12" in outputs["demo"][1]
    info = outputs["info"][1]
    assert "NVRTC         not available (see below)" in info and "cupy          " in info


def _demo_kernel() -> str:
    """The kernel the planner picks for the demo's call on an H200 (the demo's target
    without a GPU): a (1000000, 128) float16 table, 2000000 int64 indices, raise."""
    from cugather.plan.core import H200, Operand
    from cugather.plan.gather import plan_gather

    return plan_gather(Operand.contiguous((1000000, 128), 2), (2000000,), "int64", 0, "raise",
                       limits=H200).key.entry


@pytest.mark.skipif(not HAVE_NVRTC, reason=f"needs NVRTC: {HERE.nvrtc_problem}")
def test_without_a_driver_kernels_compile_and_the_demo_says_why_none_runs(cache_with_entry):
    outputs = _run_all("no-driver", cache_with_entry)
    _check(outputs, dict.fromkeys(COMMANDS, 0), "No NVIDIA driver was found", "pip install")
    assert "No GPU here, so the target is sm_90" in outputs["inspect"][1]
    assert "stale" in outputs["cache list"][1]  # built by another NVRTC
    demo = outputs["demo"][1]
    assert demo.index("plan\n") < demo.index("kernels (sm_90") < demo.index("Not run: No NVIDIA")
    assert _demo_kernel() in demo and "// ---- kernels/" not in demo
    assert "CUDA driver   none found" in outputs["info"][1]
    assert "insufficient" not in demo  # CuPy's message misleads where there is no driver


@pytest.mark.skipif(not HAVE_NVRTC, reason=f"needs NVRTC: {HERE.nvrtc_problem}")
def test_with_a_driver_but_no_gpu_the_message_says_so(cache_with_entry):
    outputs = _run_all("no-gpu", cache_with_entry)
    _check(outputs, dict.fromkeys(COMMANDS, 0),
           "The NVIDIA driver (CUDA %d.%d) is loaded but reports no GPU" % DRIVER, "nvidia-smi")
    assert "CUDA driver   %d.%d" % DRIVER in outputs["info"][1]


def test_the_module_entry_point_without_cupy_prints_no_traceback(private_kernel_cache):
    code = ("import runpy, sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.partition('.')[0] in ('cupy', 'cupy_backends'):\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, Hide())\n"
            "sys.argv = ['cugather', 'inspect']\n"
            "runpy.run_module('cugather', run_name='__main__')\n")
    env = dict(os.environ, CUPY_CACHE_DIR=str(private_kernel_cache.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert "Nothing was compiled." in done.stdout and "pip install 'cugather[cuda" in done.stdout


# ---------------------------------------------------------------- in process
class _NoDevice(RuntimeError):
    status = 100


def test_driver_without_gpu_in_process(capsys, monkeypatch, private_kernel_cache):
    monkeypatch.setattr(_env, "_driver_version", lambda cupy: DRIVER)

    def no_device(cupy):
        raise _NoDevice("cudaErrorNoDevice: no CUDA-capable device is detected")

    monkeypatch.setattr(_env, "_device_count", no_device)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    problem = _env.no_gpu_reason()
    if HERE.cupy_problem is not None:  # the advice follows the driver
        assert problem.startswith("CuPy is not installed") and "supports CUDA 12.4" in problem
        return
    version = "%d.%d" % DRIVER
    assert problem.startswith(f"The NVIDIA driver (CUDA {version}) is loaded but reports no GPU")
    assert "CUDA_VISIBLE_DEVICES=''" in problem and _env.gpu_count() == 0
    code, out, err = run(capsys, "info")
    assert code == 0 and problem in out and f"CUDA driver   {version}" in out


def test_probe_never_raises(monkeypatch):
    def boom(*args):
        raise OSError("unreadable")

    for name in ("_distributions", "_driver_version", "_device_count", "_nvrtc_version"):
        monkeypatch.setattr(_env, name, boom)
    env = probe()
    assert env.gpus == 0 and env.driver is None and env.nvrtc is None
    assert env.install_command.startswith("pip install 'cugather[cuda")
    assert env.gpu_problem and env.nvrtc_problem


# ---------------------------------------------------------------- the messages
CUPY12 = (("cupy-cuda12x", "14.2.0"), ("nvidia-cuda-nvrtc-cu12", "12.9.86"))
CUPY13 = (("cupy-cuda13x", "14.2.0"), ("nvidia-cuda-nvrtc", "13.0.88"))
MISSING = "ModuleNotFoundError: No module named 'cupy'"


def _ready(packages=CUPY12, runtime=(12, 9), **kw):
    fields = dict(packages=packages, cupy_version="14.2.0", cuda_runtime=runtime,
                  driver=(12, 8), nvrtc=runtime, gpus=1)
    fields.update(kw)
    return Environment(**fields)


def test_a_working_machine_has_no_problem():
    env = _ready()
    assert (env.cupy_problem, env.nvrtc_problem, env.gpu_problem) == (None, None, None)
    assert env.install_command == "pip install 'cugather[cuda12]'"


@pytest.mark.parametrize("packages,driver,major", [
    ((), None, 12), ((), (12, 4), 12), ((), (13, 0), 13),
    ((("nvidia-cuda-nvrtc", "13.0.48"),), None, 13),
    ((("nvidia-cuda-nvrtc-cu12", "12.9.86"),), None, 12),
])
def test_without_cupy_the_command_follows_the_driver_or_the_nvidia_wheels(packages, driver, major):
    env = Environment(packages=packages, cupy_error=MISSING, driver=driver, nvrtc_error=MISSING)
    command = f"pip install 'cugather[cuda{major}]'"
    assert env.install_command == command
    for problem in (env.cupy_problem, env.nvrtc_problem, env.gpu_problem):
        assert problem.startswith("CuPy is not installed") and problem.endswith(command)
    if not packages and driver is None:
        assert "for a CUDA 13 driver (580 or newer) use 'cugather[cuda13]'" in env.cupy_problem


def test_installed_cupy_decides_the_command_where_the_driver_can_run_it():
    env = _ready(CUPY12, driver=(13, 0), nvrtc=None, nvrtc_error="DynamicLibNotFoundError: x")
    assert env.install_command == "pip install 'cugather[cuda12]'"
    assert env.nvrtc_problem.startswith("CuPy 14.2.0 (cupy-cuda12x) cannot load NVRTC")
    assert env.nvrtc_problem.endswith("NVIDIA's pip wheel for CUDA 12 provides it: "
                                      "pip install 'cugather[cuda12]'")


def test_driver_older_than_cupys_cuda_offers_both_ways_out():
    env = _ready(CUPY13, runtime=(13, 0), driver=(12, 4), gpus=0,
                 gpu_error="CUDARuntimeError: cudaErrorInsufficientDriver", gpu_error_status=35)
    assert env.gpu_problem.startswith("The NVIDIA driver supports CUDA 12.4, older than the "
                                      "CUDA 13.0 that CuPy 14.2.0 is built for")
    assert "580 or newer" in env.gpu_problem
    assert env.gpu_problem.endswith(
        "pip uninstall -y cupy-cuda13x && pip install 'cugather[cuda12]'")
    old = _ready(driver=(11, 8), gpus=0, gpu_error="x", gpu_error_status=35)
    assert "cugather needs CUDA 12 or newer (driver 525 or newer)" in old.gpu_problem


def test_no_driver_and_no_device_read_differently():
    none = _ready(driver=None, gpus=0, gpu_error="CUDARuntimeError: insufficient",
                  gpu_error_status=35)
    assert none.gpu_problem.startswith("No NVIDIA driver was found")
    assert "insufficient" not in none.gpu_problem
    nodev = _ready(gpus=0, gpu_error="CUDARuntimeError: cudaErrorNoDevice", gpu_error_status=100)
    assert nodev.gpu_problem.startswith("The NVIDIA driver (CUDA 12.8) is loaded but reports no GPU")
    other = _ready(gpus=0, gpu_error="CUDARuntimeError: cudaErrorUnknown", gpu_error_status=999)
    assert other.gpu_problem.startswith("CUDA cannot use a GPU here (CUDARuntimeError: "
                                        "cudaErrorUnknown)")


def test_old_cupy_is_told_to_upgrade():
    env = _ready((("cupy-cuda12x", "13.6.0"), ("nvidia-cuda-nvrtc-cu12", "12.9.86")),
                 cupy_version="13.6.0", nvrtc=None,
                 nvrtc_error="RuntimeError: CuPy failed to load libnvrtc.so.12")
    assert "CuPy before 14.0 does not look for NVIDIA's NVRTC wheels" in env.nvrtc_problem
    assert env.nvrtc_problem.endswith("pip install 'cugather[cuda12]'")


def test_two_cupy_packages_are_a_problem_of_their_own():
    env = _ready(CUPY12 + (("cupy-cuda13x", "14.2.0"),), driver=(13, 0))
    assert env.cupy_problem.startswith("Several CuPy packages are installed (cupy-cuda12x "
                                       "14.2.0, cupy-cuda13x 14.2.0)")
    assert env.cupy_problem.endswith(
        "pip uninstall -y cupy-cuda12x cupy-cuda13x && pip install 'cugather[cuda13]'")
    assert env.gpu_problem == env.nvrtc_problem == env.cupy_problem


def test_broken_cupy_is_told_to_reinstall():
    env = Environment(packages=CUPY12, cupy_error="ImportError: libfoo.so: cannot open",
                      nvrtc_error="ImportError: libfoo.so: cannot open")
    assert env.cupy_problem.startswith("cupy-cuda12x 14.2.0 is installed but 'import cupy' "
                                       "fails (ImportError: libfoo.so: cannot open)")
    assert "pip install --force-reinstall 'cupy-cuda12x==14.2.0'" in env.cupy_problem
