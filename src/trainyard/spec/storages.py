"""The storages a job file asks for: Trainyard's own ``storages`` field (top level, for every
task role, and per role) and OpenPAI's two declarations in ``extras``, read into one list
per task role, each use with the field path it came from.

Trainyard's field::

    storages:                     # every task role
      - name: data                # a storage an admin defined (`yard storage list`)
        mountPath: /data          # where the task sees it; default: the storage's own path
        readOnly: true            # default: as granted (read-only if the grant or storage is)
        subPath: alice/x          # only this folder of the storage
    taskRoles:
      train:
        storages: [{name: scratch}]   # this role too (a name given in both: the role's wins)

OpenPAI's, accepted as they are (OpenPAI mounts at ``/mnt/<name>`` unless told otherwise):

* ``extras.com.microsoft.pai.runtimeplugin: [{plugin: teamwise_storage, parameters:
  {storageConfigNames: [a, b]}}]``: every named storage, for every role;
* ``extras.storages: [{name, mountPath}]`` (OpenPAI ≥ 1.0): likewise.

Whether the job's owner may use each storage is the server's question (services.storages);
this module only reads the file.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainyard.spec.errors import FieldError, show

if TYPE_CHECKING:
    from trainyard.spec.models import JobSpec

RUNTIME_PLUGINS = "com.microsoft.pai.runtimeplugin"
TEAMWISE_STORAGE = "teamwise_storage"
OPENPAI_MOUNT_ROOT = "/mnt"  # OpenPAI's default mount point: /mnt/<storage name>
# Where a job may ask for a storage to be mounted (setting ``storage_mount_roots``): a
# mountPath must be one of them or lie under one. A sandbox makes each one it mounts under a folder
# of its own (``backends/local/sandbox``), so no mount point is ever made on the host, and
# nothing there can cover what the platform runs. /tmp is the task's private /tmp.
DEFAULT_MOUNT_ROOTS = ("/mnt", "/data", "/workspace", "/tmp")
# What the platform and the system run from, or hand to every task: never a mount root, and
# never covered by a mount (a storage's own path, the admin's, included: ``sandbox``).
SYSTEM_PATHS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run",
                "/sbin", "/sys", "/usr", "/var")
# An admin's storage (``yard storage create``), ``home`` (each user's own), or ``@group``
# (a group's shared storage).
STORAGE_NAME = re.compile(r"@?[a-z][a-z0-9_-]{0,63}")
MAX_PATH = 4096


@dataclass(frozen=True)
class StorageUse:
    """One storage one task role uses, as the job file asks for it."""

    name: str
    path: str  # the field path of the declaration, for messages: ``taskRoles.w.storages[0]``
    mount_path: str | None = None  # None: the storage's own path (or /mnt/<name> for OpenPAI's)
    read_only: bool | None = None  # None: as granted
    sub_path: str = ""


# A container engine's ``--volume SOURCE:TARGET[:OPTIONS]`` reads ':' as the start of the
# next part, and its ``--mount`` ',' likewise: a path holding one would add options of the
# user's choosing (``:U`` chowns the whole storage to the job's account). No path of a
# storage, a mountPath or a subPath may hold either.
ENGINE_SEPARATORS = (":", ",")


def _no_separators(value: str) -> None:
    if any(c in value for c in ENGINE_SEPARATORS):
        raise ValueError(f"must not contain ':' or ',' (a container engine reads them as options; got {show(value)})")


# A container engine opens a bind's source by its path, after Trainyard's check: a link that
# another job of the user swaps in meanwhile inside the storage would land any folder of the
# host in the container (and with podman's options, chown it). The sandbox binds a folder it
# opened without following links; an engine cannot be given one.
CONTAINER_SUB_PATH = ("a job with an image cannot mount a storage's subPath (the container engine would open it by "
                      "its path, which another job could meanwhile point elsewhere): mount the storage and use "
                      "the folder inside it, or run this role without an image")


def check_mount_path(value: Any) -> str:
    """An absolute, normalised path; ValueError saying what is wrong."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"must be an absolute path (got {show(value)})")
    if len(value) > MAX_PATH or "\0" in value or "\n" in value:
        raise ValueError("must be a path of at most 4096 characters, without NUL or newlines")
    _no_separators(value)
    if ".." in value.split("/"):
        raise ValueError(f"must not contain '..' (got {show(value)})")
    normal = posixpath.normpath(value)
    if normal == "/":
        raise ValueError("cannot be / itself")
    return normal


