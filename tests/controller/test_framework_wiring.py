"""TensorFlow's and MPI's wiring as a local job's tasks see it: ``TF_CONFIG`` naming every
task, and the MPI hostfile each task writes in its working directory, its path in the
variables ``mpirun`` reads."""

from __future__ import annotations

import json
from pathlib import Path

JOB = """
name: tf-and-mpi
taskRoles:
  ps:
    commands: [{report}]  # no ports declared: it is given a peer port
  worker:
    instances: 2
    resourcePerInstance: {{ports: {{tf: 1}}}}
    commands: [{report}]
"""
# Each task writes what it sees under its rank.
REPORT = ("'printf %s \"$TF_CONFIG\" > {out}/tf.$RANK && cp \"$OMPI_MCA_orte_default_hostfile\" {out}/hosts.$RANK"
          " && printf \"%s %s\" \"$TRAINYARD_HOSTFILE\" \"$HYDRA_HOST_FILE\" > {out}/path.$RANK"
          " && pwd > {out}/cwd.$RANK'")


def test_every_task_sees_tf_config_and_the_mpi_hostfile(make_world, tmp_path: Path) -> None:
    world = make_world(gpus=2)
    out = tmp_path / "seen"
    out.mkdir()
    job_id = world.submit(JOB.format(report=REPORT.format(out=out)))
    assert world.drive(job_id).state == "SUCCEEDED", world.explain(job_id)
    tasks = {(t.role, t.index): t for t in world.tasks(job_id)}
    configs = [json.loads((out / f"tf.{rank}").read_text()) for rank in range(3)]
    workers = [f"{tasks['worker', i].node}" for i in range(2)]
    assert {json.dumps(c["cluster"], sort_keys=True) for c in configs} == {json.dumps(configs[0]["cluster"],
                                                                                      sort_keys=True)}
    cluster = configs[0]["cluster"]
    assert len(cluster["ps"]) == 1 and len(cluster["worker"]) == 2
    # The workers' servers listen on their reserved tf ports, the ps on the peer port it was given.
    assert [int(hp.rsplit(":", 1)[1]) for hp in cluster["worker"]] == [tasks["worker", i].ports["tf"][0]
                                                                       for i in range(2)]
    assert [int(hp.rsplit(":", 1)[1]) for hp in cluster["ps"]] == [tasks["ps", 0].ports["peer"][0]]
    assert [c["task"] for c in configs] == [{"type": "ps", "index": 0}, {"type": "worker", "index": 0},
                                           {"type": "worker", "index": 1}]
    assert len(set(workers)) == 1  # one node: one line, three slots
    for rank in range(3):
        lines = (out / f"hosts.{rank}").read_text().splitlines()
        assert len(lines) == 1 and lines[0].endswith(" slots=3")
        hostfile, hydra = (out / f"path.{rank}").read_text().split(" ")
        assert hostfile == hydra and Path(hostfile).parent == Path((out / f"cwd.{rank}").read_text().strip())
