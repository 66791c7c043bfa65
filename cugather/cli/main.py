"""The command line: ``cugather [demo|bench|tune|info|cache|inspect]``.

With no command it runs the demo.  A command that cannot do its work because
CuPy, NVRTC, the driver or a GPU is missing says so in one paragraph, with the
pip command that installs what is missing, and exits with status 1; it never
ends in a traceback for that reason.  Any other error is shown as it is (with
its traceback), even on a machine that lacks a GPU: the paragraph is only for
errors that come from CUDA, CuPy, NVRTC or the driver.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .format import error

DESCRIPTION = ("Fast, checked gather kernels for CuPy arrays: run the demo (default), "
               "benchmark, or see what was compiled.")

# command -> (module providing add_arguments(parser) and run(args) -> int, help)
COMMANDS: Dict[str, Tuple[str, str]] = {
    "demo": ("cugather.cli.demo", "gather a table, check it against cupy.take and time it "
                                  "(default); without a GPU, compile it and show the plan"),
    "bench": ("cugather.bench", "benchmark against the copy ceiling and the peers"),
    "tune": ("cugather.bench.tune", "time every candidate kernel of random geometries on this "
                                    "GPU and fit the tuning table the planner consults"),
    "info": ("cugather.cli.info", "versions, driver, GPUs, NVRTC and the kernel cache"),
    "cache": ("cugather.cli.cache", "list, show or clear compiled kernels"),
    "inspect": ("cugather.cli.inspect", "plan, source and ptxas report of one gather"),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The argument parser, with one subcommand per installed command module."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, helptext) in COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        p.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ImportError:  # an optional command whose dependencies are missing
            continue
        mod.add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Run one command; return its exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).
    prog : str, optional
        Program name for usage lines; default: the console script's name
        (``python -m cugather`` passes its own).
    """
    args_in: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not args_in or args_in[0].startswith("-") and args_in[0] not in ("-h", "--help"):
        args_in = ["demo"] + args_in
    parser = build_parser(prog or _script_name())
    args = parser.parse_args(args_in)
    runner: Callable[[argparse.Namespace], int] = importlib.import_module(args._module).run
    try:
        return int(runner(args) or 0)
    except BrokenPipeError:  # output piped into head and closed
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        problem = _environment_problem(e)
        if problem is None:
            raise  # not the machine's fault: a bug, keep its traceback
        return error(f"{type(e).__name__}: {e}\n\n{problem}", 1)


def _script_name() -> str:
    name = os.path.splitext(os.path.basename(sys.argv[0] if sys.argv else ""))[0]
    return name if name.startswith("cugather") else "cugather"


#: Packages whose exceptions are about the machine: CuPy, its CUDA bindings, NVIDIA's wheels.
_CUDA_PACKAGES = ("cupy", "cupy_backends", "cupyx", "cuda", "nvidia")
_CUDA_WORDS = re.compile(r"cuda|nvrtc|nvidia|driver", re.IGNORECASE)


def about_the_machine(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it was raised from) comes from CUDA, CuPy, NVRTC or
    the driver -- what a missing package or GPU explains -- rather than from a bug."""
    seen: List[BaseException] = []
    cur: Optional[BaseException] = e
    while cur is not None and len(seen) < 8 and cur not in seen:
        seen.append(cur)
        if isinstance(cur, ImportError):
            if (cur.name or "").partition(".")[0] in _CUDA_PACKAGES or _CUDA_WORDS.search(str(cur)):
                return True
        elif type(cur).__module__.partition(".")[0] in _CUDA_PACKAGES:
            return True  # CUDARuntimeError, CUDADriverError, NVRTCError, ...
        elif isinstance(cur, (OSError, RuntimeError)) and _CUDA_WORDS.search(str(cur)):
            return True  # libcuda.so cannot be loaded, "CUDA driver version is insufficient"
        cur = cur.__cause__ or cur.__context__
    return False


def _environment_problem(e: BaseException) -> Optional[str]:
    """The paragraph on what this machine lacks, if that is what ``e`` is about."""
    from ..env import probe
    from ..inspect.api import NvrtcUnavailableError

    if isinstance(e, NvrtcUnavailableError):
        return str(e)
    if not about_the_machine(e):
        return None  # a bug or a bad input: its own message and traceback say more
    env = probe()
    problems = [p for p in (env.cupy_problem, env.nvrtc_problem, env.gpu_problem) if p]
    return "\n\n".join(dict.fromkeys(problems)) or None


def _silence_stdout() -> None:
    # Python flushes stdout at exit; point it at devnull so that flush cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
