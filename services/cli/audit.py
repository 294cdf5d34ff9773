"""Audit commands over the DuckDB projection: `sql`, `why`, `jobs`, `nodes`, `tenants`,
`project`, one module each (services/cli/sql.py, why.py, jobs.py, nodes.py, tenants.py,
project.py). Mounted on the main app with `register(app)`; the functions that compute the
answers (`why_report`, `jobs_rows`, ...) are usable without typer.
"""

from __future__ import annotations

import typer

from gpuledger.services.cli.jobs import jobs_command
from gpuledger.services.cli.nodes import nodes_command
from gpuledger.services.cli.project import project_command
from gpuledger.services.cli.sql import sql_command
from gpuledger.services.cli.tenants import tenants_command
from gpuledger.services.cli.why import why_command


def register(app: typer.Typer, nodes: bool = True) -> None:
    """Add `sql`, `why`, `jobs`, `nodes`, `tenants` and `project` to an app (the main app
    has a `nodes` group of its own, whose default is `nodes_command`)."""
    if nodes:
        app.command("nodes")(nodes_command)
    app.command("sql")(sql_command)
    app.command("why")(why_command)
    app.command("jobs")(jobs_command)
    app.command("tenants")(tenants_command)
    app.command("project")(project_command)
