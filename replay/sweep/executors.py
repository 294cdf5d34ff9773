"""Where a sweep's tasks run: one interface, three executors.

- `InProcess`: here, one task after another (one variant, or `--workers 1`);
- `DaskExecutor` over a `distributed.LocalCluster` of worker processes on 127.0.0.1
  (`--workers N`), or over an existing cluster (`--scheduler tcp://host:8786`, the one a
  platform team runs with dask-jobqueue on Slurm or dask-kubernetes): the same code either way.

The interface: `share` ships a value every task reads (the replay's inputs) once per worker,
not once per task; `submit` queues a task `fn(shared, *args)` under a key; `as_completed`
yields an `Outcome` per task as it finishes: its value, or the error it failed with after
`retries` further attempts. A task is never dropped: every submitted key comes back once.
A worker that dies mid-task (killed, out of memory) loses the task to the scheduler, which
runs it again elsewhere. Dask is imported only here, inside the executor that uses it (the
light client never imports it).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

RETRIES = 2
"""Further attempts of a task that raised (a lost worker's task is re-run besides these)."""


@dataclass
class Outcome:
    key: str
    value: Any = None
    error: str | None = None
    """The last attempt's error, in one line, when every attempt failed."""


class ExecutorError(RuntimeError):
    """An executor that cannot start (no Dask installed, scheduler unreachable)."""


class Executor(Protocol):
    name: str
    workers: int

    def share(self, value: Any) -> Any: ...

    def submit(self, key: str, fn: Callable[..., Any], shared: Any, *args: Any) -> None: ...

    def as_completed(self) -> Iterator[Outcome]: ...

    def close(self) -> None: ...


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class InProcess:
    """Runs every task here, in submission order; a task that raises is tried again up to
    `retries` times."""

    name = "in-process"
    workers = 1

    def __init__(self, retries: int = RETRIES) -> None:
        self.retries = retries
        self._queue: list[tuple[str, Callable[..., Any], Any, tuple[Any, ...]]] = []

    def share(self, value: Any) -> Any:
        return value

    def submit(self, key: str, fn: Callable[..., Any], shared: Any, *args: Any) -> None:
        self._queue.append((key, fn, shared, args))

    def as_completed(self) -> Iterator[Outcome]:
        while self._queue:
            key, fn, shared, args = self._queue.pop(0)
            error = None
            for _ in range(self.retries + 1):
                try:
                    value = fn(shared, *args)
                except Exception as exc:  # noqa: BLE001 - reported in the Outcome, never lost
                    error = _one_line(exc)
                    logging.getLogger(__name__).debug("task %s failed: %s", key, error)
                    continue
                yield Outcome(key, value)
                break
            else:
                yield Outcome(key, error=error)

    def close(self) -> None:
        self._queue.clear()


def local_cluster(workers: int) -> Any:
    """A Dask LocalCluster of `workers` single-threaded worker processes on loopback (random
    ports, dashboard included), logging errors only."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    )


class DaskExecutor:
    """Tasks on a Dask cluster: a `LocalCluster` of `workers` processes on loopback, or the
    cluster whose scheduler is at `scheduler`."""

    def __init__(
        self, workers: int | None = None, scheduler: str | None = None, retries: int = RETRIES
    ) -> None:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ExecutorError(
                f"the Dask executors need dask[distributed] ({exc.name} is missing): "
                "pip install 'gpuledger[analysis]'"
            ) from None
        self.retries = retries
        self._cluster = None
        if scheduler is not None:
            self.name = f"dask {scheduler}"
            try:
                self._client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError) as exc:
                said = " ".join(str(exc).split())  # Dask's own text may span lines
                raise ExecutorError(
                    f"cannot reach the Dask scheduler {scheduler}: {said}"
                ) from None
        else:
            n = max(1, workers or 1)
            self.name = f"dask LocalCluster ({n} worker processes)"
            self._cluster = local_cluster(n)
            self._client = Client(self._cluster)
        self.workers = len(self._client.scheduler_info().get("workers", {})) or (workers or 1)
        self._futures: dict[Any, str] = {}

    @property
    def client(self):
        return self._client

    def share(self, value: Any) -> Any:
        """The value as the result of a task, not as scattered data: the scheduler keeps the
        task, so when the worker holding the value dies (killed, out of memory) Dask computes
        it again elsewhere; scattered data lost with its last worker cancels every task
        that reads it."""
        return self._client.submit(_the, value, pure=False)

    def submit(self, key: str, fn: Callable[..., Any], shared: Any, *args: Any) -> None:
        future = self._client.submit(fn, shared, *args, retries=self.retries, pure=False)
        self._futures[future] = key

    def as_completed(self) -> Iterator[Outcome]:
        from distributed import as_completed

        futures, self._futures = self._futures, {}
        for future in as_completed(list(futures)):
            key = futures[future]
            if future.status == "finished":
                yield Outcome(key, future.result())
            else:
                try:
                    exc = future.exception()
                except Exception as lost:  # noqa: BLE001 - a cancelled future raises here
                    exc = lost
                text = _one_line(exc) if exc is not None else future.status
                logging.getLogger(__name__).debug(
                    "task %s failed: %s", key, "".join(traceback.format_exception(exc))
                )
                yield Outcome(key, error=text)

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def _the(value: Any) -> Any:
    return value


def executor_for(tasks: int, workers: int | None, scheduler: str | None) -> Executor:
    """The executor a sweep of `tasks` uses: `scheduler` when given, else a local pool of
    `workers` processes (default: one per core, at most one per task), in process for a
    single task or `workers == 1`."""
    if scheduler is not None:
        return DaskExecutor(scheduler=scheduler)
    if workers is None:
        import os

        workers = min(tasks, os.cpu_count() or 1)
    if workers <= 1 or tasks <= 1:
        return InProcess()
    return DaskExecutor(workers=min(workers, tasks))
