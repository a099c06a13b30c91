"""The exposition writer keeps ``prometheus_client``'s text format byte for byte: what it
writes, read by the library's parser and written again by the library, is unchanged."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from trainyard.monitor.exposition import (
    ClusterFigures,
    ControllerTimings,
    GpuFigures,
    NodeFigures,
    RunningJobFigures,
    TaskFigures,
    VcFigures,
    format_value,
    render,
)
from trainyard.store.rows import LATEST_GPU_FIELDS

FIGURES = ClusterFigures(
    nodes=[
        NodeFigures(
            name="gpu-01", up=True, gpus_total={"A100": 2, "H100": 1}, gpus_allocated={"A100": 1.5},
            sampled_gpus=(GpuFigures(0, "A100", util_pct=97.5, memory_used_mb=40000, temperature_c=70.0,
                                     power_w=310.25, ecc_errors=2),
                          GpuFigures(1, "A100"),  # sampled, but nothing measured
                          # as the store's newest sample holds a GPU: a list, here of a simulated one
                          [2, "A100", 40960, 55.0, 100, 30.0, None, None, True, True]),
            cpu_pct=12.5, memory_used_mb=123456, disk_used_pct=81.0,
        ),
        NodeFigures(name='odd "name"\\with\nnewline', up=False, gpus_total={}, gpus_allocated={}),
    ],
    vcs=[VcFigures("default", {"A100": 1}, used=0.5, borrowed=0.0, waiting=0, oldest_wait_seconds=0.0),
         VcFigures("research", {"*": 2}, used=1.0, borrowed=0.5, waiting=3, oldest_wait_seconds=1234.5)],
    jobs_by_state={"RUNNING": 2, "WAITING": 3},
    running_jobs=[RunningJobFigures(7, "alice", "research", 3.0e6)],
    tasks=[TaskFigures(7, "alice", "research", "worker", 1, gpu_util_pct=None, gpu_memory_mb=1024,
                       cpu_cores=2.25, memory_mb=2048)],
)


class Parsed:
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> list[Metric]:
        return self.families


def rewritten_by_the_library(page: str) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Parsed(text_string_to_metric_families(page)))
    return generate_latest(registry).decode()


def test_the_page_is_exactly_what_prometheus_client_itself_would_write() -> None:
    timings = ControllerTimings()
    timings.cycle.observe(0.003)
    timings.start_latency.observe(42.0)
    page = render(FIGURES, timings)
    assert rewritten_by_the_library(page) == page
    assert 'trainyard_node_up{node="odd \\"name\\"\\\\with\\nnewline"} 0.0\n' in page
    assert 'trainyard_job_running_seconds{job="7",user="alice",vc="research"} 3e+06\n' in page


def test_a_figure_nobody_measured_is_absent_never_zero() -> None:
    page = render(FIGURES, None)
    assert 'trainyard_gpu_utilization_ratio{gpu="0",model="A100",node="gpu-01"} 0.975\n' in page
    assert 'gpu="1"' not in page  # GPU 1 was sampled, but none of its figures measured
    assert 'trainyard_gpu_utilization_ratio{gpu="2"' not in page  # a simulated GPU's utilisation is not shown
    assert 'trainyard_gpu_temperature_celsius{gpu="2",node="gpu-01"} 30.0\n' in page
    assert "trainyard_task_gpu_utilization_ratio{" not in page
    assert "# TYPE trainyard_task_gpu_utilization_ratio gauge" in page  # the family is still declared
    assert 'trainyard_gpus_allocated{model="H100",node="gpu-01"} 0.0\n' in page  # known: none allocated
    assert "trainyard_scheduler_cycle_duration_seconds" not in page  # no controller here


def test_a_gpus_figures_are_laid_out_as_the_store_keeps_a_nodes_newest_sample() -> None:
    assert GpuFigures._fields == ("gpu_index", *LATEST_GPU_FIELDS[1:])


@given(st.one_of(st.floats(), st.integers(min_value=-(2**53), max_value=2**53)))
def test_values_are_written_as_prometheus_client_writes_them(value: float) -> None:
    assert format_value(value) == floatToGoString(value)
