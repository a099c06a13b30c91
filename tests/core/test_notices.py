"""Which job events a user's ``notify.on`` asks for (``core.notices``), and that the job
file's names and core's stay the same list."""

from __future__ import annotations

import pytest

from trainyard.core.notices import NOTICE_CLASSES, wanted
from trainyard.core.transitions import EventKind
from trainyard.spec.notify import NOTIFY_ON


@pytest.mark.parametrize(("on", "kind", "held", "told"), [
    (["ended"], EventKind.SUCCEEDED, False, "succeeded"),
    (["ended"], EventKind.STOPPED, False, "stopped"),
    (["failed"], EventKind.FAILED, False, "failed"),
    (["failed"], EventKind.SUCCEEDED, False, None),
    (["preempted"], EventKind.REQUEUED, False, "preempted"),
    (["preempted"], EventKind.SUSPENDED, False, "preempted"),  # the scheduler suspended it
    (["preempted"], EventKind.SUSPENDED, True, None),  # its owner's `yard suspend`: no preemption
    (["ended", "preempted"], EventKind.RETRIED, False, None),  # a retry is no end
    (["ended"], EventKind.PREEMPTED, False, None),  # told once the attempt is requeued or suspended
    ([], EventKind.FAILED, False, None),
])
def test_which_events_are_told(on: list[str], kind: EventKind, held: bool, told: str | None) -> None:
    assert wanted(on, kind, held=held) == told


def test_the_job_file_and_core_name_the_same_events() -> None:
    assert sorted(NOTIFY_ON) == sorted(NOTICE_CLASSES)
