"""The submit page's form as data, and its two-way conversion with the job file.

The YAML editor holds the whole job; the form shows the fields most jobs set (name, VC,
priority, retries, run-time limit, dependencies; per task role: name, instances, GPU, CPU, memory,
commands, environment). Parsing and validation stay in ``trainyard.spec``: this module only
moves values between form fields and the job document.

* ``fields_from_document`` reads the form's values out of a job document (as loaded, not
  yet validated: a wrong value is shown as written, so its error can be shown beside it);
* ``apply_fields`` writes the form's values onto the document it was read from, keeping
  everything the form does not show (parameters, secrets, ports, completion, ...). Task
  roles and environment rows match by position: every change that adds or removes one goes
  through the server, which renders the form and the YAML again from the same state;
* ``form_field_of`` maps a job-file error path (``taskRoles.worker.instances``) to the form
  field that shows it (``roles-0-instances``).

A form field left empty leaves its key out of the job (the default applies: the form shows
it as the placeholder); a number that does not parse is written as text, for the job file's
validation to refuse at its path.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from trainyard.core.names import DEFAULT_VC
from trainyard.core.priorities import DEFAULT_PRIORITY
from trainyard.spec.models import Priority

MAX_ROLES = 100
MAX_ENV_ROWS = 200
NEW_ROLE_COMMAND = 'echo "hello from $PAI_CURRENT_TASK_ROLE_NAME $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"'
STARTER = {
    "protocolVersion": 2,
    "name": "my-job",
    "taskRoles": {"main": {"instances": 1, "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 1024},
                           "commands": [NEW_ROLE_COMMAND]}},
}
# The job file's defaults, shown as placeholders of the empty form fields.
PLACEHOLDERS = {"instances": "1", "gpu": "0", "cpu": "1", "memory_mb": "1024", "retries": "0",
                "max_run_time": "no limit"}


@dataclass
class RoleFields:
    name: str = ""
    instances: str = ""
    gpu: str = ""
    cpu: str = ""
    memory_mb: str = ""
    commands: str = ""
    env: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class JobFields:
    name: str = ""
    vc: str = "default"
    priority: str = str(Priority.NORMAL)
    retries: str = ""
    max_run_time: str = ""
    dependencies: str = ""  # as Slurm writes them: afterok:12:13,afterany:14
    roles: list[RoleFields] = field(default_factory=list)
    notify: str = ""  # notify.on, comma-separated; empty: the account's default


# --- form fields (the posted form) -------------------------------------------------------


def fields_from_form(form: Mapping[str, Any]) -> JobFields:
    """The form's values; roles and environment rows are read by index until one is missing."""
    def text(key: str) -> str:
        value = form.get(key)
        return value if isinstance(value, str) else ""

    roles = []
    for i in range(MAX_ROLES):
        prefix = f"roles-{i}-"
        if prefix + "name" not in form:
            break
        env = []
        for j in range(MAX_ENV_ROWS):
            key = f"{prefix}env-{j}-"
            if key + "key" not in form:
                break
            env.append((text(key + "key"), text(key + "value")))
        roles.append(RoleFields(
            name=text(prefix + "name").strip(), instances=text(prefix + "instances").strip(),
            gpu=text(prefix + "gpu").strip(), cpu=text(prefix + "cpu").strip(),
            memory_mb=text(prefix + "memory_mb").strip(), commands=text(prefix + "commands"), env=env,
        ))
    return JobFields(name=text("name").strip(), vc=text("vc").strip(), priority=text("priority").strip(),
                     retries=text("retries").strip(), max_run_time=text("max_run_time").strip(),
                     dependencies=text("dependencies").strip(), roles=roles,
                     notify=text("notify").strip())


# --- the document's values as form fields ------------------------------------------------------


