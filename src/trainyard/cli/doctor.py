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

from trainyard.backends.doctor import Check, exit_status, ok, render, skip, warn
from trainyard.backends.local import doctor as local_doctor
from trainyard.backends.slurm.datasets import cache_base, shared_cache
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
    state_dir = Path(settings.slurm_state_dir or settings.home / "slurm" / (cluster or "")).absolute()
    return [*checks, *check_slurm(state_dir, partition=settings.slurm_partition, accounts=accounts),
            check_dataset_caches(state_dir, settings.dataset_cache_dir, as_root=as_root)]


def check_dataset_caches(state_dir: Path, configured: Path | None, *, as_root: bool) -> Check:
    """Where the Slurm nodes' dataset caches are: a WARN where they lie on shared storage,
    where a cached dataset is read at that storage's speed, not the node's disk's."""
    base = cache_base(state_dir, configured, as_root=as_root)
    why = shared_cache(state_dir, base)
    if why is None:
        return ok("dataset caches", f"each node's at {base}/<node>, on its own disk as far as this machine can tell")
    return warn("dataset caches", f"each node's dataset cache is {base}/<node>: {why}; its datasets are read at "
                "that storage's speed, not the node's disk's",
                "set dataset_cache_dir to a folder on each node's own disk, the same path on every node, whose "
                "parents only root (or the server's account) may change; as root the default, "
                "/var/cache/trainyard/datasets, is one")


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
