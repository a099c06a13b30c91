"""Schemathesis fuzzes every operation of the real API app, as a plain user and as an admin:
no answer is a 5xx, and every answer conforms to the OpenAPI document (its status is
declared, its content type is declared, its body matches the declared schema).

Bounded and reproducible: a fixed number of cases per operation and generation mode
(positive: valid per the schema; negative: each case breaks the schema somewhere, or drops
the token), derandomized, no example database. An operation that refuses the caller (its
first ``PROBE_CASES`` answers are all 401 or 403: a user at an admin's operation) is left
there, its run ended: the admin's run fuzzes it, and more refusals prove nothing new. The
probe is the first cases of the positive run itself. As a run of its own before a run of the
other 15 (until 2026-11-30), it mostly drew what that run drew again (derandomized, one seed:
221 of the 266 probe cases of the 54 operations a user may call were among them); the runs
now send the same 15 and 20 cases per operation as those did, drawn and sent once. Failures are
gathered, not stopped at, so that one run lists them all. The counts are printed for the
record. On SQLite only: what is fuzzed here is the HTTP layer; the store's behaviour on
PostgreSQL is proved in tests/store and tests/services.

Drawing a case costs more than sending it (schemathesis's strategies: two thirds of a run's
time), and the two callers' runs draw the same cases: the same strategies (the path
parameters name the same things, made in the same order on a fresh database), derandomized.
So the cases one run drew for an operation and mode are kept (``DRAWN``), and the other
caller's run sends those same cases to its own app instead of drawing them again; a run
alone, or one whose path parameters differ, draws its own.
"""

from __future__ import annotations

import time
import unittest
from collections import Counter, defaultdict
from typing import Any

