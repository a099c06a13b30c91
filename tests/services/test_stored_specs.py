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


def test_a_job_is_parsed_once_per_row_version(parses: list[str]) -> None:
    cache = StoredSpecs()
    first = cache.parse(1, 1, document("a"))
    assert cache.parse(1, 1, document("a")) is first and parses == ["a"]
    assert cache.parse(1, 2, document("b")).name == "b" and parses == ["a", "b"]  # the row changed
    assert cache.known(1) is not None and cache.known(1).name == "b" and len(cache) == 1
    assert cache.known(2) is None


def test_the_cache_is_bounded_and_lets_the_least_recently_used_go(parses: list[str]) -> None:
    cache = StoredSpecs(capacity=2)
    cache.parse(1, 1, document("a"))
    cache.parse(2, 1, document("b"))
    cache.parse(1, 1, document("a"))  # used again: job 2 is now the oldest
    cache.parse(3, 1, document("c"))
    assert len(cache) == 2 and cache.known(2) is None and cache.known(1) is not None
    assert parses == ["a", "b", "c"]


def test_a_stored_file_that_no_longer_validates_is_not_kept() -> None:
    cache = StoredSpecs()
    with pytest.raises(SpecError):
        cache.parse(1, 1, {"name": "broken", "taskRoles": {}})
    assert cache.known(1) is None
