"""Test tiers: pure (always), nvrtc (NVRTC library), hostsim (C++ compiler), gpu."""

import re

import pytest

from cugather.env import no_gpu_reason, nvrtc_problem

_GPU = no_gpu_reason()
_NVRTC = nvrtc_problem()


def _first_clause(paragraph):
    """The diagnosis without its advice, for skip reasons repeated per test."""
    return re.split(r"[.;] ", paragraph, maxsplit=1)[0]


def pytest_report_header(config):
    return [f"cugather tiers: gpu={'yes' if _GPU is None else 'no'}, "
            f"nvrtc={'yes' if _NVRTC is None else 'no'}"] + [
        f"  {p}" for p in dict.fromkeys(p for p in (_GPU, _NVRTC) if p)]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and _GPU is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {_first_clause(_GPU)}"))
        if "nvrtc" in item.keywords and _NVRTC is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs NVRTC: {_first_clause(_NVRTC)}"))


@pytest.fixture
def private_kernel_cache(tmp_path, monkeypatch):
    """A private CUPY_CACHE_DIR and empty in-process caches; yields cugather's folder."""
    from cugather import jit

    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "kernel_cache"))
    jit.cache_clear()
    yield tmp_path / "kernel_cache" / "cugather"
    jit.cache_clear()
