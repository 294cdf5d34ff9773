"""Inflation and typical tasks, per the protocol, on the openb slice (tests/fixtures/openb:
680 pods requesting 512,150 GPU milli; 102 nodes with 498 GPUs)."""

from collections import Counter

import pytest

from gpuledger.replay.openb.trace import load_tasks
from gpuledger.replay.openb.workload import inflate, typical_tasks


@pytest.fixture(scope="module")
def tasks(openb_dir):
    return load_tasks(openb_dir / "openb_pod_list_default.csv")


CAPACITY = 498_000  # GPU milli of the slice's node list


def test_inflation_keeps_every_task_and_stops_below_target(tasks):
    capacity = CAPACITY
    assert sum(t.gpu_request_milli for t in tasks) < 1.3 * capacity  # so it must inflate
    stream = inflate(tasks, capacity, 1.3, seed=42)
    total = sum(t.gpu_request_milli for t in stream)
    assert 1.3 * capacity - 8000 < total <= 1.3 * capacity
    counts = Counter(stream)
    assert all(counts[t] >= n for t, n in Counter(tasks).items())
    assert stream == inflate(tasks, capacity, 1.3, seed=42)
    assert stream != inflate(tasks, capacity, 1.3, seed=43)
    assert stream[:50] != (tasks + stream)[:50]  # shuffled


def test_deflation_when_the_trace_exceeds_the_target(tasks):
    capacity = CAPACITY
    assert sum(t.gpu_request_milli for t in tasks) > 0.5 * capacity  # so it must deflate
    stream = inflate(tasks, capacity, 0.5, seed=1)
    total = sum(t.gpu_request_milli for t in stream)
    assert total <= 0.5 * capacity and total > 0.5 * capacity - 8000
    assert not Counter(stream) - Counter(tasks)


def test_typical_tasks_cover_95_percent(tasks):
    typical = typical_tasks(tasks)
    # counted from the CSV with awk: 52 distinct shapes; the 33 most frequent cover 647 of
    # 680 pods (>= 646 = 95 %); the most frequent is 11300 mCPU x 1 whole GPU, 88 pods
    assert len(typical) == 33
    assert (typical[0].cpu_milli, typical[0].num_gpu, typical[0].gpu_milli, typical[0].weight) == (
        11300,
        1,
        1000,
        88,
    )
    assert sum(t.weight for t in typical) == 647
    covered = sum(t.weight for t in typical)
    assert covered >= 0.95 * len(tasks) > covered - typical[-1].weight
    assert any(t.num_gpu == 0 for t in typical)  # CPU-only shapes are included


def test_typical_shapes_carry_the_lower_median_of_their_memory(tasks):
    # counted with awk: the 88 pods of 11300 mCPU x 1 whole GPU ask 49152 MiB at the lower
    # median (sort -n, the 44th value)
    typical = typical_tasks(tasks)
    assert typical[0].memory_mib == 49152
    assert all(t.memory_mib >= 0 for t in typical)
