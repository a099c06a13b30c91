"""What Slurm's job records say about a task: alive, ended (and how), or stuck for good."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Job states after which nothing of the job runs any more.
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",
})
# Why a pending job might never start where Trainyard placed it: its node was drained,
# went down or left the partition. Waiting would hold the job forever; once that is sure
# (see SlurmBackend._stuck_for_good) Trainyard cancels it and lets the job's retry policy
# decide (the node is no longer offered for placement).
UNSTARTABLE_REASONS = frozenset({
    "ReqNodeNotAvail", "NodeDown", "PartitionDown", "PartitionInactive", "PartitionNodeLimit",
    "PartitionConfig", "BadConstraints", "InvalidAccount", "InvalidQOS", "JobLaunchFailure",
})


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job as slurmctld reports it; a heterogeneous job's components merged."""

    job_id: str
    states: tuple[str, ...]
    exit_codes: tuple[str, ...]  # "exit:signal" per component
    reasons: tuple[str, ...]
    nodes: tuple[str, ...] = ()  # the nodes asked for (--nodelist), one per component

    @property
    def final(self) -> bool:
        return all(state in FINAL_STATES for state in self.states)

    @property
    def pending(self) -> bool:
        return all(state == "PENDING" for state in self.states)

    @property
    def state(self) -> str:
        """The job's state in one word: the first component's that is not COMPLETED."""
        return next((s for s in self.states if s != "COMPLETED"), self.states[0])

    def unstartable_reason(self) -> str | None:
        """Why this pending job can never start, when that is the case (else None)."""
        if not self.pending:
            return None
        for reason in self.reasons:
            head = reason.split(",")[0]
            if head in UNSTARTABLE_REASONS:
                return reason.replace("_", " ")
        return None

    def exit_code(self) -> int | None:
        """The job's exit status as a shell reports it (128 + N for signal N), if it has one.

        Slurm's ``ExitCode=E:S`` is the batch script's exit status E, or the signal S that
        ended it. A job that was cancelled before it ran, or whose node failed, has
        ``0:0``: that is no exit status at all, so None.
        """
        for code in self.exit_codes:
            status, _, sig = code.partition(":")
            if sig.isdigit() and int(sig) > 0:
                return 128 + int(sig)
            if status.isdigit() and int(status) > 0:
                return int(status)
        if all(state == "COMPLETED" for state in self.states):
            return 0
        return None


def slurm_jobs(records: Iterable[Mapping[str, str]]) -> dict[str, SlurmJob]:
    """Records of ``scontrol show job`` by job id (a hetjob's by its leader's id)."""
    parts: dict[str, list[Mapping[str, str]]] = {}
    for record in records:
        job_id = record.get("HetJobId") or record.get("JobId", "")
        parts.setdefault(job_id, []).append(record)
    jobs = {}
    for job_id, group in parts.items():
        group.sort(key=lambda r: int(r.get("HetJobOffset", "0") or 0))
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            states=tuple(r.get("JobState", "UNKNOWN") for r in group),
            exit_codes=tuple(r.get("ExitCode", "0:0") for r in group),
            reasons=tuple(r.get("Reason", "None") for r in group),
            nodes=tuple(r["ReqNodeList"] for r in group if r.get("ReqNodeList", "(null)") != "(null)"),
        )
    return jobs
