"""services/runtime/auth.py without a server: the permissions table, the files `init` writes,
rotation, and the one-line errors of bad credential files (the live checks are in
tests/integration/test_security.py)."""

from __future__ import annotations

import json
import stat

import pytest

from gpuledger.projections.nats_source import DURABLE
from gpuledger.services.runtime import auth
from gpuledger.services.runtime.auth import (
    CREDENTIALS,
    FIXED,
    PROJECTOR_DURABLE,
    AuthDir,
    AuthError,
    client_options,
    init,
    permissions,
    principal_of_creds,
)

ROLE_SUBJECTS = {
    "admission": "gl.admission.>",
    "quota": "gl.quota.>",
    "scheduler": "gl.sched.>",
    "preemption": "gl.preempt.>",
}


def pub(principal: str) -> list[str]:
    return permissions(principal)["publish"]


def events_published(principal: str) -> set[str]:
    """The `gl.` subjects (the log) `principal` may publish."""
    return {s for s in pub(principal) if s.startswith("gl.")}


def test_only_the_operator_has_no_limits():
    assert permissions("admin") is None
    for p in (*(f for f in FIXED if f != "admin"), "node:n-1", "ci:team-a"):
        perms = permissions(p)
        assert perms is not None, p
        granted = " ".join(perms["publish"])
        assert "gl.>" not in perms["publish"] and "$JS.API.>" not in granted, p
        for forbidden in (
            "STREAM.CREATE",
            "STREAM.UPDATE",
            "STREAM.DELETE",
            "STREAM.PURGE",
            "CONSUMER.DELETE.GPULEDGER.>",
        ):
            assert forbidden not in granted, (p, forbidden)


def test_each_role_publishes_only_its_own_subjects():
    # the quota service publishes time-of-day schedules' changes on its own gl.quota.> (issue 30)
    for role, subject in ROLE_SUBJECTS.items():
        # admission also stores what CI keys ask its intake to (services/runtime/intake.py)
        intake = (
            {"gl.submit.>", "gl.cancel.>", "gl.scale.>", "gl.ctl.>"}
            if role == "admission"
            else set()
        )
        assert events_published(role) == {subject, "gl.dead.>", *intake}
    assert events_published("node:n-1") == {"gl.node.n-1.>", "gl.dead.>"}
    assert events_published("agents") == {"gl.node.>", "gl.dead.>"}
    assert events_published("ci:team-a") == set()  # it asks the intake (issue 44)
    assert events_published("auditor") == set() and events_published("projector") == set()


def test_a_tenants_ci_identity_asks_only_about_its_own_jobs_and_cannot_read_the_log():
    perms = permissions("ci:team-a")
    assert perms["publish"] == [
        "glr.submit.team-a.>",
        "glr.cancel.team-a.>",
        "glr.scale.team-a.>",
        "glq.job.team-a.>",
        "glr.ctl.team-a.>",  # hold / release of its own jobs (issue 42), through the intake
    ]
    assert perms["subscribe"] == []  # replies only, on its own inbox prefix (added by auth_conf)


def test_only_the_projector_manages_its_durable_consumer():
    assert PROJECTOR_DURABLE == DURABLE
    for p in ("auditor", "scheduler", "node:n-1", "agents"):
        assert not any("DURABLE" in s or s.startswith("$JS.API.CONSUMER.DELETE") for s in pub(p)), p
        assert f"$JS.API.CONSUMER.CREATE.GPULEDGER.{DURABLE}" not in pub(p)
    assert f"$JS.API.CONSUMER.DELETE.GPULEDGER.{DURABLE}" in pub("projector")


def test_unknown_principals_are_refused():
    with pytest.raises(AuthError, match="unknown principal"):
        permissions("root")
    with pytest.raises(AuthError, match="principal"):
        AuthDir("/nonexistent-never-created").add("node:a.b")


