"""The job file's pydantic models: OpenPAI job protocol v2, relaxed and extended.

Field names are the protocol's own (camelCase), so ``model_dump(mode="json")`` gives a
protocol document back. Differences from OpenPAI v2 (rest-server `config/v2/protocol.js`):

* relaxed: ``protocolVersion``, ``type``, ``dockerImage`` and ``resourcePerInstance`` may be
  left out; resources default to 0 GPU, 1 CPU, 1024 MB;
* extended: per-role ``env``; top-level and per-role ``storages`` (``spec/storages.py``);
  ``image`` per job and per role (a plain image reference, beside OpenPAI's ``dockerImage``
  that names a ``dockerimage`` prerequisite); ``environment`` (a Trainyard environment,
  ``yard env``, per job or per role; the role's wins); top-level ``priority``,
  ``stopGracePeriodSeconds``, ``tags``,
  ``preemption`` (``suspend``: the job saves its state when told, see ``docs/runtime.md``)
  with ``suspendGracePeriodSeconds`` and ``suspendSignal``, ``watchdogSeconds``, and ``notify``
  (who is told when the job ends, ``spec/notify.py``);
  fractional ``gpu`` (< 1 shares one device); ``gpuModel`` and ``gpuMemoryMB`` constraints,
  and ``selector``, a CEL expression over node and GPU attributes (``core/selectors.py``);
  ``dependencies`` on other jobs (``spec/dependencies.py``);
* stricter: a placeholder naming an unknown parameter or secret is an error, and
  ``completion`` counts must fit the role's ``instances``.

Completion follows OpenPAI/FrameworkController: ``minFailedInstances`` (default 1) failed
instances of a role fail the whole job attempt; ``minSucceededInstances`` (default -1)
succeeded instances of a role succeed it early and stop the rest. -1 (or null, which is
stored as -1) disables that trigger; with no trigger fired, the attempt succeeds once every
task has finished.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainyard.spec.checks import MAX_PORTS, image_reference_problem, qualified_image, semantic_errors
from trainyard.spec.datasets import MAX_DATASETS, check_dataset_name
from trainyard.spec.dependencies import DependencyField
from trainyard.spec.errors import show
from trainyard.spec.notify import Notify
from trainyard.spec.storages import check_mount_path, check_storage_name, check_sub_path

JOB_NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"  # OpenPAI rest-server's job name pattern
JOB_NAME_MAX = 255  # openpai-protocol schemas/v2: name maxLength 255
MAX_INSTANCES = 1000
MAX_RETRIES = 100
MAX_STOP_GRACE_SECONDS = 3600
MAX_RUN_TIME_SECONDS = 366 * 24 * 3600
MIN_WATCHDOG_SECONDS = 10
# An environment's name (``yard env``); core.names.ENVIRONMENT_NAME says the same for the services.
ENVIRONMENT_NAME_PATTERN = r"[a-z][a-z0-9_-]{0,63}"
# Signals a job may choose to be told to suspend by; "none": only the request file.
SUSPEND_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT", "SIGTERM", "none")


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is shown to the user exactly as written."""
    return PydanticCustomError("spec", "{message}", {"message": message})


class Priority(StrEnum):
    """The job file's accepted ``priority`` values, highest first.

    The vocabulary itself (order, which priorities are guaranteed) lives in
    ``trainyard.core.priorities``; ``spec/`` imports nothing of ours, so the job file keeps
    its own spelling of the names here, which ``tests/core/test_priorities.py`` holds equal
    to core's, name for name and in order. Code outside ``spec/`` uses core's ``Priority``.
    """

    PROD = "prod"
    NORMAL = "normal"
    LOW = "low"
    OPPO = "oppo"  # opportunistic: runs on idle capacity and is preempted first

    @property
    def rank(self) -> int:
        """0 for the highest priority (prod), 3 for the lowest (oppo)."""
        return list(Priority).index(self)


class Preemption(StrEnum):
    """What happens to a running job when Trainyard needs its resources back."""

    REQUEUE = "requeue"  # stopped, and run again from the start (its job directory kept)
    SUSPEND = "suspend"  # told to save its state, then resumed from it later


def _suspend_signal(value: Any) -> str:
    if isinstance(value, str):
        name = value.strip().upper()
        name = "none" if name == "NONE" else (name if name.startswith("SIG") else "SIG" + name)
        if name in SUSPEND_SIGNALS:
            return name
    raise invalid(f"must be one of {', '.join(SUSPEND_SIGNALS)} (got {show(value)})")


