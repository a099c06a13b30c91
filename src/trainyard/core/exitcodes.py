"""Exit-code taxonomy: what a task's exit status means, and whether a retry may help."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum


class ExitKind(StrEnum):
    SUCCEEDED = "succeeded"
    USER_ERROR = "user_error"  # the program reported failure; a retry may or may not help
    PERMANENT = "permanent"  # the command cannot run as written; retrying will not help
    KILLED = "killed"  # ended by a signal (OOM killer, a stop, a crash)
    LOST = "lost"  # no exit status could be recovered


@dataclass(frozen=True)
class ExitInfo:
    code: int | None
    kind: ExitKind
    description: str

    @property
    def transient(self) -> bool:
        """Whether retrying the same command could plausibly succeed."""
        return self.kind in (ExitKind.USER_ERROR, ExitKind.KILLED, ExitKind.LOST)


# The reason a backend gives (``TaskStatus.reason``) when the kernel killed a task at its
# memory limit (its cgroup counted an OOM kill; Slurm's OUT_OF_MEMORY state). It is the
# job's own failure, like any other exit: taskRetryCount and jobRetryCount apply, and no
# platform retry is spent (the same program with the same limit would mostly fail again,
# but a job whose memory use varies may pass; its retry counts are the owner's to set).
OUT_OF_MEMORY = "OUT_OF_MEMORY"


def out_of_memory_message(memory_mb: int, code: int | None) -> str:
    """A task's message when the kernel killed it at its memory limit, as ``yard job`` shows it."""
    status = "" if code is None else f" (exit {code})"
    limit = f"its {memory_mb} MiB memory limit (memoryMB: {memory_mb})"
    return f"{OUT_OF_MEMORY}: used more than {limit} and was killed{status}"


def is_out_of_memory(message: str | None) -> bool:
    """Whether a task's message is that of :func:`out_of_memory_message`."""
    return message is not None and message.startswith(OUT_OF_MEMORY + ":")


# The reason a backend gives when a task's image cannot be pulled and no retry could change
# that (the registry said the manifest or the name is unknown, the access is denied, the
# reference is invalid): the attempt fails with the pull's own words, and neither
# taskRetryCount nor jobRetryCount is spent pulling again. A pull that failed on the network
# or ran out of time stays an ordinary failure, which the retry counts may try again.
IMAGE_UNAVAILABLE = "IMAGE_UNAVAILABLE"


def image_unavailable_message(why: str) -> str:
    """A task's message when its image cannot be pulled for good, as ``yard job`` shows it."""
    return f"{IMAGE_UNAVAILABLE}: {why} (not retried: pulling again would fail the same way)"


def is_image_unavailable(message: str | None) -> bool:
    """Whether a task's message is that of :func:`image_unavailable_message`."""
    return message is not None and message.startswith(IMAGE_UNAVAILABLE + ":")


# The reason a backend gives when a task's datasets could not be made ready on its node (a
# source that answered 404, a dataset bigger than the node's cache): the task never ran, and
# its message, which names the dataset and says why, is what ``yard job`` shows (not the
# exit status 127 the backend records for it). Not retried, as a command not found; a
# failure that may pass (``datafetch.FetchError.transient``) comes with no exit status
# instead, so that the task is LOST and retried as a platform fault.
# ``backends.datacache.DATASET_UNAVAILABLE``, which the nodes' stdlib-only copy holds, is the same.
DATASET_UNAVAILABLE = "DATASET_UNAVAILABLE"


# A task that saved its state when asked to suspend says so by exiting with this
# (``trainyard.runtime.SUSPENDED_EXIT_CODE``, which must stay equal: the runtime imports
# nothing of ours).
SUSPENDED_EXIT_CODE = 85

_PERMANENT = {
    126: "command found but not executable",
    127: "command not found",
}


def classify_exit(code: int | None) -> ExitInfo:
    """Describe an exit status as a shell reports it (128 + N for signal N)."""
    if code is None:
        return ExitInfo(None, ExitKind.LOST, "no exit status was recorded")
    if code == 0:
        return ExitInfo(0, ExitKind.SUCCEEDED, "exited with 0")
    if code in _PERMANENT:
        return ExitInfo(code, ExitKind.PERMANENT, f"exited with {code}: {_PERMANENT[code]}")
    if 128 < code < 128 + 65:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        hint = " (out of memory, or a stop past its grace period)" if name == "SIGKILL" else ""
        return ExitInfo(code, ExitKind.KILLED, f"killed by {name}{hint}")
    return ExitInfo(code, ExitKind.USER_ERROR, f"exited with {code}")
