"""structlog set-up for every gpuledger process: JSON lines for machines, console for people.

JSON is used when stderr is not a TTY or `GPULEDGER_LOG_JSON=1` (`0` forces the console
renderer); the level comes from `GPULEDGER_LOG_LEVEL` (default `info`).

Logging cannot raise: every logger method is guarded (`safe_logger_class`), so a call site
passing a reserved keyword (`event=`), a value that cannot be rendered, or a closed stream
costs at most one fallback line on stderr, never the service.
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


def _want_json() -> bool:
    flag = os.environ.get("GPULEDGER_LOG_JSON", "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    if flag in ("0", "false", "no"):
        return False
    return not sys.stderr.isatty()


_stream: Any = None  # where configure_logging sends log lines (fallback lines go there too)

_METHODS = (
    "debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg", "log",
)
_ASYNC_METHODS = tuple(f"a{name}" for name in _METHODS)


def _fallback(method: str, args: tuple[Any, ...], exc: BaseException) -> None:
    """Last resort when a log call failed: one JSON line on stderr naming the lost event."""
    try:
        logged = next((a for a in args if isinstance(a, str)), "?")
        line = {"event": "log.failed", "method": method, "logged": logged[:200],
                "error": type(exc).__name__}
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


def configure_logging() -> None:
    """Configure structlog once for this process (safe to call again)."""
    global _stream
    _stream = sys.stderr
    level = _LEVELS.get(os.environ.get("GPULEDGER_LOG_LEVEL", "info").strip().lower(), 20)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if _want_json()
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=safe_logger_class(level),
        logger_factory=structlog.PrintLoggerFactory(file=_stream),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)
