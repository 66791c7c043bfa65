"""Rendered sources without NVRTC: each records where it came from and stands alone."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from cugather.compile.render import render
from cugather.distributed.plan import SHARDED_ARGS
from cugather.plan.keys import (BUILTIN_KINDS, KernelKey, KindSpec, all_kernel_keys, kinds,
                                register_kind)
from cugather.plan.layout import ARGS_DTYPES
from cugather.plan.tuning import KERNEL_DEFINES


@pytest.mark.parametrize("kind", kinds())
def test_every_key_renders_a_self_contained_source_that_names_its_origin(kind):
    keys = [k for k in all_kernel_keys() if k.kind == kind]
    assert keys
    for key in keys:
        text = render(key).text
        first = text.splitlines()[0]
        assert first.startswith("// cugather ") and f"kind={kind} " in first, first
        assert "template gather.cu.j2" in first and "sources sha256:" in first
        assert "// ---- kernels/common.cuh ----" in text
        assert f"// ---- kernels/{key.spec.header} ----" in text
        for name, value in (*KERNEL_DEFINES.items(), *key.spec.defines):  # from Python
            assert f"#define {name} {value}\n" in text
        assert "#include" not in text  # NVRTC gets no include path
        assert f'extern "C" __global__' in text and f" {key.entry}(" in text


_DIGESTS = """
import hashlib, json, sys
{first}
from cugather.compile.render import render
from cugather.plan.keys import BUILTIN_KINDS, all_kernel_keys
texts = {{k.entry: render(k).text for k in all_kernel_keys(BUILTIN_KINDS)}}
print(json.dumps({{"distributed": "cugather.distributed" in sys.modules,
                  "digests": {{e: hashlib.sha256(t.encode()).hexdigest() for e, t in texts.items()}},
                  "sharded_constants": [e for e, t in texts.items() if "CG_MAX_RANKS" in t
                                        or "CG_SHARDED_RU" in t]}}))
"""


def _rendered(first: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _DIGESTS.format(first=first)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_core_sources_are_the_same_whether_cugather_distributed_is_imported_or_not():
    """The sharded kind's constants are rendered into its own source only, so the
    text (and with it the disk-cache entry) of every other kernel is byte for
    byte the same either way."""
    alone = _rendered("")
    along = _rendered("import cugather.distributed.plan")
    assert not alone["distributed"] and along["distributed"]
    assert alone["digests"] and alone["digests"] == along["digests"]
    assert alone["sharded_constants"] == along["sharded_constants"] == []


def test_the_sharded_kind_is_registered_by_cugather_distributed_and_found_from_its_name():
    code = ("import sys; from cugather.plan.keys import KernelKey, kinds; "
            "assert 'cugather.distributed' not in sys.modules; "
            "k = KernelKey('sharded', 16, 'int64', 'fast64', 'wrap'); "
            "assert 'cugather.distributed.plan' in sys.modules and 'sharded' in kinds(); "
            "assert 'cupy' not in sys.modules; print(k.spec.args_type)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ShardedArgs", r.stderr
    text = render(KernelKey("sharded", 16, "int64", "fast64", "wrap")).text
    defines, header = text.index("#define CG_MAX_RANKS 64\n"), text.index("kernels/sharded.cuh")
    assert defines < header and "#define CG_SHARDED_RU 4\n" in text
    assert "sharded" in kinds() and set(BUILTIN_KINDS) < set(kinds())
    assert ARGS_DTYPES["ShardedArgs"] is SHARDED_ARGS
    assert any(k.kind == "sharded" for k in all_kernel_keys())


def test_register_kind_refuses_what_is_taken_or_malformed():
    spec = KindSpec("sharded.cuh", "gather_sharded", "ShardedArgs", maths=("fast64",),
                    min_blocks=4, takes_math=False,
                    defines=(("CG_MAX_RANKS", 64), ("CG_SHARDED_RU", 4)))
    pointers = ("data", "indices", "out", "first_bad")
    register_kind("sharded", spec, SHARDED_ARGS, pointers)  # the same again: nothing happens
    with pytest.raises(ValueError, match="kernel kind 'sharded' is registered already"):
        register_kind("sharded", replace(spec, min_blocks=2), SHARDED_ARGS, pointers)
    with pytest.raises(ValueError, match="CG_MAX_THREADS is a global kernel define"):
        register_kind("other", replace(spec, defines=(("CG_MAX_THREADS", 128),)),
                      SHARDED_ARGS, pointers)
    with pytest.raises(ValueError, match="must lead ShardedArgs"):
        register_kind("other", spec, SHARDED_ARGS, ("indices", "data"))
    with pytest.raises(ValueError, match="'ShardedArgs' is registered already"):
        register_kind("other", spec, ARGS_DTYPES["GatherArgs"], pointers)
    with pytest.raises(ValueError, match="unknown kernel kind 'other'"):
        KernelKey("other", 16, "int64", "fast64", "wrap")
