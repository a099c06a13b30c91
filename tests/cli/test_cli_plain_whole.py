"""`yard job` reads a job, its notices and its usage, and `yard submit` a working directory's
upload, from the server's JSON by each model's JSON schema (``cli/plain.read``, the schemas in
``cli/shapes.py``), without pydantic (issue 33): what it reads is what the models read, the
shapes are the models' own, and an answer it does not accept goes to the models. A job file is
read with PyYAML only where its text can spell the key looked for (``may_name``)."""

from __future__ import annotations

import codecs
import inspect
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from plain_answers import ENDED, NOTICES, RUNNING, USAGE, WAITING
from pydantic import BaseModel, TypeAdapter

from trainyard.cli import plain, render, shapes
from trainyard.cli.account_commands import notices_text
from trainyard.cli.usage_commands import efficiency_line
from trainyard.client import Client
from trainyard.client_workdir import may_name
from trainyard.schemas.jobs import JobDetail
from trainyard.schemas.notices import JobNoticeView
from trainyard.schemas.usage import UsageReport
from trainyard.schemas.workdirs import WorkdirLimits, WorkdirView


def served(model: Any, data: Any) -> bytes:
    """``data`` as the server sends it: its model, serialised."""
    adapter = TypeAdapter(model)
    return adapter.dump_json(adapter.validate_python(data))


def as_data(value: Any) -> Any:
    """What ``read`` gave, as plain data, to hold against the model's ``model_dump()``."""
    if isinstance(value, SimpleNamespace):
        return {k: as_data(v) for k, v in vars(value).items()}
    if isinstance(value, list):
        return [as_data(v) for v in value]
    if isinstance(value, dict):
        return {k: as_data(v) for k, v in value.items()}
    return value


def dumped(value: Any) -> Any:
    return [v.model_dump() for v in value] if isinstance(value, list) else value.model_dump()


def test_the_shapes_are_the_models_json_schemas() -> None:
    assert plain.shapes_source() == Path(shapes.__file__).read_text(), \
        "the API's models changed: run `python -m trainyard.cli.plain` to write cli/shapes.py again"


@pytest.mark.parametrize(("where", "model", "data"), [
    ("jobs.JobDetail", JobDetail, RUNNING), ("jobs.JobDetail", JobDetail, WAITING),
    ("jobs.JobDetail", JobDetail, ENDED), ("notices.JobNoticeView[]", list[JobNoticeView], NOTICES),
    ("notices.JobNoticeView[]", list[JobNoticeView], []), ("usage.UsageReport", UsageReport, USAGE),
    ("usage.UsageReport", UsageReport, {**USAGE, "lines": [], "fairShareHalfLifeSeconds": None}),
    ("workdirs.WorkdirLimits", WorkdirLimits, {"maxBytes": 10}),
    ("workdirs.WorkdirView", WorkdirView, {**RUNNING["workdir"], "createdAt": "2026-11-21T10:00:00Z"}),
])
@pytest.mark.parametrize("sent", ["served", "as given"])
def test_an_answer_read_whole_is_what_the_model_reads(where: str, model: Any, data: Any, sent: str) -> None:
    # As the server writes it (every field), and as given here (defaults left out, a naive time).
    answer = served(model, data) if sent == "served" else json.dumps(data).encode()
    expected = TypeAdapter(model).validate_json(answer)
    read = plain.read(where, answer)
    assert as_data(read) == dumped(expected)
    assert type(as_data(read)) is type(dumped(expected))
    if where == "jobs.JobDetail":
        assert render.job_detail(read) == render.job_detail(expected)
        assert [t.label for a in read.attempts for t in a.tasks] == [t.label for a in expected.attempts
                                                                     for t in a.tasks]
        assert read.state.is_final == expected.state.is_final
        assert [str(a.state) for a in read.attempts] == [str(a.state) for a in expected.attempts]
    if where.startswith("notices"):
        assert notices_text(read) == notices_text(expected)
    if where == "usage.UsageReport":
        assert [efficiency_line(line) for line in read.lines] == [efficiency_line(line) for line in expected.lines]


