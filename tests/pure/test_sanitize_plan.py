"""The sanitizer reaches every kernel variant (pure tier: plans only, no GPU).

``tests/tools/sanitize.py`` searches candidate geometries for each kernel key;
a new kernel kind, unit or mode the candidates cannot reach fails here, before
anyone runs compute-sanitizer on a GPU.
"""

from collections import defaultdict

import numpy as np

import sanitize


def test_every_kernel_variant_has_a_sanitizer_case():
    tallies = defaultdict(sanitize.Tally)
    failures = []
    rng = np.random.default_rng(0)
    keys = sanitize.target_keys()
    for key in keys:
        sanitize.run_key(key, rng, tallies[key.kind], failures, 2, plan_only=True)
    assert not failures, "\n".join(failures[:20])
    assert sum(t.covered for t in tallies.values()) == len(keys)
    # two geometries per variant, each run with in-range and out-of-range indices
    assert all(t.cases == 4 * t.keys for t in tallies.values()), dict(tallies)


def test_shared_memory_kinds_are_sanitized_for_races():
    keys = sanitize.target_keys(shared_only=True)
    assert keys and all(k.kind in sanitize.SHARED_KINDS for k in keys)