def _shown(value: Any) -> str:
    """A scalar as the form shows it; anything else as one line of YAML, for its error."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _commands_text(commands: Any) -> str:
    if isinstance(commands, list):
        return "\n".join(_shown(command) for command in commands)
    return _shown(commands)


def fields_from_document(document: Any) -> JobFields:
    job = _mapping(document)
    roles = []
    for name, role in _mapping(job.get("taskRoles")).items():
        role = _mapping(role)
        resources = _mapping(role.get("resourcePerInstance"))
        roles.append(RoleFields(
            name=str(name), instances=_shown(role.get("instances")), gpu=_shown(resources.get("gpu")),
            cpu=_shown(resources.get("cpu")), memory_mb=_shown(resources.get("memoryMB")),
            commands=_commands_text(role.get("commands")),
            env=[(str(key), _shown(value)) for key, value in _mapping(role.get("env")).items()],
        ))
    vc = _mapping(job.get("defaults")).get("virtualCluster")
    return JobFields(
        name=_shown(job.get("name")), vc=_shown(vc) or DEFAULT_VC,
        priority=_shown(job.get("priority")) or str(DEFAULT_PRIORITY),
        retries=_shown(job.get("jobRetryCount")), max_run_time=_shown(job.get("maxRunTimeSeconds")),
        dependencies=_dependencies_text(job.get("dependencies")), roles=roles,
        notify=_notify_text(job.get("notify")),
    )


def _dependencies_text(value: Any) -> str:
    """The job file's ``dependencies`` as Slurm writes them (``afterok:12:13,afterany:14``)."""
    if isinstance(value, dict) and all(isinstance(ids, list) for ids in value.values()):
        return ",".join(":".join([str(condition), *map(_shown, ids)]) for condition, ids in value.items() if ids)
    return _shown(value)


def _notify_text(notify: Any) -> str:
    on = _mapping(notify).get("on")
    return ",".join(_shown(n) for n in on) if isinstance(on, list) else _shown(on)


# --- the form's values written onto the document ---------------------------------------------


def _number(text: str) -> int | float | str:
    """What the user typed as a number, or as text (refused later, at its field) if it is none."""
    for parse in (int, float):
        try:
            value = parse(text)
        except ValueError:
            continue
        return value if math.isfinite(value) else text
    return text


def _set(target: dict[str, Any], key: str, value: Any, default: Any = None) -> None:
    """Set ``key``; None removes it; a default value is not added where the key is absent."""
    if value is None:
        target.pop(key, None)
    elif key in target or value != default:
        target[key] = value


def _set_number(target: dict[str, Any], key: str, text: str, default: Any = None) -> None:
    _set(target, key, _number(text) if text else None, default)


def split_commands(text: str, before: Any) -> Any:
    """The commands typed one per line. The task runs its commands as the lines of one bash
    script, so a multi-line command (a heredoc) typed as lines runs the same; a text equal
    to what the form showed keeps the document's own list exactly."""
    if text == _commands_text(before):
        return copy.deepcopy(before)
    commands: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.strip():
            commands.append(line)
        elif commands:  # a blank line inside a command (a heredoc's) stays in the script
            commands[-1] += "\n"
    return [command.rstrip("\n") if i == len(commands) - 1 else command for i, command in enumerate(commands)]


