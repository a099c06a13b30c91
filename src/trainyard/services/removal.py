"""Taking away what jobs depend on: disabling, enabling and deleting users, deleting virtual
clusters and storages, removing grants (on VCs and storages) and group members.

One rule for all of them: a change that would leave a waiting or running job without its
owner, its right to its VC or its right to a storage it mounts is refused (`Conflict`,
naming the jobs) unless ``force`` is given, which stops those jobs (a waiting one at once,
a running one through its grace period) and says which. Disabling is the exception, as on most clusters: it keeps the
user's jobs unless ``stop_jobs`` asks otherwise. Each function changes the store in the
caller's transaction and answers a `RemovalResult`; a refusal raises, and the caller's
transaction, rolled back (as `Database.session` does), keeps nothing of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.names import DEFAULT_VC
from trainyard.core.states import JobState
from trainyard.schemas.admin import RemovalResult
from trainyard.services import datasets as dataset_service
from trainyard.services import web_sessions
from trainyard.services.admin import get_group, get_vc, may_use_vc
from trainyard.services.auth import get_user
from trainyard.services.datasets import may_read
from trainyard.services.environment_access import EnvironmentKind
from trainyard.services.environments import jobs_using
from trainyard.services.errors import Conflict, NotFound
from trainyard.services.jobs import request_stop
from trainyard.services.storages import get_storage, jobs_losing_storage, take_grant
from trainyard.spec.datasets import all_dataset_uses
from trainyard.spec.loading import validate_job
from trainyard.store.queries import datasets as dataset_queries
from trainyard.store.queries import environments as env_queries
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import storages as storage_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import JobRow, UserRow

MAX_JOBS_NAMED = 20  # in a refusal; the rest are counted
STOPPABLE = (JobState.WAITING, JobState.SUSPENDED, JobState.RUNNING)  # as ``stoppable_jobs`` finds them


def _job_list(jobs: list[JobRow]) -> str:
    named = ", ".join(f"{j.id} ({j.user.name}, {j.state})" for j in jobs[:MAX_JOBS_NAMED])
    more = len(jobs) - MAX_JOBS_NAMED
    return named + (f" and {more} more" if more > 0 else "")


def _stop_or_refuse(
    session: Session, jobs: list[JobRow], *, what: str, why: str, force: bool, command: str, by: UserRow, clock: Clock
) -> list[int]:
    """Refuse ``what``, naming the jobs it would stop, unless ``force``; then stop them."""
    if jobs and not force:
        them = "them" if len(jobs) > 1 else "it"
        raise Conflict(
            f"cannot {what}: {why}: job{'s' if len(jobs) > 1 else ''} {_job_list(jobs)}. Stop {them} first, "
            f"or pass force (`{command} --force`) to stop {them}",
            details=[{"path": "force", "message": f"{len(jobs)} waiting or running job(s) would be stopped"}],
        )
    return _stop(session, jobs, reason=what, by=by, clock=clock)


def _stop(session: Session, jobs: list[JobRow], *, reason: str, by: UserRow, clock: Clock) -> list[int]:
    for job in jobs:
        request_stop(session, by, job.id, clock=clock, reason=reason)
    return [j.id for j in jobs]


def _losing_access(session: Session, jobs: list[JobRow]) -> list[JobRow]:
    """Of these jobs, those whose owner may no longer use their VC (after a change in this
    session): what the change would orphan."""
    session.flush()
    mounting = [(j.user, validate_job(j.spec), j.id) for j in jobs if _may_mount(j.spec)]
    lost_storage = set(jobs_losing_storage(session, mounting))
    return [j for j in jobs if j.id in lost_storage or not may_use_vc(session, j.user, j.vc)]


def _may_mount(document: dict[str, Any]) -> bool:
    """Whether a stored job file can declare a storage (most do not: no need to parse them)."""
    roles = document.get("taskRoles")
    return bool(document.get("storages") or document.get("extras")
                or any(isinstance(r, dict) and r.get("storages") for r in (roles or {}).values()))


def _not_yourself(user: UserRow, by: UserRow, what: str) -> None:
    if user.id == by.id:
        raise Conflict(
            f"you cannot {what} yourself: another admin has to", details=[{"path": "name", "message": "the caller"}]
        )


# -- users --------------------------------------------------------------------------------


def disable_user(session: Session, name: str, *, stop_jobs: bool, by: UserRow, clock: Clock) -> RemovalResult:
    """Refuse the user's tokens from now on and end their browser sessions; their jobs go on
    unless ``stop_jobs``."""
    user = get_user(session, name)
    _not_yourself(user, by, "disable")
    user.disabled = True
    # Their browser sessions end for good: `enable` lets their tokens in again, not these.
    web_sessions.sign_out_everywhere(session, user.id)
    jobs = job_queries.stoppable_jobs(session, user_id=user.id)
    if not stop_jobs:
        return RemovalResult(done=f"disabled user {name}", stoppedJobs=[], keptJobs=[j.id for j in jobs])
    stopped = _stop(session, jobs, reason=f"disable user {name}", by=by, clock=clock)
    return RemovalResult(done=f"disabled user {name}", stoppedJobs=stopped, keptJobs=[])


def enable_user(session: Session, name: str) -> UserRow:
    user = get_user(session, name)
    user.disabled = False
    return user


def delete_user(
    session: Session, name: str, *, force: bool, by: UserRow, clock: Clock, files: list[Path] | None = None
) -> RemovalResult:
    """Delete a user: refused while they have waiting or running jobs, or while others' jobs
    run in an environment of theirs, unless ``force``, which stops them. The row stays
    (``deleted_at``), so that their finished jobs still name them; their tokens are revoked,
    and their memberships, grants and quotas removed.

    Their custom environments (``yard env create``), shared with a group or not, go with
    them: nobody is left to rebuild or delete them, and their folders are in the user's part
    of the environments root. The folders to remove once the transaction has committed are
    appended to ``files``. Base environments an admin declared are the site's (a path or an
    image Trainyard did not build): they stay, and become ``by``'s."""
    user = get_user(session, name)
    _not_yourself(user, by, "delete")
    jobs = job_queries.stoppable_jobs(session, user_id=user.id)
    owned = [env for env in env_queries.all_environments(session) if env.owner_id == user.id]
    custom = [env for env in owned if env.kind == EnvironmentKind.CUSTOM]
    theirs = {job.id for job in jobs}
    users_of_envs = sorted({job_id for env in custom for job_id in jobs_using(session, env.name)} - theirs)
    others = [job for job_id in users_of_envs if (job := job_queries.job_by_id(session, job_id)) is not None
              and job.state in STOPPABLE]
    why = "they have waiting or running jobs"
    if others:
        why = (f"{why}, or others' jobs run in their environments ({', '.join(sorted(e.name for e in custom))})"
               if jobs else f"others' jobs run in their environments ({', '.join(sorted(e.name for e in custom))})")
    stopped = _stop_or_refuse(
        session,
        [*jobs, *others],
        what=f"delete user {name}",
        why=why,
        force=force,
        command=f"yard user delete {name}",
        by=by,
        clock=clock,
    )
    for env in owned:
        if env.kind == EnvironmentKind.CUSTOM:
            if env.path and files is not None:
                files.append(Path(env.path))
            session.delete(env)
        else:
            env.owner = by
    user_queries.revoke_tokens_of(session, user.id)
    web_sessions.sign_out_everywhere(session, user.id)
    for row in [
        *vc_queries.memberships_of(session, user.id),
        *vc_queries.grants_to_user(session, user.id),
        *storage_queries.storage_grants_to_user(session, user.id),
        *user_queries.quotas_of(session, user.id),
    ]:
        session.delete(row)
    user.disabled = True
    user.deleted_at = clock.now()
    return RemovalResult(done=f"deleted user {name}", stoppedJobs=stopped, keptJobs=[])


