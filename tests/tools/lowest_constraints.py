"""Pin each dependency of pyproject.toml to its lower bound: a pip constraints file.

    python tests/tools/lowest_constraints.py [--pyproject PATH] EXTRA ... > constraints.txt

CI installs the package with ``pip install -c constraints.txt ".[EXTRA,...]"``
to test the lowest versions it allows.  Every requirement must state a lower
bound (``>=X``) that is an exact release, so that ``==X`` names it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(;.*)?$")


def lower_bound(requirement: str) -> tuple:
    """(name, version) of ``requirement``'s ``>=`` bound; ValueError if it has none."""
    m = _REQUIREMENT.match(requirement)
    if m is None:
        raise ValueError(f"cannot read requirement {requirement!r}")
    name, specifiers = m.group(1).lower(), m.group(3)
    bounds = [s.strip()[2:].strip() for s in specifiers.split(",") if s.strip().startswith(">=")]
    if len(bounds) != 1:
        raise ValueError(f"requirement {requirement!r} must have exactly one lower bound '>=X'")
    return name, bounds[0]


def lower_bounds(pyproject: Dict, extras: Sequence[str]) -> Dict[str, str]:
    """name -> lowest allowed version for the dependencies and the named extras."""
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise ValueError(f"unknown extras {unknown}; pyproject.toml has {sorted(optional)}")
    requirements: List[str] = list(project.get("dependencies", []))
    for extra in extras:
        requirements += optional[extra]
    return dict(lower_bound(r) for r in requirements)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="extras whose requirements are pinned too")
    parser.add_argument("--pyproject", default=str(Path(__file__).parents[2] / "pyproject.toml"))
    args = parser.parse_args(argv)
    with open(args.pyproject, "rb") as f:
        pins = lower_bounds(tomllib.load(f), args.extras)
    sys.stdout.write("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
