"""Checks that span several fields of a job file, each reported at its exact field path.

Field-by-field checks (types, ranges) live on the models; what is here needs the whole
job: role names, completion counts against instances, references to prerequisites and
deployments, and placeholders against the declared parameters and secrets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from trainyard.spec.errors import FieldError, join_path, show
from trainyard.spec.placeholders import (
    RenderBudget,
    RenderTooLarge,
    TemplateError,
    find_references,
    render_with,
    resolve,
)
from trainyard.spec.storages import extras_errors

if TYPE_CHECKING:
    from trainyard.spec.models import Deployment, JobSpec, TaskRole

# Ports reserved per instance, per label and in all: one job must not exhaust a node's.
MAX_PORTS = 64

# Linux refuses to exec a program with one environment string ("NAME=value" and its NUL)
# longer than MAX_ARG_STRLEN (32 pages), and all of them together past ARG_MAX (a quarter
# of the stack limit, 2 MiB by default). Trainyard adds its own variables, so the job's
# own get half of that.
MAX_ENV_ENTRY_BYTES = 128 * 1024
MAX_ENV_TOTAL_BYTES = 1024 * 1024

# Role names and port labels end up in environment variable names
# (OpenPAI: PAI_TASK_ROLE_<role>_HOST_LIST, PAI_PORT_LIST_<role>_0_<label>).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ROLE_NAME_MAX = 64
# A container image reference ([registry/]name[:tag][@digest]): it reaches the container
# engine's command line, so it may not start with '-' or hold spaces.
IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
IMAGE_REFERENCE_MAX = 255
# Podman's transports other than a registry: `docker-archive:/path` would have the engine
# (root's, on a node) load whatever archive the path names, another user's file included.
# A job's image comes from a registry; an admin's pull (`yard image pull`) may name others.
IMAGE_TRANSPORTS = frozenset({"containers-storage", "dir", "docker-archive", "docker-daemon", "oci",
                              "oci-archive", "ostree", "sif", "tarball"})


def image_reference_problem(value: str) -> str | None:
    """Why ``value`` cannot be a job's image, or None: a registry reference only."""
    if not IMAGE_REFERENCE.fullmatch(value) or len(value) > IMAGE_REFERENCE_MAX:
        return (f"must be an image reference such as 'python:3.12', 'registry.example.com/team/train:v2' "
                f"or 'repo@sha256:…', at most {IMAGE_REFERENCE_MAX} characters (got {show(value)})")
    transport = value.split(":", 1)[0].lower() if ":" in value else None
    if transport in IMAGE_TRANSPORTS:
        return (f"names the container engine's '{transport}:' transport (got {show(value)}): a job's image comes "
                f"from a registry; write the registry's name in front (e.g. 'docker.io/library/{value}'), or ask "
                "an admin to pull a local archive onto the nodes (yard image pull)")
    return None
DOCKER_HUB = "docker.io"


def qualified_image(reference: str) -> str:
    """``reference`` as Docker reads it, written in full: Podman without unqualified-search
    registries (Debian's stock one) refuses a short name that Docker pulls, so every path
    that pulls or runs an image (and shows it) uses this form. The first component is a
    registry when it holds a ``.`` or a ``:`` or is ``localhost``; else the image is on
    Docker Hub (``docker.io``), under ``library/`` when it has no ``/``; without a tag or a
    digest the tag is ``latest``. ``ubuntu`` -> ``docker.io/library/ubuntu:latest``,
    ``tensorflow/tensorflow:2.15.0`` -> ``docker.io/tensorflow/tensorflow:2.15.0``. A
    ``docker://`` reference is qualified after the prefix; another transport's (an
    admin's ``docker-archive:/path``) is left as it is."""
    prefix = ""
    if reference.startswith("docker://"):
        prefix, reference = "docker://", reference[len("docker://"):]
    elif ":" in reference and reference.split(":", 1)[0].lower() in IMAGE_TRANSPORTS:
        return reference
    name, at, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if not slash:
        registry, path = DOCKER_HUB, f"library/{name}"
    elif "." in first or ":" in first or first == "localhost":
        registry, path = first, rest
        if registry == "index.docker.io":
            registry = DOCKER_HUB
        if registry == DOCKER_HUB and "/" not in path:
            path = f"library/{path}"
    else:
        registry, path = DOCKER_HUB, name
    if not at and ":" not in path.rsplit("/", 1)[-1]:
        path += ":latest"
    return f"{prefix}{registry}/{path}{at}{digest}"


