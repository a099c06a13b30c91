"""``yard doctor``: preflight checks of this install, run on the server's machine.

Like ``yard up`` it reads the server's settings (``TRAINYARD_*``, ``config.yaml``) and its
store (read only: the users whose task accounts to look for, the cluster id that names the
Slurm state directory), so it checks the very setup ``yard up`` runs, whether the server
is up or not, and needs no token: it is the admin's, on the server, as root (as ``yard
up``). The checks are the backends' (``backends/local/doctor.py``,
``backends/slurm/doctor.py``); exit status 1 when any FAILs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from pydantic import ValidationError

from trainyard.backends.doctor import Check, exit_status, ok, render, skip
from trainyard.backends.local import doctor as local_doctor
from trainyard.backends.slurm.doctor import check_slurm
from trainyard.core.settings import Settings
from trainyard.store.db import Database
from trainyard.store.meta import known_cluster_id
from trainyard.store.queries.users import all_users


def run_doctor(args: argparse.Namespace) -> int:
    overrides = {"backend": args.backend, "slurm_partition": args.slurm_partition}
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        print(f"yard doctor: invalid setting: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    checks = doctor_checks(settings)
    if args.json:
        print(json.dumps([{**asdict(c), "status": c.status.name} for c in checks], indent=2))
    else:
        print(render(checks))
    return exit_status(checks)


def doctor_checks(settings: Settings) -> list[Check]:
    """Every check for ``settings``' backend, in the order they are printed."""
    as_root = local_doctor.running_as_root()
    users, cluster, store_check = read_store(settings)
    cluster_wide = settings.backend == "slurm"
    checks = [store_check, local_doctor.check_server_account(settings, as_root=as_root)]
    account_check, accounts = local_doctor.check_accounts(settings, users, as_root=as_root, cluster=cluster_wide)
    checks.append(account_check)
    if not cluster_wide:
        return checks + local_doctor.check_local_host(settings, as_root=as_root)
    # The state directory ``yard up`` uses; before its store has a cluster id, the folder it will be made in.
    state_dir = settings.slurm_state_dir or settings.home / "slurm" / (cluster or "")
    return checks + check_slurm(Path(state_dir).absolute(), partition=settings.slurm_partition, accounts=accounts)


def read_store(settings: Settings) -> tuple[list[str] | None, str | None, Check]:
    """The store's user names and cluster id, read only; (None, None, why) when it cannot be read."""
    if settings.database_url is None and not (settings.home / "trainyard.db").exists():
        return [], None, skip("store", f"no store yet in {settings.home} (yard up makes it): no users to check")
    db = Database(settings.db_url)
    try:
        with db.session() as session:
            users = [user.name for user in all_users(session)]
            cluster = known_cluster_id(session)
    except Exception as exc:  # noqa: BLE001 - any database error: say it, check the rest
        return None, None, skip("store", f"cannot read {settings.db_url.split('@')[-1]}: {str(exc).splitlines()[0]}")
    finally:
        db.dispose()
    plural = "" if len(users) == 1 else "s"
    return users, cluster, ok("store", f"{len(users)} user{plural}; cluster id {cluster or '(none yet)'}")
