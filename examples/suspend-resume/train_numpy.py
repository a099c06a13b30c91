"""A deterministic training loop in NumPy that Trainyard may suspend and resume at any step.

A two-layer MLP (tanh, dropout) learns a noisy function of 16 features by SGD with
momentum. Everything it computes is a function of the seed and of what it saved: the
batch of step ``s`` is drawn from a generator seeded with ``(SEED, s)``, and dropout's
generator is part of the checkpoint. So a run suspended and resumed any number of times
ends with the very parameters and loss, bit for bit, of a run that was never interrupted
(``tests/controller/test_suspend_resume_training.py`` checks it; ``train_torch.py`` is the
same loop in PyTorch). The contract it follows is ``docs/runtime.md``'s:

* each step, ``runtime.should_suspend()``: when true, save the model, the optimizer, the
  step and the random state to ``runtime.checkpoint_dir()`` atomically, then
  ``runtime.suspend_done()`` (exit 85);
* at start, ``runtime.resumed()`` (or a checkpoint left by an earlier attempt): load it;
* at the end, ``result.json`` in the job directory: the steps, the loss (``repr`` of the
  float, so exact) and the sha256 of the parameters' bytes.

SIGTERM is taken as a request to suspend too: it is what a backend without the suspend
capability sends (and ``yard stop``), and saving then loses no work.

``--wait-for-suspend STEP`` (off by default; repeat it for more steps) is for a test or a
demo that must see the loop suspended at a known step whatever the machine's speed: an
attempt that reaches that step (not one that resumes there) stops before it and waits until
it is asked to suspend, then saves and suspends as at any step.

    python train_numpy.py --steps 2000 --step-seconds 0.01
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from trainyard import runtime

SEED = 20171001
FEATURES, HIDDEN, SAMPLES, BATCH = 16, 32, 1024, 32
LEARNING_RATE, MOMENTUM, DROPOUT = 0.05, 0.9, 0.1
CHECKPOINT = "numpy.npz"
PARAMETERS = ("w1", "b1", "w2", "b2")  # the order of the hashed bytes


def dataset() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((SAMPLES, FEATURES))
    y = np.sin(x @ rng.standard_normal(FEATURES) / np.sqrt(FEATURES))[:, None] + 0.1 * rng.standard_normal((SAMPLES, 1))
    return x, y


def fresh_state() -> dict[str, Any]:
    """Step 0: the initial parameters, zero velocities, dropout's generator as seeded."""
    rng = np.random.default_rng(SEED + 1)
    params = {
        "w1": rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN),
        "b2": np.zeros(1),
    }
    return {
        "step": 0,
        "params": params,
        "velocity": {name: np.zeros_like(value) for name, value in params.items()},
        "dropout": np.random.default_rng(SEED + 2),
    }


def batch_of(step: int) -> np.ndarray:
    """The data order is a function of the step alone: nothing to save for it."""
    return np.random.default_rng([SEED, step]).choice(SAMPLES, BATCH, replace=False)


def train_step(state: dict[str, Any], x: np.ndarray, y: np.ndarray) -> None:
    p, v = state["params"], state["velocity"]
    hidden = np.tanh(x @ p["w1"] + p["b1"])
    keep = (state["dropout"].random(hidden.shape) >= DROPOUT) / (1 - DROPOUT)
    dropped = hidden * keep
    error = dropped @ p["w2"] + p["b2"] - y
    d_out = 2 * error / len(x)  # d(mean squared error)/d(output)
    d_pre = (d_out @ p["w2"].T) * keep * (1 - hidden**2)
    grads = {"w2": dropped.T @ d_out, "b2": d_out.sum(0), "w1": x.T @ d_pre, "b1": d_pre.sum(0)}
    for name, grad in grads.items():  # PyTorch's SGD: v = momentum * v + g; p -= lr * v
        v[name] = MOMENTUM * v[name] + grad
        p[name] = p[name] - LEARNING_RATE * v[name]
    state["step"] += 1


def loss_of(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The mean squared error on the whole data set, without dropout."""
    out = np.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return float(np.mean((out - y) ** 2))


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write to a temporary file beside ``path``, then rename: a crash leaves the old one."""
    arrays = {f"param_{k}": v for k, v in state["params"].items()}
    arrays |= {f"velocity_{k}": v for k, v in state["velocity"].items()}
    arrays["step"] = np.array(state["step"])
    arrays["dropout"] = np.array(json.dumps(state["dropout"].bit_generator.state))
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    with np.load(path) as saved:
        dropout = np.random.default_rng()
        dropout.bit_generator.state = json.loads(str(saved["dropout"]))
        return {
            "step": int(saved["step"]),
            "params": {k: saved[f"param_{k}"] for k in PARAMETERS},
            "velocity": {k: saved[f"velocity_{k}"] for k in PARAMETERS},
            "dropout": dropout,
        }


def parameters_sha256(params: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in PARAMETERS:
        digest.update(np.ascontiguousarray(params[name]).tobytes())
    return digest.hexdigest()


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep this long each step: a stand-in for real work, so that there is time to suspend")
    parser.add_argument("--wait-for-suspend", type=int, action="append", default=[], metavar="STEP",
                        help="stop before STEP and wait until asked to suspend (for tests)")
    args = parser.parse_args()

    terminated = False

    def on_sigterm(*_: object) -> None:
        nonlocal terminated
        terminated = True

    signal.signal(signal.SIGTERM, on_sigterm)

    job_dir, checkpoint = runtime.job_dir(), runtime.checkpoint_dir() / CHECKPOINT
    x, y = dataset()
    state = load_checkpoint(checkpoint) if runtime.resumed() or checkpoint.exists() else fresh_state()
    # Which steps each attempt ran: one JSON value kept for the whole job (the runtime's state).
    segments: list[dict[str, Any]] = runtime.get_state([])
    start = state["step"]
    print(f"attempt {runtime.attempt()}: {'resuming at' if start else 'starting at'} step {start}", flush=True)
    while state["step"] < args.steps:
        if state["step"] in args.wait_for_suspend and state["step"] != start:
            while not (runtime.should_suspend() or terminated):
                time.sleep(0.02)
        if runtime.should_suspend() or terminated:
            request = runtime.suspend_request() or {"reason": "SIGTERM"}
            save_checkpoint(state, checkpoint)
            runtime.set_state([*segments, {"attempt": runtime.attempt(), "from": start, "to": state["step"],
                                            "ended": f"suspended: {request.get('reason')}"}])
            print(f"suspended at step {state['step']} ({request.get('reason')}): checkpoint saved", flush=True)
            runtime.suspend_done()
        batch = batch_of(state["step"])
        train_step(state, x[batch], y[batch])
        write_atomically(job_dir / "progress", str(state["step"]))
        time.sleep(args.step_seconds)

    segments = [*segments, {"attempt": runtime.attempt(), "from": start, "to": state["step"], "ended": "finished"}]
    runtime.set_state(segments)
    result = {
        "framework": "numpy",
        "steps": state["step"],
        "loss": repr(loss_of(state["params"], x, y)),
        "sha256": parameters_sha256(state["params"]),
        "segments": segments,
    }
    write_atomically(job_dir / "result.json", json.dumps(result, indent=2) + "\n")
    print(f"done: {result['steps']} steps, loss {result['loss']}, parameters sha256 {result['sha256']}", flush=True)


if __name__ == "__main__":
    main()
