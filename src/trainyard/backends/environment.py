"""What every backend's tasks inherit from the server's environment: a short allowlist.

Shared by the local backend (a task's own environment) and the Slurm backend (the
environment of ``sbatch`` and friends, which Slurm copies into the job), so that neither
backend imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# What a task inherits from the server's environment. Deliberately short: the server's
# own settings and secrets (TRAINYARD_*, database URLs, tokens) must not leak into jobs.
# Kept: how to find programs and libraries (including CUDA's), who and where the user
# is, locale and time zone, and proxy/CA settings that downloads on this network need.
INHERITED_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
INHERITED_PREFIXES = ("LC_",)


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of ``environ``, with a default PATH when it has none."""
    env = {
        name: value
        for name, value in environ.items()
        if name in INHERITED_VARIABLES or name.startswith(INHERITED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    return env
