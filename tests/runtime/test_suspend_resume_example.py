"""examples/suspend-resume/train_numpy.py on its own, as docs/runtime.md tells a user to try
it: the runtime's local simulation suspends and resumes it, and it ends as an uninterrupted
run does, bit for bit. (Under Trainyard: tests/controller/test_suspend_resume_training.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deadlines import scaled

from trainyard import runtime

SRC = str(Path(runtime.__file__).resolve().parents[1])
TRAINER = Path(__file__).resolve().parents[2] / "examples" / "suspend-resume" / "train_numpy.py"


def train(folder: Path, step_seconds: str, **env: str) -> dict:
    folder.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    done = subprocess.run([sys.executable, str(TRAINER), "--steps", "200", "--step-seconds", step_seconds],
                          cwd=folder, env=clean | {"PYTHONPATH": SRC} | env, capture_output=True, text=True,
                          timeout=scaled(120), check=False)
    assert done.returncode == 0, done.stderr
    return json.loads((folder / runtime.LOCAL_JOB_DIR / "result.json").read_text())


def test_the_numpy_example_simulated_twice_suspended_ends_as_an_uninterrupted_run(tmp_path):
    plain = train(tmp_path / "plain", "0")  # the sleep per step changes no number
    simulated = train(tmp_path / "simulated", "0.01", TRAINYARD_SIMULATE_SUSPEND_AFTER="0.3",
                      TRAINYARD_SIMULATE_SUSPENSIONS="2")
    assert (simulated["loss"], simulated["sha256"], simulated["steps"]) == (plain["loss"], plain["sha256"], 200)
    segments = simulated["segments"]
    assert [(s["attempt"], s["ended"]) for s in segments] == [
        (0, "suspended: simulated after 0.3 s"), (1, "suspended: simulated after 0.3 s"), (2, "finished")]
    assert [s["from"] for s in segments] == [0, segments[0]["to"], segments[1]["to"]] and segments[2]["to"] == 200
    assert 0 < segments[0]["to"] < segments[1]["to"] < 200
