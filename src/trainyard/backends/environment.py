"""The environment every backend's tasks start from: clean, the same everywhere, documented.

Shared by the local backend (a task's own environment) and the Slurm backend (what its
task runner hands the job's script), so that neither backend imports the other.

A task inherits nothing from the server's environment: the server's virtualenv on
``PATH`` would make a job's ``python3`` Trainyard's own interpreter and its
``pip install`` change Trainyard itself, and the server's settings and secrets must not
reach jobs. Like Slurm's ``--export=NONE`` plus what the job asks for, a task gets, each
layer over the one before (docs/user/jobs.md, "What every task gets", lists them for users):

1. ``base_environment``: a standard ``PATH``, ``HOME``/``USER``/``LOGNAME`` of the
   account the task runs as, ``SHELL`` and ``LANG``;
2. the site's variables (the ``task_env`` setting: proxies, CUDA paths, caches);
2½. the job's Python environment (``yard env``), when it runs in one: its ``bin`` folders
   before the ``PATH`` of the layers below, and ``VIRTUAL_ENV`` (``python_environment``);
3. the job's ``env`` and Trainyard's wiring (``core/wiring``: ``TRAINYARD_*``, ``PAI_*``,
   ``MASTER_ADDR``...), composed by the controller;
4. the GPU pinning (``CUDA_VISIBLE_DEVICES``...), last, so that no layer widens it.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping

from trainyard.backends.base import PythonEnvironment

# systemd's default PATH (also Debian's for root): no virtualenv, no user's own bin dirs.
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TASK_SHELL = "/bin/bash"  # what runs a task's commands, on both backends
DEFAULT_LANG = "C.UTF-8"  # UTF-8 without assuming a locale is installed (glibc has it built in)
# A name that both execve and a shell accept; what the task_env setting may name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def base_environment(home: str, user: str) -> dict[str, str]:
    """Layer 1 of a task's environment, for a task that runs as ``user`` with ``home``."""
    return {
        "PATH": STANDARD_PATH,
        "HOME": home,
        "USER": user,
        "LOGNAME": user,
        "SHELL": TASK_SHELL,
        "LANG": DEFAULT_LANG,
    }


def process_account() -> tuple[str, str]:
    """``(home, user)`` of the account this process runs as (tasks that run as the server's
    own account); from the password database, else from ``HOME`` and the uid."""
    try:
        entry = pwd.getpwuid(os.getuid())
    except KeyError:  # a uid without an entry (containers): what the environment says
        return os.environ.get("HOME", "/"), os.environ.get("USER", str(os.getuid()))
    return entry.pw_dir, entry.pw_name


def site_environment(variables: Mapping[str, str]) -> dict[str, str]:
    """Layer 2, the ``task_env`` setting, checked; ValueError naming the setting and the
    variable when a name or value could not be passed to a task."""
    for name, value in variables.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ValueError(
                f"task_env: {name!r} is not a valid environment variable name (letters, digits and _, "
                "not starting with a digit)"
            )
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"task_env: {name}: the value must be a string without NUL bytes")
    return dict(variables)


def python_environment(below: Mapping[str, str], environment: PythonEnvironment | None) -> dict[str, str]:
    """Layer 2½ over ``below`` (layers 1 and 2): the environment's ``bin`` folders first on
    ``PATH`` (so its ``python``, ``pip`` and scripts win over the node's) and ``VIRTUAL_ENV``
    set, as ``activate`` does. The job's own env, the next layer, may still override both."""
    layered = dict(below)
    if environment is not None:
        layered["PATH"] = ":".join((*environment.bin_dirs, below.get("PATH", STANDARD_PATH)))
        layered["VIRTUAL_ENV"] = environment.prefix
    return layered
