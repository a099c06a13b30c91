"""Jobs on a real Slurm cluster, through the controller and the Slurm backend.

Each test drives the controller cycle by cycle against the dev cluster
(``scripts/dev-slurm.sh``: nodes n1..n4, 4 fake GPUs each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deadlines import scaled
from e2e.server import wait_until
from sqlalchemy import select

from slurm.cluster import cancel_all, drive, ended_slurm_job, node_addr, slurm_job, submit
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.environment import STANDARD_PATH, process_account
from trainyard.backends.slurm import submission
from trainyard.backends.slurm.backend import SlurmBackend
from trainyard.controller.scheduling import preempt_jobs
from trainyard.core.clock import SystemClock
from trainyard.scheduler.snapshot import Preempt
from trainyard.services import jobs as job_service
from trainyard.services.specs import StoredSpecs
from trainyard.store.rows import AttemptRow, TaskRow


def tasks_of(world, job_id: int) -> list[TaskRow]:
    with world.db.session() as s:
        return list(s.scalars(select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.role, TaskRow.index)))


def log_of(world, key: TaskKey) -> str:
    return world.backend.read_log(key).data.decode()


def start(world, job_file: str) -> tuple[int, TaskKey]:
    """Submit a one-task job whose commands ``echo started``; return once it has."""
    job_id = submit(world, job_file)
    key = TaskKey(job_id, 0, "main", 0)
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: "started" in log_of(world, key), timeout=20, what="the task to start")
    return job_id, key


def test_a_single_task_job_runs_as_one_slurm_job_on_its_node_and_reports_its_exit_code(world) -> None:
    job_id = submit(world, """
name: single
jobRetryCount: 0
taskRoles:
  main:
    resourcePerInstance: {gpu: 1, cpu: 2, memoryMB: 512}
    commands:
      - echo "hello from $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES rank=$RANK world=$WORLD_SIZE"
      - exit 3
""")
    job = drive(world, job_id)
    assert job.state == "FAILED" and job.exit_code == 3
    [task] = tasks_of(world, job_id)
    key = TaskKey(job_id, 0, "main", 0)
    assert task.exit_code == 3
    assert log_of(world, key) == f"hello from {task.node} gpus=0 rank=0 world=1\n"
    # Slurm ran it exactly where Trainyard placed it, with exactly its resources.
    [record] = ended_slurm_job(world.slurm, world.backend.slurm_job_id(key))
    assert record["NodeList"] == task.node and record["JobState"] == "COMPLETED"
    assert record["NumCPUs"] == "2" and record["MinMemoryNode"] == "512M"
    assert record["TresPerNode"] == "gres:gpu:i0:1"  # the very GPU Trainyard gave it (docs/slurm.md, "GPUs")


def test_a_two_node_gang_is_one_slurm_allocation_and_its_tasks_get_their_gpus_and_wiring(world) -> None:
    report = world.tmp / "report"
    report.mkdir()
    job_id = submit(world, f"""
name: gang
jobRetryCount: 0
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {{gpu: 4, cpu: 1, memoryMB: 256}}
    commands:
      - |
        python3 - <<'PY'
        import json, os, socket, time
        env = {{k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
               "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME", "SLURM_JOB_ID", "TRAINYARD_NODE",
               "PAI_TASK_ROLE_worker_HOST_LIST", "TRAINYARD_JOB_ID")}}
        master = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
        if env["RANK"] == "0":  # rank 1 must reach rank 0 at MASTER_ADDR:MASTER_PORT
            server = socket.create_server(master)
            conn, _ = server.accept()
            env["peer"] = conn.makefile().readline().strip()
        else:
            for _ in range(400):
                try:
                    conn = socket.create_connection(master, timeout=5)
                    break
                except OSError:
                    time.sleep(0.05)
            conn.sendall(b"hello from rank 1\\n")
        with open(os.path.join("{report}", env["RANK"]), "w") as f:
            json.dump(env, f)
        PY
