"""trainyard.runtime, the library a job imports: standard library only, its contract with
Trainyard (the request file, the signal, the exit code, the state that outlives attempts),
and the local simulation of a suspension."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from deadlines import scaled

from trainyard import runtime

SRC = str(Path(runtime.__file__).resolve().parents[1])

# A deterministic loop: sums i*i for i < 200, checkpointing the running total in the
# job's lasting state whenever it is asked to suspend.
LOOP = textwrap.dedent("""
    import sys, time
    from trainyard import runtime
    state = runtime.get_state({"i": 0, "total": 0})
    print("attempt", runtime.attempt(), "resumed", runtime.resumed(), "from", state["i"], flush=True)
    i, total = state["i"], state["total"]
    while i < 200:
        total += i * i
        i += 1
        time.sleep(0.005)
        if runtime.should_suspend():
            runtime.set_state({"i": i, "total": total})
            print("suspending at", i, flush=True)
            runtime.suspend_done()
    print("total", total, flush=True)
""")


def run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(script)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINYARD_", "RANK", "WORLD_SIZE"))}
    return subprocess.run([sys.executable, "-S", str(path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=scaled(60), env={**clean, "PYTHONPATH": SRC, **env})


def test_it_imports_with_the_standard_library_alone(tmp_path):
    # -S: no site-packages at all, so neither pydantic nor anything else of the server's.
    done = run("from trainyard import runtime\nimport sys\n"
               "print(sorted(m for m in sys.modules\n"
               "             if m != '__main__' and m.split('.')[0] not in sys.stdlib_module_names))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['trainyard', 'trainyard.runtime']"


def test_the_simulation_suspends_resumes_and_ends_as_an_uninterrupted_run(tmp_path):
    (tmp_path / "plain").mkdir()
    plain = run(LOOP, tmp_path / "plain")
    assert plain.returncode == 0 and plain.stdout.splitlines()[-1] == f"total {sum(i * i for i in range(200))}"
    twice = run(LOOP, tmp_path, TRAINYARD_SIMULATE_SUSPEND_AFTER="0.2", TRAINYARD_SIMULATE_SUSPENSIONS="2")
    assert twice.returncode == 0, twice.stderr
    lines = twice.stdout.splitlines()
    assert lines[0] == "attempt 0 resumed False from 0"
    assert [line.split()[:4] for line in lines if line.startswith("attempt")] == [
        ["attempt", "0", "resumed", "False"], ["attempt", "1", "resumed", "True"],
        ["attempt", "2", "resumed", "True"]]
    assert sum(line.startswith("suspending at") for line in lines) == 2
    assert lines[-1] == plain.stdout.splitlines()[-1]
    assert (tmp_path / runtime.LOCAL_JOB_DIR / ".trainyard" / "state.json").exists()


def test_under_trainyard_the_request_file_stops_the_task_with_the_suspended_code(tmp_path):
    request = tmp_path / "job" / ".trainyard" / "attempt-0.suspend"
    request.parent.mkdir(parents=True)
    request.write_text(json.dumps({"reason": "preempted for job 7", "deadline": 0}))
    done = run(LOOP, tmp_path, TRAINYARD_JOB_ID="3", TRAINYARD_JOB_DIR=str(tmp_path / "job"),
               TRAINYARD_SUSPEND_FILE=str(request), TRAINYARD_SIMULATE_SUSPEND_AFTER="0")
    assert done.returncode == runtime.SUSPENDED_EXIT_CODE
    assert done.stdout.splitlines()[-1] == "suspending at 1"  # the simulation is off under Trainyard
    assert json.loads((tmp_path / "job" / ".trainyard" / "state.json").read_text()) == {"i": 1, "total": 0}


def test_under_trainyard_the_chosen_signal_asks_for_a_suspension(tmp_path):
    script = LOOP.replace("time.sleep(0.005)", "time.sleep(0.005)\n    if i == 5: print('ready', flush=True)")
    path = tmp_path / "train.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env.update(PYTHONPATH=SRC, TRAINYARD_JOB_ID="3", TRAINYARD_JOB_DIR=str(tmp_path / "job"),
               TRAINYARD_SUSPEND_FILE=str(tmp_path / "none"), TRAINYARD_SUSPEND_SIGNAL="USR1")
    task = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    assert task.stdout is not None
    lines = []
    for line in task.stdout:  # wait until the loop runs (its handler is installed by then)
        lines.append(line)
        if line.startswith("ready"):
            break
    task.send_signal(signal.SIGUSR1)
    rest, _ = task.communicate(timeout=scaled(30))
    assert task.returncode == runtime.SUSPENDED_EXIT_CODE
    assert rest.splitlines()[-1].startswith("suspending at")


def test_once_done_the_task_ignores_the_signal_that_may_still_come_while_it_exits(tmp_path):
    # Trainyard writes the file, then signals: a task that saw the file first may be shutting
    # down when the signal lands, after the interpreter has put its default action back.
    script = textwrap.dedent("""
        import atexit, signal
        from trainyard import runtime
        assert runtime.should_suspend()
        atexit.register(lambda: print("at exit:", signal.getsignal(signal.SIGUSR1).name, flush=True))
        runtime.suspend_done()
    """)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"reason": "preempted", "deadline": 0}))
    done = run(script, tmp_path, TRAINYARD_JOB_ID="3", TRAINYARD_JOB_DIR=str(tmp_path / "job"),
               TRAINYARD_SUSPEND_FILE=str(request), TRAINYARD_SUSPEND_SIGNAL="SIGUSR1")
    assert done.returncode == runtime.SUSPENDED_EXIT_CODE, done.stderr
    assert done.stdout == "at exit: SIG_IGN\n"


def test_state_is_none_until_set_and_written_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINYARD_JOB_DIR", str(tmp_path))
    assert runtime.get_state() is None and runtime.get_state({"x": 1}) == {"x": 1}
    runtime.set_state({"step": 10, "loss": 0.5})
    assert runtime.get_state() == {"step": 10, "loss": 0.5}
    assert [p.name for p in (tmp_path / ".trainyard").iterdir()] == ["state.json"]  # no temporary left
    with pytest.raises(TypeError):
        runtime.set_state({"not json": object()})
    assert runtime.get_state() == {"step": 10, "loss": 0.5}


def test_rank_world_size_attempt_and_dirs_come_from_the_wiring(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("TRAINYARD_ATTEMPT", "2")
    monkeypatch.setenv("TRAINYARD_JOB_DIR", str(tmp_path / "jd"))
    monkeypatch.setenv("TRAINYARD_RESUMED", "1")
    assert (runtime.rank(), runtime.world_size(), runtime.attempt(), runtime.resumed()) == (3, 8, 2, True)
    assert runtime.checkpoint_dir() == tmp_path / "jd" / "checkpoints" and runtime.checkpoint_dir().is_dir()


def test_a_signal_before_the_first_check_is_remembered_not_fatal(tmp_path):
    # Sent while the job still "loads its data": the import alone installed the handler.
    script = ("import os, signal\nfrom trainyard import runtime\nos.kill(os.getpid(), signal.SIGUSR1)\n"
              "print('asked' if runtime.should_suspend() else 'not asked')\n")
    done = run(script, tmp_path, TRAINYARD_JOB_ID="3", TRAINYARD_SUSPEND_FILE=str(tmp_path / "none"),
               TRAINYARD_SUSPEND_SIGNAL="SIGUSR1", TRAINYARD_JOB_DIR=str(tmp_path / "job"))
    assert (done.returncode, done.stdout) == (0, "asked\n"), done.stderr


def test_a_sweep_member_knows_its_index_and_point_and_reports_figures(tmp_path, monkeypatch) -> None:
    assert (runtime.sweep_index(), runtime.sweep_params()) == (None, {})  # not in a sweep
    monkeypatch.setenv("TRAINYARD_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("TRAINYARD_SWEEP_INDEX", "3")
    monkeypatch.setenv("TRAINYARD_SWEEP_PARAMS", '{"lr": 0.01, "batch": 64}')
    assert (runtime.sweep_index(), runtime.sweep_params()) == (3, {"lr": 0.01, "batch": 64})
    runtime.report(loss=0.5, step=1)
    runtime.report(loss=0.25)  # the latest value of each name is kept
    assert json.loads((tmp_path / ".trainyard" / "metrics.json").read_text()) == {"loss": 0.25, "step": 1}
