"""A misspelled setting in the environment is said at `yard up` (pydantic-settings ignores an
unknown variable), and none of the other TRAINYARD_* names the code uses reads as one."""

from __future__ import annotations

import re
from pathlib import Path

import trainyard
from trainyard.core.settings import misspelled_environment


def test_a_near_miss_of_a_setting_is_named_with_the_setting_meant() -> None:
    found = misspelled_environment({"TRAINYARD_SCHEDULR_WORKER": "0", "TRAINYARD_LOCAL_GPU": "2",
                                    "TRAINYARD_LOCAL_GPUS": "2", "TRAINYARD_URL": "http://x", "PATH": "/bin"})
    assert found == [("TRAINYARD_LOCAL_GPU", "TRAINYARD_LOCAL_GPUS"),
                     ("TRAINYARD_SCHEDULR_WORKER", "TRAINYARD_SCHEDULER_WORKER")]


def test_no_trainyard_variable_the_code_itself_uses_reads_as_a_misspelled_setting() -> None:
    source = Path(trainyard.__file__).parent
    names = {match for path in source.rglob("*") if path.suffix in (".py", ".sh")
             for match in re.findall(r"TRAINYARD_[A-Z][A-Z_]*[A-Z]", path.read_text(errors="replace"))}
    assert len(names) > 30
    assert misspelled_environment(dict.fromkeys(names, "1")) == []
