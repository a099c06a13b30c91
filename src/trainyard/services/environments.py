"""Environments (``yard env``, HAI's haienv): create, list, show and delete them, build a
custom one as a job of its owner's, and settle it once that job has ended.

A custom environment is built by an ordinary job (tagged ``env-build``, so its log is
``yard logs`` like any other): ``python3 -m venv`` into ``<root>/<owner>/<name>``, with the
base environment's site-packages on its path when it has a base, then ``pip install -r``.
The job runs in its base environment, so ``python3`` is the base's interpreter (else the
node's). The controller marks the environment READY or FAILED once that job has ended
(``settle_builds``, level-triggered like the rest of its loop).
"""

from __future__ import annotations

import logging
import re
import secrets
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.names import DEFAULT_VC, ENVIRONMENT_NAME
from trainyard.core.states import EnvironmentState, JobState
from trainyard.scheduler.snapshot import NodeState
from trainyard.schemas.environments import CreateEnvironmentRequest, EnvironmentView
from trainyard.services import jobs as job_service
from trainyard.services.environment_access import (
    EnvironmentKind,
    Visibility,
    may_use,
    usable_environment,
)
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.spec.checks import image_reference_problem, qualified_image
from trainyard.spec.loading import validate_job
from trainyard.spec.models import JobSpec
from trainyard.store.queries import environments as env_queries
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import EnvironmentRow, JobRow, UserRow

log = logging.getLogger(__name__)

BUILD_TAG = "env-build"  # the tag that marks a job as an environment's build
BUILD_ROLE = "build"
BUILD_MEMORY_MB = 2048  # pip resolving and unpacking wheels wants more than a job's default
# Variables of the build job: the folder it builds and the requirements file's text.
PREFIX_VARIABLE = "TRAINYARD_ENV_PREFIX"
REQUIREMENTS_VARIABLE = "TRAINYARD_ENV_REQUIREMENTS"
BASE_PTH = "_trainyard_base.pth"
# The build, one bash line each (the job's script). On a base, the new environment reads the
# base's packages through a .pth file rather than --system-site-packages: a venv made from a
# venv's python would see the *system* site-packages, not the base venv's.
BUILD_COMMANDS = (
    "set -euo pipefail",
    f'echo "building environment $TRAINYARD_ENV_NAME in ${PREFIX_VARIABLE} with $(command -v python3)"',
    f'rm -rf -- "${PREFIX_VARIABLE}"',
    f'python3 -m venv "${PREFIX_VARIABLE}"',
    'if [ -n "${VIRTUAL_ENV:-}" ]; then python3 -c \'import site; print("\\n".join(site.getsitepackages()))\' '
    f'> "$("${PREFIX_VARIABLE}/bin/python" -c \'import sysconfig; print(sysconfig.get_path("purelib"))\')'
    f'/{BASE_PTH}"; fi',
    f'printf "%s\\n" "${REQUIREMENTS_VARIABLE}" > requirements.txt',
    f'"${PREFIX_VARIABLE}/bin/python" -m pip install --disable-pip-version-check --no-input -r requirements.txt',
    f'"${PREFIX_VARIABLE}/bin/python" -m pip list --disable-pip-version-check',
    f'echo "environment $TRAINYARD_ENV_NAME is ready in ${PREFIX_VARIABLE}"',
)


def environment_view(env: EnvironmentRow, base: EnvironmentRow | None = None) -> EnvironmentView:
    return EnvironmentView(
        name=env.name, owner=env.owner.name, kind=env.kind, visibility=env.visibility,
        group=env.group.name if env.group is not None else None, base=base.name if base is not None else None,
        path=env.path, image=env.image, state=env.state, message=env.message, buildJobId=env.build_job_id,
        requirements=env.requirements, createdAt=env.created_at, finishedAt=env.finished_at,
    )


def _check_new_name(session: Session, name: str) -> None:
    if not ENVIRONMENT_NAME.fullmatch(name):
        raise Invalid(f"invalid environment name {name!r}: lowercase letters, digits, '_' and '-', starting with "
                      "a letter, at most 64", details=[{"path": "name", "message": "invalid environment name"}])
    if env_queries.environment_named(session, name) is not None:
        raise Conflict(f"an environment named {name!r} exists already; choose another name, or "
                       f"`yard env delete {name}` first", details=[{"path": "name", "message": "name taken"}])


