"""An elastic data-parallel training loop (CPU, gloo) for torchrun's elastic launch.

The global batch is fixed: each of the ``WORLD_SIZE`` workers takes its slice of the same
batch at every step, so the optimisation steps are the same on any number of workers (up to
floating-point order). Rank 0 saves a checkpoint after every step into the job's directory
(``TRAINYARD_JOB_DIR``); after a restart — Trainyard restarts the workers when the job grows
or shrinks — every worker resumes from it. ``result.json`` says the final loss, the steps,
and the sizes the job ran at.

    torchrun $TRAINYARD_TORCHRUN --nproc-per-node=1 train.py --steps 300

``--wait-for-resize WORKERS:STEP`` (off by default; repeat it for other sizes) is for a
test or a demo that must see the job train at each size whatever the machine's speed: on
that many workers the run stops before that step and waits until Trainyard resizes the job
(its workers are stopped and started again at the new size, from the checkpoint). A job
never resized from that size waits until it is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

GLOBAL_BATCH = 48  # divisible by 1, 2, 3, 4, 6, 8


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch, the same whatever the number of workers."""
    draw = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 16, generator=draw)
    truth = torch.arange(16, dtype=torch.float32) / 16
    return x, (x @ truth).unsqueeze(1) + 0.01 * torch.randn(GLOBAL_BATCH, 1, generator=draw)


def alone(steps: int) -> float:
    """The loss after ``steps`` on one process, without torch.distributed: the reference."""
    model, optimizer = model_and_optimizer()
    loss = float("nan")
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            loss = torch.nn.functional.mse_loss(model(x), y).item()
    return loss


def hold(text: str) -> tuple[int, int]:
    """``WORKERS:STEP`` of ``--wait-for-resize``."""
    workers, _, step = text.partition(":")
    try:
        return int(workers), int(step)
    except ValueError:
        raise argparse.ArgumentTypeError(f"WORKERS:STEP (two integers), not {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--wait-for-resize", type=hold, action="append", default=[], metavar="WORKERS:STEP",
                        help="on WORKERS workers, stop before STEP until Trainyard resizes the job (for tests)")
    args = parser.parse_args()
    holds = dict(args.wait_for_resize)
    out = Path(os.environ.get("TRAINYARD_JOB_DIR", "."))
    checkpoint = out / "checkpoint.pt"

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = model_and_optimizer()
    step, sizes, loss = 0, [], float("nan")
    if checkpoint.exists():
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, sizes, loss = state["step"], state["sizes"], state["loss"]
    sizes.append({"workers": world, "from": step, "resizes": int(os.environ.get("TRAINYARD_ELASTIC_RESIZES", "0"))})
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    while step < args.steps:
        if holds.get(world) == step:
            # Every rank stops here, between two steps (no collective pending), until
            # Trainyard's resize stops this run: SIGTERM ends the process.
            while True:
                time.sleep(60)
        x, y = batch(step)
        share = GLOBAL_BATCH // world
        mine = slice(rank * share, (rank + 1) * share)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
        optimizer.step()
        step += 1
        if rank == 0:
            with torch.no_grad():
                loss = torch.nn.functional.mse_loss(model(x), y).item()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                     "sizes": sizes, "loss": loss}
            torch.save(state, out / "checkpoint.tmp")
            os.replace(out / "checkpoint.tmp", checkpoint)
            (out / "progress").write_text(f"{step} {world}\n")
        dist.barrier()
        time.sleep(args.step_seconds)
    if rank == 0:
        (out / "result.json").write_text(json.dumps({"steps": step, "loss": loss, "sizes": sizes}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
