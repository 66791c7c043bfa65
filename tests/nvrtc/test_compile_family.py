"""NVRTC tier for the elements, nd and check_nd kernels: every key compiles
for sm_75, sm_80 and sm_90 without warnings, spills or stack frame.

Keys are compiled in groups (same kind, index type and math) as one NVRTC
program of their rendered sources, which the headers' include guards allow;
ptxas reports each entry point separately.  One key per kind also goes
through the library's own compile path.
"""

import re

import pytest

from cugather.compile import compiler as _compiler
from cugather.compile.render import render
from cugather.plan.keys import all_kernel_keys

pytestmark = pytest.mark.nvrtc

ARCHS = ("sm_75", "sm_80", "sm_90")
KINDS = ("elements", "nd", "check_nd")


def _groups():
    groups = {}
    for key in all_kernel_keys():
        if key.kind in KINDS:
            groups.setdefault((key.kind, key.index_dtype, key.math), []).append(key)
    return groups


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")


def _per_entry(log: str) -> dict:
    """entry -> that entry's part of a ptxas -v log."""
    parts = {}
    marks = list(_ENTRY.finditer(log))
    for m, nxt in zip(marks, marks[1:] + [None]):
        parts[m.group(1)] = log[m.start():nxt.start() if nxt else len(log)]
    return parts


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("group", sorted(_groups()), ids=lambda g: "-".join(g))
def test_group_compiles_clean(group, arch):
    from cupy_backends.cuda.libs import nvrtc

    keys = _groups()[group]
    text = "\n".join(render(k).text for k in keys)
    prog = nvrtc.createProgram(text, f"{'_'.join(group)}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, _compiler.nvrtc_options(arch))
        except nvrtc.NVRTCError:
            pytest.fail(nvrtc.getProgramLog(prog))
        log = nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)
    assert "warning" not in log.lower(), log
    parts = _per_entry(log)
    assert sorted(parts) == sorted(k.entry for k in keys)
    for entry, part in parts.items():
        found = _compiler.parse_ptxas(part)
        assert found["registers"] is not None, part
        assert (found["spill_stores"], found["spill_loads"], found["stack_frame"]) == (0, 0, 0), \
            f"{entry} on {arch}:\n{part}"
        assert found["registers"] <= 64, f"{entry}: launch bounds allow 4 blocks of 256 threads"


@pytest.mark.parametrize("kind", KINDS)
def test_library_compile_path(kind):
    key = next(k for k in all_kernel_keys() if k.kind == kind and k.index_dtype == "int64")
    ck = _compiler.compile_source(render(key), "sm_90")
    assert ck.binary_kind == "cubin" and ck.binary
    assert (ck.spill_stores, ck.spill_loads) == (0, 0)
    assert key.entry.encode() in ck.binary


def test_rendered_sources_record_their_origin_and_inline_their_header():
    for kind in KINDS:
        key = next(k for k in all_kernel_keys() if k.kind == kind)
        text = render(key).text
        assert text.startswith("// cugather ") and f"kind={kind}" in text.splitlines()[0]
        assert f"// ---- kernels/{key.spec.header} ----" in text
        assert 'extern "C" __global__' in text and key.entry in text