def inside(path: str, root: str) -> bool:
    """Whether normalised ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_mount_root(value: Any) -> str:
    """One of ``storage_mount_roots``: an absolute path, neither a system path, inside one,
    nor above one; ValueError saying what is wrong."""
    root = check_mount_path(value)
    if clash := next((s for s in SYSTEM_PATHS if inside(root, s) or inside(s, root)), None):
        raise ValueError(f"{root} {'is' if root == clash else 'covers' if inside(clash, root) else 'is inside'} the "
                         f"system path {clash}: a job's storage could change what the system runs")
    return root


def mount_path_problem(target: str, roots: tuple[str, ...], kind: str = "storage") -> str | None:
    """Why a user-given mountPath (normalised) of a ``kind`` (a storage, a dataset) may not be
    used, or None: it must be one of ``roots`` (``storage_mount_roots``) or lie under one."""
    if any(inside(target, root) for root in roots):
        return None
    where = ", ".join(roots) if roots else "nowhere (this cluster's setting storage_mount_roots is empty)"
    system = next((s for s in SYSTEM_PATHS if inside(target, s) or inside(s, target)), None)
    why = f"{target} is {'a' if target == system else 'over a' if system and inside(system, target) else 'in a'} " \
          f"system path ({system})" if system else f"{target} is not under one of them"
    if kind != "storage":
        return (f"a {kind} may be mounted only under {where} (setting storage_mount_roots); {why}; choose a "
                "mountPath under one of them")
    return (f"a storage may be mounted only under {where} (setting storage_mount_roots); {why}; choose a "
            "mountPath such as /mnt/<name>, or leave it out to mount the storage at its own path")


def check_sub_path(value: Any) -> str:
    """A relative path inside a storage, normalised; ValueError saying what is wrong."""
    if not isinstance(value, str) or value.startswith("/"):
        raise ValueError(f"must be a path relative to the storage (got {show(value)})")
    if len(value) > MAX_PATH or "\0" in value or "\n" in value:
        raise ValueError("must be a path of at most 4096 characters, without NUL or newlines")
    _no_separators(value)
    if ".." in value.split("/"):
        raise ValueError(f"must stay inside the storage: no '..' (got {show(value)})")
    normal = posixpath.normpath(value) if value else ""
    return "" if normal == "." else normal


def check_storage_name(value: Any) -> str:
    if not isinstance(value, str) or not STORAGE_NAME.fullmatch(value):
        raise ValueError(
            "must be a storage's name: lowercase letters, digits, '_' and '-', starting with a letter "
            f"(or @group for a group's storage) (got {show(value)})"
        )
    return value


def storage_uses(spec: JobSpec, role: str) -> list[StorageUse]:
    """What ``role``'s tasks mount, one use per storage name: OpenPAI's declarations, then
    the job's ``storages``, then the role's own, each later one replacing an earlier one of
    the same name."""
    uses: dict[str, StorageUse] = {}
    for use in (*_openpai_uses(spec.extras), *_declared(spec.storages, "storages"),
                *_declared(spec.taskRoles[role].storages, f"taskRoles.{role}.storages")):
        uses[use.name] = use
    return list(uses.values())


def all_storage_uses(spec: JobSpec) -> Iterator[StorageUse]:
    """Every declaration in the file, for checks at submit (each with its own path)."""
    yield from _openpai_uses(spec.extras)
    yield from _declared(spec.storages, "storages")
    for role in spec.role_names:
        yield from _declared(spec.taskRoles[role].storages, f"taskRoles.{role}.storages")


def _declared(items: Any, path: str) -> Iterator[StorageUse]:
    for index, item in enumerate(items or ()):
        yield StorageUse(item.name, f"{path}[{index}]", item.mountPath, item.readOnly, item.subPath)


def _openpai_uses(extras: Any) -> Iterator[StorageUse]:
    """OpenPAI's declarations, already checked by ``extras_errors``; malformed ones skipped."""
    if not isinstance(extras, Mapping):
        return
    plugins = extras.get(RUNTIME_PLUGINS)
    for index, plugin in enumerate(plugins if isinstance(plugins, list) else ()):
        if not isinstance(plugin, Mapping) or plugin.get("plugin") != TEAMWISE_STORAGE:
            continue
        parameters = plugin.get("parameters")
        names = parameters.get("storageConfigNames") if isinstance(parameters, Mapping) else None
        for position, name in enumerate(names if isinstance(names, list) else ()):
            if isinstance(name, str) and STORAGE_NAME.fullmatch(name):
                path = f"extras.{RUNTIME_PLUGINS}[{index}].parameters.storageConfigNames[{position}]"
                yield StorageUse(name, path, posixpath.join(OPENPAI_MOUNT_ROOT, name.lstrip("@")))
    storages = extras.get("storages")
    for index, item in enumerate(storages if isinstance(storages, list) else ()):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        name = item["name"]
        if not STORAGE_NAME.fullmatch(name):
            continue
        mount = item.get("mountPath")
        try:
            mount_path = check_mount_path(mount) if mount is not None else None
        except ValueError:
            continue
        yield StorageUse(name, f"extras.storages[{index}]",
                         mount_path or posixpath.join(OPENPAI_MOUNT_ROOT, name.lstrip("@")))


