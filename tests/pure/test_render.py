"""Rendered sources without NVRTC: each records where it came from and stands alone."""

import pytest

from cugather.compile.render import render
from cugather.plan.keys import KINDS, all_kernel_keys
from cugather.plan.tuning import KERNEL_DEFINES


@pytest.mark.parametrize("kind", KINDS)
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
        for name, value in KERNEL_DEFINES.items():  # the constants come from Python
            assert f"#define {name} {value}\n" in text
        assert "#include" not in text  # NVRTC gets no include path
        assert f'extern "C" __global__' in text and f" {key.entry}(" in text
