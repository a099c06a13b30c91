"""Fractional GPUs on Slurm: Trainyard's shares as ``shard`` GRES, on the devices it chose
(the dev cluster declares ``gpu:iN:1`` and ``shard:iN:1000`` per device; docs/slurm.md, "GPUs")."""

from __future__ import annotations

import re

import pytest
from e2e.server import wait_until

from slurm.cluster import drive, ended_slurm_job, submit
from trainyard.backends.base import TaskKey
from trainyard.core.clock import SystemClock
from trainyard.core.labels import GPU_SHARES_LABEL
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid
from trainyard.spec.loading import parse_job
from trainyard.store.rows import NodeRow, TaskRow

# What each task reports: the GPUs it sees, and the ones Slurm gave its step (the sampler's).
REPORT = ('echo "cvd=$CUDA_VISIBLE_DEVICES step=${SLURM_STEP_GPUS-} shards=${SLURM_SHARDS_ON_NODE-}"'
          ' > @OUT@/$PAI_CURRENT_TASK_ROLE_NAME-@NAME@')


def report(out, name: str) -> str:
    return REPORT.replace("@OUT@", str(out)).replace("@NAME@", name)


def seen(path) -> dict[str, str]:
    return dict(word.split("=", 1) for word in path.read_text().split())


def _only_n1(world, drain) -> None:
    drain("n2", "n3", "n4")
    world.controller._last_inventory = -1e9  # refresh the inventory now, not in 30 s
    world.controller.run_once()


def _gpus(world, job_id: int) -> dict[str, list[list[int]]]:
    with world.db.session() as s:
        return {t.role: t.gpus for t in s.query(TaskRow).filter(TaskRow.job_id == job_id)}


def _slurm_gres(world, key: TaskKey) -> str:
    """Slurm's own record of what the job holds on its node (``scontrol show job -d``)."""
    shown = world.slurm.run(["scontrol", "show", "job", "-d", world.backend.slurm_job_id(key)]).stdout
    return " ".join(re.findall(r"\bGRES=(\S+)", shown))


def test_two_half_gpu_jobs_share_one_device_and_slurm_holds_half_of_it_for_each(world, drain) -> None:
    _only_n1(world, drain)
    out = world.tmp / "out"
    out.mkdir()

    def half(name: str) -> str:
        return f"""
name: {name}
taskRoles:
  main:
    resourcePerInstance: {{gpu: 0.5, cpu: 1, memoryMB: 64}}
    commands:
      - {report(out, name)}
      - until [ -e {out}/checked ]; do sleep 0.1; done
"""

    first = submit(world, half("a"))
    drive(world, first, states=("RUNNING",))
    second = submit(world, half("b"))
    drive(world, second, states=("RUNNING",))
    # Both on n1's same device (the scheduler fills a shared GPU first), each with half of it.
    [[index, milli]] = _gpus(world, first)["main"]
    assert milli == 500 and _gpus(world, second)["main"] == [[index, 500]]
    # Another user's half does not join them (the VC's rule, same-user by default: Trainyard's
    # scheduler decides, as on one machine); Slurm would have let it, having 500 shards left.
    with world.db.session() as s:
        bob = auth.create_user(s, "bob", is_admin=False, clock=SystemClock())
        other = job_service.submit_job(s, bob, parse_job(half("c").replace("until [", "true || until [")),
                                       clock=SystemClock()).id
    assert drive(world, other).state == "SUCCEEDED"
    [[elsewhere, _]] = _gpus(world, other)["main"]
    assert elsewhere != index and seen(out / "main-c")["cvd"] == str(elsewhere)
    # Running at once (each waits until the test has looked), each Slurm job holding 500 shards of it.
    wait_until(lambda: (out / "main-a").exists() and (out / "main-b").exists(), timeout=30,
               what="both halves to run at once")
    for job_id in (first, second):
        assert _slurm_gres(world, TaskKey(job_id, 0, "main", 0)) == f"shard:i{index}:500(IDX:{index})"
    (out / "checked").touch()
    assert drive(world, first).state == "SUCCEEDED" and drive(world, second).state == "SUCCEEDED"
    for name in ("a", "b"):
        assert seen(out / f"main-{name}") == {"cvd": str(index), "step": str(index), "shards": "500"}


def test_on_a_mixed_node_a_whole_gpu_and_a_fraction_are_the_devices_trainyard_chose(world, drain) -> None:
    """One job, one node: a task with two whole GPUs and one with a quarter of another. The
    whole component is asked for as shards (Slurm 22.05 takes no ``gpu`` and ``shard`` in one
    request); a whole GPU is 1000 of them, and each step gets exactly its own devices."""
    _only_n1(world, drain)
    out = world.tmp / "out"
    out.mkdir()
    job_id = submit(world, f"""
name: mixed
taskRoles:
  whole:
    resourcePerInstance: {{gpu: 2, cpu: 1, memoryMB: 64}}
    commands: ['{report(out, "x")}']
  part:
    resourcePerInstance: {{gpu: 0.25, cpu: 1, memoryMB: 64}}
    commands: ['{report(out, "x")}']
""")
    assert drive(world, job_id).state == "SUCCEEDED"
    gpus = _gpus(world, job_id)
    whole = sorted(i for i, milli in gpus["whole"] if milli == 1000)
    [[part, quarter]] = gpus["part"]
    assert len(whole) == 2 and quarter == 250 and part not in whole
    steps = {role: seen(out / f"{role}-x") for role in ("whole", "part")}
    assert steps["whole"] == {"cvd": ",".join(map(str, whole)), "step": ",".join(map(str, whole)), "shards": "2000"}
    assert steps["part"] == {"cvd": str(part), "step": str(part), "shards": "250"}
    [record] = ended_slurm_job(world.slurm, world.backend.slurm_job_id(TaskKey(job_id, 0, "whole", 0)))
    held = sorted([*((i, 1000) for i in whole), (part, 250)])
    assert record["TresPerNode"] == ",".join(f"gres:shard:i{i}:{milli}" for i, milli in held)


def test_a_fraction_is_refused_at_submit_where_no_node_can_share_a_gpu(world) -> None:
    """A site whose gres.conf declares no shards: Slurm's nodes are labelled so by the
    inventory, and a fractional job gets a 4xx with the field, not a failed launch."""
    with world.db.session() as s:
        nodes = list(s.query(NodeRow))
        assert {n.labels.get(GPU_SHARES_LABEL) for n in nodes} == {"true"}  # the dev cluster's can
        for node in nodes:
            node.labels = {**node.labels, GPU_SHARES_LABEL: "false"}  # as where gres.conf has no shards
    job = "name: {}\ntaskRoles:\n  main:\n    resourcePerInstance: {{gpu: {}}}\n    commands: [\"true\"]\n"
    with pytest.raises(Invalid, match="no node here can share one") as refused:
        submit(world, job.format("f", 0.5))
    assert refused.value.details[0]["path"] == "taskRoles.main.resourcePerInstance.gpu"
    assert submit(world, job.format("w", 1))  # whole GPUs are fine
