"""The local backend runs scripts literally, with the right env, once per key; logs, ports, inventory."""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

import pytest

from trainyard.backends.base import GpuInfo, TaskKey, TaskLaunch
from trainyard.backends.environment import STANDARD_PATH, process_account
from trainyard.backends.local import taskfiles
from trainyard.backends.local.backend import LocalBackend


def test_a_task_runs_its_output_lands_in_the_log_and_exit_0_is_recorded(local):
    key = local.launch("echo hello\necho oops >&2\necho bye")
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal, status.lost) == (0, None, False)
    # stdout and stderr share one append-only file, so their order is kept.
    assert local.log(key) == "hello\noops\nbye\n"
    exit_record = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.EXIT))
    assert exit_record["stopped"] is False
    assert exit_record["started_at"] <= exit_record["finished_at"]


def test_exit_code_3_is_recorded_as_3(local):
    status = local.wait_ended(local.launch("exit 3"))
    assert (status.exit_code, status.signal) == (3, None)


def test_a_task_killed_by_a_signal_reports_128_plus_n(local):
    status = local.wait_ended(local.launch("kill -SEGV $$"))
    assert (status.exit_code, status.signal) == (139, 11)
    assert "SIGSEGV" in status.message


def test_env_and_gpu_pinning_reach_the_task(local, monkeypatch):
    monkeypatch.setenv("TRAINYARD_TEST_SERVER_SECRET", "s3cret")
    script = (
        'echo "$GREETING|$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER'
        '|${TRAINYARD_TEST_SERVER_SECRET-unset}|$PWD"'
    )
    key = local.launch(script, env={"GREETING": "hi there"}, gpus=(1, 3))
    assert local.wait_ended(key).exit_code == 0
    work = local.backend.task_dir(key) / taskfiles.WORK_DIR
    assert local.log(key) == f"hi there|1,3|1,3|PCI_BUS_ID|unset|{work}\n"


