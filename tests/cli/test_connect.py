"""run_on_bus: how a command's failed request on the bus ends (one line, an exit code)."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest
import typer

from gpuledger.services.cli.connect import run_on_bus


def _ending(capsys, error: Exception) -> tuple[int, str]:
    async def main(_track):
        raise error

    with pytest.raises(typer.Exit) as exited:
        run_on_bus(main)
    return exited.value.exit_code, capsys.readouterr().err


def test_no_answer_from_the_stream_says_it_may_be_missing_or_electing_its_leader(capsys):
    code, err = _ending(capsys, nats.js.errors.NoStreamResponseError())
    assert code == 1
    assert err.startswith("error: no answer from the gpuledger stream")
    assert "does not exist yet" in err and "`gpuledger up`" in err  # missing
    assert "leader is being elected or cannot be reached" in err  # or leaderless for now
    assert "has no gpuledger stream" not in err  # not asserted as a fact
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_request_that_timed_out_ends_in_one_line_with_exit_4(capsys):
    code, err = _ending(capsys, nats.errors.TimeoutError())
    assert code == 4 and err.startswith("error: NATS request failed: TimeoutError")