def extras_errors(extras: Any) -> Iterator[FieldError]:
    """Problems in OpenPAI's storage declarations in ``extras``, at their field paths."""
    if not isinstance(extras, Mapping):
        return
    plugins = extras.get(RUNTIME_PLUGINS)
    for index, plugin in enumerate(plugins if isinstance(plugins, list) else ()):
        if not isinstance(plugin, Mapping) or plugin.get("plugin") != TEAMWISE_STORAGE:
            continue
        path = f"extras.{RUNTIME_PLUGINS}[{index}].parameters.storageConfigNames"
        parameters = plugin.get("parameters")
        names = parameters.get("storageConfigNames") if isinstance(parameters, Mapping) else None
        if not isinstance(names, list) or not names:
            yield FieldError(path, "must list the storages to mount (Trainyard has no default storages; "
                                   "see `yard storage list`)")
            continue
        for position, name in enumerate(names):
            try:
                check_storage_name(name)
            except ValueError as exc:
                yield FieldError(f"{path}[{position}]", str(exc))
    storages = extras.get("storages")
    if storages is None:
        return
    if not isinstance(storages, list):
        yield FieldError("extras.storages", f"must be a list of {{name, mountPath}} (got {show(storages)})")
        return
    for index, item in enumerate(storages):
        path = f"extras.storages[{index}]"
        if not isinstance(item, Mapping):
            yield FieldError(path, f"must be a mapping with name and mountPath (got {show(item)})")
            continue
        try:
            check_storage_name(item.get("name"))
        except ValueError as exc:
            yield FieldError(f"{path}.name", str(exc))
        if item.get("mountPath") is not None:
            try:
                check_mount_path(item.get("mountPath"))
            except ValueError as exc:
                yield FieldError(f"{path}.mountPath", str(exc))


def storage_variable(name: str) -> str:
    """``$TRAINYARD_STORAGE_<NAME>``: the name upper-cased, ``@group`` as ``GROUP_<GROUP>``,
    '-' as '_'."""
    base = "GROUP_" + name[1:] if name.startswith("@") else name
    return "TRAINYARD_STORAGE_" + re.sub(r"[^A-Za-z0-9_]", "_", base).upper()