PREREQUISITE_TYPES = ("dockerimage", "data", "script", "output")
# The task-role field that selects each kind of prerequisite.
_SELECTORS = {"dockerImage": "dockerimage", "data": "data", "script": "script", "output": "output"}


def semantic_errors(spec: JobSpec) -> list[FieldError]:
    """Every cross-field problem in ``spec``, in file order."""
    errors: list[FieldError] = []
    errors += _prerequisite_errors(spec)
    for name, role in spec.taskRoles.items():
        errors += _role_errors(spec, name, role)
    errors += _selector_errors(spec)
    errors += _deployment_errors(spec)
    errors += _storage_errors(spec)
    placeholder_errors = list(_placeholder_errors(spec))
    errors += placeholder_errors
    if not placeholder_errors:
        errors += _env_size_errors(spec)
    return errors


def _selector_errors(spec: JobSpec) -> Iterator[FieldError]:
    """Each role's resource expression, checked as the scheduler will run it: syntax (with
    line, column and a caret), names, attributes and types (``core/selectors.py``)."""
    # CEL's parser (lark) costs ~50 ms to import: only a job file with an expression pays it,
    # not every module (the CLI's) that reads an image reference's pattern from here.
    from trainyard.core.selectors import SelectorError, compile_selector

    for name, role in spec.taskRoles.items():
        source = role.resourcePerInstance.selector
        if source is None:
            continue
        try:
            compile_selector(source, gpus=role.resourcePerInstance.gpu > 0)
        except SelectorError as error:
            yield FieldError(f"taskRoles.{name}.resourcePerInstance.selector", error.message)


def _storage_errors(spec: JobSpec) -> Iterator[FieldError]:
    """OpenPAI's storage declarations in ``extras``, and a storage named twice in one list
    (where it would be mounted twice)."""
    yield from extras_errors(spec.extras)
    lists = [("storages", spec.storages)] + [(f"taskRoles.{name}.storages", role.storages)
                                             for name, role in spec.taskRoles.items()]
    for path, uses in lists:
        seen: set[str] = set()
        for index, use in enumerate(uses):
            if use.name in seen:
                yield FieldError(f"{path}[{index}].name", f"storage {use.name!r} is listed twice")
            seen.add(use.name)
    dataset_lists = [("datasets", spec.datasets)] + [(f"taskRoles.{name}.datasets", role.datasets)
                                                     for name, role in spec.taskRoles.items()]
    for path, datasets in dataset_lists:
        seen = set()
        for index, dataset in enumerate(datasets):
            if dataset.name in seen:
                yield FieldError(f"{path}[{index}].name", f"dataset {dataset.name!r} is listed twice")
            seen.add(dataset.name)


def _prerequisite_errors(spec: JobSpec) -> Iterator[FieldError]:
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(spec.prerequisites or ()):
        path = f"prerequisites[{index}]"
        name, kind = item.get("name"), item.get("type")
        if not isinstance(name, str) or not name:
            yield FieldError(f"{path}.name", f"must be a non-empty string (got {show(name)})")
        if kind not in PREREQUISITE_TYPES:
            allowed = ", ".join(PREREQUISITE_TYPES)
            yield FieldError(f"{path}.type", f"must be one of {allowed} (got {show(kind)})")
        if kind == "dockerimage":
            yield from _image_uri_errors(f"{path}.uri", item.get("uri"))
        if isinstance(name, str) and isinstance(kind, str):
            if (kind, name) in seen:
                yield FieldError(f"{path}.name", f"duplicate {kind} prerequisite {name!r}")
            seen.add((kind, name))


