"""A deterministic PyTorch training loop that Trainyard may suspend and resume at any step.

``train_numpy.py``'s loop in PyTorch (CPU, or one GPU with ``--device cuda``): a two-layer
MLP (tanh, dropout) trained by ``torch.optim.SGD`` with momentum, deterministic algorithms
only. The batch of step ``s`` comes from a generator seeded with a function of ``s``, and
the checkpoint holds the model, the optimizer (its momentum buffers), the step and the
random states (dropout draws from them), so a run suspended and resumed any number of
times ends with the parameters and loss, bit for bit, of a run never interrupted. The
runtime contract is ``docs/runtime.md``'s:

* each step, ``runtime.should_suspend()``: when true, save to ``runtime.checkpoint_dir()``
  atomically, then ``runtime.suspend_done()`` (exit 85);
* at start, ``runtime.resumed()`` (or a checkpoint left by an earlier attempt): load it;
* at the end, ``result.json`` in the job directory: the steps, the loss (``repr`` of the
  float, so exact) and the sha256 of the parameters' bytes.

SIGTERM is taken as a request to suspend too: it is what a backend without the suspend
capability sends (and ``yard stop``), and saving then loses no work.

``--wait-for-suspend STEP`` (off by default; repeat it for more steps) is for a test or a
demo that must see the loop suspended at a known step whatever the machine's speed: an
attempt that reaches that step (not one that resumes there) stops before it and waits until
it is asked to suspend, then saves and suspends as at any step.

    python train_torch.py --steps 2000 --step-seconds 0.01
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

import torch
from torch import nn

from trainyard import runtime

SEED = 20171001
FEATURES, HIDDEN, SAMPLES, BATCH = 16, 32, 1024, 32
LEARNING_RATE, MOMENTUM, DROPOUT = 0.05, 0.9, 0.1
CHECKPOINT = "torch.pt"


def dataset(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=generator, dtype=torch.float64)
    w = torch.randn(FEATURES, generator=generator, dtype=torch.float64)
    y = torch.sin(x @ w / FEATURES**0.5)[:, None] + 0.1 * torch.randn(SAMPLES, 1, generator=generator,
                                                                      dtype=torch.float64)
    return x.to(device), y.to(device)


def batch_of(step: int) -> torch.Tensor:
    """The data order is a function of the step alone: nothing to save for it."""
    return torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(SEED * 1_000_003 + step))[:BATCH]


def random_states(device: torch.device) -> dict[str, torch.Tensor]:
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_random_states(states: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(states["cpu"])
    if device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write to a temporary file beside ``path``, then rename: a crash leaves the old one."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def parameters_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():  # in the model's own order
        digest.update(bytes(tensor.detach().cpu().contiguous().view(torch.uint8).flatten().tolist()))
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
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for the task's GPU")
    args = parser.parse_args()

    terminated = False

    def on_sigterm(*_: object) -> None:
        nonlocal terminated
        terminated = True

    signal.signal(signal.SIGTERM, on_sigterm)

    device = torch.device(args.device)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one reduction order, whatever the machine
    torch.manual_seed(SEED + 1)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Dropout(DROPOUT), nn.Linear(HIDDEN, 1))
    model = model.to(device=device, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    x, y = dataset(device)

    job_dir, checkpoint = runtime.job_dir(), runtime.checkpoint_dir() / CHECKPOINT
    step = 0
    if runtime.resumed() or checkpoint.exists():
        saved = torch.load(checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        set_random_states(saved["random"], device)
        step = int(saved["step"])
    # Which steps each attempt ran: one JSON value kept for the whole job (the runtime's state).
    segments: list[dict[str, Any]] = runtime.get_state([])
    start = step
    print(f"attempt {runtime.attempt()}: {'resuming at' if start else 'starting at'} step {start}", flush=True)
    model.train()
    while step < args.steps:
        if step in args.wait_for_suspend and step != start:
            while not (runtime.should_suspend() or terminated):
                time.sleep(0.02)
        if runtime.should_suspend() or terminated:
            request = runtime.suspend_request() or {"reason": "SIGTERM"}
            save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "random": random_states(device), "step": step}, checkpoint)
            runtime.set_state([*segments, {"attempt": runtime.attempt(), "from": start, "to": step,
                                            "ended": f"suspended: {request.get('reason')}"}])
            print(f"suspended at step {step} ({request.get('reason')}): checkpoint saved", flush=True)
            runtime.suspend_done()
        batch = batch_of(step).to(device)
        optimizer.zero_grad()
        loss = torch.mean((model(x[batch]) - y[batch]) ** 2)
        loss.backward()
        optimizer.step()
        step += 1
        write_atomically(job_dir / "progress", str(step))
        time.sleep(args.step_seconds)

    model.eval()
    with torch.no_grad():
        final_loss = torch.mean((model(x) - y) ** 2).item()
    segments = [*segments, {"attempt": runtime.attempt(), "from": start, "to": step, "ended": "finished"}]
    runtime.set_state(segments)
    result = {
        "framework": "torch",
        "steps": step,
        "loss": repr(final_loss),
        "sha256": parameters_sha256(model),
        "segments": segments,
    }
    write_atomically(job_dir / "result.json", json.dumps(result, indent=2) + "\n")
    print(f"done: {step} steps, loss {result['loss']}, parameters sha256 {result['sha256']}", flush=True)


if __name__ == "__main__":
    main()
