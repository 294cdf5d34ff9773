"""`gpuledger check FILE...`: validate configuration, scenario, job and client-event files
against the strict schema without running anything."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import msgspec
import typer

from gpuledger import events as ev
from gpuledger.services.domain.inputs import InputError
from gpuledger.services.runtime.documents import DocumentError, load_document

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
    from gpuledger.services.domain.inputs import kind_of

    if isinstance(doc, dict) and "type" in doc:
        return Kind.event
    return Kind(kind_of(doc))


def validate(doc: Any, kind: Kind, config: Any = None) -> Any:
    """Raise InputError with every problem found in `doc` read as `kind`; a job is also
    checked against `config` (a validated FileDoc) when one is given. Returns the FileDoc of
    a configuration or scenario."""
    from gpuledger.replay.scenario import from_document
    from gpuledger.services.domain.jobfile import job_spec
    from gpuledger.services.domain.shapes import _form_problem

    if kind in (Kind.config, Kind.scenario):
        if kind is Kind.scenario and not (isinstance(doc, dict) and doc.get("timeline")):
            raise InputError("timeline: a scenario needs a timeline (check it as a config?)")
        from gpuledger.services.domain.configfile import ConfigFileError, parse

        from_document(doc)
        try:
            return parse(doc)
        except ConfigFileError:  # pragma: no cover - from_document raised already
            raise
    elif kind is Kind.job:
        job_spec(doc)
        if config is not None:
            from gpuledger.services.domain.inputs import check_references, validate_job

            problems: list[str] = []
            check_references(validate_job(doc), "", config, problems)
            if problems:
                raise InputError(problems)
    else:
        from gpuledger.services.domain.inputs import collect

        tags = {c.__struct_config__.tag: c for c in ev.ALL_EVENTS}
        cls = tags.get(doc.get("type"))
        if cls is not None:
            problems = []
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
            except ev.InvalidId as exc:
                raise InputError(f"job: {exc}") from None
            problem = _form_problem(event.job)
            if problem is not None:
                raise InputError(f"job: {problem[1]}")


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
    line per problem. Job files after a configuration are also checked against it (tenant,
    class, GPU models, MIG profile). Exit codes: 0 all valid, 2 a problem in any file."""
    bad = False
    config = None
    for path in files:
        try:
            doc = read_any(path)
            k = detect(doc) if kind is Kind.auto else kind
            parsed = validate(doc, k, config)
            if parsed is not None and config is None:
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