def _image_uri_errors(path: str, uri: object) -> Iterator[FieldError]:
    """A ``dockerimage`` prerequisite's ``uri`` is the image a container engine is given."""
    problem = image_reference_problem(uri) if isinstance(uri, str) else f"must be an image reference (got {show(uri)})"
    if problem is not None:
        yield FieldError(path, problem)


def _whole_node_errors(path: str, role: TaskRole) -> Iterator[FieldError]:
    """A whole-node role (``nodes``) runs one instance per node and takes all of each."""
    if role.nodes is None:
        return
    if role.instances != role.nodes:
        yield FieldError(
            f"{path}.instances",
            f"is {role.instances} but nodes is {role.nodes}: a whole-node role runs one instance per node; "
            "leave instances out (or make it equal to nodes)",
        )
    for field in ("gpu", "cpu", "memoryMB"):
        if field in role.resourcePerInstance.model_fields_set:
            yield FieldError(
                f"{path}.resourcePerInstance.{field}",
                f"a whole-node role (nodes: {role.nodes}) gets every GPU, all the CPU and all the memory of "
                f"each node: leave {field} out (gpuModel and gpuMemoryMB choose the kind of node), or drop "
                "nodes and ask for amounts",
            )
    if "selector" in role.resourcePerInstance.model_fields_set:
        yield FieldError(
            f"{path}.resourcePerInstance.selector",
            f"a whole-node role (nodes: {role.nodes}) chooses its kind of node with gpuModel and gpuMemoryMB; "
            "a resource expression is not supported beside nodes yet: leave selector out",
        )


def _elastic_errors(spec: JobSpec, path: str, name: str, role: TaskRole) -> Iterator[FieldError]:
    """An elastic role (``instances: {min, max}``): a range, one role of the job, not whole nodes."""
    if role.maxInstances is None:
        return
    if role.maxInstances < role.instances:
        yield FieldError(f"{path}.instances.max",
                         f"is {role.maxInstances}, below min ({role.instances}): an elastic role runs on "
                         "min to max instances")
    if role.nodes is not None:
        yield FieldError(f"{path}.instances",
                         "a whole-node role (nodes) cannot be elastic yet: give it a fixed number of nodes, "
                         "or ask for amounts per instance")
    first = spec.elastic_role
    if first is not None and first != name:
        yield FieldError(f"{path}.instances",
                         f"only one role of a job may be elastic, and {first} is: give this one a fixed number")


def _role_errors(spec: JobSpec, name: str, role: TaskRole) -> Iterator[FieldError]:
    path = f"taskRoles.{name}"
    if role.image is not None and role.dockerImage is not None:
        yield FieldError(
            f"{path}.image",
            "set either image (an image reference) or dockerImage (the name of a dockerimage "
            "prerequisite), not both",
        )
    if not IDENTIFIER.fullmatch(name) or len(name) > ROLE_NAME_MAX:
        yield FieldError(
            path,
            "task role names must start with a letter or '_', contain only letters, digits "
            f"and '_', and be at most {ROLE_NAME_MAX} characters (they become part of "
            "environment variable names)",
        )
    for field in ("minFailedInstances", "minSucceededInstances"):
        count = getattr(role.completion, field)
        if count > role.instances:
            yield FieldError(
                f"{path}.completion.{field}",
                f"must be -1, null, or between 1 and instances ({role.instances}) (got {count})",
            )
    yield from _whole_node_errors(path, role)
    yield from _elastic_errors(spec, path, name, role)
    for label in role.resourcePerInstance.ports:
        if not IDENTIFIER.fullmatch(label):
            yield FieldError(
                f"{path}.resourcePerInstance.ports.{label}",
                "port labels must start with a letter or '_' and contain only letters, "
                "digits and '_'",
            )
    total_ports = sum(role.resourcePerInstance.ports.values())
    if total_ports > MAX_PORTS:
        yield FieldError(
            f"{path}.resourcePerInstance.ports",
            f"at most {MAX_PORTS} ports per instance in all (got {total_ports})",
        )
    for key in role.env:
        if not IDENTIFIER.fullmatch(key):
            yield FieldError(
                f"{path}.env.{key}",
                "not a valid environment variable name (letters, digits and '_', "
                "not starting with a digit)",
            )
    for field, kind in _SELECTORS.items():
        selected = getattr(role, field)
        if selected is not None and spec.prerequisite(kind, selected) is None:
            yield FieldError(
                f"{path}.{field}",
                f"no {kind} prerequisite named {selected!r}; declare it under prerequisites "
                f"(- name: {selected}, type: {kind}, uri: …)",
            )


