"""structlog set-up for every gpuledger process: JSON lines for machines, console for people.

JSON is used when stderr is not a TTY or `GPULEDGER_LOG_JSON=1` (`0` forces the console
renderer); the level comes from `GPULEDGER_LOG_LEVEL` (default `info`).

Invariants:
- one renderer for everything: structlog calls and stdlib `logging` records (nats-py's
  `nats.*` loggers, `gpuledger.projector`) both go through structlog's `ProcessorFormatter`,
  so every line on stderr is one JSON object (or one console line);
- a record from a third-party logger (`nats`) never prints a traceback: its exception
  becomes an `error` field (`repr`), one line per record. Our own `log.exception` calls keep
  theirs (a bug in our code deserves the stack).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}
_HANDLER = "gpuledger-structlog"
QUIET_TRACEBACKS = ("nats",)
"""stdlib logger name prefixes whose exceptions are logged as one `error` field, no stack."""


def _want_json() -> bool:
    flag = os.environ.get("GPULEDGER_LOG_JSON", "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    if flag in ("0", "false", "no"):
        return False
    return not sys.stderr.isatty()


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever `sys.stderr` is at the time of each record (test
    runners and CLI runners swap it; a handler bound to a closed stream would fail)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _exception_as_field(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """For records of `QUIET_TRACEBACKS` loggers: replace exc_info with `error=repr(exc)`."""
    record = event_dict.get("_record")
    if record is None or not record.name.startswith(QUIET_TRACEBACKS):
        return event_dict
    exc_info = event_dict.pop("exc_info", None) or record.exc_info
    record.exc_info = None
    record.exc_text = None
    if exc_info:
        exc = exc_info[1] if isinstance(exc_info, tuple) else exc_info
        if isinstance(exc, BaseException):
            event_dict.setdefault("error", repr(exc))
    return event_dict


def configure_logging() -> None:
    """Configure structlog and stdlib logging once for this process (safe to call again)."""
    level = _LEVELS.get(os.environ.get("GPULEDGER_LOG_LEVEL", "info").strip().lower(), 20)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if _want_json()
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, _exception_as_field],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)  # an earlier call's handler: no duplicate lines
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    logging.getLogger("gpuledger").setLevel(level)
