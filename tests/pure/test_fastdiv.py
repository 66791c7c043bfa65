"""fast_divmod parameters against Python's divmod (pure tier)."""

import numpy as np
import pytest

from cugather.plan.fastdiv import MAX_OPERAND, fast_div, make_divisor


def _quotients(n: np.ndarray, d: int, bits: int) -> np.ndarray:
    """Vectorised device formula for 32-bit words: (umulhi(m, n) + n) >> l."""
    div = make_divisor(d, bits)
    hi = (np.uint64(div.m) * n) >> np.uint64(32)  # m < 2^32 and n < 2^31: no overflow
    return (hi + n) >> np.uint64(div.l)


def test_every_divisor_up_to_65536_with_edge_numerators():
    top = MAX_OPERAND[32] - 1
    for d in range(1, 65537):
        n = np.array([0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 7 * d + 3,
                      top, top - 1, top - d, (top // d) * d, (top // d) * d - 1],
                     dtype=np.uint64)
        n = n[(n >= 0) & (n <= top)]
        q = _quotients(n, d, 32)
        assert np.array_equal(q, n // np.uint64(d)), d


def test_powers_of_two_and_neighbours_32():
    rng = np.random.default_rng(1)
    for k in range(31):
        for d in {(1 << k) - 1, 1 << k, (1 << k) + 1}:
            if not 1 <= d < MAX_OPERAND[32]:
                continue
            n = np.concatenate([
                rng.integers(0, MAX_OPERAND[32], size=2000, dtype=np.uint64),
                np.array([0, d - 1, d, MAX_OPERAND[32] - 1], dtype=np.uint64)])
            assert np.array_equal(_quotients(n, d, 32), n // np.uint64(d)), d


def test_random_pairs_32():
    rng = np.random.default_rng(2)
    d = rng.integers(1, MAX_OPERAND[32], size=3000)
    n = rng.integers(0, MAX_OPERAND[32], size=3000)
    for di, ni in zip(d.tolist(), n.tolist()):
        assert fast_div(ni, make_divisor(di, 32)) == ni // di


@pytest.mark.parametrize("seed", range(3))
def test_random_pairs_64(seed):
    rng = np.random.default_rng(10 + seed)
    for _ in range(3000):
        d = int(rng.integers(1, 1 << 62)) >> int(rng.integers(0, 62))
        d = max(d, 1)
        n = int(rng.integers(0, 1 << 62)) * 2 + int(rng.integers(0, 2))
        assert fast_div(n, make_divisor(d, 64)) == n // d, (n, d)


def test_64_bit_edges():
    top = MAX_OPERAND[64] - 1
    for k in range(63):
        for d in {(1 << k) - 1, 1 << k, (1 << k) + 1}:
            if 1 <= d < MAX_OPERAND[64]:
                div = make_divisor(d, 64)
                for n in (0, d - 1, d, top, top - 1, (top // d) * d):
                    assert fast_div(n, div) == n // d, (n, d)


def test_parameters_of_known_divisors():
    # l = ceil(log2 d); m = floor(2^32 (2^l - d) / d) + 1
    assert make_divisor(1) == (1, 1, 0, 32)
    assert make_divisor(7)[1:3] == ((1 << 32) * (8 - 7) // 7 + 1, 3)
    assert make_divisor(4096)[1:3] == (1, 12)


@pytest.mark.parametrize("d,bits", [(0, 32), (-1, 32), (1 << 31, 32), (1 << 63, 64), (5, 16)])
def test_rejects_out_of_range(d, bits):
    with pytest.raises(ValueError):
        make_divisor(d, bits)
