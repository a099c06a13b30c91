"""Each backend stands alone: what two share lives in a neutral module under ``backends/``."""

from __future__ import annotations

import ast
from pathlib import Path

import trainyard.backends.base as backends_base
from trainyard.backends.environment import inherited_environment

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


def test_tasks_inherit_only_the_allowlist_and_always_a_path() -> None:
    env = inherited_environment({"HOME": "/home/a", "LC_ALL": "C", "TRAINYARD_TOKEN": "secret", "DATABASE_URL": "x"})
    assert env["HOME"] == "/home/a" and env["LC_ALL"] == "C" and env["PATH"]
    assert "TRAINYARD_TOKEN" not in env and "DATABASE_URL" not in env
