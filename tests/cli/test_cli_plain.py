"""`yard jobs` reads its table, and `yard logs` the job's task roles, from the server's JSON
without the API's models (cli/plain.py, issue 33): the table is the one the models give, and
an answer it does not expect is left to the models to refuse."""

from __future__ import annotations

import json

import pytest

from trainyard.cli import plain, render
from trainyard.schemas.jobs import JobPage

JOB = {"id": 7, "name": "train", "user": "alice", "vc": "default", "priority": "normal", "state": "RUNNING",
       "attempt": 1, "submittedAt": "2026-11-29T10:00:00Z", "startedAt": "2026-11-29T10:00:05Z",
       "finishedAt": None, "exitCode": None, "pending": None, "gpus": 1, "message": "running on n1"}
WAITING = {**JOB, "id": 8, "state": "WAITING", "startedAt": None, "gpus": 0.5, "message": "",
           "pending": {"reason": "QUOTA", "message": "vision has 0 of 2 GPUs free", "short": "vision 0/2 free",
                       "position": 3, "estimatedStart": "2026-11-29T12:00:00+00:00"}}
BORROWED = {**JOB, "id": 9, "borrowed": True, "runtimeSeconds": 4000.5, "submittedAt": "2026-11-29T10:00:00.123456"}
ENDED = {**JOB, "id": 10, "state": "FAILED", "exitCode": 3, "runtimeSeconds": 61, "message": "exited with 3",
         "heldBy": None, "pending": {"reason": "NO_FIT", "message": "no node fits"}}


@pytest.mark.parametrize("jobs", [[JOB, WAITING, BORROWED, ENDED], [WAITING], []])
@pytest.mark.parametrize("following", [None, 6])
def test_the_table_from_the_json_is_the_table_from_the_models(jobs: list[dict], following: int | None) -> None:
    # The answer as the server writes it: its own model, serialised.
    answer = JobPage.model_validate({"items": jobs, "next": following}).model_dump_json().encode()
    page = JobPage.model_validate_json(answer)
    items, after = plain.job_page(answer)
    assert after == page.next
    assert render.jobs_table(items) == render.jobs_table(page.items)
    assert [row.state for row in items] == [job.state for job in page.items]


@pytest.mark.parametrize("answer", [
    b"not json", b"[]", b'{"items": []}', b'{"items": {}, "next": null}',
    b'{"items": [{"id": 7}], "next": null}',
])
def test_an_answer_it_does_not_expect_is_a_value_error(answer: bytes) -> None:
    with pytest.raises(ValueError):
        plain.job_page(answer)


@pytest.mark.parametrize("change", [{"id": "7"}, {"state": "SLEEPING"}, {"gpus": True}, {"submittedAt": 5},
                                    {"submittedAt": "yesterday"}, {"pending": {"reason": "QUOTA"}},
                                    {"borrowed": "yes"}])
def test_a_field_of_another_type_is_a_value_error(change: dict) -> None:
    answer = JobPage.model_validate({"items": [JOB], "next": None}).model_dump(mode="json")
    answer["items"][0].update(change)
    with pytest.raises(ValueError):
        plain.job_page(json.dumps(answer).encode())


def test_the_tasks_are_the_job_files_and_those_its_attempts_ran() -> None:
    roles = {"ps": {"instances": 1, "commands": ["x"]},
             "worker": {"instances": {"min": 1, "max": 2}, "commands": ["y"]}}
    ran = [{"tasks": [{"role": "worker", "index": 3}, {"role": "ps", "index": 0}]}]  # worker/3: grown after others left
    answer = json.dumps({"spec": {"name": "j", "taskRoles": roles}, "attempts": ran}).encode()
    assert plain.task_labels(answer) == ["ps/0", "worker/0", "worker/1", "worker/3"]
    assert plain.task_labels(b'{"spec": {"name": "j"}}') == []
    for wrong in (b"[]", b'{"spec": []}', b'{"spec": {"taskRoles": {"w": 3}}}', b'{"job": {}}',
                  b'{"spec": {}, "attempts": [{"tasks": [{"role": "w"}]}]}'):
        with pytest.raises(ValueError):
            plain.task_labels(wrong)


def test_a_submits_answer_from_the_json_is_the_models() -> None:
    from trainyard.schemas.jobs import SubmitResult

    made = SubmitResult(id=12, name="train", user="alice", vc="default", priority="normal", state="WAITING",
                        submittedAt="2026-11-29T10:00:00Z", warnings=["no GPU asked for", "an unknown field: x"])
    answer = made.model_dump_json().encode()
    read = plain.submitted(answer)
    assert (read.id, read.name, read.state, read.warnings) == (made.id, made.name, made.state, made.warnings)
    assert f"{read.state}" == f"{made.state}"
    for wrong in (b"{}", b'{"id": "12", "name": "t", "state": "WAITING", "warnings": []}',
                  b'{"id": 12, "name": "t", "state": "WAITING", "warnings": "none"}', b"null"):
        with pytest.raises(ValueError):
            plain.submitted(wrong)
