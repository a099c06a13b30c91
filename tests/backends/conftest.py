"""Fixtures for backend tests: a local backend on a temporary state dir, and condition polling."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deadlines import scaled

from trainyard.backends.base import TaskKey, TaskLaunch, TaskStatus
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.local.backend import LocalBackend


def wait_until(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.01) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds,
    stretched by ``TRAINYARD_TEST_TIME_FACTOR`` (``tests/deadlines.py``)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(interval)


class LocalHarness:
    """A backend plus shortcuts to launch scripts and wait for their end."""

    wait_until = staticmethod(wait_until)

    def __init__(self, state_dir: Path, **options: Any) -> None:
        self.state_dir = state_dir
        self.backend = LocalBackend(state_dir, simulated_gpus=4, **options)
        self.node = self.backend.inventory()[0].name
        self._next_job = 1

    def new_key(self, role: str = "worker") -> TaskKey:
        self._next_job += 1
        return TaskKey(job_id=self._next_job, attempt=0, role=role, index=0)

    def launch(
        self,
        script: str,
        *,
        key: TaskKey | None = None,
        env: dict[str, str] | None = None,
        gpus: tuple[int, ...] = (),
        grace: float = 30.0,
    ) -> TaskKey:
        key = key or self.new_key()
        self.backend.launch(TaskLaunch(key, self.node, script, env or {}, gpus=gpus, grace_seconds=grace))
        return key

    def status(self, key: TaskKey, backend: LocalBackend | None = None) -> TaskStatus:
        return (backend or self.backend).observe([key])[key]

    def wait_ended(self, key: TaskKey, backend: LocalBackend | None = None, timeout: float = 10.0) -> TaskStatus:
        def ended() -> TaskStatus | None:
            status = self.status(key, backend)
            return None if status.running else status

        status = wait_until(ended, timeout)
        assert isinstance(status, TaskStatus)
        return status

    def log(self, key: TaskKey) -> str:
        return self.backend.read_log(key).data.decode()

    def wait_log(self, key: TaskKey, text: str, timeout: float = 10.0) -> None:
        wait_until(lambda: text in self.log(key), timeout)


@pytest.fixture
def local(tmp_path: Path) -> LocalHarness:
    return LocalHarness(tmp_path / "state")


@pytest.fixture
def make_local() -> Callable[..., LocalHarness]:
    """Build a harness on a given state dir with extra backend options."""
    return LocalHarness


@pytest.fixture
def podman_local(tmp_path: Path) -> LocalHarness:
    """A local backend whose tasks with an image run in Podman containers (runc)."""
    engine = ContainerEngine.find("podman", "runc")
    assert engine is not None
    return LocalHarness(tmp_path / "state", containers=engine)