# -- virtual clusters, grants, members ----------------------------------------------------


def delete_vc(session: Session, name: str, *, force: bool, by: UserRow, clock: Clock) -> RemovalResult:
    """Delete a VC with its quota and grants: refused while jobs wait or run in it, unless
    ``force``, which stops them. Finished jobs keep its name."""
    if name == DEFAULT_VC:
        raise Conflict(
            "'default' is built in and cannot be deleted: it holds whatever no other VC guarantees",
            details=[{"path": "name", "message": "built in"}],
        )
    vc = get_vc(session, name)
    jobs = job_queries.stoppable_jobs(session, vc=name)
    stopped = _stop_or_refuse(
        session,
        jobs,
        what=f"delete virtual cluster {name}",
        why="jobs use it",
        force=force,
        command=f"yard vc delete {name}",
        by=by,
        clock=clock,
    )
    session.delete(vc)
    return RemovalResult(done=f"deleted virtual cluster {name}", stoppedJobs=stopped, keptJobs=[])


def revoke_grant(session: Session, name: str, grantee: str, *, force: bool, by: UserRow, clock: Clock) -> RemovalResult:
    """Take back a user's or ``@group``'s grant on a VC: refused while it is what lets a
    waiting or running job's owner use the VC, unless ``force``, which stops those jobs."""
    if name == DEFAULT_VC:
        raise NotFound(
            "'default' is open to everyone: it has no grants to take back",
            details=[{"path": "name", "message": "built in"}],
        )
    vc = get_vc(session, name)
    if grantee.startswith("@"):
        group_id = get_group(session, grantee[1:]).id
        grant = next((g for g in vc.grants if g.group_id == group_id), None)
    else:
        user_id = get_user(session, grantee).id
        grant = next((g for g in vc.grants if g.user_id == user_id), None)
    if grant is None:
        raise NotFound(f"{grantee} has no grant on virtual cluster {name}; see `yard vc list`")
    vc.grants.remove(grant)
    jobs = _losing_access(session, job_queries.stoppable_jobs(session, vc=name))
    stopped = _stop_or_refuse(
        session,
        jobs,
        what=f"remove the grant of {grantee} on {name}",
        why="it is what lets these jobs' owners use the VC",
        force=force,
        command=f"yard vc revoke {name} {grantee}",
        by=by,
        clock=clock,
    )
    return RemovalResult(done=f"{grantee} may no longer submit to {name}", stoppedJobs=stopped, keptJobs=[])