@pytest.mark.parametrize("change", [
    {"id": "7"}, {"id": 7.0}, {"id": True}, {"state": "SLEEPING"}, {"gpus": "2"}, {"submittedAt": 5},
    {"submittedAt": "yesterday"}, {"spec": []}, {"attempts": {}}, {"events": [{"at": "2026-11-21T10:00:00Z"}]},
    {"retriesUsed": None}, {"pending": {"reason": "QUOTA"}}, {"warnings": [3]}, {"jobDir": {"bytes": 1}},
    {"dependencies": [{"condition": "afterok", "job": 3, "state": "LOST", "status": "met"}]},
])
def test_a_field_missing_or_of_another_type_is_a_value_error(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        plain.read("jobs.JobDetail", json.dumps({**RUNNING, **change}).encode())


@pytest.mark.parametrize("answer", [b"not json", b"[]", b"null", b'{"id": 7}', b'{"gpus": NaN}'])
def test_an_answer_that_is_no_job_is_a_value_error(answer: bytes) -> None:
    with pytest.raises(ValueError):
        plain.read("jobs.JobDetail", answer)


def test_an_answer_it_does_not_accept_is_read_by_the_model() -> None:
    lax = json.dumps({**RUNNING, "id": "7", "retriesUsed": 1.0}).encode()  # pydantic reads "7" as 7
    with pytest.raises(ValueError):
        plain.read("jobs.JobDetail", lax)
    with Client("http://127.0.0.1:9", "t") as client:
        job = plain.read_or_parse(client, "jobs.JobDetail", lax)
        assert isinstance(job, JobDetail) and job.id == 7
        notices = plain.read_or_parse(client, "notices.JobNoticeView", json.dumps(NOTICES).encode(), many=True)
        assert not isinstance(notices[0], BaseModel) and as_data(notices) == dumped(
            TypeAdapter(list[JobNoticeView]).validate_python(NOTICES))


def test_what_the_models_add_to_their_fields_read_adds_too() -> None:
    # A property or method on a model read whole must be on the class read gives it (plain.CLASSES).
    models: set[type[BaseModel]] = set()
    for where, _many in plain.READ_WHOLE:
        module, _, name = where.rpartition(".")
        found = getattr(__import__(f"trainyard.schemas.{module}", fromlist=[name]), name)
        models |= {found} | _nested(found)
    for model in models:
        own = {name for klass in model.__mro__ if klass not in BaseModel.__mro__ and klass is not object
               for name, value in vars(klass).items()
               if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
        given = plain.CLASSES.get(model.__name__, SimpleNamespace)
        assert own == {name for name, value in vars(given).items()
                       if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}, \
            model.__name__


def _nested(model: type[BaseModel]) -> set[type[BaseModel]]:
    """The models ``model``'s fields hold, at any depth."""
    found: set[type[BaseModel]] = set()
    pending = [model]
    while pending:
        for field in pending.pop().model_fields.values():
            for inner in _types(field.annotation):
                if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in found:
                    found.add(inner)
                    pending.append(inner)
    return found


def _types(annotation: Any) -> list[Any]:
    from typing import get_args

    args = get_args(annotation)
    return [annotation] if not args else [t for arg in args for t in _types(arg)]


@pytest.mark.parametrize(("text", "key", "may"), [
    ("name: a\nsweep:\n  grid: {lr: [1, 2]}\n", "sweep", True),
    ("name: a\ntaskRoles: {w: {commands: [python sweep.py]}}\n", "sweep", True),  # anywhere: a look, no parse
    ("name: a\ntaskRoles: {w: {commands: [true]}}\n", "sweep", False),
    ('{"name": "a", "\\u0073weep": {}}', "sweep", True),  # an escape may spell it
    ('name: a\n"\\x73weep": {}\n', "sweep", True),
    ("name: a\nworkdir: src\n", "workdir", True), ("name: a\n", "workdir", False),
])
def test_a_job_file_may_name_a_key_only_where_its_text_can_spell_it(text: str, key: str, may: bool) -> None:
    assert may_name(text, key) is may
    assert may_name(text.encode(), key) is may
    for utf16 in (codecs.BOM_UTF16_LE + text.encode("utf-16-le"), codecs.BOM_UTF16_BE + text.encode("utf-16-be")):
        assert may_name(utf16, key)  # PyYAML reads UTF-16 after its mark: the letters hold zero bytes


def test_where_may_name_says_no_pyyaml_finds_no_key_either() -> None:
    import yaml

    for text in ("name: a\ntaskRoles: {w: {commands: [true]}}\n", "{'name': 'a'}", "[1, 2]", "a: &x {b: 1}\nc: *x"):
        document = yaml.safe_load(text)
        assert not (isinstance(document, dict) and {"sweep", "workdir"} & set(document))
        assert not may_name(text, "sweep") and not may_name(text, "workdir")
