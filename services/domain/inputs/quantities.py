"""Friendly quantities in YAML input (`500m`, `36Gi`, `2h`) to the integer units of events."""

from __future__ import annotations

import re

_MEM = {
    "": 1 / (1024 * 1024),
    "k": 1000 / 2**20,
    "ki": 1 / 1024,
    "m": 1e6 / 2**20,
    "mi": 1,
    "g": 1e9 / 2**20,
    "gi": 1024,
    "t": 1e12 / 2**20,
    "ti": 1024 * 1024,
}
_DUR = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class QuantityError(ValueError):
    """A quantity that cannot be parsed; the message names the field and the value."""


MAX_VALUE = 1 << 40
"""Largest result of any conversion here (milli-units, MiB, seconds), as events bound their
quantities (`events.specs.MAX_QUANTITY`); callers may bound tighter."""


def _bounded(field: str, value: object, n: int | float) -> int:
    if not 0 <= n <= MAX_VALUE:  # also NaN
        raise QuantityError(f"{field}: {value!r} is above the upper bound ({MAX_VALUE:,} units)")
    return int(n)


def _num(field: str, value: object, pattern: str) -> re.Match[str]:
    m = re.fullmatch(pattern, str(value).strip(), re.IGNORECASE)
    if m is None:
        raise QuantityError(f"{field}: cannot read {value!r}")
    return m


def milli(field: str, value: object) -> int:
    """`4` -> 4000, `500m` -> 500, `0.5` -> 500 (CPU cores or GPUs to milli-units)."""
    if isinstance(value, bool):
        raise QuantityError(f"{field}: cannot read {value!r}")
    if isinstance(value, int):
        return _bounded(field, value, value * 1000)
    if isinstance(value, float) and not value < MAX_VALUE:  # inf, nan, huge
        raise QuantityError(f"{field}: cannot read {value!r}")
    m = _num(field, value, r"(\d+(?:\.\d+)?)(m?)")
    n = float(m.group(1)) if m.group(2) else float(m.group(1)) * 1000
    return _bounded(field, value, round(n) if n < MAX_VALUE * 2 else n)


def mebibytes(field: str, value: object) -> int:
    """`36Gi` -> 36864, `512Mi` -> 512, a bare integer is MiB."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _bounded(field, value, value)
    m = _num(field, value, r"(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?")
    n = float(m.group(1)) * _MEM[(m.group(2) or "mi").lower()]
    return _bounded(field, value, round(n) if n < MAX_VALUE * 2 else n)


def seconds(field: str, value: object) -> int:
    """`90`, `90s`, `10m`, `2h`, `1d` -> seconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _bounded(field, value, value)
    m = _num(field, value, r"(\d+(?:\.\d+)?)\s*([smhd]?)")
    n = float(m.group(1)) * _DUR[m.group(2).lower()]
    return _bounded(field, value, round(n) if n < MAX_VALUE * 2 else n)