""")
    job = drive(world, job_id)
    assert job.state == "SUCCEEDED", job.state_message
    tasks = tasks_of(world, job_id)
    assert len({t.node for t in tasks}) == 2  # 4 GPUs each: two nodes
    # One Slurm job (a heterogeneous one, a component per node) for the whole gang.
    ids = {world.backend.slurm_job_id(TaskKey(job_id, 0, "worker", t.index)) for t in tasks}
    assert len(ids) == 1
    records = ended_slurm_job(world.slurm, ids.pop())
    assert sorted(r["NodeList"] for r in records) == sorted(t.node for t in tasks)
    assert {r["TresPerNode"] for r in records} == {"gres:gpu:i0:1,gres:gpu:i1:1,gres:gpu:i2:1,gres:gpu:i3:1"}
    seen = [json.loads((report / str(rank)).read_text()) for rank in (0, 1)]
    for rank, env in enumerate(seen):
        task = next(t for t in tasks if t.index == rank)
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "0"
        assert env["SLURMD_NODENAME"] == env["TRAINYARD_NODE"] == task.node
        assert sorted(env["CUDA_VISIBLE_DEVICES"].split(",")) == ["0", "1", "2", "3"]
        # The first task's node's NodeAddr: on the dev cluster, its own address in its namespace.
        assert env["MASTER_ADDR"] == node_addr(world.slurm, next(t.node for t in tasks if t.index == 0))
        assert env["TRAINYARD_JOB_ID"] == str(job_id)
    assert seen[0]["peer"] == "hello from rank 1"
    assert seen[0]["SLURM_JOB_ID"] == seen[1]["SLURM_JOB_ID"]  # both tasks inside the one allocation


def test_a_multi_role_job_on_one_node_is_one_slurm_job_whose_steps_split_the_gpus(world) -> None:
    report = world.tmp / "report"
    report.mkdir()
    command = f'echo "$RANK $PAI_CURRENT_TASK_ROLE_NAME gpus=[$CUDA_VISIBLE_DEVICES] $SLURMD_NODENAME" > {report}/$RANK'
    job_id = submit(world, f"""
name: roles
jobRetryCount: 0
taskRoles:
  chief:
    resourcePerInstance: {{gpu: 3, cpu: 1, memoryMB: 64}}
    commands: ['{command}']
  ps:
    resourcePerInstance: {{gpu: 0, cpu: 1, memoryMB: 64}}
    commands: ['{command}']
""")
    assert drive(world, job_id).state == "SUCCEEDED"
    tasks = {t.role: t for t in tasks_of(world, job_id)}
    assert tasks["chief"].node == tasks["ps"].node  # packed together: one component, two steps
    ids = {world.backend.slurm_job_id(TaskKey(job_id, 0, role, 0)) for role in tasks}
    assert len(ids) == 1
    [record] = ended_slurm_job(world.slurm, ids.pop())
    # Slurm gives the chief's step exactly the GPUs Trainyard chose for it, pinned by their types.
    given = sorted(g[0] for g in tasks["chief"].gpus)
    assert record["TresPerNode"] == ",".join(f"gres:gpu:i{i}:1" for i in given) and record["NumCPUs"] == "2"
    chief = (report / "0").read_text().split()
    assert chief[:3] == ["0", "chief", f"gpus=[{','.join(map(str, given))}]"] and len(given) == 3
    assert (report / "1").read_text() == f"1 ps gpus=[] {tasks['ps'].node}\n"  # no GPU: none visible


def test_a_failed_task_is_rerun_in_place_as_its_own_slurm_job(world) -> None:
    job_id = submit(world, """
name: rerun
jobRetryCount: 0
taskRoles:
  main:
    taskRetryCount: 1
    commands:
      - echo "run $TRAINYARD_TASK_RUN"
      - test "$TRAINYARD_TASK_RUN" -ge 1
