"""An elastic data-parallel training loop (CPU, gloo) for torchrun's elastic launch.

The global batch is fixed: each of the ``WORLD_SIZE`` workers takes its slice of the same
batch at every step, so the optimisation steps are the same on any number of workers (up to
floating-point order). Rank 0 saves a checkpoint after every step into the job's directory
(``TRAINYARD_JOB_DIR``); after a restart — Trainyard restarts the workers when the job grows
or shrinks — every worker resumes from it. ``result.json`` says the final loss, the steps,
and the sizes the job ran at.

    torchrun $TRAINYARD_TORCHRUN --nproc-per-node=1 train.py --steps 300
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
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
