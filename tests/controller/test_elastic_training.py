"""Elastic jobs proven on a real training loop (issue 34), on the local backend: the
scenario of ``tests/elastic_training.py`` (a CPU PyTorch DDP job grows from one worker to
three and shrinks to two under a prod job, with the steps and loss of a fixed-size run)
under the real controller, on three simulated GPUs."""

from __future__ import annotations

import pytest
from elastic_training import grows_and_shrinks

from trainyard.core.clock import SystemClock


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_ddp_job_grows_into_freed_gpus_and_shrinks_for_a_prod_job_with_the_same_steps_and_loss(make_world):
    world = make_world(gpus=3, clock=SystemClock())
    hog = world.submit("name: hog\ntaskRoles:\n  h:\n    resourcePerInstance: {gpu: 2}\n    commands: ['sleep 600']\n")
    world.drive(hog, ("RUNNING",))
    grows_and_shrinks(world, hog, prod_gpus=1)
