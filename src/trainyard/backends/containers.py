"""Tasks in containers: the engine (Podman or Docker), the command line that runs a task in
its image, GPUs through CDI, and the node's image cache. Shared by the local and Slurm
backends (neither imports the other).

The container is made to look to the task like a bare task's process: the host's network
(``--network host``: MASTER_ADDR and the job's ports work unchanged), its work and job
directories and storages bound at the same paths as outside, Trainyard's wiring
variables, only its own GPUs (CDI devices, as the NVIDIA Container Toolkit documents:
``--device nvidia.com/gpu=<index>``), its CPU and memory limits, and its OS account's
uid:gid when tasks run under accounts. Signals: the task's process is the engine's client
(``run`` in the foreground), which proxies them into the container, where ``catatonit -g``
(or ``tini -g``) is PID 1 and hands each to the task script's whole process group.

The engine runs as the server's user (root on a shared node) with a clean environment
(:data:`ENGINE_ENV`): nothing of a job's environment may reach it (``CONTAINERS_CONF`` in a
job's env would otherwise choose the engine's configuration). The task's variables go in a
root-only ``--env-file`` instead, never on a command line that ``ps`` shows.

A task in an image *and* a Python environment (``yard env``): the environment's folders (its
own and its base's) are bound read-only at the same paths, so ``PATH``, ``VIRTUAL_ENV`` and
the ``.pth`` naming the base's packages stay valid inside. A virtualenv holds no interpreter
of its own: its ``bin/python`` is a link to the one it was built with on the node (the
node's ``/usr/bin/python3.11``, say), which the image may lack. So before the task, one
short container of the same image runs the environment's ``python`` (:func:`environment_check`);
when it cannot, the task ends with status 125 and a message that says so (as a failed pull
does) instead of the job failing on "python: not found".
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from trainyard.backends.base import (
    GpuInfo,
    ImagePull,
    ImageRemoval,
    Mount,
    NodeImage,
    PythonEnvironment,
    TaskKey,
    TaskStatus,
)
from trainyard.backends.cgroups import OUT_OF_MEMORY
from trainyard.backends.containercgroup import memory_cgroup as memory_cgroup  # the local backend's name for it
from trainyard.core.exitcodes import IMAGE_UNAVAILABLE

EngineKind = Literal["podman", "docker"]
ENGINE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
# Where the NVIDIA Container Toolkit writes CDI specs (``nvidia-ctk cdi generate``).
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
CDI_GPU_KIND = "nvidia.com/gpu"
# Inside every container: the init that forwards signals to the task's process group,
# and the task's script (bound read-only from the host).
INIT_PATH = "/run/trainyard/init"
SCRIPT_PATH = "/run/trainyard/task.sh"
PULL_TIMEOUT_SECONDS = 3600.0
_INITS = ("catatonit", "tini")  # both forward signals to the child's process group with -g


class ContainerError(RuntimeError):
    """The task cannot run in a container here; the message says why and what to do."""


@dataclass(frozen=True)
class ContainerEngine:
    """A container engine on a node: its client, and for Podman the OCI runtime to use."""

    kind: EngineKind
    path: str
    runtime: str | None = None  # podman's --runtime (runc: crun fails on cgroup v1 hybrid hosts)
    init: str | None = None  # catatonit or tini on the host, bound into containers as PID 1

    @classmethod
    def find(cls, kind: EngineKind = "podman", runtime: str | None = "runc") -> ContainerEngine | None:
        """The engine of that kind on this machine's PATH; None when it is not installed."""
        path = shutil.which(kind, path=ENGINE_ENV["PATH"])
        if path is None:
            return None
        init = next((p for name in _INITS if (p := shutil.which(name, path=ENGINE_ENV["PATH"]))), None)
        return cls(kind, path, runtime if kind == "podman" else None, init)

    def command(self, *args: str) -> list[str]:
        """``ENGINE [--runtime R] ARGS...``."""
        prefix = [self.path] + (["--runtime", self.runtime] if self.runtime else [])
        return [*prefix, *args]

    def exists_command(self, image: str) -> list[str]:
        if self.kind == "podman":
            return self.command("image", "exists", image)
        return self.command("image", "inspect", "--format", "{{.Id}}", image)

    def pull_command(self, image: str) -> list[str]:
        return self.command("pull", image)

    def remove_image_command(self, image: str) -> list[str]:
        """Untag (or, for its last name, delete) the image; never forced, so the engine
        refuses an image a container uses."""
        return self.command("rmi", image)

    def remove_command(self, name: str) -> list[str]:
        return self.command("rm", "--force", "--time", "0", name) if self.kind == "podman" else self.command(
            "rm", "--force", name)


