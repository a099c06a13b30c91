"""Every example in examples/ runs as its comment says."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_examples_run_as_documented(server: Server) -> None:
    client = server.admin()
    # Submitted first, stopped last: its 40 steps take 20 s, which the others run beside. Its
    # whole story, preempted and resumed to its last step, is test_jobdir_e2e.py's.
    resumable = client.submit((EXAMPLES / "checkpoint-resume.yaml").read_text()).id
    hello = client.wait(client.submit((EXAMPLES / "hello-world.yaml").read_text()).id, timeout=scaled(30))
    assert hello.state == "SUCCEEDED"
    assert b"Hello from Trainyard job" in client.logs(hello.id)

    wiring = client.wait(client.submit((EXAMPLES / "distributed-wiring.yaml").read_text()).id, timeout=scaled(60))
    assert wiring.state == "SUCCEEDED", [client.logs(wiring.id, task=f"worker/{i}") for i in (0, 1)]
    assert b"wiring OK" in client.logs(wiring.id, task="worker/1")

    retry = client.wait(client.submit((EXAMPLES / "retry.yaml").read_text()).id, timeout=scaled(30))
    assert retry.state == "SUCCEEDED"
    assert [a.state for a in retry.attempts] == ["FAILED", "SUCCEEDED"]

    # Its tasks run in containers of its dockerimage prerequisite; no registry is reachable
    # from the tests, so the pull fails, and says so.
    tf = client.wait(client.submit((EXAMPLES / "openpai-v2-tensorflow.yaml").read_text()).id, timeout=scaled(120))
    assert tf.state == "FAILED"
    # The short name is qualified as Docker does.
    assert "could not pull docker.io/tensorflow/tensorflow:2.15.0-gpu" in str(tf.message), tf.message
    assert any("runtimeplugin[0] (ssh): kept, but ignored" in w for w in tf.warnings)
    assert "not-a-real-key" not in str(tf.spec)

    if shutil.which("podman") is not None and os.geteuid() == 0:  # CI: .ci/run builds the test image
        subprocess.run([str(EXAMPLES.parent / "scripts" / "dev-image.sh"), "build"], check=True, capture_output=True)
        boxed = client.wait(client.submit((EXAMPLES / "container.yaml").read_text()).id, timeout=scaled(120))
        assert boxed.state == "SUCCEEDED", [client.logs(boxed.id, task=f"worker/{i}") for i in (0, 1)]
        assert b"hello from rank 0" in client.logs(boxed.id, task="worker/1")
        assert b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in client.logs(boxed.id, task="worker/0")

    # It runs, saving each step in its job directory; stopped, its SIGTERM handler saves the last.
    running = wait_until(lambda: (job := client.job(resumable)).state == "RUNNING" and job.jobDir
                         and job.jobDir.files == 1 and job, what="the checkpointing example to save a step")
    assert client.logs(resumable).startswith(f"attempt {running.attempt}: starting at step ".encode())
    client.stop(resumable)
    stopped = client.wait(resumable, timeout=scaled(60))
    assert stopped.state == "STOPPED" and b"saved step " in client.logs(resumable), client.logs(resumable)
    assert stopped.jobDir is not None and stopped.jobDir.files == 1
