"""What the admin pages say after a change: a removal's effect on jobs in words, and, after
a refusal that ``force`` would overcome, the action to repeat with it."""

from __future__ import annotations

from typing import Any

from trainyard.schemas.admin import RemovalResult
from trainyard.services.errors import ServiceError


def removal_notice(result: RemovalResult) -> str:
    """What a removal did, and to which jobs, in words (as ``yard`` says it)."""
    text = result.done
    if result.stoppedJobs:
        text += "; stopped jobs " + ", ".join(map(str, result.stoppedJobs))
    if result.keptJobs:
        text += "; jobs " + ", ".join(map(str, result.keptJobs)) + " go on"
    return text


def refusal_values(failed: ServiceError | None, retry: dict[str, str] | None) -> dict[str, Any]:
    """The template values of a refusal (``force_retry.html``): its message, its field
    errors, and the action to repeat with ``force`` when that is what would overcome it."""
    if failed is None:
        return {"error": None, "errors": {}, "retry": None}
    forcible = retry is not None and any(d.get("path") == "force" for d in failed.details)
    return {"error": failed.message, "errors": {d["path"]: d["message"] for d in failed.details},
            "retry": retry if forcible else None}
