"""One renderer words every event (events/sentences.py): the CLI's timeline and the dashboard's
job page show the same sentence, each from its side, and a new event type is worded or left to
the generic sentence on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuledger import events as ev
from gpuledger.events.sentences import SENTENCES, JobRef, describe, timeline_line
from gpuledger.projections.ui.data import life_entry, life_text

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
WORDED_GENERICALLY = {
    ev.FairShareUpdated,
    ev.GpuMetricsReported,
    ev.NodeHeartbeat,
    ev.PolicyConfigured,
    ev.ScheduleConfigured,
}
"""Event types without a sentence of their own (not about one job, or too frequent to read)."""


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_every_event_has_a_sentence(path):
    event = ev.decode(path.read_bytes())
    s = describe(event)
    assert s.verb and s.kind
    assert all(isinstance(p, str | JobRef) for p in s.parts)
    job = getattr(event, "job_id", "") or ""
    assert s.about(job)[0] == s.verb
    line = timeline_line(event)
    assert (line is None) == (not s.notable)


def test_each_event_type_is_worded_or_generic_on_purpose():
    assert set(ev.ALL_EVENTS) - set(SENTENCES) == WORDED_GENERICALLY


def _preempt() -> ev.PreemptionRequested:
    return ev.PreemptionRequested(
        occurred_at_ms=10_000,
        job_id="pretrain",
        allocation_id="pretrain#1",
        beneficiary="serve",
        reason="Reclaim",
        deadline_ms=15_000,
    )


def test_the_timeline_and_the_job_page_word_an_event_alike():
    evicted = ev.GangEvicted(
        occurred_at_ms=12_000,
        job_id="pretrain",
        allocation_id="pretrain#1",
        reason="Reclaim",
        preempted_by="serve",
        checkpointed=True,
        lost_gpu_ms=64_000,
    )
    line = "evicted     pretrain (Reclaim by serve), checkpointed, lost 64 GPU-s"
    assert timeline_line(evicted) == f"     12.0s  {line}"
    item = life_entry(12_000, "GangEvicted", ev.encode(evicted).decode(), "pretrain")
    assert item["kind"] == "evicted" and JobRef("serve") in item["parts"]
    assert life_text(item["parts"], "pretrain") == (
        "evicted (Reclaim by serve), checkpointed, lost 64 GPU-s"
    )


def test_a_preemption_from_the_victim_and_from_the_beneficiary():
    s = describe(_preempt())
    assert s.line() == "preempt     pretrain for serve (Reclaim), checkpoint within 5s"
    raw = ev.encode(_preempt()).decode()
    victim = life_entry(10_000, "PreemptionRequested", raw, "pretrain")
    assert victim["kind"] == "preempted"
    assert life_text(victim["parts"], "pretrain") == (
        "preempt for serve (Reclaim), checkpoint within 5s"
    )
    beneficiary = life_entry(10_000, "PreemptionRequested", raw, "serve")
    assert beneficiary["kind"] == "preemptor"
    assert life_text(beneficiary["parts"], "serve") == (
        "preempt pretrain for this job (Reclaim), checkpoint within 5s"
    )


def test_member_events_are_for_the_job_page_only():
    started = ev.MemberStarted(job_id="a", allocation_id="a#1", rank=1, node="n1")
    assert timeline_line(started) is None
    assert life_text(list(describe(started).about("a")), "a") == "started rank 1 on n1"


def test_an_event_without_a_sentence_and_an_undecodable_payload_are_still_worded():
    heartbeat = describe(ev.NodeHeartbeat(node="n1"))
    assert heartbeat.verb == "NodeHeartbeat" and not heartbeat.notable
    item = life_entry(None, "Mystery", json.dumps({"type": "Mystery.v9"}), "a")
    assert item["kind"] == "other" and life_text(item["parts"], "a") == "Mystery"
