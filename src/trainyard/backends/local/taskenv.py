"""The environment a local task runs with: the clean base and the site's variables
(``backends/environment``), the job's env with the wiring, and the GPU pinning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# CUDA shows exactly the devices listed in CUDA_VISIBLE_DEVICES, so an empty list shows
# none. For the NVIDIA container runtime, "none" is the documented "no GPU" value.
NO_CUDA_DEVICES = ""
NO_NVIDIA_DEVICES = "none"


def gpu_environment(gpus: Sequence[int]) -> dict[str, str]:
    """The variables that pin a task to its GPUs (or hide all GPUs when it has none).

    Indices are NVML's (PCI bus order); ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA use
    the same numbering instead of its default fastest-first order.
    """
    devices = ",".join(str(index) for index in gpus)
    return {
        "CUDA_VISIBLE_DEVICES": devices or NO_CUDA_DEVICES,
        "NVIDIA_VISIBLE_DEVICES": devices or NO_NVIDIA_DEVICES,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def task_environment(base: Mapping[str, str], job_env: Mapping[str, str], gpus: Sequence[int]) -> dict[str, str]:
    """The full environment of a task: ``base`` (the clean base with the site's variables)
    < the job's env and wiring < GPU pinning.

    GPU pinning comes last so that a job cannot widen its own GPU allocation.
    Raises ValueError for a variable that execve cannot pass.
    """
    check_job_env(job_env)
    return {**base, **job_env, **gpu_environment(gpus)}


def check_job_env(job_env: Mapping[str, str]) -> None:
    """Raise ValueError for a variable of the job's env that execve cannot pass."""
    for name, value in job_env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"invalid environment variable name {name!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment variable {name}: value must be a string without NUL bytes")