def test_a_task_starts_from_the_clean_documented_environment_not_the_servers(local, tmp_path, monkeypatch):
    # The server's own venv first on its PATH, and a secret of its own: neither reaches tasks.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SECRET_SERVER_VAR", "s3cret")
    backend = LocalBackend(tmp_path, gpus=[], site_env={"HTTPS_PROXY": "http://proxy:3128", "LANG": "en_US.UTF-8"})
    key = TaskKey(1, 0, "main", 0)
    job_env = {"GREETING": "hi", "TRAINYARD_JOB_ID": "1", "HTTPS_PROXY": "http://the-jobs-own:1"}
    backend.launch(TaskLaunch(key, backend.inventory()[0].name, "env -0", job_env))
    local.wait_ended(key, backend=backend)
    env = dict(item.split("=", 1) for item in backend.read_log(key).data.decode().split("\0") if item)
    home, user = process_account()
    bash_own = {"PWD", "SHLVL", "_"}  # what bash sets for the commands it runs
    assert {k: v for k, v in env.items() if k not in bash_own} == {
        "PATH": STANDARD_PATH, "HOME": home, "USER": user, "LOGNAME": user, "SHELL": "/bin/bash",
        "LANG": "en_US.UTF-8",  # the site's variables override the base...
        "HTTPS_PROXY": "http://the-jobs-own:1",  # ...and the job's override the site's
        "GREETING": "hi", "TRAINYARD_JOB_ID": "1",
        "TRAINYARD_SECRETS_DIR": str(backend.work_dir(key).with_name("work.secrets")),
        "TRAINYARD_JOB_DIR": str(backend.job_dir(1)),
        "TRAINYARD_SUSPEND_FILE": str(backend.work_dir(key).with_name("work.suspend") / "request.json"),
        "PYTHONPATH": str(backend.task_python),  # trainyard.runtime for the task's own Python
        "CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "none", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def test_a_site_variable_no_task_could_get_is_refused_at_start(tmp_path):
    with pytest.raises(ValueError, match="task_env: 'NOT A NAME' is not a valid environment variable name"):
        LocalBackend(tmp_path, gpus=[], site_env={"NOT A NAME": "x"})


def test_a_task_without_gpus_sees_none(local):
    key = local.launch('echo "[${CUDA_VISIBLE_DEVICES-unset}]" "$NVIDIA_VISIBLE_DEVICES"')
    local.wait_ended(key)
    assert local.log(key) == "[] none\n"


def test_the_job_env_cannot_widen_its_gpu_allocation(local):
    key = local.launch('echo "$CUDA_VISIBLE_DEVICES"', env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, gpus=(2,))
    local.wait_ended(key)
    assert local.log(key) == "2\n"


def test_a_script_with_shell_metacharacters_is_run_literally(local, tmp_path):
    marker = tmp_path / "must-not-exist"
    script = (
        f"echo '$(touch {marker})' \"it's\" `echo back` 100% %s %%\n"
        "printf '%s\\n' \"line two\" 'a \"quoted\" word'\n"
        "x='multi\nline'; echo \"$x\"\n"
    )
    key = local.launch(script)
    assert local.wait_ended(key).exit_code == 0
    assert local.log(key) == (f'$(touch {marker}) it\'s back 100% %s %%\nline two\na "quoted" word\nmulti\nline\n')
    assert not marker.exists()
    assert (local.backend.task_dir(key) / taskfiles.SCRIPT).read_text() == script


def test_launching_the_same_key_twice_starts_it_once(local, tmp_path):
    counter = tmp_path / "counter"
    script = f"echo run >> {counter}"
    key = local.launch(script)
    local.launch(script, key=key)
    local.wait_ended(key)
    # A new backend on the same state dir (a restarted server) does not start it again.
    LocalBackend(local.state_dir).launch(TaskLaunch(key, local.node, script, {}))
    local.launch(script, key=key)
    assert local.wait_ended(key).exit_code == 0
    assert counter.read_text() == "run\n"


def test_observing_a_task_never_launched_reports_it_lost(local):
    key = TaskKey(job_id=999, attempt=0, role="worker", index=0)
    status = local.status(key)
    assert status.lost and not status.running and status.exit_code is None


@pytest.mark.parametrize("role", ["../escape", "a/b", "", "1st", "a-b", "worker\n"])
def test_roles_that_could_build_odd_paths_are_refused(local, role):
    key = TaskKey(job_id=1, attempt=0, role=role, index=0)
    with pytest.raises(ValueError, match="role"):
        local.backend.launch(TaskLaunch(key, local.node, "true", {}))
    with pytest.raises(ValueError, match="role"):
        local.backend.task_dir(key)


def test_negative_key_numbers_are_refused(local):
    with pytest.raises(ValueError, match="attempt"):
        local.backend.task_dir(TaskKey(job_id=1, attempt=-1, role="w", index=0))


def test_launch_refuses_another_node_unknown_gpus_and_bad_env(local):
    key = TaskKey(job_id=1, attempt=0, role="w", index=0)
    with pytest.raises(ValueError, match="one node"):
        local.backend.launch(TaskLaunch(key, "elsewhere", "true", {}))
    with pytest.raises(ValueError, match=r"GPU indices \[7\]"):
        local.backend.launch(TaskLaunch(key, local.node, "true", {}, gpus=(7,)))
    with pytest.raises(ValueError, match="NUL"):
        local.backend.launch(TaskLaunch(key, local.node, "true", {"A": "x\0y"}))
    with pytest.raises(ValueError, match="name"):
        local.backend.launch(TaskLaunch(key, local.node, "true", {"A=B": "x"}))
    assert local.status(key).lost  # nothing was written


def test_read_log_with_offsets_negative_offsets_and_limits(local):
    key = local.launch("printf 0123456789")
    local.wait_ended(key)
    read = local.backend.read_log
    assert (read(key).data, read(key).offset, read(key).size) == (b"0123456789", 0, 10)
    assert (read(key, 3, 4).data, read(key, 3, 4).offset) == (b"3456", 3)
    assert (read(key, -4).data, read(key, -4).offset) == (b"6789", 6)
    assert (read(key, -4, 2).data, read(key, -4, 2).offset) == (b"67", 6)
    assert (read(key, -100).data, read(key, -100).offset) == (b"0123456789", 0)
    assert (read(key, 50).data, read(key, 50).offset, read(key, 50).size) == (b"", 10, 10)
    assert read(key, 0, 0).data == b""


def test_read_log_of_a_task_without_output_is_empty(local):
    chunk = local.backend.read_log(TaskKey(job_id=5, attempt=0, role="w", index=0), -10)
    assert (chunk.data, chunk.offset, chunk.size) == (b"", 0, 0)


def test_allocated_ports_are_distinct_and_free(local):
    ports = local.backend.allocate_ports(local.node, 5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    assert local.backend.allocate_ports(local.node, 0) == []
    with pytest.raises(ValueError):
        local.backend.allocate_ports("elsewhere", 1)


def test_inventory_reports_one_node_with_simulated_gpus_marked(tmp_path: Path):
    backend = LocalBackend(tmp_path, simulated_gpus=2, cpu_milli=8000, memory_mb=4096)
    [node] = backend.inventory()
    assert (node.name, node.address) == (socket.gethostname(), "127.0.0.1")
    assert (node.cpu_milli, node.memory_mb) == (8000, 4096)
    assert [(g.index, g.model, g.simulated) for g in node.gpus] == [(0, "V100", True), (1, "V100", True)]
    assert backend.name == "local"


def test_inventory_measures_the_host_and_takes_explicit_gpus(tmp_path: Path):
    gpus = [GpuInfo(index=0, model="A100", memory_mb=40960, uuid="GPU-x")]
    [node] = LocalBackend(tmp_path, gpus=gpus, simulated_gpus=3).inventory()
    assert node.gpus == tuple(gpus)
    assert node.cpu_milli >= 1000 and node.memory_mb > 0


INVALID_KEYS = [
    TaskKey(job_id=1, attempt=0, role="worker\n", index=0),
    TaskKey(job_id=1, attempt=0, role="../escape", index=0),
    TaskKey(job_id=1, attempt=-1, role="worker", index=0),
    TaskKey(job_id=1, attempt=0, role="worker", index=0, run=-2),
]


@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
def test_read_paths_answer_for_an_invalid_key_instead_of_raising(local, key, caplog):
    chunk = local.backend.read_log(key, -10)
    assert (chunk.data, chunk.offset, chunk.size) == (b"", 0, 0)
    valid = local.launch("exit 0")
    statuses = local.backend.observe([key, valid])  # one bad row must not hide the others
    assert statuses[key].lost and not statuses[key].running and "invalid task key" in statuses[key].message
    assert statuses[valid].running or statuses[valid].exit_code == 0
    with caplog.at_level(logging.WARNING, logger="trainyard.backends.local.backend"):
        local.backend.stop(key, 5)
    assert "invalid task key" in caplog.text
    assert sorted(p.name for p in (local.state_dir / "tasks").iterdir()) == [str(valid.job_id)]


def test_a_task_dir_holding_another_task_is_never_adopted(local, caplog):
    key = local.launch("echo mine", env={"A": "1"})
    assert local.wait_ended(key).exit_code == 0
    other = LocalBackend(local.state_dir, gpus=[])  # say, a server on another database
    for script, env in [("echo theirs", {"A": "1"}), ("echo mine", {"A": "2"}), ("echo mine", {})]:
        with pytest.raises(RuntimeError, match=r"task dir .* already holds a different task"):
            other.launch(TaskLaunch(key, local.node, script, env))
    assert "holds a different task" in caplog.text
    other.launch(TaskLaunch(key, local.node, "echo mine", {"A": "1"}))  # the same task: adopted, not rerun
    local.launch("echo mine", key=key, env={"A": "1"})
    assert local.log(key) == "mine\n"


def test_a_launch_in_progress_of_another_task_is_not_overwritten(local, tmp_path):
    key = local.new_key()
    task_dir = local.backend.task_dir(key)
    # spec.json written, supervisor not spawned yet (no pid.json); an older version's spec.
    task_dir.mkdir(parents=True)
    spec = {"script": "echo theirs", "env": {"PATH": "/bin", "A": "1", "CUDA_VISIBLE_DEVICES": ""}}
    taskfiles.write_json(str(task_dir / taskfiles.SPEC), spec)
    with pytest.raises(RuntimeError, match="already holds a different task"):
        local.launch("echo mine", key=key, env={"A": "1"})
    assert taskfiles.read_json(str(task_dir / taskfiles.SPEC)) == spec
    # The same task (GPU pinning is the backend's, not the job's) is launched as usual.
    local.launch("echo theirs", key=key, env={"A": "1", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert local.wait_ended(key).exit_code == 0 and local.log(key) == "theirs\n"