def _sharing(session: Session, owner: UserRow, group: str | None, *, kind: EnvironmentKind) -> tuple[str, int | None]:
    """(visibility, group id) for an environment of ``owner`` shared with ``group``."""
    if group is None:
        return (Visibility.EVERYONE if kind == EnvironmentKind.BASE else Visibility.PRIVATE), None
    row = vc_queries.group_named(session, group)
    if row is None:
        raise NotFound(f"group: no group named {group!r}; see `yard group list`",
                       details=[{"path": "group", "message": "unknown group"}])
    if not owner.is_admin and vc_queries.membership(session, row.id, owner.id) is None:
        raise Forbidden(f"group: {owner.name} is not a member of group {group!r}, so cannot share with it",
                        details=[{"path": "group", "message": f"{owner.name} is not a member"}])
    return Visibility.GROUP, row.id


@dataclass(frozen=True)
class CustomEnvironment:
    """What ``yard env create NAME -r FILE`` asks for."""

    name: str
    requirements: str
    base: str | None = None
    group: str | None = None
    vc: str | None = None


# PyTorch's own index of its CPU builds: PyPI's Linux torch is the CUDA build, which pulls
# several GB of nvidia-* wheels that a node without NVIDIA GPUs never uses.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_TORCH_PACKAGES = re.compile(r"^\s*(torch|torchvision|torchaudio)\s*($|[=<>!~\[;@ ])", re.IGNORECASE | re.MULTILINE)
_INDEX_OPTIONS = re.compile(r"^\s*(-i|--index-url|--extra-index-url|--no-index|-f|--find-links)\b", re.MULTILINE)


def torch_index_hint(requirements: str) -> str:
    """What the environment's message adds when it asks for PyTorch from PyPI alone."""
    if not _TORCH_PACKAGES.search(requirements) or _INDEX_OPTIONS.search(requirements):
        return ""
    return (f"; torch comes from PyPI as its CUDA build (several GB of nvidia-* wheels): for the CPU build, "
            f"make `--index-url {TORCH_CPU_INDEX}` the requirements file's first line")


def build_job_spec(env: CustomEnvironment, prefix: Path) -> JobSpec:
    """The job that builds ``env`` into ``prefix``: an ordinary job file, shown as such."""
    document = {
        "name": f"env-build-{env.name}",
        "description": f"builds environment {env.name} (yard env create) into {prefix}",
        "tags": [BUILD_TAG],
        "defaults": {"virtualCluster": env.vc or DEFAULT_VC},
        "taskRoles": {BUILD_ROLE: {
            "resourcePerInstance": {"cpu": 1, "memoryMB": BUILD_MEMORY_MB},
            "env": {"TRAINYARD_ENV_NAME": env.name, PREFIX_VARIABLE: str(prefix),
                    REQUIREMENTS_VARIABLE: env.requirements},
            "commands": list(BUILD_COMMANDS),
        }},
    }
    if env.base is not None:
        document["environment"] = env.base
    return validate_job(document)


def create_custom(
    session: Session, owner: UserRow, env: CustomEnvironment, *, root: Path, clock: Clock,
    nodes: list[NodeState] | None = None,
) -> EnvironmentRow:
    """Record a custom environment as BUILDING and submit the job that builds it, as ``owner``'s."""
    _check_new_name(session, env.name)
    if not env.requirements.strip():
        raise Invalid("requirements: empty; list the packages to install, one per line (a pip requirements file)",
                      details=[{"path": "requirements", "message": "empty"}])
    if "<%" in env.requirements:
        raise Invalid("requirements: '<%' would be read as a job file placeholder; leave it out",
                      details=[{"path": "requirements", "message": "contains <%"}])
    base = None
    if env.base is not None:
        base = usable_environment(session, owner, env.base, path="base")
        if base.kind != EnvironmentKind.BASE:
            raise Invalid(f"base: environment {env.base!r} is a custom one; build on a base environment (its "
                          "requirements and yours go in one requirements file)",
                          details=[{"path": "base", "message": "not a base environment"}])
        if base.path is None:
            raise Invalid(f"base: environment {env.base!r} is an image; custom environments build on Python "
                          "environments (build your own image instead)",
                          details=[{"path": "base", "message": "an image cannot be a base"}])
    visibility, group_id = _sharing(session, owner, env.group, kind=EnvironmentKind.CUSTOM)
    prefix = root / owner.name / env.name
    job = job_service.submit_job(session, owner, build_job_spec(env, prefix), clock=clock, nodes=nodes)
    row = EnvironmentRow(
        name=env.name, owner_id=owner.id, kind=EnvironmentKind.CUSTOM, visibility=visibility, group_id=group_id,
        base_id=base.id if base is not None else None, path=str(prefix), requirements=env.requirements,
        state=EnvironmentState.BUILDING, build_job_id=job.id,
        message=f"being built by job {job.id}{torch_index_hint(env.requirements)}",
        created_at=clock.now(),
    )
    session.add(row)
    session.flush()
    return row


