"""Whole-node jobs on the Slurm dev cluster (n1..n4, 4 fake GPUs each): a ``nodes: 2`` role
is one allocation of two whole nodes, each instance with every GPU, CPU and the memory."""

from __future__ import annotations

import json

from sqlalchemy import select

from slurm.cluster import drive, ended_slurm_job, submit
from trainyard.backends.base import TaskKey
from trainyard.store.rows import NodeRow, TaskRow


def test_a_two_node_whole_node_role_gets_two_whole_nodes_in_one_allocation(world) -> None:
    report = world.tmp / "report"
    report.mkdir()
    job_id = submit(world, f"""
name: whole
jobRetryCount: 0
taskRoles:
  trainer:
    nodes: 2
    commands:
      - |
        python3 - <<'PY'
        import json, os
        env = {{k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "PAI_RESOURCE_trainer", "TRAINYARD_NODE",
               "RANK", "WORLD_SIZE")}}
        with open(os.path.join("{report}", env["RANK"]), "w") as f:
            json.dump(env, f)
        PY
""")
    job = drive(world, job_id)
    assert job.state == "SUCCEEDED", job.state_message
    with world.db.session() as s:
        tasks = list(s.scalars(select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.index)))
        nodes = {n.name: n for n in s.scalars(select(NodeRow))}
    assert len({t.node for t in tasks}) == 2
    for task in tasks:
        node = nodes[task.node]
        assert sorted(g[0] for g in task.gpus) == [g["index"] for g in node.gpus]
        assert (task.cpu_milli, task.memory_mb) == (node.cpu_milli, node.memory_mb)
        env = json.loads((report / str(task.index)).read_text())
        assert env["TRAINYARD_NODE"] == task.node and env["WORLD_SIZE"] == "2"
        assert sorted(env["CUDA_VISIBLE_DEVICES"].split(",")) == [str(g["index"]) for g in node.gpus]
        assert env["PAI_RESOURCE_trainer"].startswith(f"{len(node.gpus)},")
    ids = {world.backend.slurm_job_id(TaskKey(job_id, 0, "trainer", t.index)) for t in tasks}
    assert len(ids) == 1
    records = ended_slurm_job(world.slurm, ids.pop())
    assert sorted(r["NodeList"] for r in records) == sorted(t.node for t in tasks)
    assert {r["TresPerNode"] for r in records} == {"gres:gpu:i0:1,gres:gpu:i1:1,gres:gpu:i2:1,gres:gpu:i3:1"}
