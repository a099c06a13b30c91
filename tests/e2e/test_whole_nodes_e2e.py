"""Whole-node jobs through a real `yard up` (the local backend: one node of simulated GPUs):
a `nodes: 1` job gets all of the node, and a fractional job submitted after it waits, saying
why, until the whole-node job ends."""

from __future__ import annotations

import pytest

from e2e.server import Server, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)


def test_a_whole_node_job_takes_the_node_and_a_fraction_waits_until_it_ends(server: Server, gates) -> None:
    admin = server.admin()
    (node,) = admin.nodes()
    gpus = len(node.gpus)
    devices = ",".join(str(i) for i in range(gpus))
    whole = admin.submit(f"""
name: whole
taskRoles:
  trainer:
    nodes: 1
    commands:
      - echo "$CUDA_VISIBLE_DEVICES;$PAI_RESOURCE_trainer;$PAI_TASK_ROLE_TASK_COUNT_trainer" > {gates}/env.tmp
      - mv {gates}/env.tmp {gates}/env
      - while [ ! -e {gates}/done ]; do sleep 0.2; done
""").id
    wait_until(lambda: (gates / "env").exists(), timeout=60, what="the whole-node task to start")
    cpu = node.cpu
    assert (gates / "env").read_text().strip() == f"{devices};{gpus},{cpu:g},{node.memoryMB},0;1"
    (task,) = admin.job(whole).attempts[0].tasks
    assert (task.gpus, task.cpu, task.memoryMB) == (list(range(gpus)), cpu, node.memoryMB)
    shown = server.yard("job", str(whole)).stdout
    assert f"trainer/0 has node {node.name} whole: {gpus} GPU, {cpu:g} CPU, {node.memoryMB} MiB" in shown

    fraction = admin.submit("""
name: fraction
taskRoles:
  w:
    resourcePerInstance: {gpu: 0.5, cpu: 0.1, memoryMB: 64}
    commands: ['true']
""").id
    wait_until(lambda: admin.job(fraction).pending is not None, timeout=60,
               what="the fractional job to get a reason")
    pending = admin.job(fraction).pending
    assert pending is not None and pending.reason == "NO_FIT", pending
    assert "1 node is held whole by whole-node jobs" in pending.message
    assert admin.job(fraction).state == "WAITING"

    (gates / "done").touch()
    wait_until(lambda: admin.job(whole).state == "SUCCEEDED", timeout=60, what="the whole-node job to end")
    wait_until(lambda: admin.job(fraction).state == "SUCCEEDED", timeout=60,
               what="the fractional job to run once the node is free")
