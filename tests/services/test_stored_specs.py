"""The one cache of parsed job files (services/specs.py)."""

from __future__ import annotations

from typing import Any

import pytest

from trainyard.services import specs as specs_module
from trainyard.services.specs import StoredSpecs
from trainyard.spec.errors import SpecError


def document(name: str = "train") -> dict[str, Any]:
    return {"name": name, "taskRoles": {"main": {"commands": ["python train.py"]}}}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the documents validated, in order."""
    seen: list[str] = []
    real = specs_module.validate_job

    def counting(data: dict[str, Any]):  # type: ignore[no-untyped-def]
        seen.append(data["name"])
        return real(data)

    monkeypatch.setattr(specs_module, "validate_job", counting)
    return seen


def test_a_job_is_parsed_once_per_document_whatever_its_row_version(parses: list[str]) -> None:
    cache = StoredSpecs()
    first = cache.parse(1, document("a"))
    # Read again (another session's copy of the same document: the job placed, launched,
    # ended, its row's version moving each time): not parsed again.
    assert cache.parse(1, document("a")) is first and parses == ["a"]
    # Another document under the same id (a row rolled back after its insert, its id given
    # to the next job): that job's own document, parsed.
    assert cache.parse(1, document("b")).name == "b" and parses == ["a", "b"]
    assert cache.known(1) is not None and cache.known(1).name == "b" and len(cache) == 1
    assert cache.known(2) is None


def test_the_cache_is_bounded_and_lets_the_least_recently_used_go(parses: list[str]) -> None:
    cache = StoredSpecs(capacity=2)
    cache.parse(1, document("a"))
    cache.parse(2, document("b"))
    cache.parse(1, document("a"))  # used again: job 2 is now the oldest
    cache.parse(3, document("c"))
    assert len(cache) == 2 and cache.known(2) is None and cache.known(1) is not None
    assert parses == ["a", "b", "c"]


def test_a_stored_file_that_no_longer_validates_is_not_kept() -> None:
    cache = StoredSpecs()
    with pytest.raises(SpecError):
        cache.parse(1, {"name": "broken", "taskRoles": {}})
    assert cache.known(1) is None
