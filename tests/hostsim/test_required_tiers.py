"""CI names the tiers that must run (CUGATHER_REQUIRE_TIERS=nvrtc,hostsim): there
a missing NVRTC library or C++ compiler fails the run instead of skipping it."""

import os

import pytest

from cugather.env import nvrtc_problem

from . import build

_REASONS = {"nvrtc": nvrtc_problem, "hostsim": build.no_compiler_reason}


@pytest.mark.parametrize("tier", sorted(_REASONS))
def test_required_tier_is_available(tier):
    reason = _REASONS[tier]()
    required = tier in os.environ.get("CUGATHER_REQUIRE_TIERS", "").split(",")
    if reason is None:
        return
    if required:
        pytest.fail(f"CUGATHER_REQUIRE_TIERS includes {tier}, but {reason}")
    pytest.skip(f"{tier} tier unavailable: {reason}")