@dataclass(frozen=True)
class ContainerTask:
    """What one task's container needs: everything the run command says."""

    key: TaskKey
    image: str
    node: str
    work_dir: Path
    script: Path  # on the host; bound read-only at SCRIPT_PATH
    env_file: Path  # root-only, written by :func:`write_env_file`
    binds: tuple[Mount, ...] = ()  # the work/job/secrets dirs and the task's storages
    gpu_devices: tuple[str, ...] = ()  # CDI device names of the task's GPUs
    cpu_milli: int = 0
    memory_mb: int = 0
    pids_max: int | None = None  # the most processes and threads at once (--pids-limit)
    user: tuple[int, int, tuple[int, ...]] | None = None  # uid, gid, supplementary groups
    name_salt: str = ""  # tells apart two servers' tasks of the same key on one machine
    # The memory cgroup the container sits in, holding its limit (``containercgroup``);
    # None: the limit is the engine's --memory, and an OOM kill cannot be told apart.
    cgroup: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return container_name(self.key, self.name_salt)


def container_name(key: TaskKey, salt: str) -> str:
    """A task run's container name: unique per task run and server (``salt``: its task
    directory), valid for both engines."""
    digest = hashlib.sha256(salt.encode()).hexdigest()[:8]
    return f"trainyard-{key.job_id}-{key.attempt}-{key.role}-{key.index}-{key.run}-{digest}"


def run_command(engine: ContainerEngine, task: ContainerTask) -> list[str]:
    """The engine's command line that runs ``task`` in the foreground (see the module docstring)."""
    return [*run_options(engine, task), task.image, *container_command(engine)]


CONTAINER_COMMAND = ("bash", "--noprofile", "--norc", SCRIPT_PATH)


def container_command(engine: ContainerEngine) -> tuple[str, ...]:
    """What follows the image on the run command line. Docker's ``--entrypoint`` is one
    executable, never a JSON list as Podman's may be (docker/cli#4870): there the init's
    ``-g --`` lead the command instead."""
    if engine.kind == "docker" and engine.init is not None:
        return ("-g", "--", *CONTAINER_COMMAND)
    return CONTAINER_COMMAND


def run_options(engine: ContainerEngine, task: ContainerTask) -> list[str]:
    """``ENGINE run`` and its options, up to the image (a runner may add devices there)."""
    argv = engine.command("run", "--rm", "--name", task.name, "--network", "host", "--env-file", str(task.env_file),
                          "--workdir", str(task.work_dir))
    argv += _ulimits()
    if engine.init is not None:  # Docker: the init's -g -- lead the command (container_command)
        entrypoint = INIT_PATH if engine.kind == "docker" else json.dumps([INIT_PATH, "-g", "--"])
        argv += ["--volume", volume(engine.init, INIT_PATH, read_only=True), "--entrypoint", entrypoint]
    else:  # the engine's own init: signals reach the script's shell only ("" is Docker's "none")
        argv += ["--init", "--entrypoint", "" if engine.kind == "docker" else "[]"]
    argv += ["--volume", volume(str(task.script), SCRIPT_PATH, read_only=True)]
    for bind in task.binds:
        argv += ["--volume", volume(bind.source, bind.target, read_only=bind.read_only)]
    argv += memory_options(task)
    if task.cpu_milli > 0:
        argv += ["--cpus", f"{task.cpu_milli / 1000:g}"]
    if task.pids_max:
        argv += ["--pids-limit", str(task.pids_max)]
    for device in task.gpu_devices:
        argv += ["--device", f"{CDI_GPU_KIND}={device}"]
    return argv + as_user(task.user)


def as_user(user: tuple[int, int, tuple[int, ...]] | None) -> list[str]:
    """The options that run a container as the task's account (none: the image's user).
    The image is the user's: a setuid program in it must not make them root in the
    container (on the host's network, over the folders bound in)."""
    if user is None:
        return []
    uid, gid, groups = user
    return ["--user", f"{uid}:{gid}", *(f"--group-add={g}" for g in groups if g != gid),
            "--security-opt", "no-new-privileges", "--cap-drop", "all"]


