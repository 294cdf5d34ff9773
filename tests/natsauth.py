"""Credentials for tests: every test server runs with authentication on (as `gpuledger up`
does), and a test connects as the operator unless it tests a narrower identity.

A test that starts a server exports its operator credential as `GPULEDGER_CREDS` (`as_admin`),
so the CLI and service processes it starts connect as every user's would: with a credential.
"""

from __future__ import annotations

import os
from typing import Any

from gpuledger.services.runtime.auth import CREDS_ENV, client_options


def as_admin(monkeypatch, server) -> None:
    """Make `server`'s operator identity this test's default credential (inherited by
    subprocesses)."""
    monkeypatch.setenv(CREDS_ENV, str(server.creds("admin")))


def options() -> dict[str, Any]:
    """`Bus.connect` options for the default credential (`as_admin`)."""
    return client_options(os.environ[CREDS_ENV])