""")
    assert drive(world, job_id).state == "SUCCEEDED"
    [task] = tasks_of(world, job_id)
    assert task.run == 1
    runs = [TaskKey(job_id, 0, "main", 0, run) for run in (0, 1)]
    assert [log_of(world, key) for key in runs] == ["run 0\n", "run 1\n"]
    assert len({world.backend.slurm_job_id(key) for key in runs}) == 2


def test_a_stop_sends_sigterm_to_the_task_and_ends_the_slurm_job(world) -> None:
    job_id, key = start(world, """
name: stoppable
stopGracePeriodSeconds: 20
taskRoles:
  main:
    commands:
      - trap 'echo got SIGTERM; exit 7' TERM
      - echo started
      - >-
        python3 -c 'import signal, sys, time; signal.signal(signal.SIGTERM,
        lambda *a: (print("child got SIGTERM", flush=True), sys.exit(3))); time.sleep(300)' & wait
      - echo "shell exits $?"
""")
    with world.db.session() as s:
        job_service.request_stop(s, s.merge(world.user), job_id, clock=SystemClock())
    job = drive(world, job_id)
    assert job.state == "STOPPED"
    # The whole process group got SIGTERM at once (the task runner relays it), so the shell's
    # trap ran although its child ended first: it did not carry on to exit 0.
    task_lines = [line for line in log_of(world, key).splitlines() if not line.startswith("slurmstepd")]
    assert "child got SIGTERM" in task_lines and "got SIGTERM" in task_lines
    assert not any(line.startswith("shell exits") for line in task_lines)
    [task] = tasks_of(world, job_id)
    assert task.exit_code == 7
    [record] = ended_slurm_job(world.slurm, world.backend.slurm_job_id(key))
    assert record["JobState"] in ("COMPLETED", "CANCELLED")


def test_a_task_that_ignores_sigterm_is_cancelled_when_its_grace_period_ends(world) -> None:
    job_id, key = start(world, """
name: stubborn
stopGracePeriodSeconds: 1
taskRoles:
  main:
    commands:
      - trap 'echo ignoring SIGTERM' TERM
      - echo started
      - while true; do sleep 0.2; done
""")
    with world.db.session() as s:
        job_service.request_stop(s, s.merge(world.user), job_id, clock=SystemClock())
    drive(world, job_id, states=("STOPPING",), until=lambda _: tasks_of(world, job_id)[0].stop_sent)
    # Until the controller runs again nothing cancels the job (the grace period is enforced
    # as it observes): the SIGTERM the task ignores is the one its runner relayed.
    wait_until(lambda: "ignoring SIGTERM" in log_of(world, key), timeout=20, what="the relayed SIGTERM")
    assert "CANCELLED" not in log_of(world, key)
    assert drive(world, job_id).state == "STOPPED"
    [record] = ended_slurm_job(world.slurm, world.backend.slurm_job_id(key))
    assert record["JobState"] == "CANCELLED"
    assert "CANCELLED AT" in log_of(world, key)  # slurmstepd's word, once the grace period was over
    # Killed by its runner at Slurm's SIGTERM (grace.over), which recorded it: not after
    # slurmd's own wait of 5 s and more, whose SIGKILL would leave no exit status at all.
    assert tasks_of(world, job_id)[0].exit_code == 137


def test_a_stop_asked_before_the_runner_knew_its_task_reaches_the_task_as_it_starts(tmp_path) -> None:
    """The backend writes ``relay.stop`` and then has Slurm send SIGURG to the job's steps;
    one that comes before the task runner has set its trap, or knows its task's pid (a stop
    just as the job starts), finds nothing to signal, and no other follows: the runner
    delivers a stop already asked for as soon as it has started the task."""
    backend = SlurmBackend(tmp_path / "slurm")
    key = TaskKey(1, 0, "main", 0)
    task_dir = backend.task_dir(key)
    script = "trap 'echo got SIGTERM; exit 7' TERM\necho started\nsleep 60 & wait\necho not stopped\n"
    submission.write_task_files(task_dir, TaskLaunch(key, "n1", script, {}), {}, backend.job_dir(1),
                                backend.task_python)
    submission.write_private(task_dir / "relay.stop", b"TERM")  # as SlurmBackend._relay writes it; no SIGURG
    done = subprocess.run(["/bin/bash", str(backend.task_runner), str(task_dir)], timeout=scaled(30),
                          env={"SLURMD_NODENAME": "n1", "PATH": os.environ["PATH"]}, stdin=subprocess.DEVNULL)
    # SIGTERM in its trap (7), or before the task had set it (143): either way, at once.
    assert done.returncode in (7, 143) and (task_dir / "exit").read_text() == f"{done.returncode}\n"
    assert "not stopped" not in backend.read_log(key).data.decode()


def test_a_preempted_job_gets_sigterm_and_its_grace_then_is_requeued_as_a_new_slurm_job(world) -> None:
    marker = world.tmp / "runs"
    job_id = submit(world, f"""
