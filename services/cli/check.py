"""`gpuledger check FILE...`: validate configuration, scenario, job and client-event files
against the strict schema without running anything."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from gpuledger import events as ev

# The file schemas (services/domain/inputs/schema/ pulls in the placement model), YAML and the
# event contract are imported when a file is checked, not when the CLI starts.

# This module's commands; services/cli/main.py mounts them on the `gpuledger` app.
app = typer.Typer()


class Kind(StrEnum):
    """What a file holds; `auto` decides from its content."""

    auto = "auto"
    config = "config"
    scenario = "scenario"
    job = "job"
    event = "event"


def read_any(path: Path) -> Any:
    """YAML or JSON (JSON is YAML) from a file or `-`; InputError when unreadable."""
    import sys

    from gpuledger.services.domain.inputs.schema import InputError
    from gpuledger.services.runtime.documents import DocumentError, load_document

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        return load_document(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"cannot read: {exc.strerror if isinstance(exc, OSError) else exc}"
        ) from None
    except DocumentError as exc:
        raise InputError(str(exc)) from None


def detect(doc: Any) -> Kind:
    from gpuledger.services.domain.inputs.schema import kind_of

    if isinstance(doc, dict) and "type" in doc:
        return Kind.event
    return Kind(kind_of(doc))


def validate(doc: Any, kind: Kind, config: Any = None) -> Any:
    """Raise InputError with every problem found in `doc` read as `kind`; a job is also
    checked against `config` (a validated FileDoc) when one is given. Returns the FileDoc of
    a configuration or scenario, and the JobWarnings of a job checked without one."""
    from gpuledger.replay.scenario import from_document
    from gpuledger.services.domain.inputs.schema import InputError

    if kind in (Kind.config, Kind.scenario):
        if kind is Kind.scenario and not (isinstance(doc, dict) and doc.get("timeline")):
            raise InputError("timeline: a scenario needs a timeline (check it as a config?)")
        from gpuledger.services.domain.inputs.configfile import ConfigFileError, parse

        from_document(doc)
        try:
            return parse(doc)
        except ConfigFileError:  # pragma: no cover - from_document raised already
            raise
    elif kind is Kind.job:
        return _validate_job(doc, config)
    else:
        _validate_event(doc)
    return None


def _validate_job(doc: Any, config: Any) -> Any:
    """A job file: on its own (warnings about unknown models), or against `config` (its
    references, then what admission would say)."""
    from gpuledger.services.domain.inputs.jobfile import job_spec
    from gpuledger.services.domain.inputs.schema import InputError

    job_spec(doc)
    if config is None:
        return JobWarnings(model_warnings(doc))
    from gpuledger.services.domain.inputs.schema import check_references, validate_job

    problems: list[str] = []
    check_references(validate_job(doc), "", config, problems)
    if problems:
        raise InputError(problems)
    rejection = admission_rejection(job_spec(doc), config)
    if rejection is not None:
        raise InputError(rejection)
    return None


def _validate_event(doc: Any) -> None:
    """An event file: its fields, then an event a client publishes, then (a submission) a job
    id that routes and a job shape admission accepts."""
    import msgspec

    from gpuledger import events as ev
    from gpuledger.services.domain.inputs.schema import InputError, collect
    from gpuledger.services.domain.policy.shapes import _form_problem

    tags = {c.__struct_config__.tag: c for c in ev.ALL_EVENTS}
    cls = tags.get(doc.get("type"))
    if cls is not None:
        problems: list[str] = []
        collect({k: v for k, v in doc.items() if k != "type"}, cls, "", problems)
        if problems:
            raise InputError(problems)
    try:
        event = ev.decode(msgspec.json.encode(doc))
    except ev.UndecodableEvent as exc:
        known = ", ".join(
            sorted(
                t
                for t in tags
                if t.split(".")[0] in {c.__name__ for c in ev.CLIENT_EVENTS + ev.CONFIG_EVENTS}
            )
        )
        raise InputError(f"type: {exc} (client events: {known})") from None
    if not isinstance(event, ev.CLIENT_EVENTS + ev.CONFIG_EVENTS):
        raise InputError(f"type: {type(event).__name__} is not an event a client publishes")
    if isinstance(event, ev.JobSubmitted):
        try:
            ev.subject_for(event)
            ev.validate_job_id(event.job.job_id)
        except ev.InvalidId as exc:
            raise InputError(f"job: {exc}") from None
        problem = _form_problem(event.job)
        if problem is not None:
            raise InputError(f"job: {problem[1]}")


class JobWarnings(list):
    """What `validate` returns for a job checked without a configuration: warning lines
    (without `warning: `) for what only the cluster can tell."""


def model_warnings(doc: Any) -> list[str]:
    """A warning per GPU model the job names that gpuledger's vocabulary does not know (the
    cluster is not known here: `check CONFIG JOB` makes it an error with a did-you-mean)."""
    from gpuledger.services.domain.inputs.model_names import unknown_models

    names = doc.get("models") or doc.get("gpu_models") if isinstance(doc, dict) else None
    if not isinstance(names, list):
        return []
    return unknown_models(n for n in names if isinstance(n, str))


def admission_rejection(spec: ev.JobSpec, config: Any, now_ms: int | None = None) -> str | None:
    """What admission would answer `spec` on a cluster of exactly `config` (its tenants,
    classes, policy, schedules and declared nodes) at `now_ms` (default: now), as
    `Reason: message` (what `submit --wait` prints after `rejected JOB:`); None if admitted.
    The same decider code runs: `services.admission.decider.check`."""
    import time

    from gpuledger import events as ev
    from gpuledger.services.admission.decider import Admission, Rejection
    from gpuledger.services.admission.decider import check as admission_check
    from gpuledger.services.domain.fold.ledger import Ledger
    from gpuledger.services.domain.inputs.configfile import config_events, node_infos

    at = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    ledger = Ledger()
    events = config_events(config, at_ms=at)
    events += [
        ev.NodeRegistered(
            node=n, simulated=True, event_id=f"check:{n.name}", producer="node-agent/check"
        )
        for n in node_infos(config)
    ]
    for seq, e in enumerate(events, 1):
        ledger.apply(seq, e)
    admission = Admission()
    try:
        admission_check(ledger, spec, admission.fleet_summary(ledger), at)
    except Rejection as r:
        return f"{r.reason}: {r.message}"
    return None


@app.command()
def check(
    files: list[Path] = typer.Argument(
        ..., help="Files to validate (YAML or JSON; - for standard input)."
    ),
    kind: Kind = typer.Option(
        Kind.auto,
        "--kind",
        help="What the files hold (auto: a job has `tenant`, "
        "a scenario a `timeline`, an event a `type`; else a cluster configuration).",
    ),
) -> None:
    """Validate cluster configurations, scenarios, job files and client events without running
    anything. Prints `ok FILE (kind)` per good file and one `error: FILE: key.path: problem`
    line per problem. A job checked alone gets a `warning:` line per GPU model gpuledger does
    not know (exit 0: only the cluster can tell). Job files after a configuration are also
    checked against it (tenant,
    class, GPU models, MIG profile), and judged as admission would judge them on a cluster
    of exactly that configuration: a job it would reject (`Unschedulable`: more members than
    the declared nodes can ever hold, `NonPreemptibleOverQuota`, ...) is one error line with
    admission's reason and message. Exit codes: 0 all valid, 2 a problem in any file."""
    from gpuledger.services.domain.inputs.schema import InputError

    bad = False
    config = None
    for path in files:
        try:
            doc = read_any(path)
            k = detect(doc) if kind is Kind.auto else kind
            parsed = validate(doc, k, config)
            if isinstance(parsed, JobWarnings):
                for line in parsed:
                    typer.echo(f"warning: {path}: {line}", err=True)
            elif parsed is not None and config is None:
                config = parsed
        except InputError as exc:
            bad = True
            for line in exc.lines(str(path)):
                typer.echo(line, err=True)
            continue
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            # whatever the validation did not foresee is still one line, never a traceback
            bad = True
            typer.echo(f"error: {path}: {' '.join(str(exc).split())[:300]}", err=True)
            continue
        typer.echo(f"ok {path} ({k.value})")
    if bad:
        raise typer.Exit(2)