def create_base(
    session: Session, admin: UserRow, name: str, *, path: str | None, image: str | None, group: str | None,
    clock: Clock,
) -> EnvironmentRow:
    """Declare a base environment (admins): a Python environment at ``path`` on every node, or an ``image``."""
    if not admin.is_admin:
        raise Forbidden("only admins define base environments; build your own with `yard env create NAME -r FILE`")
    _check_new_name(session, name)
    if (path is None) == (image is None):
        raise Invalid("a base environment is a path (basePath) or an image, one of the two",
                      details=[{"path": "basePath", "message": "give basePath or image"}])
    if path is not None and (not path.startswith("/") or ":" in path or "\n" in path):
        raise Invalid(f"basePath: {path!r} must be an absolute path without ':' (it goes on PATH)",
                      details=[{"path": "basePath", "message": "not an absolute path"}])
    if image is not None and (problem := image_reference_problem(image)) is not None:
        # As a job's image: it reaches the engine's command line, and the engine is root's.
        raise Invalid(f"image: {problem}", details=[{"path": "image", "message": problem}])
    visibility, group_id = _sharing(session, admin, group, kind=EnvironmentKind.BASE)
    row = EnvironmentRow(
        name=name, owner_id=admin.id, kind=EnvironmentKind.BASE, visibility=visibility, group_id=group_id,
        path=path.rstrip("/") if path is not None else None,
        image=None if image is None else qualified_image(image), requirements="",
        state=EnvironmentState.READY, message="", created_at=clock.now(), finished_at=clock.now(),
    )
    session.add(row)
    session.flush()
    return row


def create_environment(
    session: Session, user: UserRow, request: CreateEnvironmentRequest, *, root: Path | None, clock: Clock,
    nodes: list[NodeState] | None = None,
) -> EnvironmentView:
    """``POST /environments``: a base environment when the request names ``basePath`` or
    ``image`` (admins), else a custom one built into ``root`` (None: the backend has no
    folder every node sees, so nothing can be built)."""
    if request.basePath is not None or request.image is not None:
        if request.requirements is not None or request.base is not None:
            raise Invalid("a base environment (basePath or image) has no requirements and no base of its own",
                          details=[{"path": "requirements", "message": "not for a base environment"}])
        row = create_base(session, user, request.name, path=request.basePath, image=request.image,
                          group=request.group, clock=clock)
        return environment_view(row)
    if request.requirements is None:
        raise Invalid("requirements: give the requirements file's text (or, admins, basePath or image)",
                      details=[{"path": "requirements", "message": "missing"}])
    if root is None:
        raise Conflict("this backend has no folder every node sees, so it cannot build environments; an admin "
                       "can still declare base environments (basePath, image)")
    wanted = CustomEnvironment(request.name, request.requirements, base=request.base, group=request.group,
                               vc=request.virtualCluster)
    row = create_custom(session, user, wanted, root=root, clock=clock, nodes=nodes)
    return describe_environment(session, user, row.name)


def list_environments(session: Session, viewer: UserRow) -> list[EnvironmentView]:
    """The environments ``viewer`` may run in (an admin: all), by name."""
    rows = env_queries.all_environments(session)
    by_id = {row.id: row for row in rows}
    return [environment_view(row, by_id.get(row.base_id or -1)) for row in rows if may_use(session, viewer, row)]


def get_environment(session: Session, viewer: UserRow, name: str) -> EnvironmentRow:
    """The environment, if ``viewer`` may see it (NotFound otherwise, as for another's job)."""
    env = env_queries.environment_named(session, name)
    if env is None or not may_use(session, viewer, env):
        raise NotFound(f"no environment named {name!r}; see `yard env list`")
    return env


def describe_environment(session: Session, viewer: UserRow, name: str) -> EnvironmentView:
    env = get_environment(session, viewer, name)
    base = env_queries.environment_by_id(session, env.base_id) if env.base_id is not None else None
    return environment_view(env, base)