name: victim
jobRetryCount: 0
stopGracePeriodSeconds: 20
taskRoles:
  m:
    resourcePerInstance: {{gpu: 2}}
    commands:
      - trap 'echo checkpointed >> {marker}; exit 0' TERM
      - echo "attempt $TRAINYARD_ATTEMPT" >> {marker}
      - sleep 300 & wait
""")
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: marker.exists(), timeout=20, what="the task to start")
    with world.db.session() as s:
        assert preempt_jobs(s, [
            Preempt(job_id, 0, "preempted for job 99", 0)], SystemClock(), StoredSpecs().of) == [job_id]
    requeued = drive(world, job_id, states=("RUNNING",), until=lambda j: j.attempt == 1)
    assert requeued.retries_used == 0
    wait_until(lambda: marker.read_text().count("attempt") == 2, timeout=20, what="attempt 1 to start")
    assert marker.read_text().splitlines() == ["attempt 0", "checkpointed", "attempt 1"]
    first, second = (world.backend.slurm_job_id(TaskKey(job_id, n, "m", 0)) for n in (0, 1))
    assert first != second
    assert ended_slurm_job(world.slurm, first)[0]["JobState"] in ("COMPLETED", "CANCELLED")
    assert slurm_job(world.slurm, second)[0]["JobState"] == "RUNNING"
    with world.db.session() as s:
        attempts = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)).all()
        assert [a.state for a in attempts] == ["PREEMPTED", "RUNNING"]


def test_a_slurm_job_cancelled_outside_trainyard_fails_the_job_with_slurms_reason(world) -> None:
    job_id, key = start(world, """
name: cancelled-outside
jobRetryCount: 0
taskRoles:
  main:
    commands:
      - echo started
      - sleep 300
""")
    world.slurm.run(["scancel", world.backend.slurm_job_id(key)])
    job = drive(world, job_id)
    assert job.state == "FAILED"
    [task] = tasks_of(world, job_id)
    assert task.state == "FAILED"
    assert "CANCELLED" in task.message, task.message


def test_drained_nodes_get_no_new_work_and_a_job_stuck_on_one_is_cancelled(world, drain) -> None:
    drain("n1", "n2", "n3")
    world.controller._last_inventory = -1e9  # refresh the inventory now, not in 30 s
    world.controller.run_once()
    job_id = submit(world, """
name: drained
taskRoles:
  main:
    resourcePerInstance: {gpu: 4}
    commands: [echo "on $SLURMD_NODENAME"]
""")
    assert drive(world, job_id).state == "SUCCEEDED"
    assert [t.node for t in tasks_of(world, job_id)] == ["n4"]
    # A job placed on a node just before it was drained would pend forever in Slurm:
    # the backend cancels it and reports why, and the job's retry policy decides.
    stuck = TaskLaunch(TaskKey(999, 0, "main", 0), node="n1", script="true\n", env={}, memory_mb=16)
    world.backend.launch(stuck)
    status = wait_until(lambda: (s := world.backend.observe([stuck.key])[stuck.key]).running is False and s,
                        timeout=20, what="the stuck job to be reported")
    assert status.exit_code is None and "ReqNodeNotAvail" in status.message, status


def test_a_job_on_a_node_that_goes_down_is_retried_as_a_platform_fault(world, slurm) -> None:
    job_id, _ = start(world, """
