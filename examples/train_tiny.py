"""A tiny pure-Python "training job" that follows gpuledger's checkpoint protocol.

It counts steps, sleeping ``--step-time`` seconds per step. Every ``--save-every`` steps,
and when SIGTERM arrives, it saves its step to ``train_tiny-rank<R>.json`` in
``$GPULEDGER_CHECKPOINT_DIR`` and acknowledges it with
``services.node_agent.checkpoint.acknowledge``; after SIGTERM it exits with 75
(EXIT_CHECKPOINTED). Started with ``GPULEDGER_RESUME=1`` it continues from its checkpoint.
A member of an elastic gang notices every 10 steps when the gang was resized
(``checkpoint.world_size()``) and says so in its log.

    python examples/train_tiny.py --steps 100 --step-time 0.01 --save-every 10
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

try:
    from gpuledger.services.node_agent import checkpoint
except ImportError:  # run from a source checkout without installing gpuledger
    import types

    _checkout = str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, _checkout)
    # The installed name `gpuledger.services...` maps onto the checkout's folders.
    sys.modules.setdefault("gpuledger", types.ModuleType("gpuledger")).__path__ = [_checkout]
    from gpuledger.services.node_agent import checkpoint


def save(directory: Path, rank: int, step: int) -> Path:
    """Durably save the model (here: the step) and return where."""
    path = directory / f"train_tiny-rank{rank}.json"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(directory: Path, rank: int) -> int:
    try:
        return int(json.loads((directory / f"train_tiny-rank{rank}.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-time", type=float, default=0.01)
    parser.add_argument("--save-every", type=int, default=0, help="0: only on SIGTERM")
    parser.add_argument(
        "--ignore-sigterm",
        action="store_true",
        help="misbehave: ignore SIGTERM (the agent will SIGKILL at the deadline)",
    )
    parser.add_argument("--fail-at-step", type=int, default=0, help="exit 1 at this step")
    args = parser.parse_args()

    directory, rank = checkpoint.checkpoint_dir(), checkpoint.rank()
    directory.mkdir(parents=True, exist_ok=True)
    step = load(directory, rank) if checkpoint.resuming() else 0
    stop = False

    def on_sigterm() -> None:
        nonlocal stop
        stop = True

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        checkpoint.install_sigterm_handler(on_sigterm)
    print(f"train_tiny: rank {rank} starting at step {step}", flush=True)
    world = checkpoint.world_size()

    while step < args.steps:
        time.sleep(args.step_time)
        step += 1
        if step == args.fail_at_step:
            print(f"train_tiny: failing at step {step}", flush=True)
            return 1
        if step % 10 == 0 and checkpoint.world_size() != world:
            world = checkpoint.world_size()  # an elastic gang was resized: re-form here
            print(f"train_tiny: rank {rank} world size now {world}", flush=True)
        if stop or (args.save_every and step % args.save_every == 0):
            checkpoint.acknowledge(step, str(save(directory, rank, step)))
        if stop:
            print(f"train_tiny: checkpointed step {step}, exiting on request", flush=True)
            return checkpoint.EXIT_CHECKPOINTED
    print(f"train_tiny: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
