"""Priority names and state names are written once, in ``core/``: elsewhere code names them
through ``core.priorities`` and ``core.states``, so a new word cannot be missed in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import trainyard.core.priorities as priorities_module
from trainyard.core.priorities import PRIORITY_NAMES
from trainyard.core.states import AttemptState, JobState, TaskState

PACKAGE = Path(priorities_module.__file__).parent.parent
WORDS = set(PRIORITY_NAMES) | {s.value for enum in (JobState, AttemptState, TaskState) for s in enum}
# Where the same spelling means something else, or must stand alone, and why.
ELSEWHERE = {
    "spec/models.py": "the job file's accepted priorities: spec/ imports nothing of ours (see test_priorities)",
    "backends/slurm/": "Slurm's own job states (squeue/scancel), not Trainyard's",
    "cli/admin_commands.py": "a column header (jobs waiting per VC)",
    "cli/shapes.py": "generated from the API's models (python -m trainyard.cli.plain): their enums, core's own values",
}


def test_priority_and_state_names_are_written_only_in_core() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("core/") or any(where.startswith(prefix) for prefix in ELSEWHERE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=where)):
            if isinstance(node, ast.Constant) and node.value in WORDS:
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == [], "use core.priorities / core.states instead of these literals"
