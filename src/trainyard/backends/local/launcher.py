"""How the local backend starts task supervisors, so that no upgrade of Trainyard breaks it.

Supervisors start for every launch while the server runs for days, and the installed
``trainyard`` package may be replaced under it meanwhile: ``pip install`` deletes the old
files before it writes the new ones, an editable install moves the package elsewhere, and
a new version may change the supervisor's file protocol. A supervisor that imported the
installed package would fail (``ModuleNotFoundError``) or run code of another version.

So supervisors never import the installed package. When the backend starts, it takes the
source of the supervisor's stdlib-only modules (``supervisor``, ``procfs``,
``taskfiles``, ``containerrun``, and the shared ``backends/sandboxjoin`` (a sandboxed
task's start, see ``starter``), ``backends/cgroups``,
``backends/containercgroup``, ``backends/datacache`` and ``datafetch`` (a node's dataset
cache) with the name check they use, ``core/workdirs``, and the addresses a fetch refuses,
``core/addresses``, and a GPU share's MPS daemon, ``backends/mps``, as this server has them) and keeps
them in memory; it writes them to
``<state_dir>/supervisor/<digest>/`` (a runnable directory: ``__main__.py`` plus the
``trainyard/backends/`` packages holding just those modules) and runs every
supervisor as::

    <the interpreter's real path> -I -S <state_dir>/supervisor/<digest> TASK_DIR

``-I`` (isolated: no ``PYTHON*`` variables, no user site, no current directory on the
path) and ``-S`` (no site-packages) leave the supervisor the copy and the standard library
and nothing else. The interpreter is the real file behind ``sys.executable`` (a virtual
environment's ``python`` is a link to it), which an upgrade of Trainyard does not touch.

The copy is checked once, when the backend starts (it must import and answer
``--check``), so a server that cannot launch anything refuses to start; it is rewritten
from memory before a launch if something deleted it. The digest names the copy after its
content, so servers of two versions never share one, and supervisors that are still
running keep the copy they started from (copies of older versions are left in place: a
few tens of KiB each). A supervisor that still fails before it claims its task is
reported by the backend with the end of its ``supervisor.log``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import IO

from trainyard.backends import cgroups, containercgroup, datacache, datafetch, mps, sandboxjoin
from trainyard.backends.local import containerrun, procfs, supervisor, taskfiles
from trainyard.backends.sandbox import real_interpreter
from trainyard.core import addresses, workdirs

SNAPSHOTS_DIR = "supervisor"
CHECK_ARG = "--check"
CHECK_TIMEOUT_SECONDS = 30.0
# The package path the copied modules keep, so that their own imports resolve to each other.
_PACKAGE = ("trainyard", "backends", "local")
_MODULES: tuple[ModuleType, ...] = (supervisor, procfs, taskfiles, containerrun, sandboxjoin, cgroups,
                                    containercgroup, datacache, datafetch, workdirs, addresses, mps)
_MAIN = f"import sys\nfrom {supervisor.__name__} import main\nsys.exit(main(sys.argv))\n"


class LaunchError(RuntimeError):
    """Supervisors cannot be started here: the server must not accept jobs it cannot run."""


class SupervisorLauncher:
    """Starts supervisors from a private copy of their code; see the module docstring."""

    def __init__(self, state_dir: Path, python: str | None = None) -> None:
        self.python = python or real_interpreter()  # the file an upgrade of Trainyard leaves in place
        self._files = _snapshot_files()
        digest = hashlib.sha256()
        for name, text in sorted(self._files.items()):
            digest.update(name.encode() + b"\0" + text + b"\0")
        self.snapshot = state_dir / SNAPSHOTS_DIR / digest.hexdigest()[:16]
        self.ensure()

    def argv(self, task_dir: Path) -> list[str]:
        """The command line of the supervisor of ``task_dir``."""
        return [self.python, "-I", "-S", str(self.snapshot), str(task_dir)]

    def starter(self) -> tuple[str, ...]:
        """How a sandboxed task's start (``sandboxjoin --stop``) is run: from this copy,
        which outlives an upgrade as the supervisors' code does, by the same interpreter."""
        return (self.python, "-I", "-S", str(self.snapshot / Path(*_PACKAGE[:-1]) / "sandboxjoin.py"))

    def spawn(self, task_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
        """Start the supervisor of ``task_dir``, its output appended to ``log_path``.

        In its own session: it survives the server (kill -9 included) and its terminal's
        Ctrl-C. LaunchError when it cannot even be executed.
        """
        self.ensure()
        with open(log_path, "ab") as log:
            return self._start(self.argv(task_dir), log, detached=True)

    def ensure(self) -> None:
        """Write the copy unless it is whole; cheap when it is (one stat per file)."""
        if all((self.snapshot / name).is_file() for name in self._files):
            return
        self.snapshot.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Written beside it, then renamed into place: a supervisor never sees half a copy.
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.snapshot.parent))
        for name, text in self._files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text)
        try:
            os.rename(staging, self.snapshot)
        except OSError:  # a partial copy is in the way (something deleted files from it)
            shutil.rmtree(self.snapshot, ignore_errors=True)
            os.rename(staging, self.snapshot)

    def check(self) -> None:
        """Run the copy once; LaunchError saying why when it cannot start."""
        process = self._start([self.python, "-I", "-S", str(self.snapshot), CHECK_ARG], subprocess.PIPE)
        try:
            output, _ = process.communicate(timeout=CHECK_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            process.wait()
            raise LaunchError(f"cannot start task supervisors with {self.python}: {exc}") from exc
        if process.returncode != 0:
            detail = last_lines(output.decode(errors="replace")) or f"exit status {process.returncode}"
            raise LaunchError(f"cannot start task supervisors with {self.python} from {self.snapshot}: {detail}")

    def _start(self, argv: list[str], output: IO[bytes] | int, *, detached: bool = False) -> subprocess.Popen[bytes]:
        """The one way a supervisor process starts: nothing inherited but a default PATH."""
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd="/",
                env={"PATH": os.defpath},
                start_new_session=detached,
                close_fds=True,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start task supervisors with {self.python}: {exc}") from exc


def _snapshot_files() -> dict[str, bytes]:
    """The copy's files by relative path: the modules' sources as this server has them."""
    files = {"__main__.py": _MAIN.encode()}
    for depth in range(1, len(_PACKAGE) + 1):
        files[str(Path(*_PACKAGE[:depth]) / "__init__.py")] = b""
    for module in _MODULES:
        assert module.__file__ is not None
        # Each module where its name puts it (``cgroups`` is shared, one package up;
        # ``core.workdirs``, the names a dataset may hold, in a package of its own).
        package = Path(*module.__name__.split(".")[:-1])
        files[str(package / "__init__.py")] = b""
        files[str(package / Path(module.__file__).name)] = Path(module.__file__).read_bytes()
    return files


def last_lines(text: str, count: int = 1, limit: int = 1000) -> str:
    """The last ``count`` non-empty lines of ``text``, on one line: a traceback's last
    names the error."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:])[-limit:]