def volume(source: str, target: str, *, read_only: bool) -> str:
    """``--volume``'s ``SOURCE:TARGET[:ro]``; ValueError for a path holding ':' or ',', which
    the engine would read as options of the path's choosing (``:U`` chowns the source)."""
    for path in (source, target):
        if ":" in path or "," in path or "\n" in path:
            raise ValueError(f"{path!r} cannot be bound into a container: it holds ':', ',' or a newline, which the "
                             "container engine would read as options")
    return f"{source}:{target}" + (":ro" if read_only else "")


# Prefixes a base environment may name that are the system's own: in a container they are
# the image's, never covered by the node's.
_SYSTEM_PREFIXES = frozenset(("", "/", "/usr", "/usr/local"))


def environment_binds(environment: PythonEnvironment | None, *, guarded: bool = False) -> tuple[Mount, ...]:
    """The folders of a task's Python environment, its own (``prefix``) and its base's (the
    folder above each of its ``bin_dirs``), read-only at the same paths in the container;
    never a system prefix (a base environment declared at ``/usr``: the image's is used)."""
    if environment is None:
        return ()
    folders = dict.fromkeys([environment.prefix, *(os.path.dirname(b.rstrip("/")) for b in environment.bin_dirs)])
    kept = [folder for folder in folders if folder.rstrip("/") not in _SYSTEM_PREFIXES]
    # ``guarded`` where the tasks of other accounts could change what the engine (this
    # server's account) opens: the local backend's per-user tasks (``unswappable``). On
    # Slurm every task runs as the server's account today, which may change all of it anyway.
    bound = dict.fromkeys(unswappable(folder) if guarded else folder for folder in kept)
    return tuple(Mount(folder, folder, read_only=True) for folder in bound)


def unswappable(folder: str) -> str:
    """``folder``, or the folder above it that no account but root can replace: the engine
    opens a bind's source by its path, following links, as root, so a folder that its owner
    could swap for a link (a user's own environment, in the folder of theirs where their
    ``yard env create`` builds) would bind whatever the link names. Bound from the nearest
    folder whose every folder above is root's and writable by root alone, links inside it
    resolve in the container. The server's own account counts as root here: it runs the
    engine. ContainerError when that would be a top-level folder."""
    path = Path(os.path.normpath(folder))
    current = Path("/")
    for part in path.parts[1:]:
        try:
            status = os.lstat(current)
        except OSError:  # not on this machine (a Slurm node's path): nothing to tell here
            return str(path)
        if status.st_uid not in (0, os.geteuid()) or status.st_mode & 0o022:
            break  # its entries may be renamed by another account: stop above them
        current = current / part
    if current != path and len(current.parts) <= 2:
        raise ContainerError(f"{folder} cannot be bound into a container: {current} above it may be changed by "
                             "accounts other than root; keep environments in a folder root owns")
    return str(current)


# The environment check's bounds (``environment_check``): it only imports sys.
CHECK_PIDS, CHECK_MEMORY_MB, CHECK_SECONDS = 64, 512, 120


def environment_check(engine: ContainerEngine, task: ContainerTask, environment: PythonEnvironment | None, *,
                      guarded: bool = False) -> dict[str, Any] | None:
    """How to tell, before the task, whether its Python environment runs in its image:
    ``argv`` runs the environment's ``python`` in a throwaway container of the image with the
    environment bound (no network, the task's user), and ``error`` is the task's message when
    it fails. None: no environment, one without a ``python`` on this machine to check, or
    one at a system prefix (the image's own). ``guarded`` as for ``environment_binds``."""
    if environment is None or not environment.bin_dirs:
        return None
    python = f"{environment.bin_dirs[0]}/python"
    if not os.path.exists(python) or os.path.dirname(environment.bin_dirs[0].rstrip("/")) in _SYSTEM_PREFIXES:
        return None  # nothing to check, or the image's own python
    target = os.path.realpath(python)
    # Bounded as the task is not yet: the user's python, which they may have swapped for
    # anything, runs here outside the task's cgroup; the engine ends it after the timeout
    # even when whatever started it was killed.
    argv = engine.command("run", "--rm", "--network", "none", *_ulimits(), "--pids-limit", str(CHECK_PIDS),
                          "--memory", f"{CHECK_MEMORY_MB}m", "--cpus", "1")
    if engine.kind == "podman":
        argv += ["--timeout", str(CHECK_SECONDS)]
    binds = environment_binds(environment, guarded=guarded)
    for bind in binds:
        argv += ["--volume", volume(bind.source, bind.target, read_only=True)]
    argv += as_user(task.user)
    argv += ["--entrypoint", python, task.image, "-c", "import sys"]
    inside = any(target.startswith(b.source.rstrip("/") + "/") for b in binds)
    why = (f"its python is a link to {target} on the node, which the image does not have or cannot run"
           if not inside else f"its python ({target}) does not run in the image")
    return {
        "argv": argv,
        "error": (f"the job's Python environment {environment.prefix} cannot run in image {task.image}: {why}. "
                  "Use an image with the same Python at that path (an environment built on the node's "
                  "/usr/bin/python3 runs in images of the node's distribution release), run the job without "
                  "an image, or install its packages in the image"),
    }