def remove_member(
    session: Session, group_name: str, user_name: str, *, force: bool, by: UserRow, clock: Clock
) -> RemovalResult:
    """Take a user out of a group: refused while the group is what lets one of their
    waiting or running jobs use its VC, unless ``force``, which stops those jobs."""
    group, user = get_group(session, group_name), get_user(session, user_name)
    membership = vc_queries.membership(session, group.id, user.id)
    if membership is None:
        raise NotFound(f"{user_name} is not in group {group_name}; see `yard group list`")
    session.delete(membership)
    jobs = _losing_access(session, job_queries.stoppable_jobs(session, user_id=user.id))
    stopped = _stop_or_refuse(
        session,
        jobs,
        what=f"remove {user_name} from group {group_name}",
        why="the group is what lets these jobs use their VC or a storage",
        force=force,
        command=f"yard group remove {group_name} {user_name}",
        by=by,
        clock=clock,
    )
    return RemovalResult(done=f"{user_name} is no longer in group {group_name}", stoppedJobs=stopped, keptJobs=[])


# -- storages -------------------------------------------------------------------------------


def delete_storage(session: Session, name: str, *, force: bool, by: UserRow, clock: Clock) -> RemovalResult:
    """Delete a storage and its grants (never its files): refused while a waiting or running
    job mounts it, unless ``force``, which stops those jobs."""
    row = get_storage(session, name)
    session.delete(row)
    jobs = _losing_access(session, job_queries.stoppable_jobs(session))
    stopped = _stop_or_refuse(
        session, jobs, what=f"delete storage {name}", why="jobs mount it", force=force,
        command=f"yard storage delete {name}", by=by, clock=clock,
    )
    return RemovalResult(done=f"deleted storage {name} (its files are untouched)", stoppedJobs=stopped, keptJobs=[])


