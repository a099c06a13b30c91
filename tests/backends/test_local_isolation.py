"""Task accounts per Trainyard user, and the start-up decision of what keeps tasks apart."""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid
from pathlib import Path

import pytest

from trainyard.backends.local import isolation
from trainyard.backends.local.isolation import plan_isolation
from trainyard.backends.sandbox import Sandbox
from trainyard.backends.taskaccounts import ACCOUNT_MARKER, TaskAccounts, derived_account_name

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="task accounts need root")


@pytest.mark.parametrize(
    ("user", "account"),
    [
        ("alice", "ty-alice"),
        ("bob_2-x", "ty-bob_2-x"),
        ("a" * 29, "ty-" + "a" * 29),  # 32 characters: still derived
    ],
)
def test_a_plain_name_gives_ty_name(user: str, account: str) -> None:
    assert derived_account_name(user) == account


@pytest.mark.parametrize("user", ["alice.smith", "a" * 30, "Alice", "x;rm -rf /", "../etc"])
def test_other_names_give_a_hash_that_no_plain_name_can_give(user: str) -> None:
    account = derived_account_name(user)
    assert account.startswith("ty_") and len(account) == 19 and account[3:].isalnum()
    assert derived_account_name(user) == account and derived_account_name(user + "x") != account


def test_accounts_need_root(monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="need the server to run as root"):
        TaskAccounts()


@needs_root
def test_an_account_is_created_on_first_use_then_reused() -> None:
    user = f"t{uuid.uuid4().hex[:10]}"
    accounts = TaskAccounts()
    try:
        first = accounts.account_for(user)
        entry = pwd.getpwnam(f"ty-{user}")
        assert (first.name, first.uid, entry.pw_gecos) == (f"ty-{user}", entry.pw_uid, ACCOUNT_MARKER)
        assert entry.pw_uid != 0 and entry.pw_shell in ("/usr/sbin/nologin", "/bin/false")
        assert TaskAccounts().account_for(user) == first  # a new server finds it
    finally:
        subprocess.run(["userdel", f"ty-{user}"], check=False, capture_output=True)


@needs_root
def test_an_account_not_made_by_trainyard_is_never_taken_over() -> None:
    user = f"t{uuid.uuid4().hex[:10]}"
    subprocess.run(["useradd", "--system", "--no-create-home", f"ty-{user}"], check=True, capture_output=True)
    try:
        with pytest.raises(ValueError, match="was not created by Trainyard"):
            TaskAccounts().account_for(user)
    finally:
        subprocess.run(["userdel", f"ty-{user}"], check=False, capture_output=True)


@needs_root
def test_a_configured_map_is_checked_at_start_and_used() -> None:
    assert TaskAccounts({"alice": "nobody"}).account_for("alice").name == "nobody"
    with pytest.raises(ValueError, match="is root"):
        TaskAccounts({"alice": "root"})
    with pytest.raises(ValueError, match="no OS account"):
        TaskAccounts({"alice": "no-such-account-xyz"})
    # A name no other test runs jobs as: e2e tests create ty-<name> accounts that outlive the run.
    with pytest.raises(ValueError, match="no OS account for Trainyard user 'nemo-unmapped'"):
        TaskAccounts({"alice": "nobody"}, create=False).account_for("nemo-unmapped")


@needs_root
def test_an_account_removed_after_start_is_refused_if_mapped_and_made_again_if_ours() -> None:
    # Accounts are looked up once; one removed since must not leave jobs running as a bare uid.
    site, user = f"t{uuid.uuid4().hex[:10]}", f"u{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", site], check=True, capture_output=True)
    accounts = TaskAccounts({"alice": site})
    try:
        assert accounts.account_for("alice").name == site
        made = accounts.account_for(user)
        subprocess.run(["userdel", site], check=True, capture_output=True)
        subprocess.run(["userdel", made.name], check=True, capture_output=True)
        with pytest.raises(ValueError, match=f"the OS account '{site}' that task_account_map gives .* no longer"):
            accounts.account_for("alice")
        assert accounts.account_for(user).name == made.name  # ours: made again
    finally:
        for name in (site, f"ty-{user}"):
            subprocess.run(["userdel", name], check=False, capture_output=True)