def test_init_writes_secrets_0600_and_is_idempotent(tmp_path):
    d = init(tmp_path / "auth", tenants=["team-a"], nodes=["n-1"])
    entries = json.loads((d.path / CREDENTIALS).read_text())
    assert set(entries) == {*FIXED, "ci:team-a", "node:n-1"}
    assert stat.S_IMODE(d.path.stat().st_mode) == 0o700
    for name, e in entries.items():
        assert e["kind"] == "nkey" and not e["file"].startswith("/"), name
        assert stat.S_IMODE((d.path / e["file"]).stat().st_mode) == 0o600, name
    before = {e["file"]: (d.path / e["file"]).read_bytes() for e in entries.values()}
    conf = (d.path / "auth.conf").read_text()
    assert "no_auth_user" not in conf and conf.count("nkey:") == len(entries)

    init(tmp_path / "auth", tenants=["team-a", "team-b"], nodes=["n-1"])
    after = json.loads((d.path / CREDENTIALS).read_text())
    assert set(after) == {*entries, "ci:team-b"}
    assert all(
        (d.path / f).read_bytes() == seed for f, seed in before.items()
    )  # existing keys kept


def test_rotate_changes_the_key(tmp_path):
    d = init(tmp_path, tenants=["team-a"])
    old = d.principals()["ci:team-a"]
    assert d.add("ci:team-a", rotate=True) == ["ci:team-a"]
    new = d.principals()["ci:team-a"]
    assert new.public_key != old.public_key and new.file == old.file
    assert stat.S_IMODE((d.path / new.file).stat().st_mode) == 0o600
    conf = (d.path / "auth.conf").read_text()
    assert f'nkey: "{new.public_key}"' in conf and f'nkey: "{old.public_key}"' not in conf
    # the reply prefix is kept (a running client's subscriptions outlive its old key); a
    # process holding only the new seed may use its own key's prefix too
    kept = f"_INBOX_{old.public_key}"
    assert client_options(d.creds("ci:team-a"))["inbox_prefix"] == kept
    assert f"{kept}.>" in conf and f"_INBOX_{new.public_key}.>" in conf
    d.add("ci:team-a", rotate=True)  # a second rotation keeps the first prefix
    assert client_options(d.creds("ci:team-a"))["inbox_prefix"] == kept
    assert d.principals()["ci:team-a"].inbox_prefix == kept
    assert f"_INBOX_{new.public_key}" not in (d.path / "auth.conf").read_text()


def test_remove_deletes_the_identity_and_its_key(tmp_path):
    d = init(tmp_path, tenants=["team-a"], nodes=["n-1"])
    key = d.creds("node:n-1")
    public = d.principals()["node:n-1"].public_key
    assert d.remove("node:n-1") == ["node:n-1"]
    assert "node:n-1" not in d.principals() and not key.exists()
    assert public not in (d.path / "auth.conf").read_text()
    with pytest.raises(AuthError, match="rotate its key instead"):
        d.remove("scheduler")
    with pytest.raises(AuthError, match="no identity 'ci:team-b'"):
        d.remove("ci:team-a", "ci:team-b")
    assert "ci:team-a" in d.principals()  # nothing removed when one name is bad


def test_principal_of_creds(tmp_path):
    d = init(tmp_path / "auth", tenants=["team-a"], nodes=["n-1"])
    assert principal_of_creds(d.creds("ci:team-a")) == "ci:team-a"
    assert principal_of_creds(d.creds("node:n-1")) == "node:n-1"
    copied = tmp_path / "ci.nk"  # a credential handed to a CI system, outside its directory
    copied.write_bytes(d.creds("ci:team-a").read_bytes())
    assert principal_of_creds(copied) is None


@pytest.mark.parametrize("content", [b"", b"not a seed\n", b"SUAXXXXXXXXXXXXXXXXXXX\n"])
def test_a_bad_seed_file_is_a_one_line_auth_error(tmp_path, content):
    bad = tmp_path / "bad.nk"
    bad.write_bytes(content)
    with pytest.raises(AuthError) as err:
        client_options(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(AuthError, match="cannot read"):
        client_options(tmp_path / "missing.nk")


def test_tls_from_env():
    assert auth.tls_from_env({}) is None
    tls = auth.tls_from_env(
        {"GPULEDGER_TLS_CA": "ca.pem", "GPULEDGER_TLS_CERT": "c.pem", "GPULEDGER_TLS_KEY": "k.pem"}
    )
    assert (tls.ca, tls.client_cert, tls.client_key) == ("ca.pem", "c.pem", "k.pem")
