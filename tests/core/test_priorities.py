"""The priority vocabulary: one order, one opportunistic tier, and the job file's spelling of it."""

from __future__ import annotations

from trainyard.core.priorities import (
    DEFAULT_PRIORITY,
    OPPORTUNISTIC_RANK,
    PRIORITY_NAMES,
    Priority,
)
from trainyard.spec import models as spec_models


def test_priorities_rank_from_prod_down_to_oppo() -> None:
    assert [p.rank for p in Priority] == [0, 1, 2, 3]
    assert PRIORITY_NAMES == ("prod", "normal", "low", "oppo")
    assert Priority.of_rank(0) is Priority.PROD
    assert Priority.of_rank(9) is Priority.OPPO  # below the lowest is the lowest


def test_only_oppo_is_opportunistic() -> None:
    assert [p for p in Priority if p.is_opportunistic] == [Priority.OPPO]
    assert OPPORTUNISTIC_RANK == Priority.OPPO.rank


def test_the_job_file_accepts_exactly_cores_priorities_in_the_same_order() -> None:
    assert [p.value for p in spec_models.Priority] == list(PRIORITY_NAMES)
    assert [p.rank for p in spec_models.Priority] == [Priority(p.value).rank for p in spec_models.Priority]
    assert spec_models.JobSpec.model_fields["priority"].default.value == DEFAULT_PRIORITY.value
