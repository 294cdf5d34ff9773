"""The entry points: what kind of document this is, and a configuration, scenario or job
file fully checked (raises InputError)."""

from typing import Any, cast

from gpuledger.services.domain.inputs.reservations import yaml_times
from gpuledger.services.domain.inputs.schema.errors import (
    InputError,
    collect,
)
from gpuledger.services.domain.inputs.schema.file_checks import _check_file
from gpuledger.services.domain.inputs.schema.files import FileDoc
from gpuledger.services.domain.inputs.schema.job import JobDoc
from gpuledger.services.domain.inputs.schema.job_checks import _check_job

# ------------------------------------------------------------------ validation


def kind_of(doc: Any) -> str:
    """`job` for a job document, `scenario` when it has a timeline, else `config`."""
    if (
        isinstance(doc, dict)
        and ("tenant" in doc or "id" in doc or "job_id" in doc)
        and "tenants" not in doc
    ):
        return "job"
    if isinstance(doc, dict) and "timeline" in doc:
        return "scenario"
    return "config"


def yaml_on(doc: Any) -> Any:
    """`doc` with the key `on` of every `depends_on` entry restored: YAML 1.1 (PyYAML) reads
    a bare `on:` key as the boolean True, so `{job: a, on: failed}` arrives as
    `{'job': 'a', True: 'failed'}`. Nothing else changes."""
    if isinstance(doc, list):
        return [yaml_on(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        if k == "depends_on" and isinstance(v, list):
            v = [
                {("on" if key is True and "on" not in d else key): x for key, x in d.items()}
                if isinstance(d, dict)
                else d
                for d in v
            ]
        out[k] = yaml_on(v) if isinstance(v, dict | list) else v
    return out


def validate_file(doc: Any) -> FileDoc:
    """A cluster configuration or scenario, fully checked; raises InputError."""
    problems: list[str] = []
    if doc is not None and not isinstance(doc, dict):
        raise InputError(f"(top level): expected a mapping of keys, got {type(doc).__name__}")
    doc = yaml_times(yaml_on(doc))
    parsed = collect({} if doc is None else doc, FileDoc, "", problems)
    if parsed is not None:
        _check_file(parsed, problems)
    if problems:
        raise InputError(problems)
    return cast(FileDoc, parsed)


def validate_job(doc: Any, base: str = "") -> JobDoc:
    """A job document, checked on its own (references need a configuration); raises InputError."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise InputError(f"{base or '(top level)'}: a job must be a mapping of fields")
    job = collect(yaml_on(doc), JobDoc, base, problems)
    if job is not None:
        _check_job(job, base, problems)
    if problems:
        raise InputError(problems)
    return cast(JobDoc, job)
