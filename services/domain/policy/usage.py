"""Time-decayed past GPU usage per tenant (a half-life), in integer arithmetic.

Definition: time on the event clock is cut into steps of `half_life_ms // 16` ms (at least
1 ms), counted from 0. A tenant's usage accrues at its allocated rate (milli-GPUs) into the
current step undecayed; at every step boundary everything accrued so far is multiplied by
2^(-1/16) (Q32 fixed point, floored), so usage one half-life old counts half. Whole steps
between two events are summed in closed form, r·s·Σ_{i=1..n} d^i = r·s·d(1-d^n)/(1-d),
floored in Q32. Units: milli-GPU·ms.

Everything is an integer function of event times and the folded allocation rates, so the
fold is identical live, in the simulator and when `gpuledger verify` re-decides; a query at
`now_ms` extends the last folded value to `now_ms` with the current rate.
"""

from __future__ import annotations

STEPS_PER_HALF_LIFE = 16
_Q = 32
_ONE = 1 << _Q
_POW = (
    4294967296,
    4112874773,
    3938502376,
    3771522796,
    3611622603,
    3458501653,
    3311872529,
    3171459999,
    3037000500,
    2908241642,
    2784941738,
    2666869345,
    2553802834,
    2445529972,
    2341847524,
    2242560872,
)
"""round(2^(-k/16) · 2^32) for k = 0..15 (literal, so no float is ever involved)."""


def step_ms(half_life_s: int) -> int:
    return max(1, half_life_s * 1000 // STEPS_PER_HALF_LIFE)


def decay(value: int, steps: int) -> int:
    """`value` after `steps` step boundaries: value · 2^(-steps/16), floored."""
    if steps <= 0:
        return value
    halvings, rest = divmod(steps, STEPS_PER_HALF_LIFE)
    return (value * _POW[rest] >> _Q) >> halvings


def _full_steps(rate_step: int, n: int) -> int:
    """Σ_{i=1..n} rate_step · d^i with d = 2^(-1/16), in closed form (floored)."""
    if n <= 0 or rate_step == 0:
        return 0
    d = _POW[1]
    geometric_q = d * (_ONE - decay(_ONE, n)) // (_ONE - d)  # Q32
    return rate_step * geometric_q >> _Q


def advance(value: int, since_ms: int, rate_milli: int, until_ms: int, step: int) -> int:
    """Decayed usage at `until_ms`, given `value` at `since_ms` and a constant allocated rate
    (milli-GPUs) in between."""
    if until_ms <= since_ms:
        return value
    b0, b1 = since_ms // step, until_ms // step
    if b0 == b1:
        return value + rate_milli * (until_ms - since_ms)
    head = value + rate_milli * ((b0 + 1) * step - since_ms)
    full = b1 - b0 - 1
    return (
        decay(head, b1 - b0)
        + _full_steps(rate_milli * step, full)
        + rate_milli * (until_ms - b1 * step)
    )
