"""Rendering a job's placeholders for launch, and the masked and normalized views of a job.

A spec is stored normalized (defaults filled in, secrets included) and shown masked:
every secret value replaced with ``******``, wherever it appears. A job shown masked and
submitted again (a clone) gets its masked values back from the stored original
(``unmasked``); anywhere else the mask is not a secret (``masked_secret_paths``).
"""

from __future__ import annotations

from typing import Any

from trainyard.spec.checks import selected_deployment, template_context
from trainyard.spec.errors import FieldError, SpecError, format_path
from trainyard.spec.models import JobSpec
from trainyard.spec.placeholders import TemplateError, render_with

MASK = "******"

__all__ = [
    "MASK",
    "TemplateError",
    "masked_secret_paths",
    "masked_spec",
    "normalized_spec",
    "render",
    "render_role",
    "unmasked",
]


def render(text: str, parameters: dict[str, Any], secrets: dict[str, Any]) -> str:
    """Replace ``<% $parameters.x %>`` and ``<% $secrets.x %>`` placeholders in ``text``.

    Nested keys are reached with dots (``$parameters.optim.lr``) and list items with
    ``[N]``. Raises TemplateError (a ValueError) for a malformed or unknown reference.
    """
    return render_with(text, {"parameters": parameters, "secrets": secrets})


def render_role(spec: JobSpec, role: str) -> tuple[list[str], dict[str, str]]:
    """The commands and environment one task of ``role`` runs with, placeholders filled.

    When ``defaults.deployment`` names a deployment, its ``preCommands`` for this role
    come before the role's commands and its ``postCommands`` after, as in OpenPAI.
    The result holds secret values: hand it to the backend, never to a log.
    """
    if role not in spec.taskRoles:
        raise KeyError(f"no task role named {role!r} (task roles: {', '.join(spec.role_names)})")
    task_role = spec.taskRoles[role]
    commands = list(task_role.commands)
    deployment = selected_deployment(spec)
    hooks = deployment.taskRoles.get(role) if deployment is not None else None
    if hooks is not None:
        commands = list(hooks.preCommands or ()) + commands + list(hooks.postCommands or ())
    context = template_context(spec, role)
    rendered = [render_with(command, context) for command in commands]
    env = {key: render_with(value, context) for key, value in task_role.env.items()}
    return rendered, env


def normalized_spec(spec: JobSpec) -> dict[str, Any]:
    """The full job as JSON-ready data with every default filled in, secrets included.

    This is the stored form; validating it again gives an equal spec.
    """
    return spec.model_dump(mode="json", exclude_none=True)


def masked_spec(spec: JobSpec) -> dict[str, Any]:
    """The normalized job with every secret value replaced by ``******``.

    The ``secrets`` section keeps its keys (nested maps included) with masked leaves.
    Any other string that contains a secret value verbatim — a command or parameter the
    user pasted it into — has that part masked too. Map keys are left as they are.
    """
    dump = normalized_spec(spec)
    secret_texts = sorted(
        {text for text in _leaf_texts(dump.get("secrets", {})) if text.strip("*")},
        key=len,
        reverse=True,
    )
    masked = {key: _scrub(value, secret_texts) for key, value in dump.items() if key != "secrets"}
    if "secrets" in dump:
        masked["secrets"] = _mask_leaves(dump["secrets"])
    return {key: masked[key] for key in dump}  # keep the field order of the dump


def _leaf_texts(value: Any) -> list[str]:
    """The string form of every scalar secret value (booleans and nulls are not secrets)."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in _leaf_texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _leaf_texts(item)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)] if str(value) else []


def _mask_leaves(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _mask_leaves(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mask_leaves(item) for item in value]
    return MASK


def _scrub(value: Any, secret_texts: list[str]) -> Any:
    if isinstance(value, dict):
        return {key: _scrub(item, secret_texts) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item, secret_texts) for item in value]
    if isinstance(value, str):
        return _scrub_text(value, secret_texts)
    return value


def _scrub_text(text: str, secret_texts: list[str]) -> str:
    # Repeat until no secret is left: masking one secret can bring the neighbouring
    # characters together into another. Each pass removes at least one character that
    # is not '*' (every secret here has one), so this ends.
    changed = True
    while changed:
        changed = False
        for secret in secret_texts:
            if secret in text:
                text = text.replace(secret, MASK)
                changed = True
    return text


def masked_secret_paths(spec: JobSpec) -> list[str]:
    """Paths of the secrets whose value is the mask itself: a job copied from what
    Trainyard showed (``yard job --json``), whose secrets were never written back in."""
    return [format_path(("secrets", *loc)) for loc, value in _leaves(spec.secrets, ()) if value == MASK]


_ABSENT = object()  # no value at this path in the original


def unmasked(document: Any, original: JobSpec) -> Any:
    """``document`` (a job file as Trainyard showed ``original``, perhaps edited) with each
    value still shown masked given back its stored value.

    A text equal to what ``masked_spec(original)`` shows at the same path is the original's
    value there: a secret under ``secrets``, or a command a secret was scrubbed from. Raises
    SpecError, at the path, for a mask nothing can fill: a secret the original does not
    have, or a text that hid a secret and was then edited around the mask.
    """
    problems: list[FieldError] = []
    filled = _refill(document, masked_spec(original), normalized_spec(original), (), problems)
    if problems:
        raise SpecError(problems)
    return filled


def _refill(value: Any, shown: Any, stored: Any, loc: tuple[str | int, ...], problems: list[FieldError]) -> Any:
    if isinstance(value, dict):
        return {
            key: _refill(item, _child(shown, key), _child(stored, key), (*loc, key), problems)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _refill(item, _child(shown, index), _child(stored, index), (*loc, index), problems)
            for index, item in enumerate(value)
        ]
    if not isinstance(value, str) or MASK not in value:
        return value
    if value == shown and stored is not _ABSENT:
        return stored
    if loc[:1] == ("secrets",) and value == MASK:
        problems.append(FieldError(format_path(loc), f"{MASK} stands for a secret, and the original job has "
                                   "none here to fill in: write the secret's value"))
    elif isinstance(shown, str) and shown != stored and MASK in shown:
        problems.append(FieldError(format_path(loc), f"this text hid a secret of the original job as {MASK}, "
                                   "and was edited: keep it exactly as shown, or write the secret out"))
    return value  # a mask the user wrote, where no secret was


def _child(container: Any, key: str | int) -> Any:
    if isinstance(container, dict) and isinstance(key, str):
        return container.get(key, _ABSENT)
    if isinstance(container, list) and isinstance(key, int) and key < len(container):
        return container[key]
    return _ABSENT


def _leaves(value: Any, loc: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*loc, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in _leaves(item, (*loc, index))]
    return [(loc, value)]
