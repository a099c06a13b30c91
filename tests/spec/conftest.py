"""Shared fixtures for the job-file tests: the OpenPAI example and a minimal job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

OPENPAI_EXAMPLE = Path(__file__).parent / "data" / "openpai_tensorflow_cifar10.yaml"


@pytest.fixture
def openpai_text() -> str:
    """A full OpenPAI protocol v2 job file, as text."""
    return OPENPAI_EXAMPLE.read_text(encoding="utf-8")


@pytest.fixture
def openpai_document(openpai_text: str) -> dict[str, Any]:
    """The same file parsed with plain PyYAML, for comparing against what we keep."""
    return yaml.safe_load(openpai_text)


@pytest.fixture
def minimal_document() -> dict[str, Any]:
    """The smallest job Trainyard accepts, with one role named `worker` of 2 instances."""
    return {"name": "demo", "taskRoles": {"worker": {"instances": 2, "commands": ["echo hi"]}}}