import pytest
import schemathesis
from api.harness import Api
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CASES_PER_MODE = 20  # negative cases per operation, per caller
POSITIVE_CASES = 15  # positive cases per operation, per caller
PROBE_CASES = 5  # the first positive cases, which tell whether an operation refuses the caller
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
VALID_JOB = {"name": "fuzzed", "taskRoles": {"main": {"instances": 1, "commands": ["true"],
                                                      "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 512}}}}


def seed(api: Api) -> dict[str, dict[str, Any]]:
    """Things for path parameters to name, so that cases also reach past the 404s."""
    admin = api.admin
    job = api.user.post("/api/v1/jobs", json=VALID_JOB).json()["id"]
    assert admin.post("/api/v1/vcs", json={"name": "vision", "gpus": 1}).status_code == 201
    assert admin.post("/api/v1/groups", json={"name": "cv"}).status_code == 201
    node = admin.get("/api/v1/nodes").json()[0]["name"]
    spare = admin.post("/api/v1/tokens", json={"user": "alice", "name": "spare"}).json()["token"]
    token = next(t["id"] for t in admin.get("/api/v1/tokens", params={"all": "true"}).json()
                 if spare.startswith(t["prefix"]))
    return {"/jobs/": {"job_id": job}, "/vcs/": {"name": "vision"}, "/groups/": {"name": "cv"},
            "/nodes/": {"name": node}, "/quotas/": {"user": "alice"}, "/users/": {"name": "alice"},
            "/tokens/": {"token_id": token}}


def destructive_last(operation) -> tuple[bool, bool]:
    """Removals after everything else, and revoking tokens (perhaps the caller's own) last of
    all: the other operations are fuzzed with the caller still signed in."""
    return operation.method.upper() == "DELETE", operation.path.startswith("/api/v1/tokens/")


def strategies(operation, mode: GenerationMode, known: dict[str, dict[str, Any]]):
    """Cases from the schema alone, and the same with path parameters naming what exists."""
    kwargs: dict[str, Any] = {}
    if operation.path.endswith("/logs"):
        kwargs["query"] = {"follow": "false"}  # following a job that never runs would never end
    options = [operation.as_strategy(generation_mode=mode, **kwargs)]
    for prefix, params in known.items():
        if prefix in operation.path:
            options.append(operation.as_strategy(generation_mode=mode, path_parameters=params, **kwargs))
    if operation.method.upper() == "POST" and operation.path == "/api/v1/jobs" and mode.is_positive:
        for media_type in ("application/json", "application/yaml"):
            options.append(operation.as_strategy(generation_mode=mode, body=VALID_JOB, media_type=media_type))
    return st.one_of(options)


# (operation, mode, number of cases, the path parameters known) -> the cases drawn for them
DRAWN: dict[tuple[str, str, int, str], list[Any]] = {}


class Tally:
    def __init__(self) -> None:
        self.cases: Counter = Counter()  # per operation
        self.statuses: Counter = Counter()
        self.failures: list[str] = []
        self.answers: dict[str, set[int]] = defaultdict(set)  # statuses per operation
        self.refused: list[str] = []  # operations that refuse the caller


class _Refused(unittest.SkipTest):
    """Ends a run once its probe is refused. A skip, because Hypothesis re-raises a skip at once,
    drawing nothing more (another exception would be drawn and sent again, as a failure's
    report)."""


def fuzz_operation(operation, mode: GenerationMode, strategy, auth: dict[str, str], tally: Tally, app: Any,
                   known: dict[str, dict[str, Any]], cases: int = CASES_PER_MODE, probe: int = 0) -> bool:
    """Send ``cases`` cases of ``mode`` drawn from ``strategy`` (or drawn already, ``DRAWN``).
    With ``probe``: stop after the first ``probe`` cases if every answer to them was a 401 or
    403, and say so (False: the operation refuses the caller)."""
    key = (operation.label, mode.value, cases, repr(sorted(known.items())))
    drawn = DRAWN.get(key)
    sent = 0

    def send(case) -> None:
        nonlocal sent
        tally.cases[operation.label] += 1
        sent += 1
        answer(case)
        if sent == probe and refused():
            raise _Refused()

    def answer(case) -> None:
        try:
            response = case.call(headers=auth, app=app)
        except Exception as exc:  # noqa: BLE001 - in process, the app's exception surfaces here
            tally.statuses[500] += 1
            tally.failures.append(f"{operation.label} ({mode.value}): a 500: {exc!r}\n{case.as_curl_command()}")
            return
        tally.statuses[response.status_code] += 1
        tally.answers[operation.label].add(response.status_code)
        try:
            case.validate_response(response, headers=auth, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - gathered, reported by the test
            tally.failures.append(f"{operation.label} ({mode.value}): {exc}")

    def refused() -> bool:
        return tally.answers[operation.label] <= {401, 403}

    if drawn is not None:  # the other caller's run drew them: the same cases, sent to this app
        try:
            for case in drawn:
                send(case)
        except _Refused:
            return False
        return not (sent < probe and refused())
    drawn = []

    @settings(max_examples=cases, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case) -> None:
        drawn.append(case)
        send(case)

    try:
        run()
    except Unsatisfiable:
        pass  # nothing to negate (no parameters, or a free-form string): no negative cases
    except _Refused:
        return False  # drawn in part: the other caller's run draws them all
    DRAWN[key] = drawn
    return not (sent < probe and refused())  # fewer cases than the probe's, all refused


def fuzz(api: Api, token: str) -> Tally:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", api.app)
    known = seed(api)
    auth = {"Authorization": f"Bearer {token}"}
    tally = Tally()
    for operation in sorted((r.ok() for r in schema.get_all_operations()), key=destructive_last):
        positive = strategies(operation, GenerationMode.POSITIVE, known)
        if not fuzz_operation(operation, GenerationMode.POSITIVE, positive, auth, tally, api.app, known,
                              cases=POSITIVE_CASES, probe=PROBE_CASES):
            tally.refused.append(operation.label)
            continue
        negative = strategies(operation, GenerationMode.NEGATIVE, known)
        fuzz_operation(operation, GenerationMode.NEGATIVE, negative, auth, tally, api.app, known)
    return tally


# Over a thousand requests per run: past pytest's default 120 s on a loaded 2-core machine.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("caller", ["user", "admin"])
def test_fuzzed_requests_get_no_5xx_and_answers_conform_to_the_openapi_document(
        api: Api, caller: str, capsys: pytest.CaptureFixture) -> None:
    started = time.monotonic()
    tally = fuzz(api, api.user_token if caller == "user" else api.admin_token)
    cases, statuses, failures = tally.cases, tally.statuses, tally.failures
    took = time.monotonic() - started
    with capsys.disabled():
        print(f"\nschemathesis as {caller}: {sum(cases.values())} cases on {len(cases)} operations in "
              f"{took:.1f} s; statuses {dict(sorted(statuses.items()))}; {len(failures)} failures; "
              f"{len(tally.refused)} operations refuse this caller")
        for label, count in sorted(cases.items()):
            print(f"  {count:4d}  {label}")
    assert len(cases) == len(api.app.openapi()["paths"]) + sum(
        len(ops) - 1 for ops in api.app.openapi()["paths"].values())  # every operation was fuzzed
    if caller == "admin":
        assert not tally.refused, "the admin's run must fuzz every operation past the door"
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    assert not failures, f"{server_errors} 5xx among {len(failures)} failures:\n\n" + "\n\n".join(failures[:10])
