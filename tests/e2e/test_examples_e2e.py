"""Every example in examples/ runs as its comment says."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.server import Server

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_examples_run_as_documented(server: Server) -> None:
    client = server.admin()
    # Submitted first, ended last: it runs 20 s beside the others.
    resumable = client.submit((EXAMPLES / "checkpoint-resume.yaml").read_text()).id
    hello = client.wait(client.submit((EXAMPLES / "hello-world.yaml").read_text()).id, timeout=30)
    assert hello.state == "SUCCEEDED"
    assert b"Hello from Trainyard job" in client.logs(hello.id)

    wiring = client.wait(client.submit((EXAMPLES / "distributed-wiring.yaml").read_text()).id, timeout=60)
    assert wiring.state == "SUCCEEDED", [client.logs(wiring.id, task=f"worker/{i}") for i in (0, 1)]
    assert b"wiring OK" in client.logs(wiring.id, task="worker/1")

    retry = client.wait(client.submit((EXAMPLES / "retry.yaml").read_text()).id, timeout=30)
    assert retry.state == "SUCCEEDED"
    assert [a.state for a in retry.attempts] == ["FAILED", "SUCCEEDED"]

    tf = client.wait(client.submit((EXAMPLES / "openpai-v2-tensorflow.yaml").read_text()).id, timeout=30)
    assert tf.state == "SUCCEEDED"
    assert any("not used by the local backend" in w for w in tf.warnings)
    assert any("runtimeplugin[0] (ssh): kept, but ignored" in w for w in tf.warnings)
    assert "not-a-real-key" not in str(tf.spec)

    checkpointed = client.wait(resumable, timeout=90)
    assert checkpointed.state == "SUCCEEDED", client.logs(resumable)
    log = client.logs(resumable)
    assert log.startswith(f"attempt {checkpointed.attempt}: starting at step ".encode()) and b"done: 40 steps" in log
    assert checkpointed.jobDir is not None and checkpointed.jobDir.files == 1
