"""What the fold says when it does not take an event (services/domain/fold/acceptance.py has the
rules): a `Refusal` value for an event that changes nothing, a `Refused` error raised before
any change for an event that contradicts the folded state. Pure data; its own module so the
ledger and the acceptance rules can both use it without importing each other."""

from __future__ import annotations

from typing import NamedTuple


class Refusal(NamedTuple):
    """Why the fold did not take an event: a stable CamelCase `code` and a quantitative,
    human `message` naming what was wrong."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Refused(ValueError):
    """Raised by the fold for an event that contradicts the folded state; raised before the
    state is touched, so nothing is half-applied. A host dead-letters the event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.refusal = Refusal(code, message)
