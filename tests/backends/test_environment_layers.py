"""The Python environment's layer of a task's environment (``backends/environment.py``): its
bin folders before the PATH below (the site's, when it sets one), VIRTUAL_ENV set, and the
job's own env still over both."""

from __future__ import annotations

from trainyard.backends.base import PythonEnvironment
from trainyard.backends.environment import STANDARD_PATH, base_environment, python_environment
from trainyard.backends.local.taskenv import task_environment

ENV = PythonEnvironment("/envs/alice/torch", ("/envs/alice/torch/bin", "/opt/conda/bin"))


def test_the_environments_bins_come_before_the_standard_path_and_virtual_env_is_set() -> None:
    layered = python_environment(base_environment("/home/alice", "alice"), ENV)
    assert layered["PATH"] == f"/envs/alice/torch/bin:/opt/conda/bin:{STANDARD_PATH}"
    assert layered["VIRTUAL_ENV"] == "/envs/alice/torch" and layered["USER"] == "alice"


def test_a_site_path_stays_after_the_environments_bins_and_the_jobs_env_wins_over_both() -> None:
    site = {**base_environment("/home/alice", "alice"), "PATH": f"/usr/local/cuda/bin:{STANDARD_PATH}"}
    layered = python_environment(site, ENV)
    assert layered["PATH"] == f"/envs/alice/torch/bin:/opt/conda/bin:/usr/local/cuda/bin:{STANDARD_PATH}"
    env = task_environment(layered, {"PATH": "/mine/bin:/usr/bin", "VIRTUAL_ENV": ""}, ())
    assert (env["PATH"], env["VIRTUAL_ENV"]) == ("/mine/bin:/usr/bin", "")


def test_without_an_environment_nothing_changes() -> None:
    below = base_environment("/home/alice", "alice")
    assert python_environment(below, None) == below and "VIRTUAL_ENV" not in below
