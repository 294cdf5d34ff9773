"""structlog set-up for every gpuledger process: JSON lines for machines, console for people.

JSON is used when stderr is not a TTY or `GPULEDGER_LOG_JSON=1` (`0` forces the console
renderer); the level comes from `GPULEDGER_LOG_LEVEL` (default `info`).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


def _want_json() -> bool:
    flag = os.environ.get("GPULEDGER_LOG_JSON", "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    if flag in ("0", "false", "no"):
        return False
    return not sys.stderr.isatty()


def configure_logging() -> None:
    """Configure structlog once for this process (safe to call again)."""
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
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr)
