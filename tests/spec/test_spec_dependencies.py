"""The job file's ``dependencies`` (Slurm's ``--dependency``): a map of condition to job ids,
or Slurm's own text; every problem at its field path; and what each condition makes of the
state of the job waited for (``core/dependencies.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from spec_mutations import errors_of

from trainyard.core.dependencies import Status, status
from trainyard.spec.loading import validate_job
from trainyard.spec.templating import normalized_spec


def document(dependencies: Any) -> dict[str, Any]:
    return {"name": "j", "dependencies": dependencies, "taskRoles": {"m": {"commands": ["true"]}}}


def test_the_map_and_slurms_text_read_the_same_and_the_stored_form_validates_again():
    as_map = validate_job(document({"afterok": [12, 13], "afterany": [14]}))
    as_text = validate_job(document("afterok:12:13, afterany:14"))
    assert as_map == as_text
    assert as_map.dependencies is not None
    assert list(as_map.dependencies.listed()) == [
        ("afterok", 12, "dependencies.afterok[0]"), ("afterok", 13, "dependencies.afterok[1]"),
        ("afterany", 14, "dependencies.afterany[0]")]
    assert validate_job(normalized_spec(as_map)) == as_map
    assert validate_job(document(None)).dependencies is None
    assert not validate_job(document({})).dependencies  # nothing to wait for


@pytest.mark.parametrize(("value", "path", "message"), [
    ({"afterok": [0]}, "dependencies.afterok[0]", "must be a job id, ≥ 1 (got 0)"),
    ({"afterany": ["x"]}, "dependencies.afterany[0]", "must be a job id, a whole number (got 'x')"),
    ({"after": [1]}, "dependencies.after", "unknown field"),
    ({"afterok": [3, 3]}, "dependencies", "afterok names job 3 twice"),
    ({"afterok": [3], "afternotok": [3]}, "dependencies",
     "job 3 is in both afterok and afternotok: it cannot both succeed and fail, so this job could never start"),
    ("afterok:12,singleton", "dependencies",
     "'singleton' is not a dependency condition: use one of afterok, afterany, afternotok, e.g. "
     "afterok:12:13,afterany:14"),
    ("afterok:", "dependencies", "afterok names no job: write afterok:ID[:ID...]"),
    ("afterok:1:b", "dependencies", "'b' in 'afterok:1:b' is not a job id"),
])
def test_each_problem_is_reported_at_its_field_path(value, path, message):
    [error] = errors_of(document(value))
    assert error.path == path
    assert message in error.message


def test_a_job_not_ended_may_still_meet_any_condition_and_an_ended_one_decides():
    for state in ("WAITING", "RUNNING", "SUSPENDED", "STOPPING"):  # suspended or requeued: not ended
        assert {status(c, state) for c in ("afterok", "afterany", "afternotok")} == {Status.WAITING}
    assert status("afterok", "SUCCEEDED") == Status.MET
    assert status("afterok", "FAILED") == status("afterok", "STOPPED") == Status.NEVER
    assert status("afternotok", "SUCCEEDED") == Status.NEVER
    assert status("afternotok", "FAILED") == status("afternotok", "STOPPED") == Status.MET
    assert {status("afterany", s) for s in ("SUCCEEDED", "FAILED", "STOPPED")} == {Status.MET}


def test_a_long_dependency_list_is_refused_before_it_is_counted() -> None:
    from trainyard.spec.dependencies import parse_slurm

    with pytest.raises(ValueError, match="at most 100 dependencies"):
        parse_slurm("afterok:" + ":".join(str(i) for i in range(1, 50_000)))
    with pytest.raises(ValueError, match="is not a job id"):
        parse_slurm("afterok:" + "9" * 5000)
