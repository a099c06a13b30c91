"""The datasets a job file asks for (issue 35): Trainyard's ``datasets`` field, at the top
level (every task role) and per role, read into one list per role, each use with the field
path it came from::

    datasets:                         # every task role
      - name: imagenet-mini           # a registered dataset (`yard dataset list`)
        mountPath: /data/imagenet     # where the task finds it, read-only; default /data/<name>
    taskRoles:
      train:
        datasets: [{name: tokenizer}] # this role too (a name given in both: the role's wins)

A dataset is always read-only: its files are the node's cache, shared by every job that
reads it. Whether the job's owner may read each one is the server's question
(``services.datasets``); this module only reads the file.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainyard.spec.errors import show

if TYPE_CHECKING:
    from trainyard.spec.models import JobSpec

DATASET_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
DEFAULT_DATASET_ROOT = "/data"  # a dataset without a mountPath: /data/<name>
MAX_DATASETS = 16


@dataclass(frozen=True)
class DatasetUse:
    """One dataset one task role reads, as the job file asks for it."""

    name: str
    path: str  # the field path of the declaration, for messages: ``taskRoles.w.datasets[0]``
    mount_path: str  # normalised; the default filled in

    @property
    def mount_path_field(self) -> str:
        return f"{self.path}.mountPath"


def check_dataset_name(value: Any) -> str:
    if not isinstance(value, str) or not DATASET_NAME.fullmatch(value):
        raise ValueError("must be a dataset's name: lowercase letters, digits, '_' and '-', starting with a letter, "
                         f"at most 64 characters (got {show(value)})")
    return value


def default_mount_path(name: str) -> str:
    return posixpath.join(DEFAULT_DATASET_ROOT, name)


def dataset_uses(spec: JobSpec, role: str) -> list[DatasetUse]:
    """What ``role``'s tasks read, one use per dataset name: the job's ``datasets``, then the
    role's own, a later one replacing an earlier one of the same name."""
    uses: dict[str, DatasetUse] = {}
    for use in (*_declared(spec.datasets, "datasets"), *_declared(spec.taskRoles[role].datasets,
                                                                  f"taskRoles.{role}.datasets")):
        uses[use.name] = use
    return list(uses.values())


def all_dataset_uses(spec: JobSpec) -> Iterator[DatasetUse]:
    """Every declaration in the file, for checks at submit (each with its own path)."""
    yield from _declared(spec.datasets, "datasets")
    for role in spec.role_names:
        yield from _declared(spec.taskRoles[role].datasets, f"taskRoles.{role}.datasets")


def _declared(items: Any, path: str) -> Iterator[DatasetUse]:
    for index, item in enumerate(items or ()):
        yield DatasetUse(item.name, f"{path}[{index}]", item.mountPath or default_mount_path(item.name))


def dataset_variable(name: str) -> str:
    """``$TRAINYARD_DATASET_<NAME>``: where the task finds the dataset."""
    return "TRAINYARD_DATASET_" + re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
