"""What the Slurm backend reads from Slurm and hands to sbatch, without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.slurm.commands import parse_records
from trainyard.backends.slurm.jobstate import slurm_jobs
from trainyard.backends.slurm.nodes import gpus_of, is_schedulable, node_inventory
from trainyard.backends.slurm.submission import check_task, components, sbatch_argv

NODE = ("NodeName=g7 Arch=x86_64 CPUAlloc=0 CPUEfctv=62 CPUTot=64 Gres=gpu:a100:4(S:0-1),gpu:v100:2,shard:8 "
        "NodeAddr=10.0.0.7 NodeHostName=g7 RealMemory=515000 State=MIXED+DRAIN Partitions=gpu,all "
        "Reason=bad fan [root@2026-11-21T08:00:00]")


def test_a_node_record_becomes_inventory_with_typed_gpus_in_slurms_order() -> None:
    [record] = parse_records(NODE + "\n\n")
    assert record["Reason"] == "bad fan [root@2026-11-21T08:00:00]"  # free text with spaces survives
    node = node_inventory(record)
    assert (node.name, node.address, node.cpu_milli, node.memory_mb) == ("g7", "10.0.0.7", 62000, 515000)
    assert [(g.index, g.model) for g in node.gpus] == [(0, "a100"), (1, "a100"), (2, "a100"), (3, "a100"),
                                                       (4, "v100"), (5, "v100")]
    assert node.schedulable is False  # draining
    assert node.labels["slurm.partitions"] == "gpu,all"


@pytest.mark.parametrize(("state", "schedulable"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+COMPLETING", True), ("IDLE+PLANNED", True),
    ("IDLE+DRAIN", False), ("MIXED+DRAIN", False), ("DOWN", False), ("DOWN*", False), ("IDLE*", False),
    ("IDLE+MAINT", False), ("IDLE+RESERVED", False), ("FUTURE", False), ("UNKNOWN", False),
    ("IDLE+POWERED_DOWN", False), ("ALLOCATED+FAIL", False),
])
def test_only_nodes_slurm_would_start_new_work_on_are_schedulable(state: str, schedulable: bool) -> None:
    assert is_schedulable(state) is schedulable


def test_untyped_and_absent_gres() -> None:
    assert [g.model for g in gpus_of("gpu:2")] == ["gpu", "gpu"]
    assert gpus_of("(null)") == () and gpus_of("") == () and gpus_of("mps:100") == ()


def _job(job_id: str, state: str, exit_code: str = "0:0", reason: str = "None", het: str = "", offset: str = "") -> str:
    het_fields = f" HetJobId={het} HetJobOffset={offset}" if het else ""
    return (f"JobId={job_id}{het_fields} JobName=x JobState={state} Reason={reason} ExitCode={exit_code} "
            f"ReqNodeList=n{job_id} Command=/a b")


def test_job_records_merge_hetjob_components_and_give_shell_style_exit_codes() -> None:
    jobs = slurm_jobs(parse_records("\n".join([
        _job("10", "COMPLETED", het="10", offset="0"), _job("11", "FAILED", "3:0", het="10", offset="1"),
        _job("12", "CANCELLED", "0:15"),
        _job("13", "CANCELLED"),
        _job("14", "PENDING", reason="ReqNodeNotAvail,_UnavailableNodes:n2"),
        _job("15", "PENDING", reason="Resources"),
        _job("16", "RUNNING"),
    ])))
    assert jobs["10"].final and jobs["10"].state == "FAILED" and jobs["10"].exit_code() == 3
    assert jobs["12"].exit_code() == 128 + 15
    assert jobs["13"].exit_code() is None  # cancelled before it ran: no exit status at all
    assert jobs["14"].unstartable_reason() == "ReqNodeNotAvail, UnavailableNodes:n2"
    assert jobs["10"].nodes == ("n10", "n11") and jobs["14"].nodes == ("n14",)
    assert jobs["15"].unstartable_reason() is None and jobs["15"].pending
    assert not jobs["16"].final and jobs["16"].unstartable_reason() is None


def _task(index: int, node: str, gpus: int, cpu_milli: int = 1500, **extra) -> TaskLaunch:
    return TaskLaunch(TaskKey(5, 0, "w", index), node=node, script="true\n", env=extra.pop("env", {}),
                      gpus=tuple(range(gpus)), cpu_milli=cpu_milli, memory_mb=100, gpu_milli=(1000,) * gpus, **extra)


def test_a_gang_on_two_nodes_is_one_heterogeneous_submission_pinned_per_node() -> None:
    tasks = [_task(0, "n1", 2), _task(1, "n2", 4), _task(2, "n1", 0, cpu_milli=10)]
    dirs = {t.key: Path(f"/s/t{t.key.index}") for t in tasks}
    argv = sbatch_argv(name="ty-5-0", submission_dir=Path("/s/sub"), partition="gpu", parts=components(tasks, {}),
                       task_dirs=dirs, gang_runner=Path("/s/g.sh"), task_runner=Path("/s/t.sh"), user="alice")
    script = argv.index("/s/g.sh")
    options, script_args = argv[:script], argv[script + 1:]
    first, second = " ".join(options).split(" : ")
    assert "--nodelist=n1 --nodes=1 --ntasks=1 --cpus-per-task=3 --mem=200 --gres=gpu:2 --partition=gpu" in first
    assert second == "--nodelist=n2 --nodes=1 --ntasks=1 --cpus-per-task=2 --mem=100 --gres=gpu:4 --partition=gpu"
    assert "--no-requeue" in first and "--job-name=ty-5-0" in first
    assert "--comment=trainyard:alice" in first  # Slurm sees root's job: the comment names its user
    # Without --output Slurm writes slurm-<id>.out where sbatch ran (once: the repo root).
    assert "--output=/s/sub/batch.log" in first and "--chdir=/s/sub" in first
    assert script_args == ["/s/t.sh", "1", "0", "2", "100", "gpu:2", "/s/t0", "0", "1", "100", "none", "/s/t2",
                           "1", "2", "100", "gpu:4", "/s/t1"]


def test_on_a_node_with_typed_gpus_each_task_asks_for_the_types_it_was_placed_on() -> None:
    a100_then_v100 = {"g7": ("a100", "a100", "v100", "v100")}
    first = TaskLaunch(TaskKey(5, 0, "w", 0), node="g7", script="", env={}, gpus=(1, 2), gpu_milli=(1000, 1000))
    second = TaskLaunch(TaskKey(5, 0, "w", 1), node="g7", script="", env={}, gpus=(3,), gpu_milli=(1000,))
    [part] = components([first, second], a100_then_v100)
    assert part.gres == "gpu:a100:1,gpu:v100:2"
    assert (part.task_gres(first), part.task_gres(second)) == ("gpu:a100:1,gpu:v100:1", "gpu:v100:1")
    assert components([first], {"g7": ("a100", "bad;type", "x", "y")})[0].gres == "gpu:1,gpu:x:1"  # unsafe: untyped


def test_tasks_the_backend_cannot_run_as_asked_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        check_task(TaskLaunch(TaskKey(1, 0, "w", 0), node="n1", script="", env={}, gpus=(0,), gpu_milli=(500,)))
    with pytest.raises(ValueError, match="not a valid shell name"):
        check_task(_task(0, "n1", 0, env={"1X": "a"}))
    with pytest.raises(ValueError, match="NUL"):
        check_task(_task(0, "n1", 0, env={"X": "a\0b"}))
