"""Simulator policy names → the registered scorers that implement them.

The FGD paper's baselines keep the paper's names; ``default`` is whatever the live
scheduler uses when nothing is configured (``SchedulerConfig().scorer``); any other name
of ``scorers.registry.SCORERS`` may be given as ``scorer:NAME``.
"""

from __future__ import annotations

from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import SchedulerConfig

PAPER_POLICIES = {
    "random": "random",
    "dotprod": "dotprod",
    "clustering": "clustering",
    "packing": "packing",
    "bestfit": "bestfit-cpu-gpu",  # the paper's best-fit weighs CPU and GPU alike
    "fgd": "fgd",
}
# The authors' names for them, as in ``fgd_expected_results``.
PAPER_LABELS = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}


def scorer_name(policy: str) -> str:
    """The registered scorer a policy name stands for; ValueError naming the choices."""
    if policy == "default":
        return SchedulerConfig().scorer
    if policy in PAPER_POLICIES:
        return PAPER_POLICIES[policy]
    if policy.startswith("scorer:") and policy[len("scorer:") :] in SCORERS:
        return policy[len("scorer:") :]
    choices = ", ".join([*PAPER_POLICIES, "default"] + [f"scorer:{n}" for n in sorted(SCORERS)])
    raise ValueError(f"unknown policy {policy!r}; choose one of: {choices}")
