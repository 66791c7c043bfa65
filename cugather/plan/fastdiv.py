"""fast_divmod parameters (Granlund-Montgomery), computed on the host.

For a divisor ``d >= 1`` and a word size ``N`` (32 or 64)::

    l = ceil(log2 d)
    m = floor(2**N * (2**l - d) / d) + 1
    q = (umulhi(m, n) + n) >> l          # == n // d

The identity is exact for ``0 <= n < 2**N``; the short form above adds ``n``
to the high product without a carry, so it needs ``umulhi(m, n) + n < 2**N``,
which holds whenever ``n < 2**(N-1)``.  Hence the 32-bit kernels are used only
where every numerator and divisor is below ``2**31``.  Pure Python, no GPU.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Divisor", "make_divisor", "fast_div", "MAX_OPERAND"]

# Largest numerator (exclusive) each width handles.
MAX_OPERAND = {32: 1 << 31, 64: 1 << 63}


class Divisor(NamedTuple):
    """Magic numbers for dividing by ``d`` with ``bits``-wide arithmetic."""

    d: int
    m: int
    l: int  # noqa: E741 - the shift is called l in the literature
    bits: int


def make_divisor(d: int, bits: int = 32) -> Divisor:
    """Return the fast_divmod parameters for divisor ``d``.

    Parameters
    ----------
    d : int
        Divisor, ``1 <= d < 2**(bits-1)``.
    bits : {32, 64}
        Word size of the device arithmetic.
    """
    if bits not in MAX_OPERAND:
        raise ValueError(f"bits must be 32 or 64, got {bits!r}")
    d = int(d)
    if not 1 <= d < MAX_OPERAND[bits]:
        raise ValueError(f"divisor must be in [1, 2**{bits - 1}), got {d}")
    l = (d - 1).bit_length()  # noqa: E741 - ceil(log2 d); 0 for d == 1
    m = ((1 << bits) * ((1 << l) - d)) // d + 1
    assert 0 < m < (1 << bits), (d, m)  # a bug here would corrupt every launch
    return Divisor(d, m, l, bits)


def fast_div(n: int, div: Divisor) -> int:
    """Emulate the device quotient ``(umulhi(m, n) + n) >> l`` exactly."""
    hi = (div.m * n) >> div.bits
    return (hi + n) >> div.l
