"""Rendering: KernelKey -> CUDA source text.  Pure (Jinja2 only, no GPU).

This module owns the Jinja2 environment.  A rendered source is
self-contained: its first line records where it came from, then the tuning
constants of cugather/plan/tuning.py (and those of the key's own spec, for a
kind registered from another module), the headers of kernels/ inlined (so any
cache keyed on the text changes when a header or a constant changes), and the
argument-struct layout asserted against cugather/plan/layout.py.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources

import jinja2

from .._version import __version__
from ..plan.keys import KernelKey
from ..plan.layout import ARGS_DTYPES, layout_of
from ..plan.tuning import KERNEL_DEFINES

__all__ = ["Source", "render", "sources_digest", "header_names", "TEMPLATE"]

#: The one template every kernel is rendered from.
TEMPLATE = "gather.cu.j2"

UNIT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}
INDEX_TYPES = {"int32": "int", "int64": "long long"}
MATH_TYPES = {"fast32": "cg::Math32", "fast64": "cg::Math64", "div64": "cg::MathDiv64"}
MODE_CONSTANTS = {
    "raise": "cg::MODE_RAISE", "wrap": "cg::MODE_WRAP", "clip": "cg::MODE_CLIP",
    "clip_numpy": "cg::MODE_CLIP_NUMPY", "fill": "cg::MODE_FILL",
}


@dataclass(frozen=True)
class Source:
    """Rendered CUDA source of one kernel."""

    key: KernelKey
    entry: str
    args_type: str
    template: str
    text: str
    digest: str  # sha256 of every header and template, with the package version


def _read(package: str, name: str) -> str:
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def header_names() -> list[str]:
    """Names of the CUDA headers shipped in ``cugather.kernels``."""
    return sorted(p.name for p in resources.files("cugather.kernels").iterdir()
                  if p.name.endswith(".cuh"))


def _template_names() -> list[str]:
    return sorted(p.name for p in resources.files("cugather.templates").iterdir()
                  if p.name.endswith(".j2"))


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    """sha256 over the package version, the tuning constants, every header and
    every template."""
    h = hashlib.sha256(__version__.encode() + repr(sorted(KERNEL_DEFINES.items())).encode())
    for package, names in (("cugather.kernels", header_names()),
                           ("cugather.templates", _template_names())):
        for name in names:
            h.update(name.encode() + b"\0" + _read(package, name).encode() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: _read("cugather.templates", name)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _template_args(key: KernelKey) -> list[str]:
    index_type = INDEX_TYPES[key.index_dtype]
    if not key.spec.moves_data:
        return [index_type]
    if not key.spec.takes_math:
        return [UNIT_TYPES[key.unit], index_type, MODE_CONSTANTS[key.mode]]
    return [UNIT_TYPES[key.unit], index_type, MATH_TYPES[key.math], MODE_CONSTANTS[key.mode]]


@functools.lru_cache(maxsize=None)
def render(key: KernelKey) -> Source:
    """Render the CUDA source of ``key``."""
    spec = key.spec
    digest = sources_digest()
    provenance = (
        f"// cugather {__version__} | template {TEMPLATE} | kind={key.kind} "
        f"unit={key.unit} index={key.index_dtype} math={key.math} mode={key.mode} "
        f"| sources sha256:{digest[:16]}")
    headers = "\n".join(f"// ---- kernels/{name} ----\n{_read('cugather.kernels', name)}"
                        for name in ("common.cuh", spec.header))
    text = _environment().get_template(TEMPLATE).render(
        provenance=provenance,
        defines=sorted({**KERNEL_DEFINES, **dict(spec.defines)}.items()),
        headers=headers,
        layout=layout_of(spec.args_type),
        args_type=spec.args_type,
        args_size=ARGS_DTYPES[spec.args_type].itemsize,
        entry=key.entry,
        min_blocks=spec.min_blocks(key) if callable(spec.min_blocks) else spec.min_blocks,
        function=spec.function,
        template_args=_template_args(key),
    )
    return Source(key, key.entry, spec.args_type, TEMPLATE, text, digest)