def _deployment_errors(spec: JobSpec) -> Iterator[FieldError]:
    names: set[str] = set()
    for index, deployment in enumerate(spec.deployments or ()):
        path = f"deployments[{index}]"
        if deployment.name in names:
            yield FieldError(f"{path}.name", f"duplicate deployment {deployment.name!r}")
        names.add(deployment.name)
        for role in deployment.taskRoles:
            if role not in spec.taskRoles:
                yield FieldError(
                    f"{path}.taskRoles.{role}",
                    f"no task role named {role!r} (task roles: {', '.join(spec.taskRoles)})",
                )
    chosen = spec.defaults.deployment
    if chosen is not None and chosen not in names:
        known = f" (deployments: {', '.join(sorted(names))})" if names else ""
        yield FieldError("defaults.deployment", f"no deployment named {chosen!r}{known}")


def selected_deployment(spec: JobSpec) -> Deployment | None:
    """The deployment named by ``defaults.deployment``, if any."""
    for deployment in spec.deployments or ():
        if deployment.name == spec.defaults.deployment:
            return deployment
    return None


def template_context(spec: JobSpec, role: str | None) -> dict[str, Any]:
    """What placeholders in ``role``'s strings may refer to.

    ``$parameters`` and ``$secrets`` are job-wide; ``$data``, ``$output`` and ``$script``
    are the prerequisites that this role selects (absent when it selects none).
    """
    context: dict[str, Any] = {"parameters": spec.parameters, "secrets": spec.secrets}
    if role is not None and role in spec.taskRoles:
        task_role = spec.taskRoles[role]
        for field in ("data", "output", "script"):
            selected = getattr(task_role, field)
            if selected is not None:
                context[field] = spec.prerequisite(field, selected)
    return context


def templated_strings(spec: JobSpec) -> Iterator[tuple[str, str, str | None]]:
    """Every string that may hold placeholders, as (path, text, role it renders for)."""
    for index, item in enumerate(spec.prerequisites or ()):
        auth = item.get("auth")
        if isinstance(auth, Mapping):
            for key, value in auth.items():
                if isinstance(value, str):
                    yield f"prerequisites[{index}].auth.{key}", value, None
    for name, role in spec.taskRoles.items():
        for index, command in enumerate(role.commands):
            yield f"taskRoles.{name}.commands[{index}]", command, name
        for key, value in role.env.items():
            yield f"taskRoles.{name}.env.{key}", value, name
    for index, deployment in enumerate(spec.deployments or ()):
        for name, hooks in deployment.taskRoles.items():
            for field in ("preCommands", "postCommands"):
                for position, command in enumerate(getattr(hooks, field) or ()):
                    path = join_path(
                        f"deployments[{index}].taskRoles.{name}.{field}", f"[{position}]"
                    )
                    yield path, command, name


def _placeholder_errors(spec: JobSpec) -> Iterator[FieldError]:
    for path, text, role in templated_strings(spec):
        if role is None:  # docker registry credentials may use secrets only (as in OpenPAI)
            context: dict[str, Any] = {"secrets": spec.secrets}
        else:
            context = template_context(spec, role)
        try:
            references = find_references(text)
        except TemplateError as error:
            yield FieldError(path, str(error))
            continue
        for reference in references:
            if role is None and reference.root != "secrets":
                yield FieldError(path, f"only $secrets may be used here (got {reference.tag!r})")
            elif reference.root in _missing_selections(spec, role):
                continue  # the selector field itself is already reported
            else:
                try:
                    resolve(reference, context)
                except TemplateError as error:
                    yield FieldError(path, str(error))