# The most Podman's monitor (conmon) allows a container when it cannot raise its own limits
# (no CAP_SYS_RESOURCE): its fallbacks. Above them, or above the server's own hard limits,
# no container starts ("error setting rlimit").
_ULIMIT_CEILINGS = (("nofile", resource.RLIMIT_NOFILE, 1_048_576), ("nproc", resource.RLIMIT_NPROC, 32_768))


def _ulimits() -> list[str]:
    """Open-file and process limits every container can be given: the engine's defaults may
    be above what this host allows (as measured on Debian 12 with Podman 4.3)."""
    flags = []
    for name, limit, ceiling in _ULIMIT_CEILINGS:
        _, hard = resource.getrlimit(limit)
        value = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """The task's variables as the engine's ``--env-file`` (one ``NAME=value`` a line),
    readable by the server's user only; ValueError for a value an env file cannot hold."""
    lines = []
    for name, value in env.items():
        if "\n" in value or "\r" in value:
            raise ValueError(f"environment variable {name}: a container task's variables cannot hold line breaks")
        lines.append(f"{name}={value}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)


# --- the memory limit, and OOM kills (``containercgroup``) --------------------------


def memory_options(task: ContainerTask) -> list[str]:
    """The engine's options that hold the container to the task's memory limit: its parent
    cgroup (``task.cgroup``, which holds the limit), else the engine's own limit."""
    if task.cgroup is not None:
        return ["--cgroup-parent", str(task.cgroup["relative"])]
    if task.memory_mb > 0:  # swap at the same figure: no way around the limit through swap
        return ["--memory", f"{task.memory_mb}m", "--memory-swap", f"{task.memory_mb}m"]
    return []


def with_oom_record(status: TaskStatus, record: Mapping[str, Any] | None) -> TaskStatus:
    """``status`` with the OOM kills that the container's parent cgroup saw (the task's
    ``container.json``, ``containercgroup.run_in``): a task that failed after one ends
    OUT_OF_MEMORY, its message naming the limit."""
    if status.running or status.exit_code == 0 or not isinstance(record, Mapping) or not record.get("oom_kills"):
        return status
    limit = int(record.get("memory_bytes") or 0) // (1024 * 1024)
    note = f"killed by the kernel at its memory limit of {limit} MB"
    return replace(status, reason=OUT_OF_MEMORY, message="; ".join(m for m in (note, status.message) if m))


# --- GPUs ------------------------------------------------------------------------


def cdi_gpu_names(dirs: Iterable[Path] = CDI_DIRS) -> set[str]:
    """The ``nvidia.com/gpu`` device names the node's CDI specs declare ("0", "GPU-<uuid>",
    "all"); empty when the NVIDIA Container Toolkit has written none."""
    names: set[str] = set()
    for directory in dirs:
        for path in sorted(directory.glob("*")) if directory.is_dir() else ():
            if path.suffix not in (".json", ".yaml", ".yml"):
                continue
            try:
                spec = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(spec, dict) and spec.get("kind") == CDI_GPU_KIND:
                names.update(str(d.get("name")) for d in spec.get("devices") or () if isinstance(d, dict))
    return names


NO_CDI = (
    "this node has NVIDIA GPUs but no CDI spec for them in /etc/cdi or /var/run/cdi, so tasks in "
    "containers cannot get GPUs: install the NVIDIA Container Toolkit and run "
    "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
)


def gpu_devices(gpus: Sequence[int], node_gpus: Sequence[GpuInfo], names: set[str]) -> tuple[str, ...]:
    """The CDI device names of the task's GPUs (by index, else by UUID); ContainerError
    saying what to install when the node's CDI specs do not declare them."""
    devices = []
    by_index = {g.index: g for g in node_gpus}
    for index in gpus:
        gpu = by_index.get(index)
        if gpu is not None and gpu.simulated:
            continue  # a simulated slot has no device to hand over
        if str(index) in names:
            devices.append(str(index))
        elif gpu is not None and gpu.uuid and gpu.uuid in names:
            devices.append(gpu.uuid)
        else:
            raise ContainerError(NO_CDI if not names else f"GPU {index} is not in this node's CDI spec "
                                 "(regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)")
    return tuple(devices)


# --- the image cache -----------------------------------------------------------------


def list_images(engine: ContainerEngine, node: str, pulls: Path | None = None,
                timeout: float = 60.0) -> list[NodeImage]:
    """The images the engine on this machine holds, one row per name, with when Trainyard
    pulled each (``pulls``: the node's record of them, :func:`pull_record_path`);
    ContainerError when the engine fails."""
    fmt = "{{json .}}" if engine.kind == "docker" else "json"
    result = _engine_output(engine, ["images", "--format", fmt], timeout)
    rows = parse_image_list(engine.kind, result)
    return [NodeImage(node, image, image_id, size, created,
                      pulled_at(pull_record_path(pulls, image)) if pulls is not None else None)
            for image, image_id, size, created in rows]


def pull_record_path(pulls: Path, image: str) -> Path:
    """Where a node records when Trainyard pulled ``image`` (one small file per image, so
    that tasks pulling at once never write the same file)."""
    return pulls / (hashlib.sha256(image.encode()).hexdigest()[:32] + ".json")


def pulled_at(path: Path) -> datetime | None:
    try:
        record = json.loads(path.read_text())
        return datetime.fromisoformat(record["pulled_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_pull(path: Path, image: str, when: datetime) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps({"image": image, "pulled_at": when.isoformat()}))
    os.replace(staging, path)


def parse_image_list(kind: EngineKind, output: str) -> list[tuple[str, str, int, datetime | None]]:
    """``(name, id, size, created)`` per image name from ``podman images --format json``
    (one JSON list) or ``docker images --format '{{json .}}'`` (one object a line)."""
    rows: list[tuple[str, str, int, datetime | None]] = []
    if kind == "podman":
        for item in json.loads(output or "[]") or []:
            names = item.get("Names") or ["<none>:<none>"]
            created = item.get("Created")
            when = datetime.fromtimestamp(created, UTC) if isinstance(created, int | float) else None
            rows += [(name, str(item.get("Id", ""))[:12], int(item.get("Size") or 0), when) for name in names]
        return rows
    for line in output.splitlines():
        if line.strip():
            item = json.loads(line)
            name = f"{item.get('Repository', '<none>')}:{item.get('Tag', '<none>')}"
            rows.append((name, str(item.get("ID", "")).removeprefix("sha256:")[:12], _docker_size(item.get("Size")),
                         None))
    return rows


def _docker_size(text: object) -> int:
    units = {"B": 1, "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}
    if isinstance(text, str):
        for unit in sorted(units, key=len, reverse=True):
            if text.endswith(unit):
                try:
                    return int(float(text[: -len(unit)]) * units[unit])
                except ValueError:
                    return 0
    return 0


def pull_image(engine: ContainerEngine, image: str, node: str, timeout: float = PULL_TIMEOUT_SECONDS,
               pulls: Path | None = None) -> ImagePull:
    """Make sure the engine on this machine holds ``image``: pull it unless it is there; a
    pull is recorded under ``pulls`` (``record_pull``), as ``list_images`` reads it."""
    if _succeeds(engine.exists_command(image), 60.0):
        return ImagePull(node, image, pulled=False, seconds=0.0)
    started = time.monotonic()
    try:
        result = subprocess.run(engine.pull_command(image), env=ENGINE_ENV, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ImagePull(node, image, False, time.monotonic() - started,
                         f"could not pull {image} on node {node}: no answer within {timeout:.0f} s")
    seconds = time.monotonic() - started
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return ImagePull(node, image, False, seconds,
                         f"could not pull {image} on node {node}: {detail[-1] if detail else result.returncode}")
    if pulls is not None:
        record_pull(pull_record_path(pulls, image), image, datetime.now(UTC))
    return ImagePull(node, image, pulled=True, seconds=seconds)


def remove_image(engine: ContainerEngine, image: str, node: str, timeout: float = 300.0,
                 pulls: Path | None = None) -> ImageRemoval:
    """Remove ``image`` (one name of it: an image with other names keeps them) from the
    engine on this machine, unless it is not there; never by force (``image_removal``);
    its pull record under ``pulls`` goes with it."""
    try:
        result = subprocess.run(engine.remove_image_command(image), env=ENGINE_ENV, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ImageRemoval(node, image, False, f"could not remove {image} from node {node}: no answer within "
                                                f"{timeout:.0f} s")
    removal = image_removal(engine.kind, node, image, result.returncode, result.stderr or result.stdout)
    if removal.removed and pulls is not None:
        pull_record_path(pulls, image).unlink(missing_ok=True)
    return removal


def image_removal(kind: EngineKind, node: str, image: str, returncode: int, output: str) -> ImageRemoval:
    """What ``ENGINE rmi IMAGE`` answered: removed (0); not there (Podman's 1, Docker's "No such
    image"); in use by a container (Podman's 2, Docker's "conflict"), which is refused, never
    forced; else the error."""
    said = output.strip().splitlines()
    text = output.lower()
    if returncode == 0:
        return ImageRemoval(node, image, removed=True)
    if "srun:" not in text and ((kind == "podman" and returncode == 1) or "no such image" in text
                                or "image not known" in text):
        return ImageRemoval(node, image, removed=False)
    if (kind == "podman" and returncode == 2) or "in use" in text or "being used" in text or "conflict" in text:
        return ImageRemoval(node, image, False, f"{image} is in use on node {node} by a container, so it was kept: "
                                                "stop what runs in it first", in_use=True)
    return ImageRemoval(node, image, False,
                        f"could not remove {image} from node {node}: {said[-1] if said else returncode}")


# What an engine says when a pull can never succeed as asked (Podman's, Docker's and the
# registries' words): the registry does not know the image or its tag, refuses the access,
# or the reference itself is invalid. Anything else (a refused connection, an unknown host,
# a timeout, a registry's 5xx or rate limit) may pass on a later try.
_PERMANENT_PULL_ERRORS = (
    "manifest unknown", "name unknown", "not found: manifest", "unauthorized", "denied",
    "authentication required", "invalid reference format", "repository name must be lowercase",
    "name invalid", "did not resolve to an alias", "no image found in manifest list",
    "does not match the specified platform",
)


def pull_failure_is_permanent(said: str) -> bool:
    """Whether an engine's pull output says that pulling again cannot help (see above)."""
    text = said.lower()
    return any(words in text for words in _PERMANENT_PULL_ERRORS)


def image_record_note(record: Mapping[str, Any] | None) -> ImagePull | None:
    """The pull a task's ``image.json`` records (written where the task ran), if any."""
    if not isinstance(record, Mapping) or not isinstance(record.get("image"), str):
        return None
    return ImagePull(str(record.get("node", "")), record["image"], bool(record.get("pulled")),
                     float(record.get("seconds") or 0.0), "" if record.get("ok") else str(record.get("error", "")))


def with_image_pull(status: TaskStatus, record: Mapping[str, Any] | None) -> TaskStatus:
    """``status`` with how the task's image came to its node (the task's ``image.json``);
    a failed pull is also why a task that ended ended, and one that cannot succeed
    (``said``: the engine's last line, :func:`pull_failure_is_permanent`) ends it with the
    reason ``IMAGE_UNAVAILABLE``, which no retry count spends a pull on."""
    pull = image_record_note(record)
    if pull is None:
        return status
    said = str(record.get("said") or "") if record is not None else ""
    if pull.error and not status.running and said and pull_failure_is_permanent(said):
        # Not worth a retry: the task ends for good with the engine's reason.
        why = f"{pull.error.split(' (')[0]}: {said.removeprefix('Error: ')}"
        return replace(status, image_pull=pull.note, reason=IMAGE_UNAVAILABLE, message=why)
    if pull.error and not status.running:
        return replace(status, image_pull=pull.note, message="; ".join(m for m in (pull.error, status.message) if m))
    return replace(status, image_pull=pull.note)


def _succeeds(argv: list[str], timeout: float) -> bool:
    try:
        return subprocess.run(argv, env=ENGINE_ENV, capture_output=True, timeout=timeout, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _engine_output(engine: ContainerEngine, args: list[str], timeout: float) -> str:
    try:
        result = subprocess.run(engine.command(*args), env=ENGINE_ENV, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ContainerError(f"{engine.kind} {' '.join(args)}: no answer within {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise ContainerError(f"{engine.kind} {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    return result.stdout
