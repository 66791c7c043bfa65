"""Command line: ``python -m cugather [demo|bench|info|cache|inspect]``.

With no command it runs the demo: a gather timed against cupy.take on the
GPU, or, where there is none, the plan and the kernel it would compile.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> module providing add_arguments(parser) and run(args) -> int
_COMMANDS = {
    "demo": ("cugather.cli.demo", "gather a table and time it against cupy.take (default)"),
    "bench": ("cugather.bench", "benchmark against the copy ceiling and the peers"),
    "info": ("cugather.cli.jit", "versions, GPU and kernel cache"),
    "cache": ("cugather.cli.jit", "list, show or clear compiled kernels"),
    "inspect": ("cugather.cli.inspect", "plan, source and ptxas report of one gather"),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m cugather", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, helptext) in _COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ImportError:  # a command whose module is not installed
            continue
        adder = getattr(mod, f"add_{name}_arguments", None) or getattr(mod, "add_arguments")
        adder(p)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["demo"] + argv
    args = parser.parse_args(argv)
    mod = importlib.import_module(args._module)
    runner = getattr(mod, f"run_{args.command}", None) or mod.run
    return int(runner(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