def _env_size_errors(spec: JobSpec) -> Iterator[FieldError]:
    """Environment values too large for the kernel to pass to the task, once rendered.

    Refused here, because at launch the failure would look like the task's own
    (``bash: Argument list too long``).
    """
    for name, role in spec.taskRoles.items():
        context = template_context(spec, name)
        total = 0
        # Bounded: a value used thousands of times stops rendering just past the total allowed.
        budget = RenderBudget(MAX_ENV_TOTAL_BYTES)
        for key, value in role.env.items():
            try:
                rendered = render_with(value, context, budget)
            except RenderTooLarge:
                yield FieldError(
                    f"taskRoles.{name}.env.{key}",
                    f"the environment passes {MAX_ENV_TOTAL_BYTES:,} bytes in all once rendered, with this value: "
                    "put the data in a file and pass its path",
                )
                break
            size = len(key.encode()) + 1 + len(rendered.encode("utf-8", "surrogateescape")) + 1
            total += size
            if size > MAX_ENV_ENTRY_BYTES:
                yield FieldError(
                    f"taskRoles.{name}.env.{key}",
                    f"is {size:,} bytes once rendered (with its name); Linux passes at most {MAX_ENV_ENTRY_BYTES:,} "
                    "bytes per environment variable: put the data in a file and pass its path",
                )
        if total > MAX_ENV_TOTAL_BYTES:
            yield FieldError(
                f"taskRoles.{name}.env",
                f"{total:,} bytes in all once rendered; at most {MAX_ENV_TOTAL_BYTES:,}: "
                "put the data in a file and pass its path",
            )


def _missing_selections(spec: JobSpec, role: str | None) -> set[str]:
    """The prerequisite kinds ``role`` selects by a name that no prerequisite has."""
    if role is None:
        return set()
    task_role = spec.taskRoles[role]
    return {
        field
        for field in ("data", "output", "script")
        if getattr(task_role, field) is not None
        and spec.prerequisite(field, getattr(task_role, field)) is None
    }


def rendered_strings(spec: JobSpec, role: str) -> Iterator[tuple[str, str]]:
    """What one task of ``role`` renders, as (path, text), in the order ``render_role``
    renders it: the selected deployment's preCommands, the commands, its postCommands,
    then the env values."""
    deployment = selected_deployment(spec)
    index = next((i for i, d in enumerate(spec.deployments or ()) if d is deployment), 0)
    hooks = deployment.taskRoles.get(role) if deployment is not None else None
    hook_path = f"deployments[{index}].taskRoles.{role}"
    for position, command in enumerate((hooks.preCommands or ()) if hooks is not None else ()):
        yield f"{hook_path}.preCommands[{position}]", command
    for position, command in enumerate(spec.taskRoles[role].commands):
        yield f"taskRoles.{role}.commands[{position}]", command
    for position, command in enumerate((hooks.postCommands or ()) if hooks is not None else ()):
        yield f"{hook_path}.postCommands[{position}]", command
    for key, value in spec.taskRoles[role].env.items():
        yield f"taskRoles.{role}.env.{key}", value


def rendered_size_errors(spec: JobSpec, limit: int, setting: str = "") -> list[FieldError]:
    """Task roles whose commands and environment, placeholders filled in, come to more than
    ``limit`` bytes: each reported at the field that passed it. Rendering stops there, so
    checking costs at most ``limit`` bytes of memory however often a parameter is used."""
    errors: list[FieldError] = []
    where = f" ({setting})" if setting else ""
    for name in spec.taskRoles:
        context = template_context(spec, name)
        budget = RenderBudget(limit)
        for path, text in rendered_strings(spec, name):
            try:
                render_with(text, context, budget)
                budget.spend("\n")  # the line (or the NUL of an env entry) that ends it
            except RenderTooLarge:
                errors.append(FieldError(path, (
                    f"task role {name} renders to more than {_size(limit)} by here (its commands and env with "
                    f"every placeholder filled in), past the cluster's limit{where}: keep data out of the job "
                    "file's placeholders; put it in a file (a storage, the job directory) and pass its path")))
                break
            except TemplateError:
                continue  # a placeholder that does not resolve: validation reports it
    return errors


def _size(size: int) -> str:
    return f"{size // 1024:,} KiB" if size % 1024 == 0 else f"{size:,} bytes"
