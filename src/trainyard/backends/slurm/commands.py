"""Running Slurm's own commands (sbatch, scancel, scontrol) and reading their output.

Every command runs from an argv list, never through a shell, with a short allowlisted
environment: the server's settings and secrets must not reach Slurm, which copies the
submitting environment into the job (``--export=ALL``, its default) for the batch script
and ``srun`` to find their way. The task itself does not get it: the task runner starts
the job's script from a clean environment (``backends/environment``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

COMMAND_TIMEOUT_SECONDS = 30.0
# What Slurm's commands inherit from the server's environment: how to find programs,
# who and where the user is, locale and time zone, and proxy/CA settings. Never the
# server's own settings and secrets (TRAINYARD_*, database URLs, tokens).
INHERITED_VARIABLES = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR",
)
INHERITED_PREFIXES = ("LC_",)
# scontrol's one-line records: ``Key=value`` pairs separated by single spaces. Values
# hold no spaces except in a few free-text fields (Reason, Comment, Command); a space
# counts as a separator only when a ``Key=`` follows it.
MUNGE_DEFAULT_SOCKET = "/run/munge/munge.socket.2"
_AUTH_SOCKET = re.compile(r"^\s*AuthInfo\s*=\s*(?:\S*,)?socket=([^,\s]+)", re.IGNORECASE | re.MULTILINE)
_FIELD_START = re.compile(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)")


class SlurmError(RuntimeError):
    """A Slurm command failed, or Slurm is not installed or not reachable."""


class SlurmCommands:
    """Slurm's CLI, configured by ``SLURM_CONF`` (inherited, or given)."""

    def __init__(self, slurm_conf: str | None = None) -> None:
        self.slurm_conf = slurm_conf or os.environ.get("SLURM_CONF")
        env = command_environment(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        self.env: Mapping[str, str] = env
        needed = ("sbatch", "scancel", "scontrol", "squeue")
        missing = [name for name in needed if shutil.which(name, path=env["PATH"]) is None]
        if missing:
            raise SlurmError(
                f"the Slurm backend needs {', '.join(missing)} on PATH; install Slurm's client commands "
                "(Debian: slurm-client) or start a dev cluster with scripts/dev-slurm.sh start"
            )

    def run(self, argv: Sequence[str], *, check: bool = True,
            timeout: float = COMMAND_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                list(argv), env=dict(self.env), capture_output=True, text=True,
                timeout=timeout, stdin=subprocess.DEVNULL, cwd="/",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]} failed: {exc}") from exc
        if check and done.returncode != 0:
            raise SlurmError(f"{' '.join(argv[:2])} ... exited with {done.returncode}: {done.stderr.strip()}")
        return done

    def sbatch(self, argv: Sequence[str]) -> str:
        """Submit; returns the Slurm job id (``--parsable`` is added here)."""
        done = self.run(["sbatch", "--parsable", *argv])
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {done.stdout.strip()!r}, not a job id")
        return job_id

    def scancel(self, job_id: str, *, signal: str | None = None, state: str | None = None) -> None:
        argv = ["scancel", "--quiet"]
        if signal is not None:
            argv.append(f"--signal={signal}")
        if state is not None:
            argv.append(f"--state={state}")
        # A job that has already ended is not an error worth raising.
        self.run([*argv, job_id], check=False)

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld still knows (hetjob components are separate records)."""
        done = self.run(["scontrol", "show", "job", "--oneliner"], check=False)
        if done.returncode != 0:
            if "No jobs in the system" in done.stdout + done.stderr:
                return []
            raise SlurmError(f"scontrol show job failed ({done.returncode}): {done.stderr.strip()}")
        return parse_records(done.stdout)

    def nodes(self) -> list[dict[str, str]]:
        return parse_records(self.run(["scontrol", "show", "node", "--oneliner"]).stdout)

    def job_ids_named(self, name: str) -> list[str]:
        """Ids of the jobs (in any state Slurm still remembers) with exactly this name."""
        done = self.run(["squeue", "--noheader", "--all", "--states=all", f"--name={name}", "--format=%F"])
        return sorted({line.strip() for line in done.stdout.splitlines() if line.strip().isdigit()})


def parse_records(text: str) -> list[dict[str, str]]:
    """scontrol ``--oneliner`` output: one ``{key: value}`` dict per non-empty line."""
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line or "=" not in line:
            continue
        record: dict[str, str] = {}
        for part in _FIELD_START.split(line):
            key, _, value = part.partition("=")
            record[key] = value.strip()
        records.append(record)
    return records


def command_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of ``environ``, with a default PATH when it has none."""
    env = {
        name: value
        for name, value in environ.items()
        if name in INHERITED_VARIABLES or name.startswith(INHERITED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    return env


def munge_socket(slurm_conf: str | None) -> str:
    """The munge socket ``slurm.conf`` names (``AuthInfo=socket=...``), else munge's default:
    whoever can reach it can ask Slurm for jobs as their own account."""
    try:
        text = Path(slurm_conf or "/etc/slurm/slurm.conf").read_text()
    except OSError:
        return MUNGE_DEFAULT_SOCKET
    match = _AUTH_SOCKET.search(text)
    return match.group(1) if match else MUNGE_DEFAULT_SOCKET
