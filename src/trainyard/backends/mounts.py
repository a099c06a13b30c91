"""What every backend does alike with a task's storages (``TaskLaunch.mounts``): the
``$TRAINYARD_STORAGE_<NAME>`` variables, making a home or group storage on first use, and
the notes a task's log gets where a backend cannot honour a mount as asked.

Shared by the local and Slurm backends (and containers), so that none imports another.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from trainyard.backends.base import Mount
from trainyard.spec.storages import storage_variable


def mount_env(mounts: Sequence[Mount], *, inside: bool) -> dict[str, str]:
    """``$TRAINYARD_STORAGE_<NAME>`` of each storage: where the task finds it, its mountPath
    when the backend mounts it there (``inside``: a container or the sandbox), else the
    storage's path on the node."""
    return {storage_variable(m.name): m.target if inside else m.source for m in mounts}


def make_missing_storage(mount: Mount, uid: int | None, gid: int | None) -> bool:
    """Make a home or group storage's folder (``create_mode``) when it is missing, owned by
    ``uid``/``gid`` (None: this process's account); its root must exist (the admin's mount).
    True when it was made."""
    if not mount.create_mode:
        return False
    path = Path(mount.source)
    if path.is_dir():
        return False
    if not path.parent.is_dir():
        raise ValueError(f"storage {mount.name!r}: {path.parent} does not exist on this node; is the storage "
                         "root mounted here?")
    try:
        os.mkdir(path, mount.create_mode)
    except FileExistsError:
        return False  # another task made it meanwhile
    os.chmod(path, mount.create_mode)  # past the umask
    if uid is not None and gid is not None:
        os.chown(path, uid, gid, follow_symlinks=False)
    return True


def unenforced_notes(mounts: Sequence[Mount], why: str) -> list[str]:
    """Lines for a task's log where its storages are given as plain paths (no container, no
    sandbox): a read-only mount is not enforced, and a mountPath is not where it is."""
    notes = []
    for m in mounts:
        if m.read_only:
            notes.append(f"trainyard: storage {m.name!r} is read-only for this job, but {why}: read-only is not "
                         f"enforced; do not write to {m.source}")
        if m.target != m.source:
            notes.append(f"trainyard: storage {m.name!r} is at {m.source}, not at its mountPath {m.target}, "
                         f"because {why}; ${storage_variable(m.name)} says where it is")
    return notes
