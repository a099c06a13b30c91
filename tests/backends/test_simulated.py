"""The simulated backend (a stand-in for scale tests, ``backends/simulated.py``): nodes that
report GPUs, tasks that "run" for their stated time without a process, on the controller's
clock; and the live controller and scheduler driving jobs through them."""

from __future__ import annotations

import queue

from deadlines import scaled

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.simulated import SimulatedBackend
from trainyard.controller.loop import Controller
from trainyard.core.clock import FakeClock, SystemClock
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.rows import JobRow


def launch(backend: SimulatedBackend, key: TaskKey, script: str, **env: str) -> None:
    backend.launch(TaskLaunch(key=key, node="sim-0001", script=script, env=env))


def test_nodes_report_gpus_and_tasks_run_for_their_stated_time_or_until_stopped() -> None:
    clock = FakeClock()
    backend = SimulatedBackend(3, 4, gpu_model="H100", nodes_per_rack=2, clock=clock)
    nodes = backend.inventory()
    assert [n.name for n in nodes] == ["sim-0001", "sim-0002", "sim-0003"]
    assert [n.labels["rack"] for n in nodes] == ["r1", "r1", "r2"]
    assert all(len(n.gpus) == 4 and n.gpus[0].model == "H100" and n.gpus[0].simulated for n in nodes)
    sleeping, timed, failing, stopped = (TaskKey(1, 0, "m", i) for i in range(4))
    launch(backend, sleeping, "echo hi\nsleep 30 && echo done\n")
    launch(backend, timed, "python train.py\n", TRAINYARD_SIMULATED_SECONDS="5")
    launch(backend, failing, "sleep 1\n", TRAINYARD_SIMULATED_EXIT="3")
    launch(backend, stopped, "sleep 100\n")
    launch(backend, timed, "sleep 999\n")  # a second launch of a key does nothing
    clock.advance(2)
    backend.stop(stopped, 30)
    seen = backend.observe([sleeping, timed, failing, stopped, TaskKey(9, 0, "m", 0)])
    assert [seen[k].running for k in (sleeping, timed)] == [True, True]
    assert (seen[failing].running, seen[failing].exit_code) == (False, 3)
    assert (seen[stopped].exit_code, seen[stopped].signal) == (143, 15)
    assert seen[TaskKey(9, 0, "m", 0)].lost
    clock.advance(30)
    assert [s.exit_code for s in backend.observe([sleeping, timed]).values()] == [0, 0]
    assert b"runs 30 s" in backend.read_log(sleeping).data and not backend.read_log(TaskKey(9, 0, "m", 0)).exists
    assert backend.allocate_ports("sim-0001", 2, taken={20001}) == [20000, 20002]


def test_the_controller_schedules_gangs_across_simulated_nodes_and_they_end_on_its_clock(db) -> None:
    clock = FakeClock()
    backend = SimulatedBackend(4, 8, clock=clock)
    controller = Controller(db, backend, clock)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
    controller.run_once()
    job = ("name: {name}\ntaskRoles:\n  w:\n    instances: {n}\n    resourcePerInstance: {{gpu: 8}}\n"
           "    commands: ['{cmd}']\n")
    files = [job.format(name="big", n=3, cmd="sleep 60")] + [job.format(name="small", n=1, cmd="sleep 10")] * 2
    with db.session() as s:
        ids = [job_service.submit_job(s, s.merge(alice), parse_job(text), clock=clock).id for text in files]
    controller.wake()
    controller.run_once()
    controller.run_once()

    def states() -> list[str]:
        with db.session() as s:
            return [s.get(JobRow, i).state for i in ids]

    assert states() == ["RUNNING", "RUNNING", "WAITING"]  # 32 GPUs: the gang's 24 and one small job's 8
    clock.advance(15)
    for _ in range(3):
        controller.wake()
        controller.run_once()
    assert states() == ["RUNNING", "SUCCEEDED", "RUNNING"]  # the second small job took the freed node
    clock.advance(60)
    for _ in range(3):
        controller.wake()
        controller.run_once()
    assert states() == ["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]


def test_ends_and_stops_are_announced_when_they_come() -> None:
    backend = SimulatedBackend(1, 8, clock=SystemClock())
    ends: queue.SimpleQueue[float] = queue.SimpleQueue()
    backend.on_task_end(lambda: ends.put(backend.clock.monotonic()))
    short, long = TaskKey(1, 0, "m", 0), TaskKey(2, 0, "m", 0)
    launch(backend, long, "sleep 3600\n")
    launch(backend, short, "train\n", TRAINYARD_SIMULATED_SECONDS="0.05")
    ends.get(timeout=scaled(30))  # the short one's end, not the hour-long one's
    assert backend.observe([short])[short].exit_code == 0 and backend.observe([long])[long].running
    backend.stop(long, 30)
    ends.get(timeout=scaled(30))
    assert backend.observe([long])[long].signal == 15


def test_the_live_controller_sees_a_task_end_when_it_comes_not_at_its_tick(db) -> None:
    # A tick of an hour: only the backend's announcement can bring the cycle that sees the end.
    cycles: queue.SimpleQueue[None] = queue.SimpleQueue()

    class Watched(Controller):
        def run_once(self) -> None:
            super().run_once()
            cycles.put(None)

    clock = SystemClock()
    controller = Watched(db, SimulatedBackend(2, 8, clock=clock), clock, interval=3600)
    controller.run_once()  # the nodes
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        text = ("name: quick\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 1}\n"
                "    env: {TRAINYARD_SIMULATED_SECONDS: '0.5'}\n    commands: [train]\n")
        job_id = job_service.submit_job(s, s.merge(alice), parse_job(text), clock=clock).id
    controller.wake()
    controller.start()  # its first cycle places and launches the job; the next comes at once (the wake)
    try:

        def state() -> str:
            with db.session() as s:
                return s.get(JobRow, job_id).state

        while state() != "SUCCEEDED":
            cycles.get(timeout=scaled(30))
    finally:
        controller.stop()
