"""Rendering a job's placeholders for launch, and the masked and normalized views of a job.

A spec is stored normalized (defaults filled in, secrets included) and shown masked:
every secret value replaced with ``******``, wherever it appears.
"""

from __future__ import annotations

from typing import Any

from trainyard.spec.checks import selected_deployment, template_context
from trainyard.spec.models import JobSpec
from trainyard.spec.placeholders import TemplateError, render_with

MASK = "******"

__all__ = ["MASK", "TemplateError", "masked_spec", "normalized_spec", "render", "render_role"]


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