FAKE_SANDBOX = Sandbox("/usr/bin/bwrap", "/usr/bin/env", "/bin/sh", user_namespace=True)


def _plan(monkeypatch, *, as_root: bool, sandbox: Sandbox | None, **settings):
    why = "" if sandbox is not None else "bubblewrap (bwrap) is not installed"
    monkeypatch.setattr(isolation, "find_sandbox", lambda mode, hidden, as_root, allow_userns=False: (sandbox, why))
    options = dict(accounts_mode="auto", task_user=None, sandbox_mode="auto", home=Path("/srv/ty"),
                   cluster="c1", as_root=as_root, server_user="root" if as_root else "ty-admin")
    return plan_isolation(**{**options, **settings})


def test_not_root_with_a_sandbox_runs_tasks_as_the_server_and_says_what_is_left(monkeypatch) -> None:
    plan = _plan(monkeypatch, as_root=False, sandbox=FAKE_SANDBOX)
    assert (plan.accounts, plan.run_as, plan.sandbox, plan.work_dir_root) == (None, None, FAKE_SANDBOX, None)
    assert plan.weak and "not root, so every task runs as 'ty-admin'" in plan.summary
    assert "its home directory" in plan.summary


def test_not_root_without_a_sandbox_warns_that_nothing_is_isolated(monkeypatch) -> None:
    plan = _plan(monkeypatch, as_root=False, sandbox=None)
    assert plan.weak and plan.summary.startswith("tasks are NOT isolated")
    assert "/srv/ty (the admin token, the database)" in plan.summary and "bwrap) is not installed" in plan.summary


@needs_root
def test_root_by_default_uses_per_user_accounts_and_a_work_root_per_cluster(monkeypatch) -> None:
    plan = _plan(monkeypatch, as_root=True, sandbox=FAKE_SANDBOX)
    assert plan.accounts is not None and plan.run_as is None
    assert plan.work_dir_root == Path("/var/lib/trainyard/work/c1") and not plan.weak
    plan = _plan(monkeypatch, as_root=True, sandbox=None)
    assert plan.weak and "command lines of all processes" in plan.summary


def test_root_with_task_user_shares_one_account(monkeypatch) -> None:
    plan = _plan(monkeypatch, as_root=True, sandbox=None, task_user="nobody", work_dir=Path("/w"))
    # The work root given holds one folder per cluster id, as the default does.
    assert (plan.accounts, plan.run_as, plan.work_dir_root) == (None, "nobody", Path("/w/c1"))
    assert plan.weak and "the one OS account 'nobody'" in plan.summary


def test_root_as_the_server_account_gets_no_sandbox_and_a_loud_warning(monkeypatch) -> None:
    plan = _plan(monkeypatch, as_root=True, sandbox=FAKE_SANDBOX, accounts_mode="server")
    assert plan.sandbox is None and plan.summary.startswith("tasks are NOT isolated: every task runs as root")


@pytest.mark.parametrize(
    ("settings", "as_root", "error"),
    [
        ({"accounts_mode": "per-user"}, False, "need `yard up` to run as root"),
        ({"task_user": "nobody"}, False, "need `yard up` to run as root"),
        ({"task_user": "nobody", "accounts_mode": "per-user"}, True, "cannot be combined"),
        ({"account_map": {"a": "b"}, "accounts_mode": "server"}, True, "needs task_accounts=per-user"),
        ({"accounts_mode": "server", "sandbox_mode": "bwrap"}, True, "cannot hold tasks that run as root"),
        ({"accounts_mode": "everyone"}, True, "must be one of"),
    ],
)
def test_settings_that_cannot_work_are_refused(monkeypatch, settings, as_root, error) -> None:
    with pytest.raises(ValueError, match=error):
        _plan(monkeypatch, as_root=as_root, sandbox=FAKE_SANDBOX, **settings)
