"""Helpers shared by the tests of cugather.jit and the command line, in every tier."""

import json
import os
import subprocess
import sys

from cugather.cli.main import main
from cugather.compile import compiler as _compiler
from cugather.inspect import disasm as _disasm
from cugather.plan.keys import KernelKey

ROWS = KernelKey("rows", 16, "int64", "fast32", "raise")
CHECK = KernelKey("check", 0, "int64", "fast64", "raise")
SCALAR = KernelKey("scalar", 4, "int32", "fast32", "wrap")


def compiles() -> int:
    """NVRTC runs of this process since the last cache_clear."""
    return _compiler.stats()["compiles"]


def run(capsys, *argv, prog="cugather"):
    """(exit code, stdout, stderr) of ``cugather ARGV`` run in this process."""
    code = main(list(argv), prog=prog)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    """(exit code, parsed stdout, stderr) of ``cugather ARGV --json``."""
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out), err


def run_fresh(script, cache_root):
    """The last stdout line of ``script``, run in a new Python with CUPY_CACHE_DIR=cache_root, as JSON."""
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache_root))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def no_disassembler(monkeypatch, tmp_path):
    """Hide cuobjdump and nvdisasm (PATH, CUDA_PATH, CUDA_HOME and NVIDIA's wheels)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(_disasm, "_wheel_bin_folders", lambda: [])
