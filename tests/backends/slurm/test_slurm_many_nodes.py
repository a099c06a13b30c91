"""Many machines, really: a gang across nodes that are machines of their own on the network
(the dev cluster's nodes each have a network namespace and an address of their own,
``scripts/dev-slurm.sh``), through the controller and the Slurm backend.

A real two-node PyTorch job (CPU, ``gloo``) started by ``torchrun`` from the variables
Trainyard sets, whose all-reduce must add up; a gang whose node goes down mid-job, and a
task whose node's slurmd stops answering: each a platform fault, requeued, finished on
other nodes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from e2e.server import wait_until
from sqlalchemy import select

from slurm.cluster import drive, node_addr, submit
from trainyard.backends.base import TaskKey
from trainyard.backends.slurm.nodes import is_schedulable
from trainyard.store.rows import AttemptRow, TaskRow

# Each rank adds rank + 1 (and a vector) across the world: 1 + 2, and [1, 2] + [2, 4].
ALL_REDUCE = """
import datetime, json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
vector = torch.tensor([1.0, 2.0]) * (rank + 1)
dist.all_reduce(total)
dist.all_reduce(vector)
with open(os.path.join(sys.argv[1], str(rank)), "w") as f:
    json.dump({"rank": rank, "world": dist.get_world_size(), "total": total.item(), "vector": vector.tolist(),
               "node": os.environ["TRAINYARD_NODE"], "master": os.environ["MASTER_ADDR"],
               "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}, f)
dist.destroy_process_group()
"""


def tasks_of(world, job_id: int, attempt: int) -> list[TaskRow]:
    with world.db.session() as s:
        row = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == attempt)).one()
        return sorted(row.tasks, key=lambda t: t.index)


def test_torchrun_all_reduces_with_gloo_across_two_nodes_from_trainyards_variables(world) -> None:
    report = world.tmp / "report"
    report.mkdir()
    (world.tmp / "all_reduce.py").write_text(ALL_REDUCE)
    # One task per node (4 GPUs each: a node's all), one torchrun each, as a user would write it.
    job_id = submit(world, f"""
name: ddp
jobRetryCount: 0
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {{gpu: 4, cpu: 1, memoryMB: 2048}}
    commands:
      - cp "$TRAINYARD_HOSTFILE" {report}/hosts.$RANK && printf %s "$TF_CONFIG" > {report}/tf.$RANK
      - >-
        {sys.executable} -m torch.distributed.run --nnodes="$WORLD_SIZE" --nproc-per-node=1
        --node-rank="$NODE_RANK" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT"
        {world.tmp / "all_reduce.py"} {report}
""")
    job = drive(world, job_id, timeout=120)
    logs = {i: world.backend.read_log(TaskKey(job_id, 0, "worker", i)).data.decode()[-3000:] for i in (0, 1)}
    assert job.state == "SUCCEEDED", (job.state_message, logs)
    tasks = tasks_of(world, job_id, 0)
    assert len({t.node for t in tasks}) == 2
    master = node_addr(world.slurm, next(t.node for t in tasks if t.index == 0))
    seen = [json.loads((report / str(rank)).read_text()) for rank in (0, 1)]
    assert {s["node"] for s in seen} == {t.node for t in tasks}
    for rank, result in enumerate(seen):
        assert result["rank"] == rank and result["world"] == 2
        assert result["total"] == 3.0 and result["vector"] == [3.0, 6.0]
        assert result["master"] == master
        if master != "127.0.0.1":  # nodes in namespaces: gloo binds the interface that reaches the master
            assert result["gloo_ifname"] == "eth0"
    # MPI's hostfile (a host a line, its tasks as slots) and TF_CONFIG name the same two nodes in rank order.
    addresses = [node_addr(world.slurm, t.node) for t in sorted(tasks, key=lambda t: t.index)]
    for rank in (0, 1):
        slots = {a: addresses.count(a) for a in addresses}  # nodes sharing an address (127.0.0.1) are one host
        assert (report / f"hosts.{rank}").read_text().splitlines() == [f"{a} slots={n}" for a, n in slots.items()]
        tf_config = json.loads((report / f"tf.{rank}").read_text())
        assert [w.rsplit(":", 1)[0] for w in tf_config["cluster"]["worker"]] == addresses
        assert tf_config["task"] == {"type": "worker", "index": rank}


def test_a_gang_whose_node_goes_down_mid_job_is_requeued_and_finishes_on_other_nodes(world, slurm, drain) -> None:
    started = world.tmp / "started"
    started.mkdir()
    job_id = submit(world, f"""
name: gang-node-down
jobRetryCount: 0
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {{gpu: 4, cpu: 1, memoryMB: 64}}
    commands:
      - touch {started}/$TRAINYARD_ATTEMPT-$RANK
      - if [ "$TRAINYARD_ATTEMPT" = 0 ]; then exec sleep 300; fi
""")
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: len(list(started.glob("0-*"))) == 2, timeout=30, what="both tasks to start")
    first = tasks_of(world, job_id, 0)
    down = next(t.node for t in first if t.index == 1)
    slurm.run(["scontrol", "update", f"NodeName={down}", "State=DOWN", "Reason=trainyard-test"])
    # Kept out of service until the test ends (a DOWN node comes back by itself: ReturnToService=2).
    drain(down)
    # Placed from the inventory read after the loss (should other tests have drained the other
    # nodes just then, the next read comes after INVENTORY_REFRESH_SECONDS, 30 s).
    job = drive(world, job_id, timeout=60)
    # The node failed the attempt, not the job's program: both tasks are LOST (the one on
    # the healthy node too, killed with its gang), and the job is retried without spending
    # its jobRetryCount (0), on nodes that are up.
    assert job.state == "SUCCEEDED" and job.attempt == 1 and job.retries_used == 0, job.state_message
    with world.db.session() as s:
        attempt = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == 0)).one()
        assert attempt.state == "LOST"
        assert [t.state for t in attempt.tasks] == ["LOST", "LOST"], [(t.state, t.message) for t in attempt.tasks]
        assert all("NODE_FAIL" in t.message for t in attempt.tasks), [t.message for t in attempt.tasks]
    second = tasks_of(world, job_id, 1)
    assert down not in {t.node for t in second} and len({t.node for t in second}) == 2
    assert sorted(p.name for p in started.iterdir()) == ["0-0", "0-1", "1-0", "1-1"]


def test_a_task_whose_nodes_slurmd_stops_answering_is_requeued_and_finishes_elsewhere(world, slurm) -> None:
    # A dead node as slurmctld sees it: its slurmd answers nothing (frozen here, so that the
    # node can be given back as it was: SIGCONT). After SlurmdTimeout (15 s on the dev
    # cluster) Slurm fails the job NODE_FAIL; the attempt is LOST and retried elsewhere.
    started = world.tmp / "started"
    started.mkdir()
    job_id = submit(world, f"""
name: silent-node
jobRetryCount: 0
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 64}}
    commands:
      - touch {started}/$TRAINYARD_ATTEMPT
      - if [ "$TRAINYARD_ATTEMPT" = 0 ]; then exec sleep 300; fi
""")
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: (started / "0").exists(), timeout=30, what="the task to start")
    [task] = tasks_of(world, job_id, 0)
    config = {name.strip(): value.strip() for name, _, value in (
        line.partition(" = ") for line in slurm.run(["scontrol", "show", "config"]).stdout.splitlines())}
    slurmd = int(Path(config["SlurmdPidFile"].replace("%n", task.node)).read_text())
    os.kill(slurmd, signal.SIGSTOP)
    try:
        job = drive(world, job_id, timeout=120)
    finally:
        os.kill(slurmd, signal.SIGCONT)
        # Back in service before the next test (ReturnToService=2: once it answers again).
        wait_until(lambda: any(r["NodeName"] == task.node and is_schedulable(r.get("State", ""))
                               for r in slurm.nodes()), timeout=90, interval=0.5, what=f"{task.node} to answer again")
    assert job.state == "SUCCEEDED" and job.attempt == 1 and job.retries_used == 0, job.state_message
    with world.db.session() as s:
        attempt = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == 0)).one()
        assert attempt.state == "LOST" and "NODE_FAIL" in attempt.tasks[0].message, attempt.tasks[0].message
    [retry] = tasks_of(world, job_id, 1)
    assert retry.node != task.node
