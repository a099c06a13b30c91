"""What the Slurm backend reads from Slurm and hands to sbatch, without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.slurm.commands import parse_records
from trainyard.backends.slurm.jobstate import slurm_jobs
from trainyard.backends.slurm.nodes import NodeGres, gpus_of, is_schedulable, node_gres, node_inventory
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
    assert node.labels["trainyard.io/gpu-shares"] == "false"  # types are models: no device can be pinned


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
    assert "trainyard.io/gpu-shares" not in node_inventory({"NodeName": "c1", "Gres": "(null)"}).labels


def test_per_device_types_give_trainyards_indices_and_models_and_shards_make_them_shareable() -> None:
    gpus, gres = node_gres("gpu:h100_i3:1(S:1),gpu:h100_i1:1(S:0),gpu:a100_i0:1(S:0),shard:h100_i3:1000(S:1),"
                           "shard:h100_i1:1000(S:0),shard:a100_i0:1000(S:0)")
    assert [(g.index, g.model) for g in gpus] == [(0, "a100"), (1, "h100"), (3, "h100")]  # the device numbers
    assert gres == NodeGres(types=("a100_i0", "h100_i1", "h100_i3"), pinned=True, shards=True)
    # The dev cluster's: no model in the type.
    gpus, gres = node_gres("gpu:i0:1,gpu:i1:1,shard:i0:1000,shard:i1:1000")
    assert [(g.index, g.model) for g in gpus] == [(0, "gpu"), (1, "gpu")] and gres.shards
    record = {"NodeName": "n1", "Gres": "gpu:i0:1,gpu:i1:1,shard:i0:1000,shard:i1:1000"}
    assert node_inventory(record).labels["trainyard.io/gpu-shares"] == "true"


@pytest.mark.parametrize("gres", [
    "gpu:i0:1,gpu:i1:1",  # pinned, no shards
    "gpu:i0:1,gpu:i1:1,shard:i0:1000",  # a device without shards
    "gpu:i0:1,gpu:i1:1,shard:i0:8,shard:i1:8",  # shards, but not thousandths
    "gpu:a100:2,shard:a100:2000",  # types are models: the devices cannot be named
])
def test_nodes_whose_devices_have_no_thousand_shards_each_cannot_share(gres: str) -> None:
    assert not node_gres(gres)[1].shards
    assert node_inventory({"NodeName": "n1", "Gres": gres}).labels["trainyard.io/gpu-shares"] == "false"


@pytest.mark.parametrize("gres", ["gpu:i0:2", "gpu:i0:1,gpu:i0:1", "gpu:i0:1,gpu:2", "gpu:i0:1,gpu:a100:1"])
def test_gres_that_does_not_name_each_device_once_keeps_slurms_numbering(gres: str) -> None:
    gpus, found = node_gres(gres)
    assert not found.pinned and [g.index for g in gpus] == list(range(len(gpus)))


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
    a100_then_v100 = {"g7": NodeGres(types=("a100", "a100", "v100", "v100"))}
    first = TaskLaunch(TaskKey(5, 0, "w", 0), node="g7", script="", env={}, gpus=(1, 2), gpu_milli=(1000, 1000))
    second = TaskLaunch(TaskKey(5, 0, "w", 1), node="g7", script="", env={}, gpus=(3,), gpu_milli=(1000,))
    [part] = components([first, second], a100_then_v100)
    assert part.gres == "gpu:a100:1,gpu:v100:2"
    assert (part.task_gres(first), part.task_gres(second)) == ("gpu:a100:1,gpu:v100:1", "gpu:v100:1")
    unsafe = node_gres("gpu:a100:1,gpu:bad;type:1,gpu:x:2")[1]
    assert components([first], {"g7": unsafe})[0].gres == "gpu:1,gpu:x:1"  # unsafe: untyped


PINNED = {"n1": node_gres("gpu:i0:1,gpu:i1:1,gpu:i2:1,gpu:i3:1,shard:i0:1000,shard:i1:1000,shard:i2:1000,"
                          "shard:i3:1000")[1],
          "g7": node_gres("gpu:a100_i0:1,gpu:a100_i1:1,gpu:h100_i2:1")[1]}


def _on(index: int, node: str, gpus: tuple[int, ...], milli: tuple[int, ...]) -> TaskLaunch:
    return TaskLaunch(TaskKey(5, 0, "w", index), node=node, script="", env={}, gpus=gpus, gpu_milli=milli)


def test_whole_gpus_on_a_pinned_node_are_the_devices_trainyard_chose() -> None:
    first, second = _on(0, "g7", (2, 0), (1000, 1000)), _on(1, "g7", (1,), (1000,))
    [part] = components([first, second], PINNED)
    assert part.gres == "gpu:a100_i0:1,gpu:a100_i1:1,gpu:h100_i2:1"
    assert (part.task_gres(first), part.task_gres(second)) == ("gpu:a100_i0:1,gpu:h100_i2:1", "gpu:a100_i1:1")
    check_task(first, PINNED["g7"])


def test_when_a_task_on_a_node_holds_a_fraction_everything_there_is_asked_for_as_shards() -> None:
    # Two halves of GPU 1, a whole GPU 3, a quarter of GPU 0 and a task without GPUs, on one node.
    tasks = [_on(0, "n1", (1,), (500,)), _on(1, "n1", (1,), (500,)), _on(2, "n1", (3,), (1000,)),
             _on(3, "n1", (0,), (250,)), _on(4, "n1", (), ())]
    [part] = components(tasks, PINNED)
    assert part.gres == "shard:i0:250,shard:i1:1000,shard:i3:1000"  # never gpu and shard in one request
    assert [part.task_gres(t) for t in tasks] == ["shard:i1:500", "shard:i1:500", "shard:i3:1000", "shard:i0:250", ""]
    # Another node of the same gang holds whole GPUs only: it asks for them as GPUs.
    whole, half = _on(5, "n2", (0, 1), (1000, 1000)), _on(6, "n1", (2,), (500,))
    parts = components([whole, half], {"n2": PINNED["n1"], **PINNED})
    assert [p.gres for p in parts] == ["gpu:i0:1,gpu:i1:1", "shard:i2:500"]
    argv = sbatch_argv(name="ty", submission_dir=Path("/s/sub"), partition=None, parts=parts,
                       task_dirs={whole.key: Path("/s/a"), half.key: Path("/s/b")}, gang_runner=Path("/s/g.sh"),
                       task_runner=Path("/s/t.sh"))
    assert "--gres=gpu:i0:1,gpu:i1:1" in argv and "--gres=shard:i2:500" in argv
    # Each step: its het group, CPUs, MiB, its own --gres, its directory.
    assert argv[argv.index("/s/g.sh") + 1:] == ["/s/t.sh", "1", "0", "1", "1", "gpu:i0:1,gpu:i1:1", "/s/a",
                                                "1", "1", "1", "shard:i2:500", "/s/b"]


def test_tasks_the_backend_cannot_run_as_asked_are_refused_with_the_reason() -> None:
    half = TaskLaunch(TaskKey(1, 0, "w", 0), node="n1", script="", env={}, gpus=(0,), gpu_milli=(500,))
    for gres in (NodeGres(), node_gres("gpu:a100:4")[1], PINNED["g7"]):
        with pytest.raises(ValueError, match="cannot be shared in Slurm.*ask for whole GPUs"):
            check_task(half, gres)
    check_task(half, PINNED["n1"])
    with pytest.raises(ValueError, match="has no GPU 7"):
        check_task(_on(0, "n1", (7,), (1000,)), PINNED["n1"])
    with pytest.raises(ValueError, match="do not match"):
        check_task(_on(0, "n1", (0, 1), (500,)), PINNED["n1"])
    with pytest.raises(ValueError, match="not a valid shell name"):
        check_task(_task(0, "n1", 0, env={"1X": "a"}))
    with pytest.raises(ValueError, match="NUL"):
        check_task(_task(0, "n1", 0, env={"X": "a\0b"}))


def test_private_files_written_by_two_threads_at_once_never_trip_each_other(tmp_path: Path) -> None:
    # The stops of a gang's tasks go side by side and share their submission's record: each
    # writer has a temporary file of its own (a shared ``NAME.tmp`` lost one rename in two).
    import threading

    from trainyard.backends.slurm.submission import write_private

    target, errors = tmp_path / "stop.json", []

    def write(text: bytes) -> None:
        try:
            for _ in range(200):
                write_private(target, text)
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(b'{"w": %d}' % i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and target.read_bytes() in (b'{"w": 0}', b'{"w": 1}')
    assert [p.name for p in tmp_path.iterdir()] == ["stop.json"] and target.stat().st_mode & 0o777 == 0o600
