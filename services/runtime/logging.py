"""structlog set-up for every gpuledger process: JSON lines for machines, console for people.

JSON is used when stderr is not a TTY or `GPULEDGER_LOG_JSON=1` (`0` forces the console
renderer); the level comes from `GPULEDGER_LOG_LEVEL` (default `info`).

Logging cannot raise: every logger method is guarded (`safe_logger_class`), so a call site
passing a reserved keyword (`event=`), a value that cannot be rendered, or a closed stream
costs at most one fallback line on stderr, never the service.

Invariants:
- one renderer for everything: structlog calls and stdlib `logging` records (nats-py's
  `nats.*` loggers, `gpuledger.projector`) both go through structlog's `ProcessorFormatter`,
  so every line on stderr is one JSON object (or one console line);
- a record from a third-party logger (`nats`) never prints a traceback: its exception
  becomes an `error` field (`repr`), one line per record. Our own `log.exception` calls keep
  theirs (a bug in our code deserves the stack).
"""

from __future__ import annotations

import functools
import json
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


_stream: Any = None  # where configure_logging sends log lines (fallback lines go there too)

_METHODS = (
    "debug",
    "info",
    "warning",
    "warn",
    "error",
    "exception",
    "critical",
    "fatal",
    "msg",
    "log",
)
_ASYNC_METHODS = tuple(f"a{name}" for name in _METHODS)


def _fallback(method: str, args: tuple[Any, ...], exc: BaseException) -> None:
    """Last resort when a log call failed: one JSON line on stderr naming the lost event."""
    try:
        logged = next((a for a in args if isinstance(a, str)), "?")
        line = {
            "event": "log.failed",
            "method": method,
            "logged": logged[:200],
            "error": type(exc).__name__,
        }
        (_stream or sys.stderr).write(json.dumps(line) + "\n")
    except Exception:  # noqa: BLE001, S110 - nothing left to report to
        pass


def _guard(name: str, method: Any, event_pos: int) -> Any:
    """`method` that never raises; a keyword named `event` next to a positional event is
    kept as `event_` instead of raising TypeError."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kw: Any) -> Any:
        try:
            if len(args) > event_pos and "event" in kw:
                kw["event_"] = kw.pop("event")
            return method(self, *args, **kw)
        except Exception as exc:  # noqa: BLE001 - logging must not stop the caller
            _fallback(name, args, exc)
            return None

    @functools.wraps(method)
    async def aguarded(self: Any, *args: Any, **kw: Any) -> Any:
        try:
            if len(args) > event_pos and "event" in kw:
                kw["event_"] = kw.pop("event")
            return await method(self, *args, **kw)
        except Exception as exc:  # noqa: BLE001
            _fallback(name, args, exc)
            return None

    return aguarded if name.startswith("a") and name[1:] in _METHODS else guarded


@functools.cache
def safe_logger_class(level: int) -> type:
    """structlog's filtering bound logger at `level`, with every method guarded."""
    base = structlog.make_filtering_bound_logger(level)
    ns = {
        name: _guard(name, getattr(base, name), 1 if name in ("log", "alog") else 0)
        for name in (*_METHODS, *_ASYNC_METHODS)
        if hasattr(base, name)
    }
    return type(f"Safe{base.__name__}", (base,), ns)


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever `sys.stderr` is at the time of each record (test
    runners and CLI runners swap it; a handler bound to a closed stream would fail)."""

    @property  # type: ignore[override]  # a property over logging's attribute
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
    global _stream
    _stream = sys.stderr
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
        wrapper_class=safe_logger_class(level),
        logger_factory=structlog.PrintLoggerFactory(file=_stream),
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
