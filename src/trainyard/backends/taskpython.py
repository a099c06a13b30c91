"""``trainyard.runtime`` for a task's own Python: the directory every backend puts first on
its tasks' ``PYTHONPATH``.

The directory holds ``trainyard/runtime.py`` (a copy of the module, standard library only)
and no ``trainyard/__init__.py``: a namespace-package portion. Any interpreter a task runs
(a virtualenv's, a container's, the system's) then finds ``from trainyard import runtime``
without anything of Trainyard's installed; and one whose sys.path holds the real package
(an installed or path-based ``trainyard``) gets that one, since Python takes a regular
package wherever it finds one on the path over namespace portions. Shared by the backends
(``docs/runtime.md``), so neither imports the other.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "trainyard"
MODULE = "runtime.py"
PYTHONPATH = "PYTHONPATH"


def runtime_source() -> str:
    """The source of ``trainyard.runtime`` as this server has it."""
    return importlib.resources.files(PACKAGE).joinpath(MODULE).read_text(encoding="utf-8")


def install_runtime(directory: Path) -> Path:
    """Make ``directory`` hold ``trainyard/runtime.py`` (readable by everyone: it is the
    public library) unless it already holds exactly this copy; returns ``directory``.

    Replaced atomically: a task importing it meanwhile reads the old copy or the new one.
    """
    package = directory / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    for folder in (directory, package):
        os.chmod(folder, 0o755)  # whatever the umask
    target = package / MODULE
    text = runtime_source()
    try:
        current = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = None
    if current != text:
        tmp = target.with_name(f".{MODULE}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    return directory


def with_runtime_path(env: Mapping[str, str], directory: Path) -> dict[str, str]:
    """``env`` with ``directory`` first on its ``PYTHONPATH``, then the value it had (the
    job's own, or the site's) exactly as it was; never an empty entry of ours, which
    Python would read as the current directory."""
    kept = env.get(PYTHONPATH, "")
    return {**env, PYTHONPATH: f"{directory}{os.pathsep}{kept}" if kept else str(directory)}
