"""Stage `dependencies`: given a job that depends on another, when the gate is asked, then it
keeps the job out with `Dependency` (the other's state in the message) until the other has
done what it waits for; a job without dependencies passes."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import dependencies
from tests.scheduler.stages.helpers import round_at
from tests.services.test_pending import N8, fleet, scheduled

TRAIN = {"id": "train", "tenant": "a", "gpus": 2, "depends_on": [{"job": "prep"}]}


def test_a_job_whose_dependency_runs_is_kept_out_with_its_state():
    ledger, out = scheduled(fleet(N8), [{"id": "prep", "tenant": "a", "gpus": 2}], [TRAIN])
    assert not [e for e in out if isinstance(e, ev.GangPlaced)]
    assert ledger.jobs["train"].reason == PendingReason.Dependency
    assert ledger.jobs["train"].message == "waits for prep to succeed (prep is running)"
    # asked again: still kept out, and its unchanged reason is not repeated
    assert dependencies.gate(round_at(ledger, 5), ledger.jobs["train"], Limits(need=2000)) == []


def test_a_job_without_dependencies_passes_the_gate():
    ledger, out = scheduled(fleet(N8), [{"id": "j", "tenant": "a", "gpus": 2}])
    assert dependencies.gate(round_at(ledger, 5), ledger.jobs["j"], Limits(need=2000)) is None
    assert [e.job_id for e in out if isinstance(e, ev.GangPlaced)] == ["j"]