def jobs_using(session: Session, name: str) -> list[int]:
    """Jobs waiting or running (or suspended) that name the environment ``name``."""
    using = []
    for job_id, spec in env_queries.unfinished_job_specs(session):
        roles = spec.get("taskRoles") or {}
        names = {spec.get("environment")} | {r.get("environment") for r in roles.values() if isinstance(r, dict)}
        if name in names:
            using.append(job_id)
    return using


@dataclass(frozen=True)
class Deleted:
    """What deleting an environment did; ``files`` is the folder to remove (custom ones),
    once the transaction has committed."""

    view: EnvironmentView
    stopped_jobs: list[int]
    files: Path | None


def delete_environment(session: Session, viewer: UserRow, name: str, *, force: bool, clock: Clock) -> Deleted:
    """Delete an environment (its owner, or an admin). Refused while a job that has not ended
    names it, or while it is being built, unless ``force``, which stops its build (the jobs
    that use it go on, and fail to launch again if they ever need to); always refused while
    other environments are built on it."""
    env = get_environment(session, viewer, name)
    if not viewer.is_admin and env.owner_id != viewer.id:
        raise Forbidden(f"environment {name!r} is {env.owner.name}'s; only they or an admin can delete it")
    children = [child.name for child in env_queries.built_on(session, env.id)]
    if children:
        raise Conflict(f"environment {name!r} is the base of {', '.join(sorted(children))}; delete those first",
                       details=[{"path": "name", "message": "other environments are built on it"}])
    users = [job_id for job_id in jobs_using(session, name) if job_id != env.build_job_id]
    building = env.state == EnvironmentState.BUILDING and env.build_job_id is not None
    if (users or building) and not force:
        what = [f"job{'s' if len(users) > 1 else ''} {', '.join(map(str, users))} use{'' if len(users) > 1 else 's'} it"
                ] if users else []
        if building:
            what.append(f"job {env.build_job_id} is building it")
        raise Conflict(f"environment {name!r} is in use: {'; '.join(what)}; wait for them to end, or delete it "
                       "anyway with --force (force=true)",
                       details=[{"path": "name", "message": "in use"}])
    stopped = []
    if building and env.build_job_id is not None:
        job = job_queries.job_by_id(session, env.build_job_id)
        if job is not None and not JobState(job.state).is_final:
            job_service.request_stop(session, viewer, job.id, clock=clock, reason=f"delete environment {name}")
            stopped.append(job.id)
    view = describe_environment(session, viewer, name)
    files = Path(env.path) if env.kind == EnvironmentKind.CUSTOM and env.path else None
    session.delete(env)
    return Deleted(view, stopped, files)


DELETING = ".deleting-"  # a deleted environment's folder, moved aside in the root while it is removed


def remove_files(name: str, files: Path) -> None:
    """Remove a deleted custom environment's folder (call it once the deletion has committed):
    moved aside at once, so that its name is free and its owner's folder empty, then removed
    in a thread of its own — a PyTorch environment is gigabytes, longer to remove than a
    request may take (a new user's trial: ``yard env delete`` timed out). Folders a stopped
    server left moved aside go with the next removal."""
    root = files.parent.parent
    aside = root / f"{DELETING}{files.parent.name}-{files.name}-{secrets.token_hex(4)}"
    try:
        files.rename(aside)
    except OSError:
        aside = files  # not movable (gone, or another file system): removed where it is
    leftovers = [p for p in root.glob(f"{DELETING}*") if p != aside and p.is_dir() and not p.is_symlink()]
    threading.Thread(target=_remove, args=(name, [aside, *leftovers]), name=f"remove environment {name}",
                     daemon=True).start()


def _remove(name: str, folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            log.warning("environment %s: could not remove all of %s", name, folder)


def settle_builds(session: Session, clock: Clock) -> list[str]:
    """Mark READY or FAILED each environment whose build job has ended; returns their names."""
    settled = []
    for env, job in env_queries.ended_builds(session):
        settle_build(env, job, clock)
        settled.append(env.name)
    return settled


def settle_build(env: EnvironmentRow, job: JobRow, clock: Clock) -> None:
    """The environment's state from its ended build job's."""
    env.finished_at = clock.now()
    if job.state == JobState.SUCCEEDED:
        env.state, env.message = EnvironmentState.READY, f"built by job {job.id}"
        return
    env.state = EnvironmentState.FAILED
    env.message = f"build job {job.id} {str(job.state).lower()}: {job.state_message or 'no reason given'}"

