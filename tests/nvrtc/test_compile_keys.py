"""NVRTC tier: every kernel key the library can produce, compiled for sm_75, sm_80 and
sm_90 without a GPU, judged by one set of criteria:

- NVRTC compiles it, and its log has no warning;
- ptxas reports 0 bytes of spill stores and spill loads;
- its ``__launch_bounds__`` reach the PTX (``.maxntid``, ``.minnctapersm``), the
  thread bound is the block size the plans launch (``MAX_THREADS``), and its
  registers fit that many blocks of that many threads in one SM's register file.

The keys come from ``cugather.plan.keys.all_kernel_keys()``, so a new variant is
covered as soon as the library can produce it.  The keys of one variant (kind,
unit, index type, index math; all modes) are compiled as one NVRTC program, which
the headers' include guards allow: each test is one variant on one architecture,
well under a second.
"""

import re

import pytest

from cugather.compile.compiler import nvrtc_options, parse_ptxas
from cugather.compile.nvrtc import cubin_registers
from cugather.compile.render import render
from cugather.plan.tuning import MAX_THREADS
from cugather.plan.keys import all_kernel_keys

pytestmark = pytest.mark.nvrtc

ARCHS = ("sm_75", "sm_80", "sm_90")
#: 32-bit registers per SM, the same on sm_75, sm_80 and sm_90.
REGISTERS_PER_SM = 65536


def _variants() -> dict:
    groups = {}
    for key in all_kernel_keys():
        name = f"{key.kind}-u{key.unit}-{key.index_dtype}-{key.math}"
        groups.setdefault(name, []).append(key)
    return groups


VARIANTS = _variants()

_ENTRY_LOG = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_ENTRY_PTX = re.compile(r"\.entry\s+(\w+)\s*\(")


def _log_per_entry(log: str) -> dict:
    """entry -> that entry's part of a ptxas -v log."""
    marks = list(_ENTRY_LOG.finditer(log))
    return {m.group(1): log[m.start():nxt.start() if nxt else len(log)]
            for m, nxt in zip(marks, marks[1:] + [None])}


def _bounds_per_entry(ptx: str) -> dict:
    """entry -> (maxntid, minnctapersm) from the directives before its body; None if absent."""
    bounds = {}
    for m in _ENTRY_PTX.finditer(ptx):
        head = ptx[m.end():ptx.index("{", m.end())]
        ntid = re.search(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", head)
        blocks = re.search(r"\.minnctapersm\s+(\d+)", head)
        bounds[m.group(1)] = (
            None if ntid is None else tuple(int(g) for g in ntid.groups()),
            None if blocks is None else int(blocks.group(1)))
    return bounds


def _compile(keys, arch):
    """(log, ptx, cubin) of the keys' rendered sources as one program, or pytest.fail."""
    from cupy_backends.cuda.libs import nvrtc

    text = "\n".join(render(k).text for k in keys)
    prog = nvrtc.createProgram(text, f"{keys[0].entry}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, nvrtc_options(arch))
        except nvrtc.NVRTCError:
            pytest.fail(f"NVRTC rejected it for {arch}:\n{nvrtc.getProgramLog(prog)}",
                        pytrace=False)
        log = nvrtc.getProgramLog(prog).rstrip("\0")
        ptx = nvrtc.getPTX(prog)
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return log, ptx.decode() if isinstance(ptx, bytes) else ptx, bytes(cubin)


def problems_of(entry: str, part: str, bounds) -> list:
    """What is wrong with one compiled entry; empty when it meets every criterion."""
    found = parse_ptxas(part)
    problems = []
    if found["registers"] is None or found["spill_stores"] is None:
        return [f"{entry}: no ptxas report (was --ptxas-options=-v passed?)"]
    if found["spill_stores"] or found["spill_loads"]:
        problems.append(f"{entry}: {found['spill_stores']} bytes spill stores, "
                        f"{found['spill_loads']} bytes spill loads")
    ntid, blocks = bounds if bounds else (None, None)
    if ntid is None or blocks is None:
        return problems + [f"{entry}: no __launch_bounds__ in its PTX ({ntid=}, {blocks=})"]
    if ntid != (MAX_THREADS, 1, 1):
        problems.append(f"{entry}: launch bounds of {ntid} threads, but plans launch blocks "
                        f"of up to {MAX_THREADS}")
    budget = REGISTERS_PER_SM // (ntid[0] * blocks)
    if found["registers"] > budget:
        problems.append(f"{entry}: {found['registers']} registers, more than the {budget} "
                        f"that {blocks} resident blocks of {ntid[0]} threads allow")
    return problems


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_compiles_clean(variant, arch):
    keys = VARIANTS[variant]
    log, ptx, cubin = _compile(keys, arch)
    where = f"{variant} ({len(keys)} modes) for {arch}"
    assert "warning" not in log.lower(), f"NVRTC warned on {where}:\n{log}"
    parts, bounds = _log_per_entry(log), _bounds_per_entry(ptx)
    assert sorted(parts) == sorted(k.entry for k in keys), f"entries of {where}:\n{log}"
    problems = [p for k in keys for p in problems_of(k.entry, parts[k.entry], bounds.get(k.entry))]
    assert not problems, f"{where}:\n" + "\n".join(problems) + f"\n{log}"
    # The cubin's own record of registers, used when NVRTC skips ptxas on a repeat.
    from_cubin = {k.entry: cubin_registers(cubin, k.entry) for k in keys}
    assert from_cubin == {e: parse_ptxas(parts[e])["registers"] for e in from_cubin}, where


def test_the_criteria_can_fail():
    """problems_of flags spills, missing or wrong launch bounds and excess registers."""
    clean = ("ptxas info : Compiling entry function 'k' for 'sm_90'\n"
             "ptxas . 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
             "ptxas info : Used 40 registers")
    assert problems_of("k", clean, ((MAX_THREADS, 1, 1), 6)) == []
    assert "spill" in problems_of("k", clean.replace("0 bytes spill stores", "8 bytes spill stores"),
                                  ((MAX_THREADS, 1, 1), 6))[0]
    assert "no __launch_bounds__" in problems_of("k", clean, None)[0]
    assert "plans launch blocks" in problems_of("k", clean, ((MAX_THREADS * 2, 1, 1), 1))[0]
    assert "more than the 32" in problems_of("k", clean, ((MAX_THREADS, 1, 1), 8))[0]
