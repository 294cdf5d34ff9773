"""The shared wait helper (tests/waiting.py): what it returns, when it gives up, what it says."""

from __future__ import annotations

import asyncio

import pytest

from tests import waiting


@pytest.fixture(autouse=True)
def _short_bounds(monkeypatch):
    monkeypatch.setattr(waiting, "SCALE", 1.0)


def test_returns_the_first_truthy_value_of_the_check():
    values = iter([0, None, [], "ready"])
    assert waiting.eventually(lambda: next(values), 5, interval_s=0) == "ready"


def test_an_assertion_in_the_check_means_not_yet():
    calls = []

    def check():
        calls.append(1)
        assert len(calls) >= 3, "not yet"
        return len(calls)

    assert waiting.eventually(check, 5, interval_s=0) == 3


def test_gives_up_naming_what_it_waited_for_and_the_last_value():
    with pytest.raises(waiting.NotReached, match=r"waiting for the job to be placed \(last: 0\)"):
        waiting.eventually(lambda: 0, 0.05, "the job to be placed", interval_s=0.01)


def test_other_errors_stop_the_wait_unless_ignored():
    def broken():
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        waiting.eventually(broken, 5)
    with pytest.raises(waiting.NotReached, match="refused"):
        waiting.eventually(broken, 0.05, ignoring=(ConnectionError,), interval_s=0.01)


def test_the_async_form_awaits_what_the_check_returns():
    state = {"n": 0}

    async def check():
        state["n"] += 1
        return state["n"] if state["n"] >= 2 else None

    assert asyncio.run(waiting.eventually_async(check, 5, interval_s=0)) == 2


# every sleep a test may still hold, and why it is not a wait for something to happen
SLEEPS_ALLOWED = {
    "tests/waiting.py": "the helpers themselves: the interval between checks",
    "tests/runtime/test_nats_cluster.py": "a load generator's pace (50/s), not a wait",
    "tests/runtime/test_stopping.py": "inside the child script: the stuck decide under test",
    "tests/ui/test_app.py": "inside the child script: a process that outlives its parent",
}


def test_tests_wait_for_events_and_never_sleep_for_them():
    # given every test module
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sleep = re.compile(r"\b(?:time|asyncio)\.sleep\((?!0\))")  # sleep(0) only yields
    # then none sleeps, except where SLEEPS_ALLOWED says why
    found = {
        path.relative_to(root).as_posix()
        for path in (root / "tests").rglob("*.py")
        if sleep.search(path.read_text())
    }
    assert found - set(SLEEPS_ALLOWED) == set(), "wait with tests/waiting.py's eventually"
    assert set(SLEEPS_ALLOWED) - found == set(), "an allowance nothing uses any more"
