"""The MIG fold (services/domain/fold/mig.py): a re-geometry requested, one at a time per
node, and reported done; a report the node contradicts is refused whole."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.services.domain.fold import mig
from gpuledger.services.domain.fold.refusals import Refused
from tests.fold.story import given, node, when

LAYOUT = ("3g.40gb", "3g.40gb")


def asked(at: int = 0) -> ev.MigReconfigurationRequested:
    return ev.MigReconfigurationRequested(
        job_id="j",
        node="m1",
        gpu_index=0,
        layout=LAYOUT,
        producer="preemption/0",
        occurred_at_ms=at,
    )


def mig_node():
    return node("m1", gpus=1, model="A100-80GB", sharing="mig")


def test_the_mig_fold_handles_the_re_geometry_events():
    assert set(mig.FOLD.handlers) == {ev.MigReconfigurationRequested, ev.MigReconfigured}


def test_a_re_geometry_is_one_at_a_time_and_its_report_repartitions_the_gpu():
    # given a re-geometry requested on m1
    ledger = given(mig_node(), asked(at=5))
    assert ledger.mig.mig_requests["m1"].layout == LAYOUT and ledger.mig.mig_history == {"m1": [5]}
    # when a second one is requested, then it is refused while the first is under way
    refusal = when(ledger, asked(at=6))
    assert refusal is not None and refusal.code == "MigReconfigurationPending"
    # when the agent reports it done
    done = ev.MigReconfigured(node="m1", gpu_index=0, layout=LAYOUT, producer="node-agent/m1")
    when(ledger, done)
    # then the GPU has the new layout and the request is over
    assert ledger.nodes["m1"].info.gpus[0].mig_layout == ("3g.40gb@0", "3g.40gb@4")
    assert ledger.mig.mig_requests == {} and ledger.nodes_version == 2


def test_a_report_for_a_gpu_that_is_not_mig_is_refused_and_changes_nothing():
    ledger = given(node("m1", gpus=1))
    bad = ev.MigReconfigured(node="m1", gpu_index=0, layout=LAYOUT, producer="node-agent/m1")
    with pytest.raises(Refused, match="NotMigGpu"):
        ledger.apply(2, bad)
    assert ledger.nodes_version == 1
