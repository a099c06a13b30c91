"""Each backend stands alone: what two share lives in a neutral module under ``backends/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainyard.backends.base as backends_base
from trainyard.backends.environment import STANDARD_PATH, base_environment, site_environment

BACKENDS = Path(backends_base.__file__).parent
BACKEND_PACKAGES = sorted(p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists())


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_backend_imports_another() -> None:
    assert {"local", "slurm"} <= set(BACKEND_PACKAGES)
    crossings = [
        f"{path.relative_to(BACKENDS)} imports {module}"
        for name in BACKEND_PACKAGES
        for path in sorted((BACKENDS / name).rglob("*.py"))
        for module in sorted(imported_modules(path))
        for other in BACKEND_PACKAGES
        if other != name and module.startswith(f"trainyard.backends.{other}")
    ]
    assert crossings == []


def test_the_clean_base_of_every_task_is_the_documented_one() -> None:
    assert base_environment("/home/a", "alice") == {
        "PATH": STANDARD_PATH, "HOME": "/home/a", "USER": "alice", "LOGNAME": "alice", "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
    }


def test_site_variables_that_no_task_could_get_are_refused_naming_the_setting() -> None:
    assert site_environment({"HTTPS_PROXY": "http://proxy:3128"}) == {"HTTPS_PROXY": "http://proxy:3128"}
    for bad in ({"A=B": "x"}, {"1ST": "x"}, {"": "x"}, {"OK": "nul\0"}):
        with pytest.raises(ValueError, match="^task_env: "):
            site_environment(bad)
