"""Run one member's command and record how it ended (stdlib only; run as a script).

    python member_wrapper.py EXIT_FILE -- ARGV...
    python member_wrapper.py EXIT_FILE --shell 'COMMAND LINE'

Why a wrapper: after an agent restart the member is no longer the agent's child, so the
agent cannot ``wait()`` for its exit status. The wrapper is the member's parent for its
whole life and writes ``{"exit_code": int|null, "signal": int|null}`` atomically to
EXIT_FILE when the command ends, so whoever adopts the member later knows how it ended.

The agent starts the wrapper as the leader of a new process group and signals that group,
so the command (and its children) get checkpoint signals directly. The wrapper survives
catchable signals (its handlers do nothing; handlers, unlike SIG_IGN, are not inherited by
the command) and exits with the command's status (128+n when the command was killed by
signal n). SIGKILL kills the wrapper too; then the agent knows it sent SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

_SURVIVE = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGQUIT,
)


def _write(path: str, payload: dict[str, int | None]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("--", "--shell"):
        print("usage: member_wrapper.py EXIT_FILE (-- ARGV... | --shell CMD)", file=sys.stderr)
        return 2
    exit_file, mode, rest = argv[0], argv[1], argv[2:]
    for signum in _SURVIVE:
        signal.signal(signum, lambda _s, _f: None)
    try:
        if mode == "--shell":
            child = subprocess.Popen(rest[0], shell=True)
        else:
            child = subprocess.Popen(rest)
    except OSError as err:
        print(f"gpuledger: cannot start member: {err}", file=sys.stderr, flush=True)
        _write(exit_file, {"exit_code": 127, "signal": None})
        return 127
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    if code < 0:
        _write(exit_file, {"exit_code": None, "signal": -code})
        return 128 - code
    _write(exit_file, {"exit_code": code, "signal": None})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