def revoke_storage_grant(
    session: Session, name: str, grantee: str, *, force: bool, by: UserRow, clock: Clock
) -> RemovalResult:
    """Take back a user's or ``@group``'s grant on a storage: refused while it is what lets a
    waiting or running job mount it as it asks, unless ``force``, which stops those jobs."""
    take_grant(session, name, grantee)
    who = f"--group {grantee[1:]}" if grantee.startswith("@") else f"--user {grantee}"
    jobs = _losing_access(session, job_queries.stoppable_jobs(session))
    stopped = _stop_or_refuse(
        session, jobs, what=f"remove the grant of {grantee} on storage {name}",
        why="it is what lets these jobs mount it", force=force,
        command=f"yard storage revoke {name} {who}",
        by=by, clock=clock,
    )
    return RemovalResult(done=f"{grantee} may no longer mount storage {name}", stoppedJobs=stopped, keptJobs=[])


# -- datasets -------------------------------------------------------------------------------


def _losing_datasets(session: Session, jobs: list[JobRow]) -> list[JobRow]:
    """Of these jobs, those whose owner may no longer read a dataset the job reads (after a
    change in this session)."""
    session.flush()
    lost = []
    for job in jobs:
        document = job.spec
        roles = document.get("taskRoles")
        if not (document.get("datasets") or any(isinstance(r, dict) and r.get("datasets")
                                                 for r in (roles or {}).values())):
            continue  # most jobs read none: no need to parse them
        uses = list(all_dataset_uses(validate_job(document)))
        rows = dataset_queries.datasets_named(session, sorted({use.name for use in uses}))
        if any((row := rows.get(use.name)) is None or not may_read(session, job.user, row) for use in uses):
            lost.append(job)
    return lost


def _dataset_change(session: Session, jobs: list[JobRow], *, what: str, why: str, force: bool, command: str,
                    by: UserRow, clock: Clock) -> list[int]:
    """As a storage's (``_stop_or_refuse``): refused while waiting or running jobs need the
    dataset, unless ``force``, which stops them: its owner's own, or any job for an admin."""
    others = [j for j in jobs if j.user_id != by.id]
    if force and others and not by.is_admin:
        raise Conflict(f"cannot {what}: jobs of other users read it: {_job_list(others)}; only an admin may stop "
                       "them (or ask their owners to)", details=[{"path": "force", "message": "not your jobs"}])
    return _stop_or_refuse(session, jobs, what=what, why=why, force=force, command=command, by=by, clock=clock)


def remove_dataset(session: Session, name: str, *, force: bool, by: UserRow, clock: Clock) -> RemovalResult:
    """Forget a dataset (never its source's files): refused while a waiting or running job
    reads it, unless ``force``, which stops those jobs."""
    dataset_service.remove_dataset(session, by, name)
    jobs = _losing_datasets(session, job_queries.stoppable_jobs(session))
    stopped = _dataset_change(session, jobs, what=f"remove dataset {name}", why="jobs read it", force=force,
                              command=f"yard dataset remove {name}", by=by, clock=clock)
    return RemovalResult(done=f"removed dataset {name}", stoppedJobs=stopped, keptJobs=[])


def revoke_dataset_grant(session: Session, name: str, grantee: str, *, force: bool, by: UserRow,
                         clock: Clock) -> RemovalResult:
    """Take back a grant on a dataset: refused while it is what lets a waiting or running
    job read it, unless ``force``, which stops those jobs."""
    dataset_service.revoke_dataset_grant(session, by, name, grantee)
    who = f"--group {grantee[1:]}" if grantee.startswith("@") else f"--user {grantee}"
    jobs = _losing_datasets(session, job_queries.stoppable_jobs(session))
    stopped = _dataset_change(session, jobs, what=f"remove the grant of {grantee} on dataset {name}",
                              why="it is what lets these jobs read it", force=force,
                              command=f"yard dataset revoke {name} {who}", by=by, clock=clock)
    return RemovalResult(done=f"{grantee} may no longer read dataset {name}", stoppedJobs=stopped, keptJobs=[])
