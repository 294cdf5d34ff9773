"""A refused request is filed under its own tenant (`Ledger.filed_under`,
services/domain/fold/keys.py; issue 44 item 8): given tenant B's job held under the key `j1~~<digest>`, when
tenant A publishes a raw submission naming that key, or cancels B's id, then admission's
`RequestRefused` is about A (its correlation id is A's key), never about B's job, and B's
`why` does not list it."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.ids import tenant_job_key
from gpuledger.services.admission.decider import Admission
from tests.services.given import fold, of_type, submitted_json
from tests.services.test_tenant_job_ids import B_KEY, cancel, settle, two_j1s


def test_a_raw_submission_of_another_tenants_key_is_filed_under_the_publisher():
    ledger = settle(two_j1s())
    fold(ledger, [submitted_json(job_id=B_KEY, tenant="org/a", resources={"gpus": 1})])
    (refused,) = of_type(Admission().decide(ledger, 200), ev.RequestRefused)
    assert (refused.tenant, refused.reason) == ("org/a", "InvalidSpec")
    assert refused.job_id == B_KEY  # what the request named, as it named it
    assert refused.correlation_id == tenant_job_key("org/a", B_KEY) != B_KEY


def test_a_cancel_of_another_tenants_id_is_filed_under_the_canceller():
    ledger = settle(two_j1s())
    fold(ledger, [cancel("org/c", "j1")])
    (refused,) = of_type(Admission().decide(ledger, 200), ev.RequestRefused)
    assert (refused.tenant, refused.reason) == ("org/c", "UnknownJob")
    assert refused.correlation_id == tenant_job_key("org/c", "j1")


def test_a_tenants_own_job_and_a_free_name_are_filed_as_named():
    ledger = settle(two_j1s())
    assert ledger.filed_under("org/a", "j1") == "j1"
    assert ledger.filed_under("org/b", "j1") == B_KEY
    assert ledger.filed_under("org/a", "nobody-has") == "nobody-has"