# --- value checks shared by several fields -------------------------------------------


def _number(value: Any, *, whole: bool) -> int | float:
    """Accept an int or float (never a bool or a string); whole floats become ints."""
    kind = "whole number" if whole else "number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"must be a {kind} (got {show(value)})")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise invalid(f"must be a finite {kind} (got {show(value)})")
        if value.is_integer():
            return int(value)
        if whole:
            raise invalid(f"must be a whole number (got {show(value)})")
    return value


def _whole(value: Any) -> int:
    return int(_number(value, whole=True))


def _between(low: int, high: int | None = None) -> AfterValidator:
    def check(value: int) -> int:
        if value < low:
            raise invalid(f"must be ≥ {low} (got {show(value)})")
        if high is not None and value > high:
            raise invalid(f"must be ≤ {high} (got {show(value)})")
        return value

    return AfterValidator(check)


def _is_milli_multiple(value: float) -> bool:
    return abs(value * 1000 - round(value * 1000)) < 1e-6


def _gpu(value: Any) -> int | float:
    amount = _number(value, whole=False)
    if amount < 0:
        raise invalid(f"must be ≥ 0 (got {show(amount)})")
    if isinstance(amount, float) and amount > 1:
        raise invalid(
            f"must be a whole number of GPUs, or a fraction below 1 to share one GPU "
            f"(got {show(amount)})"
        )
    if isinstance(amount, float) and not _is_milli_multiple(amount):
        raise invalid(f"a GPU fraction must be a multiple of 0.001 (got {show(amount)})")
    return amount


def _cpu(value: Any) -> int | float:
    amount = _number(value, whole=False)
    if amount <= 0:
        raise invalid(f"must be > 0 (got {show(amount)})")
    if isinstance(amount, float) and not _is_milli_multiple(amount):
        raise invalid(f"must be a multiple of 0.001 (got {show(amount)})")
    return amount


def _completion_count(meaning: str) -> BeforeValidator:
    def check(value: Any) -> int:
        if value is None:
            return -1
        count = _whole(value)
        if count == -1 or count >= 1:
            return count
        raise invalid(f"must be -1 or null ({meaning}), or ≥ 1 (got {show(count)})")

    return BeforeValidator(check)


def _none_to(factory: Any) -> BeforeValidator:
    """Treat an empty YAML section (``env:`` with nothing under it) as its default."""
    return BeforeValidator(lambda value: factory() if value is None else value)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise invalid("must not be empty")
    return value


def _at_least_one(noun: str) -> Any:
    def check(value: Any) -> Any:
        if not value:
            raise invalid(f"must list at least one {noun}")
        return value

    return check


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    raise invalid(f"must be a string, number or boolean (got {show(value)})")


