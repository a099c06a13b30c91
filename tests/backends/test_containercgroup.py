"""Where a Slurm task's container cannot get a memory cgroup of Trainyard's on its node,
``container-cgroup.py check`` says why (the runner then gives the engine the limit)."""

from __future__ import annotations

import json
from pathlib import Path

from trainyard.backends import containercgroup


def task_dir(tmp_path: Path, memory_mb: int = 64) -> str:
    (tmp_path / containercgroup.CGROUP_INPUT).write_text(json.dumps({"name": "c1", "memory_mb": memory_mb}))
    return str(tmp_path)


def test_the_plan_is_the_nodes_own_memory_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup {root}/memory cgroup rw,memory 0 0\ncgroup {root}/cpu cgroup rw,cpu 0 0\n")

    plan, why = containercgroup.node_plan(task_dir(tmp_path), str(mounts))

    assert why == "" and plan is not None
    assert plan["memory"] == f"{root}/memory/trainyard/containers/c1" and plan["bytes"] == 64 << 20
    assert plan["roots"] == [f"{root}/memory", f"{root}/cpu"]


def test_without_a_memory_controller_or_its_input_there_is_no_plan(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")

    assert containercgroup.node_plan(task_dir(tmp_path), str(mounts)) == (
        None, "no cgroup memory controller is mounted here")
    plan, why = containercgroup.node_plan(str(tmp_path / "absent"), str(mounts))
    assert plan is None and why.startswith("cannot read container.cgroup")


def test_check_says_why_and_fails(tmp_path: Path, capsys) -> None:
    assert containercgroup.main(["container-cgroup.py", "check", str(tmp_path / "absent")]) == 1
    assert "the container's memory limit is the engine's on this node (cannot read" in capsys.readouterr().out
    assert containercgroup.main(["container-cgroup.py", "bogus"]) == 2
