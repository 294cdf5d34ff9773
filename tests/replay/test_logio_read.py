"""`read_log` decodes most lines in one pass; every line still yields exactly what the codec
(`events.decode`, under its limits, upcasting old versions) makes of its event."""

from __future__ import annotations

import json

import pytest

from gpuledger import events as ev
from gpuledger.events.limits import MAX_DEPTH, MAX_INT
from gpuledger.replay.bench.projector import synthetic_log
from gpuledger.replay.logio import LogFormatError, read_log, write_log


def test_every_line_is_what_the_codec_decodes(tmp_path) -> None:
    log = tmp_path / "log.jsonl"
    messages = list(synthetic_log(3000))
    write_log(log, messages)
    old = {
        "type": "GpuMetricsReported.v1",
        "node": "n1",
        "samples": [{"uuid": "u", "util_pct": 50}],
    }
    with open(log, "ab") as f:
        f.write(b"\n")  # a blank line is skipped
        f.write(
            json.dumps(
                {"seq": 3001, "subject": "gl.node.n1.GpuMetricsReported", "event": old}
            ).encode()
            + b"\n"
        )
    got = list(read_log(log))
    assert got[:3000] == messages
    assert got[3000] == (3001, "gl.node.n1.GpuMetricsReported", ev.decode(json.dumps(old)))
    assert len(got) == 3001


@pytest.mark.parametrize(
    "event",
    [
        {"type": "JobCancelled.v1", "job_id": "j", "tenant": "t", "occurred_at_ms": MAX_INT + 1},
        {
            "type": "JobRejected.v1",
            "job_id": "j",
            "tenant": "t",
            "reason": "InvalidSpec",
            "message": "m",
            "details": {"d": json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))},
        },
    ],
)
def test_a_line_beyond_the_limits_is_refused_naming_it(tmp_path, event) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"seq": 1, "subject": "s", "event": event}) + "\n")
    with pytest.raises(LogFormatError, match=":1:"):
        list(read_log(log))


def test_numbers_and_brackets_inside_the_limits_take_either_path_alike(tmp_path) -> None:
    event = {
        "type": "JobCancelled.v1",
        "job_id": "j",
        "tenant": "t",
        "occurred_at_ms": MAX_INT,
        "event_id": "x" + "[" * 70,
    }
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"seq": 1, "subject": "s", "event": event}) + "\n")
    assert list(read_log(log)) == [(1, "s", ev.decode(json.dumps(event)))]