def _gpu_models(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and not value:
        raise invalid("must list at least one GPU model, or be left out")
    return value


def _protocol_version(value: Any) -> int:
    if value is None or value == "2" or (type(value) in (int, float) and value == 2):
        return 2
    raise invalid(f"only protocol version 2 is supported (got {show(value)})")


def _version(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise invalid(f"must be a string or a number (got {show(value)})")


def _job_type(value: Any) -> str:
    if value is None or value == "job":
        return "job"
    raise invalid(f"must be 'job' (got {show(value)})")


def _image(value: str) -> str:
    problem = image_reference_problem(value)
    if problem is not None:
        raise invalid(problem)
    return value


def _job_name(value: str) -> str:
    if not value:
        raise invalid("must not be empty")
    if not re.fullmatch(JOB_NAME_PATTERN, value):
        raise invalid(f"may contain only letters, digits, '_' and '-' (got {show(value)})")
    if len(value) > JOB_NAME_MAX:
        raise invalid(f"must be at most {JOB_NAME_MAX} characters (got {len(value)})")
    return value


def _environment_name(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(ENVIRONMENT_NAME_PATTERN, value):
        raise invalid(
            "must name an environment: lowercase letters, digits, '_' and '-', starting with a letter "
            f"(got {show(value)}); see `yard env list`"
        )
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole)]
Command = Annotated[str, AfterValidator(_non_blank)]
Text = Annotated[str, AfterValidator(_non_blank)]
EnvironmentName = Annotated[str, AfterValidator(_environment_name)]
Image = Annotated[str, AfterValidator(_image)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Completion(_Model):
    """When a task role's finished instances end the whole job attempt (see module doc)."""

    minFailedInstances: Annotated[int, _completion_count("never fail the job")] = 1
    minSucceededInstances: Annotated[int, _completion_count("all instances must succeed")] = -1


class ResourcePerInstance(_Model):
    """What one instance of a task role needs."""

    gpu: Annotated[int | float, BeforeValidator(_gpu)] = 0
    cpu: Annotated[int | float, BeforeValidator(_cpu)] = 1
    memoryMB: Annotated[WholeNumber, _between(1)] = 1024
    # A port is reserved per label and instance; a cap keeps one job from exhausting them.
    ports: Annotated[dict[str, Annotated[WholeNumber, _between(0, MAX_PORTS)]], _none_to(dict)] = Field(
        default_factory=dict
    )
    gpuModel: Annotated[list[Text] | None, BeforeValidator(_gpu_models)] = None
    gpuMemoryMB: Annotated[WholeNumber, _between(1)] | None = None
    # A CEL expression over node and gpu attributes (``core/selectors.py``), checked with
    # the role's other fields in ``checks._selector_errors``.
    selector: Text | None = None


def _as_spec_error(check: Any) -> Any:
    def run(value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise invalid(str(exc)) from None

    return run


class StorageMount(_Model):
    """A storage the tasks see (``spec/storages.py``): its name, where, how, which part."""

    name: Annotated[str, BeforeValidator(_as_spec_error(check_storage_name))]
    mountPath: Annotated[str, BeforeValidator(_as_spec_error(check_mount_path))] | None = None
    readOnly: StrictBool | None = None  # None: as granted; 1 or "yes" is no boolean
    subPath: Annotated[str, BeforeValidator(_as_spec_error(check_sub_path))] = ""


MAX_STORAGES = 32


class DatasetMount(_Model):
    """A dataset the tasks read (``spec/datasets.py``): its name and where, always read-only."""

    name: Annotated[str, BeforeValidator(_as_spec_error(check_dataset_name))]
    mountPath: Annotated[str, BeforeValidator(_as_spec_error(check_mount_path))] | None = None


class TaskRole(_Model):
    """One kind of task in a job, run as ``instances`` identical tasks."""

    instances: Annotated[WholeNumber, _between(1, MAX_INSTANCES)] = 1
    # Elastic (``instances: {min: N, max: M}``, stored so): ``instances`` is the minimum the
    # job starts with and never shrinks below, this the most workers it grows to
    # (``scheduler/elastic.py``); None: a fixed number of instances.
    maxInstances: Annotated[WholeNumber, _between(1, MAX_INSTANCES)] | None = None
    # Whole nodes (Trainyard's): ``nodes: N`` runs N instances, one per node, each with
    # every GPU, all the CPU and all the memory of a node that nothing else shares while it
    # runs (``scheduler/whole_nodes.py``). ``instances`` follows it; the role may not also
    # name amounts (``checks``); ``gpuModel``/``gpuMemoryMB`` choose the kind of node.
    nodes: Annotated[WholeNumber, _between(1, MAX_INSTANCES)] | None = None
    completion: Annotated[Completion, _none_to(Completion)] = Field(default_factory=Completion)
    taskRetryCount: Annotated[WholeNumber, _between(0, MAX_RETRIES)] = 0
    # The container image the role's tasks run in: ``image`` names it; ``dockerImage`` (OpenPAI)
    # names a ``dockerimage`` prerequisite whose ``uri`` is the image. See ``JobSpec.role_image``.
    image: Image | None = None
    dockerImage: str | None = None
    data: str | None = None
    output: str | None = None
    script: str | None = None
    extraContainerOptions: dict[str, Any] | None = None
    resourcePerInstance: Annotated[ResourcePerInstance, _none_to(ResourcePerInstance)] = Field(
        default_factory=ResourcePerInstance
    )
    commands: Annotated[list[Command], AfterValidator(_at_least_one("command"))]
    env: Annotated[dict[str, Annotated[str, BeforeValidator(_env_value)]], _none_to(dict)] = Field(
        default_factory=dict
    )
    storages: Annotated[list[StorageMount], _none_to(list)] = Field(default_factory=list, max_length=MAX_STORAGES)
    datasets: Annotated[list[DatasetMount], _none_to(list)] = Field(default_factory=list, max_length=MAX_DATASETS)
    # The environment this role's tasks run in, over the job's ``environment``.
    environment: EnvironmentName | None = None

    @model_validator(mode="before")
    @classmethod
    def _instances_follow_nodes(cls, data: Any) -> Any:
        """``nodes: N`` without ``instances`` means N instances (one per node);
        ``instances: {min: N, max: M}`` is an elastic role of N to M instances."""
        if isinstance(data, dict) and "instances" not in data:
            nodes = data.get("nodes")
            if isinstance(nodes, int) and not isinstance(nodes, bool):
                return {**data, "instances": nodes}
        if isinstance(data, dict) and isinstance(data.get("instances"), dict):
            span = data["instances"]
            unknown = sorted(str(k) for k in span if k not in ("min", "max"))
            if unknown or span.get("min") is None or span.get("max") is None:
                raise invalid("an elastic role's instances are {min: N, max: M}, both whole numbers"
                              + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
            if "maxInstances" in data:
                raise invalid("maxInstances is not a field: an elastic role says instances: {min: N, max: M}")
            return {**data, "instances": span["min"], "maxInstances": span["max"]}
        if isinstance(data, dict) and "maxInstances" in data:
            raise invalid("maxInstances is not a field: an elastic role says instances: {min: N, max: M}")
        return data

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A whole-node role is dumped without amounts, as it was written (they are not
        its: it gets all of each node), so that its stored form validates again."""
        data = handler(self)
        if isinstance(data, dict) and "maxInstances" in data:
            top = data.pop("maxInstances")
            if top is not None:  # an elastic role, as it was written
                data["instances"] = {"min": self.instances, "max": top}
        if self.nodes is not None and isinstance(data, dict):
            resources = data.get("resourcePerInstance")
            if isinstance(resources, dict):
                data["resourcePerInstance"] = {
                    k: v for k, v in resources.items() if k not in ("gpu", "cpu", "memoryMB")
                }
        return data

    @property
    def whole_nodes(self) -> bool:
        """Whether each instance takes a whole node (``nodes``)."""
        return self.nodes is not None

    @property
    def elastic(self) -> bool:
        """Whether it runs on between ``instances`` and ``maxInstances`` instances."""
        return self.maxInstances is not None


class DeploymentRole(_Model):
    """Commands a deployment runs before and after one task role's own commands."""

    preCommands: list[Command] | None = None
    postCommands: list[Command] | None = None


class Deployment(_Model):
    """A named set of per-role pre/post commands, chosen with ``defaults.deployment``."""

    protocolVersion: Annotated[int | None, BeforeValidator(_protocol_version)] = None
    name: Text
    version: Annotated[str | int | float | None, BeforeValidator(_version)] = None
    contributor: str | None = None
    description: str | None = None
    taskRoles: Annotated[dict[str, DeploymentRole], AfterValidator(_at_least_one("task role"))]


class Defaults(_Model):
    """Cluster-specific submission defaults."""

    virtualCluster: Annotated[Text, _none_to(lambda: "default")] = "default"
    deployment: str | None = None


class JobSpec(_Model):
    """A whole job file."""

    protocolVersion: Annotated[int, BeforeValidator(_protocol_version)] = 2
    name: Annotated[str, AfterValidator(_job_name)]
    type: Annotated[str, BeforeValidator(_job_type)] = "job"
    version: Annotated[str | int | float | None, BeforeValidator(_version)] = None
    contributor: str | None = None
    description: str | None = None
    prerequisites: list[dict[str, Any]] | None = None
    image: Image | None = None  # every role's image, unless the role names its own
    parameters: Annotated[dict[str, Any], _none_to(dict)] = Field(default_factory=dict)
    secrets: Annotated[dict[str, Any], _none_to(dict)] = Field(default_factory=dict)
    jobRetryCount: Annotated[WholeNumber, _between(0, MAX_RETRIES)] = 0
    taskRoles: Annotated[dict[str, TaskRole], AfterValidator(_at_least_one("task role"))]
    deployments: list[Deployment] | None = None
    defaults: Annotated[Defaults, _none_to(Defaults)] = Field(default_factory=Defaults)
    extras: Any = None
    priority: Priority = Priority.NORMAL
    stopGracePeriodSeconds: Annotated[WholeNumber, _between(0, MAX_STOP_GRACE_SECONDS)] = 30
    # Like Slurm's --time: an attempt still running after this long is stopped and the job
    # fails without retrying. Declaring it lets the job backfill around a reservation.
    maxRunTimeSeconds: Annotated[WholeNumber, _between(1, MAX_RUN_TIME_SECONDS)] | None = None
    tags: Annotated[list[Text], _none_to(list)] = Field(default_factory=list)
    # Storages every task role mounts (``spec/storages.py``); a role's own ``storages`` add to them.
    storages: Annotated[list[StorageMount], _none_to(list)] = Field(default_factory=list, max_length=MAX_STORAGES)
    # Datasets every task role reads from its node's cache (``spec/datasets.py``); a role's own add to them.
    datasets: Annotated[list[DatasetMount], _none_to(list)] = Field(default_factory=list, max_length=MAX_DATASETS)
    preemption: Preemption = Preemption.REQUEUE
    # How long a suspending job has to save its state before what is left is stopped.
    suspendGracePeriodSeconds: Annotated[WholeNumber, _between(0, MAX_STOP_GRACE_SECONDS)] = 300
    suspendSignal: Annotated[str, BeforeValidator(_suspend_signal)] = "SIGUSR1"
    # HAI's set_watchdog_time: no task writing output for this long means the job hangs; it
    # is stopped and retried as a platform fault.
    watchdogSeconds: Annotated[WholeNumber, _between(MIN_WATCHDOG_SECONDS, MAX_RUN_TIME_SECONDS)] | None = None
    # The environment (``yard env``) every role's tasks run in, unless a role names its own.
    environment: EnvironmentName | None = None
    # Jobs this one waits for, as Slurm's --dependency (``spec/dependencies.py``).
    dependencies: DependencyField = None
    # The folder every task starts in a copy of: in a job file, a path (relative to the file)
    # that `yard submit` sends; as the server stores it, the upload's digest (``core.workdirs``).
    workdir: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    # Tell the owner when it ends, fails or is preempted (``spec/notify.py``); None: their account's default.
    notify: Notify | None = None

    @model_validator(mode="after")
    def _check_semantics(self) -> JobSpec:
        errors = semantic_errors(self)
        if errors:
            summary = "; ".join(str(error) for error in errors)
            raise PydanticCustomError(
                "spec_semantic", "{summary}", {"summary": summary, "errors": errors}
            )
        return self

    @property
    def suspendable(self) -> bool:
        return self.preemption == Preemption.SUSPEND

    @property
    def task_count(self) -> int:
        """How many tasks one attempt of the job runs (instances over all roles)."""
        return sum(role.instances for role in self.taskRoles.values())

    @property
    def elastic_role(self) -> str | None:
        """The role that runs on between ``instances`` and ``maxInstances`` (at most one
        has a range); None for a job of fixed size."""
        return next((name for name, role in self.taskRoles.items() if role.elastic), None)

    @property
    def role_names(self) -> list[str]:
        """Task role names in the order the file declares them."""
        return list(self.taskRoles)

    def environment_of(self, role: str) -> str | None:
        """The environment ``role``'s tasks run in: the role's own, else the job's (None: none)."""
        return self.taskRoles[role].environment or self.environment

    def environment_paths(self) -> dict[str, str]:
        """Each environment the job names, with the field path that first names it."""
        named = {} if self.environment is None else {self.environment: "environment"}
        for name, role in self.taskRoles.items():
            if role.environment is not None:
                named.setdefault(role.environment, f"taskRoles.{name}.environment")
        return named

    def role_image(self, role: str) -> str | None:
        """The image the role's tasks run in, None for bare processes. The most specific
        wins: the role's ``image``, then its ``dockerImage`` (the named prerequisite's
        ``uri``), then the job's ``image``; a role may not set both of its own. Written in
        full as Docker reads it (``checks.qualified_image``: ``ubuntu:22.04`` is
        ``docker.io/library/ubuntu:22.04``), as the engine pulls and runs it."""
        task_role = self.taskRoles[role]
        image = self.image
        if task_role.image is not None:
            image = task_role.image
        elif task_role.dockerImage is not None:
            prerequisite = self.prerequisite("dockerimage", task_role.dockerImage)
            uri = None if prerequisite is None else prerequisite.get("uri")
            image = uri if isinstance(uri, str) else None
        return None if image is None else qualified_image(image)

    def prerequisite(self, kind: str, name: str) -> dict[str, Any] | None:
        """The prerequisite of type ``kind`` (``dockerimage``, ``data``…) called ``name``."""
        for item in self.prerequisites or ():
            if item.get("type") == kind and item.get("name") == name:
                return item
        return None