name: node-down
jobRetryCount: 1
taskRoles:
  main:
    commands:
      - echo started
      - if [ "$TRAINYARD_ATTEMPT" = 0 ]; then sleep 300; fi
""")
    [task] = tasks_of(world, job_id)
    try:
        slurm.run(["scontrol", "update", f"NodeName={task.node}", "State=DOWN", "Reason=trainyard-test"])
        # The retry is placed from the inventory read after the task was lost; should every
        # other node be drained by a test running alongside just then, the job waits for the
        # next read (INVENTORY_REFRESH_SECONDS, 30 s).
        job = drive(world, job_id, timeout=60)
    finally:
        slurm.run(["scontrol", "update", f"NodeName={task.node}", "State=RESUME"], check=False)
    # Slurm knows no exit status of a task whose node failed: the task is LOST, and the
    # attempt is retried without spending the user's jobRetryCount.
    assert job.state == "SUCCEEDED" and job.attempt == 1 and job.retries_used == 0
    with world.db.session() as s:
        first = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == 0)).one()
        assert first.state == "LOST"
        [lost] = first.tasks
        assert lost.state == "LOST" and "NODE_FAIL" in lost.message, lost.message


def test_a_partition_limits_the_inventory_and_receives_the_jobs(world, slurm) -> None:
    """The dev cluster puts n1 alone in partition `first` (besides `debug`, the default)."""
    backend = SlurmBackend(world.tmp / "first", partition="first")
    assert [node.name for node in backend.inventory()] == ["n1"]
    task = TaskLaunch(TaskKey(7, 0, "main", 0), node="n1", script="echo here\n", env={}, memory_mb=16)
    backend.launch(task)
    try:
        [record] = wait_until(lambda: slurm_job(slurm, backend.slurm_job_id(task.key)), timeout=10,
                              what="the job to show in Slurm")
        assert record["Partition"] == "first"
    finally:
        cancel_all(slurm, backend.name_prefix)


def test_a_slurm_task_starts_from_the_clean_documented_environment_not_the_servers(
    world, slurm, monkeypatch
) -> None:
    # As with --export=NONE: Slurm's own variables, and else only what is documented.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SECRET_SERVER_VAR", "s3cret")
    backend = SlurmBackend(world.tmp / "clean-env", site_env={"SITE_CACHE": "/scratch/cache"})
    node = backend.inventory()[0].name
    key = TaskKey(1, 0, "main", 0)
    try:
        backend.launch(TaskLaunch(key, node, "env -0; printf END", {"GREETING": "hi", "TRAINYARD_JOB_ID": "1"},
                                  cpu_milli=1000, memory_mb=64))
        wait_until(lambda: not backend.observe([key])[key].running, timeout=30, what="the task to end")
        assert backend.observe([key])[key].exit_code == 0
        # Slurm's step I/O may land in the log a moment after the task's exit is recorded.
        raw = wait_until(lambda: (log := backend.read_log(key).data.decode()).endswith("END") and log,
                         what="the whole log")
        env = dict(item.split("=", 1) for item in raw.removesuffix("END").split("\0") if item)
    finally:
        cancel_all(slurm, backend.name_prefix)
    home, user = process_account()
    bash_own = {"PWD", "SHLVL", "_"}
    assert {k: v for k, v in env.items() if not k.startswith("SLURM") and k not in bash_own} == {
        "PATH": STANDARD_PATH, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
        "SITE_CACHE": "/scratch/cache", "GREETING": "hi", "TRAINYARD_JOB_ID": "1",
        "TRAINYARD_JOB_DIR": str(backend.job_dir(1)),
        "TRAINYARD_SUSPEND_FILE": str(backend.task_dir(key) / "suspend.json"),
        "TRAINYARD_SECRETS_DIR": str(backend.task_dir(key) / "secrets"),  # its secrets as files, as locally
        "PYTHONPATH": str(backend.task_python),  # trainyard.runtime for the task's own Python
        "CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "none", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert env["SLURM_JOB_ID"] == backend.slurm_job_id(key)
