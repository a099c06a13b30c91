"""What runs inside a Trainyard job: who am I, where do my checkpoints go, must I suspend.

Standard library only, and nothing else of Trainyard's: a task imports it from its own
Python (any virtualenv or container) as ``from trainyard import runtime``::

    from trainyard import runtime

    step = runtime.get_state({"step": 0})["step"]      # survives the whole chain of attempts
    model = load(runtime.checkpoint_dir()) if runtime.resumed() else fresh()
    while step < total:
        train_one_step(model)
        step += 1
        if runtime.should_suspend():                    # Trainyard asks for the GPUs back
            save(model, runtime.checkpoint_dir())
            runtime.set_state({"step": step})
            runtime.suspend_done()                      # exits with SUSPENDED_EXIT_CODE

**The contract** (``docs/runtime.md``). A job that declares it can be suspended is told to,
every task of it: Trainyard creates the file named by ``TRAINYARD_SUSPEND_FILE`` (the
request: a reason and the deadline) and sends the signal named by
``TRAINYARD_SUSPEND_SIGNAL``. The task saves its state and exits with
``SUSPENDED_EXIT_CODE`` (``suspend_done()`` does); whatever is still running at the end of
the grace period is stopped. The job waits as SUSPENDED and later resumes as a new attempt
of the same chain, with ``TRAINYARD_RESUMED=1``.

**Trying it without a cluster.** With ``TRAINYARD_SIMULATE_SUSPEND_AFTER=30`` and no
Trainyard around (no ``TRAINYARD_JOB_ID``), ``should_suspend()`` turns true 30 s after the
program started, and ``suspend_done()`` starts the program again as the next attempt, as
Trainyard would resume it (``hai-cli``'s local simulation does the same); the job directory
is ``$TRAINYARD_JOB_DIR`` or ``./.trainyard-local``. ``TRAINYARD_SIMULATE_SUSPENSIONS``
(default 1) says how many times.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SUSPENDED_EXIT_CODE = 85  # "I saved my state and stopped because I was asked to"

JOB_DIR = "TRAINYARD_JOB_DIR"
SUSPEND_FILE = "TRAINYARD_SUSPEND_FILE"
SUSPEND_SIGNAL = "TRAINYARD_SUSPEND_SIGNAL"
RESUMED = "TRAINYARD_RESUMED"
SIMULATE_AFTER = "TRAINYARD_SIMULATE_SUSPEND_AFTER"
SIMULATE_TIMES = "TRAINYARD_SIMULATE_SUSPENSIONS"
LOCAL_JOB_DIR = ".trainyard-local"  # the job directory of a simulation outside Trainyard

_STATE_FILE = "state.json"  # in <job dir>/.trainyard/
_METRICS_FILE = "metrics.json"  # runtime.report's, in <job dir>/.trainyard/
SWEEP_INDEX = "TRAINYARD_SWEEP_INDEX"
SWEEP_PARAMS = "TRAINYARD_SWEEP_PARAMS"
_started = time.monotonic()
_signalled = threading.Event()
_handler_installed = False


# -- who am I --------------------------------------------------------------------------


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def rank() -> int:
    """This task's rank among all the job's tasks (roles in declaration order, then index)."""
    return _int_env("RANK", 0)


def world_size() -> int:
    return _int_env("WORLD_SIZE", 1)


def attempt() -> int:
    """The attempt this task belongs to: 0 first, one more for each retry or resumption."""
    return _int_env("TRAINYARD_ATTEMPT", 0)


def under_trainyard() -> bool:
    return "TRAINYARD_JOB_ID" in os.environ


def resumed() -> bool:
    """Whether this attempt resumes a suspended one (its checkpoint is there to load)."""
    return os.environ.get(RESUMED) == "1"


def elastic() -> tuple[int, int, int] | None:
    """An elastic job's size (``instances: {min, max}``): (workers now, min, max); None for a
    job of fixed size. It runs on that many workers until Trainyard resizes it: every worker
    is then stopped and started again at the new size, from the job's last checkpoint
    (``resizes()`` counts how many times that happened in this attempt)."""
    if "TRAINYARD_ELASTIC_MAX" not in os.environ:
        return None
    low = _int_env("TRAINYARD_ELASTIC_MIN", 1)
    return _int_env("TRAINYARD_NNODES", low), low, _int_env("TRAINYARD_ELASTIC_MAX", low)


def resizing() -> int | None:
    """While Trainyard stops this worker for its elastic job's resize: the number of workers
    the job starts again at (the stop, SIGTERM, comes with it; a handler for it can tell a
    resize from a stop of the job this way and save quickly). None otherwise. A worker the
    resize keeps starts again with ``resizes()`` one higher."""
    found = suspend_request()
    size = None if found is None else found.get("resize_to")
    return size if isinstance(size, int) else None


def resizes() -> int:
    """How many times this attempt of an elastic job has been resized so far (0: never)."""
    return _int_env("TRAINYARD_ELASTIC_RESIZES", 0)


# -- where -----------------------------------------------------------------------------


def job_dir() -> Path:
    """The job's directory, kept across all its attempts (``$TRAINYARD_JOB_DIR``); in a
    simulation outside Trainyard, ``./.trainyard-local``."""
    path = Path(os.environ.get(JOB_DIR) or LOCAL_JOB_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def checkpoint_dir() -> Path:
    """``<job dir>/checkpoints``, made if missing: where a job keeps what it resumes from."""
    path = job_dir() / "checkpoints"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _control_dir() -> Path:
    path = job_dir() / ".trainyard"
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- the value that lives as long as the job -------------------------------------------


def get_state(default: Any = None) -> Any:
    """The value last given to `set_state` in any attempt of this job, else ``default``."""
    try:
        return json.loads((_control_dir() / _STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


def set_state(value: Any) -> None:
    """Keep a JSON-able value for the rest of the job's life, written atomically (a crash
    mid-write leaves the previous value)."""
    _write_atomically(_STATE_FILE, json.dumps(value))


def _write_atomically(name: str, text: str) -> None:
    folder = _control_dir()
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".state-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, folder / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# -- sweeps ----------------------------------------------------------------------------


def sweep_index() -> int | None:
    """This job's index in its sweep (``yard submit`` of a file with ``sweep:``); None
    for a job of no sweep."""
    value = os.environ.get(SWEEP_INDEX)
    return int(value) if value is not None and value.isdigit() else None


def sweep_params() -> dict[str, Any]:
    """This job's point of its sweep: the parameters it overrides (``{}`` outside a sweep).
    They are also the job's ``parameters`` for ``<% $parameters.x %>`` placeholders."""
    try:
        found = json.loads(os.environ.get(SWEEP_PARAMS) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def report(**values: Any) -> None:
    """Report figures (``report(loss=0.12, step=900)``): kept in
    ``<job dir>/.trainyard/metrics.json``, the latest value of each name, and shown by the
    job's sweep (``metric: {name: loss}``). Values must be JSON-able; call it as often as you
    like (each call writes the file atomically)."""
    path = _control_dir() / _METRICS_FILE
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        current = {}
    if not isinstance(current, dict):
        current = {}
    current.update(values)
    _write_atomically(_METRICS_FILE, json.dumps(current))


# -- suspension ------------------------------------------------------------------------


def _install_handler() -> None:
    """Note the suspend signal when it comes (once, from the main thread; a program with a
    handler of its own for that signal keeps it, and relies on the request file)."""
    global _handler_installed
    if _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    _handler_installed = True
    number = _suspend_signal_number()
    if number is not None and signal.getsignal(number) in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(number, lambda *_: _signalled.set())


def _suspend_signal_number() -> signal.Signals | None:
    """The signal named by ``TRAINYARD_SUSPEND_SIGNAL`` ("SIGUSR1" or "USR1"), if any."""
    name = os.environ.get(SUSPEND_SIGNAL, "")
    try:
        return signal.Signals[name if name.startswith("SIG") else "SIG" + name] if name else None
    except KeyError:
        return None


def suspend_request() -> dict[str, Any] | None:
    """Trainyard's request to suspend (``{"reason": …, "deadline": <epoch seconds>}``), or
    None when none is pending."""
    path = os.environ.get(SUSPEND_FILE)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        if text is not None:
            try:
                found = json.loads(text) if text.strip() else {}
            except ValueError:
                found = {}
            return found if isinstance(found, dict) else {}
    if _signalled.is_set():
        return {"reason": "signalled"}
    if _simulating() and time.monotonic() - _started >= float(os.environ[SIMULATE_AFTER]):
        return {"reason": f"simulated after {os.environ[SIMULATE_AFTER]} s"}
    return None


def should_suspend() -> bool:
    """Whether Trainyard asked this job to suspend: save, then call `suspend_done`. Cheap
    enough to call every step (a stat of one file)."""
    _install_handler()
    return suspend_request() is not None


def suspend_done() -> None:
    """Say the state is saved and stop: exits with ``SUSPENDED_EXIT_CODE``. In a simulation
    outside Trainyard, starts this program again as the next attempt instead."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _simulating():
        left = _int_env(SIMULATE_TIMES, 1) - 1
        env = dict(os.environ, TRAINYARD_ATTEMPT=str(attempt() + 1), **{RESUMED: "1"})
        if left > 0:
            env[SIMULATE_TIMES] = str(left)
        else:
            env.pop(SIMULATE_AFTER, None)
            env.pop(SIMULATE_TIMES, None)
        print(f"trainyard.runtime: simulated suspension; resuming as attempt {attempt() + 1}", file=sys.stderr)
        sys.stderr.flush()
        arguments = getattr(sys, "orig_argv", None)  # as invoked (3.10+): keeps -m and the like
        os.execve(sys.executable, [sys.executable, *(arguments[1:] if arguments else sys.argv)], env)
    _ignore_suspend_signal()
    raise SystemExit(SUSPENDED_EXIT_CODE)


def _ignore_suspend_signal() -> None:
    """From now on the suspend signal changes nothing: the task has said it is done. It
    may still come (Trainyard writes the request file first, and a task polling the file
    can be on its way out before the signal arrives), and the interpreter puts the default
    action, death, back on a signal it handled while it shuts down: the task would end
    killed by it instead of with ``SUSPENDED_EXIT_CODE``. An ignored signal stays ignored."""
    number = _suspend_signal_number()
    if number is not None and threading.current_thread() is threading.main_thread():
        signal.signal(number, signal.SIG_IGN)


def _simulating() -> bool:
    return not under_trainyard() and bool(os.environ.get(SIMULATE_AFTER))


# Note the suspend signal from the moment the job imports this module, so that a signal
# that comes before its first `should_suspend()` (while it loads its data) is not its end.
_install_handler()
