"""Who may run in which environment (``yard env``), and the check a submit makes of the
environments a job file names.

Kept apart from ``services/environments.py`` (which submits build jobs through
``services/jobs.py``) so that the submit path can ask these rules without a cycle.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy.orm import Session

from trainyard.core.states import EnvironmentState
from trainyard.services.errors import Conflict, NotFound
from trainyard.spec.models import JobSpec
from trainyard.store.queries import environments as env_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import EnvironmentRow, UserRow


class EnvironmentKind(StrEnum):
    BASE = "base"  # an admin's: a Python environment on every node, or an image
    CUSTOM = "custom"  # built by Trainyard from a requirements file


class Visibility(StrEnum):
    PRIVATE = "private"  # its owner (and admins)
    GROUP = "group"  # also the members of its group
    EVERYONE = "everyone"  # every user (base environments without a group)


def may_use(session: Session, user: UserRow, env: EnvironmentRow) -> bool:
    """Whether ``user`` may see the environment and run jobs in it."""
    if user.is_admin or env.owner_id == user.id or env.visibility == Visibility.EVERYONE:
        return True
    return (env.visibility == Visibility.GROUP and env.group_id is not None
            and env.group_id in vc_queries.group_ids_of(session, user.id))


def usable_environment(session: Session, user: UserRow, name: str, *, path: str = "environment") -> EnvironmentRow:
    """The environment ``name`` if ``user`` may run in it: NotFound when there is none
    or it is not shared with them, Conflict unless it is READY; each error
    names ``path``, the field of the request or job file that named it."""
    env = env_queries.environment_named(session, name)
    # One not shared with the user is answered as one that does not exist, as `yard env show`
    # and `delete` answer it: its name and owner are not theirs to learn.
    if env is None or not may_use(session, user, env):
        raise NotFound(f"{path}: no environment named {name!r} that you may use; see `yard env list`",
                       details=[{"path": path, "message": "unknown environment"}])
    if env.state != EnvironmentState.READY:
        if env.state == EnvironmentState.BUILDING:
            why = f"is still being built by job {env.build_job_id}; `yard wait {env.build_job_id}`, then submit again"
        else:
            why = (f"failed to build ({env.message}); its build log: `yard logs {env.build_job_id}`; "
                   f"`yard env delete {name}` and create it again")
        raise Conflict(f"{path}: environment {name!r} {why}",
                       details=[{"path": path, "message": f"environment {env.state}"}])
    return env


def check_job_environments(session: Session, user: UserRow, spec: JobSpec) -> None:
    """Refuse a job naming an environment its owner may not run in (see ``usable_environment``)."""
    for name, path in spec.environment_paths().items():
        usable_environment(session, user, name, path=path)
