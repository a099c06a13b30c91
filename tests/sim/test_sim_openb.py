"""The openb loaders and the paper's tuning, on the shared trace files."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_data import DEFAULT_PODS, GPUSPEC25_PODS, NODES

from trainyard.scheduler.scorers.fgd import Fgd
from trainyard.sim.openb import Pod, gpu_capacity, load_nodes, load_pods, tune, workload_of


def test_the_openb_gpu_nodes_are_the_papers_cluster() -> None:
    nodes = load_nodes(NODES)
    assert len(nodes) == 1213
    assert gpu_capacity(nodes) == 6212 * 1000
    models = {g.model for n in nodes for g in n.gpus}
    assert models == {"G2", "T4", "G3", "P100", "V100M32", "V100M16", "A10"}


def test_openb_pods_become_whole_or_shared_gpu_requests_with_their_model_constraints() -> None:
    pods = load_pods(DEFAULT_PODS)
    assert len(pods) == 8152
    first = pods[0]
    assert (first.cpu_milli, first.memory_mb, first.num_gpu, first.gpu_milli) == (12000, 16384, 1, 1000)
    assert all(p.gpu_milli == 1000 for p in pods if p.num_gpu > 1)  # only single-GPU pods share
    assert any(0 < p.gpu_request < 1000 for p in pods) and any(p.gpu_request == 0 for p in pods)
    constrained = [p for p in load_pods(GPUSPEC25_PODS) if p.gpu_models]
    assert constrained and all(set(p.gpu_models) <= {"G2", "T4", "G3", "P100", "V100M32", "V100M16", "A10"}
                               for p in constrained)


def test_tuning_keeps_every_pod_and_fills_to_the_ratio_reproducibly() -> None:
    pods = load_pods(DEFAULT_PODS)
    capacity = gpu_capacity(load_nodes(NODES))
    tuned = tune(pods, capacity, 1.3, 42)
    assert tuned == tune(pods, capacity, 1.3, 42) and tuned != tune(pods, capacity, 1.3, 43)
    names = {p.name for p in tuned}
    assert names == {p.name for p in pods}
    total = sum(p.gpu_request for p in tuned)
    assert 1.29 * capacity < total <= 1.3 * capacity


def test_the_fgd_workload_is_the_pod_mix_by_kind() -> None:
    pods = load_pods(DEFAULT_PODS)
    workload = workload_of(pods)
    assert sum(w.weight for w in workload) == len(pods)
    gpu_kinds = [w for w in workload if w.gpu_milli > 0]
    assert sum(w.weight for w in gpu_kinds) == sum(1 for p in pods if p.gpu_request > 0)
    assert sum(w.weight for w, _ in Fgd(workload).classes) == sum(w.weight for w in gpu_kinds)  # FGD: GPU pods


pod = st.builds(
    Pod,
    name=st.sampled_from(["a", "b", "c"]),
    cpu_milli=st.integers(0, 8000),
    memory_mb=st.integers(0, 4096),
    num_gpu=st.integers(0, 4),
    gpu_milli=st.sampled_from([250, 500, 1000]),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(pod, min_size=1, max_size=20), st.integers(1000, 50_000), st.floats(0.5, 2.0), st.integers(0, 99))
def test_tuning_never_passes_the_ratio_and_never_drops_a_pod(pods: list[Pod], capacity: int, ratio: float,
                                                              seed: int) -> None:
    tuned = tune(pods, capacity, ratio, seed)
    assert sorted(map(id, pods)) == sorted(set(map(id, tuned)) & set(map(id, pods)))
    original = sum(p.gpu_request for p in pods)
    assert sum(p.gpu_request for p in tuned) <= max(original, ratio * capacity)