def apply_fields(document: Any, fields: JobFields) -> tuple[dict[str, Any], dict[str, str]]:
    """``document`` with the form's values written in, and the form's own problems (a role
    name given twice) by form field; ``document`` itself is not changed."""
    job: dict[str, Any] = copy.deepcopy(document) if isinstance(document, dict) else {}
    problems: dict[str, str] = {}
    job["name"] = fields.name
    defaults = _mapping(job.get("defaults"))
    _set(defaults, "virtualCluster", fields.vc or None, "default")
    _set(job, "defaults", defaults or None)
    _set(job, "priority", fields.priority or None, str(Priority.NORMAL))
    _set_number(job, "jobRetryCount", fields.retries)
    _set_number(job, "maxRunTimeSeconds", fields.max_run_time)
    if fields.dependencies != _dependencies_text(job.get("dependencies")):  # unchanged: the document's own kept
        _set(job, "dependencies", fields.dependencies or None)
    if fields.notify != _notify_text(job.get("notify")):  # unchanged: the document's own, exactly
        notify = dict(_mapping(job.get("notify")))
        _set(notify, "on", [n.strip() for n in fields.notify.split(",") if n.strip()] or None)
        _set(job, "notify", notify or None)
    before = list(_mapping(job.get("taskRoles")).values())
    roles: dict[str, Any] = {}
    for index, form_role in enumerate(fields.roles):
        if form_role.name in roles:
            problems[f"roles-{index}-name"] = f"another task role is called {form_role.name!r}"
            continue
        old = before[index] if index < len(before) else None
        role = copy.deepcopy(old) if isinstance(old, dict) else {}
        _set_number(role, "instances", form_role.instances)
        resources = _mapping(role.get("resourcePerInstance"))
        _set_number(resources, "gpu", form_role.gpu)
        _set_number(resources, "cpu", form_role.cpu)
        _set_number(resources, "memoryMB", form_role.memory_mb)
        _set(role, "resourcePerInstance", resources or None)
        role["commands"] = split_commands(form_role.commands, role.get("commands"))
        old_env = _mapping(role.get("env"))
        env: dict[str, Any] = {}
        for key, value in form_role.env:
            key = key.strip()
            if not key and not value:
                continue  # an empty row, as "add variable" leaves it
            kept = old_env.get(key)
            # An input shows a multi-line value on one line: unchanged, it keeps its lines.
            env[key] = kept if isinstance(kept, str) and kept.replace("\n", "").replace("\r", "") == value else value
        _set(role, "env", env or None)
        roles[form_role.name] = role
    job["taskRoles"] = roles
    return job, problems


# --- the job document as YAML ------------------------------------------------------------------


# libyaml's emitter when PyYAML was built with it (several times faster), as loading uses its parser.
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_SafeDumper):  # type: ignore[misc, valid-type]
    """Block style, multi-line text as ``|`` literals, keys in the document's order."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump_yaml(document: Any) -> str:
    text: str = yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                          width=100)
    return text


# --- error paths to form fields ------------------------------------------------------------------

_JOB_FIELDS = {"name": "name", "defaults.virtualCluster": "vc", "defaults": "vc", "priority": "priority",
               "jobRetryCount": "retries", "maxRunTimeSeconds": "max_run_time", "dependencies": "dependencies",
               "notify": "notify", "notify.on": "notify", "notify.webhook": "notify", "notify.email": "notify"}
_ROLE_FIELDS = {"": "name", "instances": "instances", "resourcePerInstance.gpu": "gpu",
                "resourcePerInstance.cpu": "cpu", "resourcePerInstance.memoryMB": "memory_mb",
                "commands": "commands", "env": "env"}
_INDEX = re.compile(r"\[\d+\]$")


def form_field_of(path: str, fields: JobFields) -> str | None:
    """The form field that shows the job file's field at ``path``; None where the form has
    none (the error is shown above the YAML editor)."""
    if path in _JOB_FIELDS:
        return _JOB_FIELDS[path]
    if path.startswith("dependencies"):  # dependencies.afterok[1]: the one field shows them all
        return "dependencies"
    if not path.startswith("taskRoles."):
        return None
    rest = path.removeprefix("taskRoles.")
    for index, role in enumerate(fields.roles):
        if rest == role.name or rest.startswith((role.name + ".", role.name + "[")):
            inner = rest[len(role.name):].lstrip(".")
            inner = _INDEX.sub("", inner)  # commands[2] → commands
            if inner.startswith("env."):
                inner = "env"
            name = _ROLE_FIELDS.get(inner)
            return f"roles-{index}-{name}" if name else None
    return None
