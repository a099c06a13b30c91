"""Storages on a real store (SQLite, and PostgreSQL when configured): who may mount what
(grants to users and groups, read-only grants and storages, admins), the submit-time
refusals at their field paths, OpenPAI's declarations, the mounts a task gets at launch,
home and group storages, and taking storages and grants away while jobs use them."""

from __future__ import annotations

import pytest

from trainyard.core.clock import FakeClock
from trainyard.scheduler.snapshot import NodeState
from trainyard.services import admin, auth, removal
from trainyard.services import jobs as job_service
from trainyard.services import storages as storage_service
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.services.storages import PlannedMount, StorageUnavailable
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database
from trainyard.store.rows import JobRow, UserRow

NODES = [NodeState("n1", cpu_milli=8000, memory_mb=16384)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def world(db: Database, clock: FakeClock) -> dict[str, UserRow]:
    """root (admin), alice (in group cv) and bob; storage data (granted to @cv read-write and
    to bob read-only), storage refs (read-only for everyone, granted to @cv), storage
    private (granted to nobody)."""
    with db.session() as s:
        users = {n: auth.create_user(s, n, is_admin=n == "root", clock=clock) for n in ("root", "alice", "bob")}
        admin.create_group(s, "cv", clock=clock)
        admin.add_member(s, "cv", "alice")
        storage_service.create_storage(s, "data", "/srv/data/", read_only=False, kind="nfs", description="team data",
                                       clock=clock)
        storage_service.create_storage(s, "refs", "/srv/refs", read_only=True, kind="lustre", description="",
                                       clock=clock)
        storage_service.create_storage(s, "private", "/srv/private", read_only=False, kind="", description="",
                                       clock=clock)
        storage_service.grant_storage(s, "data", "@cv", read_only=False)
        storage_service.grant_storage(s, "data", "bob", read_only=True)
        storage_service.grant_storage(s, "refs", "@cv", read_only=False)
    return users


def job(storages: str = "", role_storages: str = "", extras: str = "") -> str:
    text = "name: j\n"
    if storages:
        text += f"storages: {storages}\n"
    if extras:
        text += f"extras: {extras}\n"
    text += "taskRoles:\n  w:\n    commands: [run]\n"
    if role_storages:
        text += f"    storages: {role_storages}\n"
    return text


def submit(db: Database, clock: FakeClock, user: UserRow, text: str) -> int:
    with db.session() as s:
        return job_service.submit_job(s, user, parse_job(text), clock=clock, nodes=NODES).id


def refusal(db: Database, clock: FakeClock, user: UserRow, text: str) -> Invalid | Forbidden:
    with pytest.raises((Invalid, Forbidden)) as caught:
        submit(db, clock, user, text)
    assert isinstance(caught.value, Invalid | Forbidden)
    return caught.value


def mounts(db: Database, user: UserRow, text: str, role: str = "w") -> list[PlannedMount]:
    with db.session() as s:
        return storage_service.task_mounts(s, s.get(UserRow, user.id), parse_job(text), role)


def test_a_storage_granted_to_a_group_is_mounted_by_its_members_read_write_at_the_asked_path(db, clock, world) -> None:
    text = job(role_storages="[{name: data, mountPath: /data, subPath: alice/x}]")
    submit(db, clock, world["alice"], text)
    assert mounts(db, world["alice"], text) == [
        PlannedMount("data", "/srv/data/alice/x", "/data", False, root="/srv/data")]
    # Without a mountPath it is at its own path.
    assert mounts(db, world["alice"], job("[{name: data}]")) == [
        PlannedMount("data", "/srv/data", "/srv/data", False, root="/srv/data")]


def test_a_storage_not_granted_is_refused_at_submit_with_403_naming_it_at_its_field_path(db, clock, world) -> None:
    error = refusal(db, clock, world["bob"], job(role_storages="[{name: refs}]"))
    assert error.status == 403
    assert str(error) == ("taskRoles.w.storages[0].name: you have no grant for storage 'refs'; ask an admin "
                          "(`yard storage grant refs --user bob`)")
    assert error.details == [{"path": "taskRoles.w.storages[0].name", "message": str(error).split(": ", 1)[1]}]
    assert refusal(db, clock, world["alice"], job("[{name: private}]")).status == 403


def test_an_unknown_storage_is_refused_with_422_at_its_path_before_any_403(db, clock, world) -> None:
    error = refusal(db, clock, world["bob"], job("[{name: refs}, {name: nosuch}]"))
    assert error.status == 422
    assert str(error) == "storages[1].name: no storage named 'nosuch'; see `yard storage list`"
    assert [d["path"] for d in error.details] == ["storages[0].name", "storages[1].name"]


def test_read_write_use_of_a_read_only_grant_or_storage_is_refused_and_as_granted_is_read_only(
    db, clock, world
) -> None:
    error = refusal(db, clock, world["bob"], job("[{name: data, readOnly: false}]"))
    assert error.status == 403 and str(error).startswith(
        "storages[0].readOnly: storage 'data' is granted to you read-only: set readOnly: true")
    error = refusal(db, clock, world["alice"], job("[{name: refs, readOnly: false}]"))
    assert "storage 'refs' is a read-only storage" in str(error)
    # Left out, readOnly is as granted.
    submit(db, clock, world["bob"], job("[{name: data}]"))
    assert mounts(db, world["bob"], job("[{name: data}]"))[0].read_only is True
    assert mounts(db, world["alice"], job("[{name: refs}]"))[0].read_only is True
    assert mounts(db, world["alice"], job("[{name: data, readOnly: true}]"))[0].read_only is True


def test_the_best_grant_wins_and_admins_may_mount_every_storage(db, clock, world) -> None:
    with db.session() as s:
        admin.create_group(s, "readers", clock=clock)
        admin.add_member(s, "readers", "bob")
        storage_service.grant_storage(s, "data", "@readers", read_only=False)
    assert mounts(db, world["bob"], job("[{name: data}]"))[0].read_only is False
    submit(db, clock, world["root"], job("[{name: private}, {name: refs}]"))
    assert [m.read_only for m in mounts(db, world["root"], job("[{name: private}, {name: refs}]"))] == [False, True]


def test_openpai_declarations_are_accepted_as_they_are_and_mount_at_mnt_by_default(db, clock, world) -> None:
    plugin = ('{com.microsoft.pai.runtimeplugin: [{plugin: ssh, parameters: {}}, {plugin: teamwise_storage, '
              'parameters: {storageConfigNames: [data]}}], storages: [{name: refs, mountPath: /mnt/refs}]}')
    text = job(extras=plugin)
    submit(db, clock, world["alice"], text)
    assert mounts(db, world["alice"], text) == [PlannedMount("data", "/srv/data", "/mnt/data", False, root="/srv/data"),
                                                 PlannedMount("refs", "/srv/refs", "/mnt/refs", True, root="/srv/refs")]
    error = refusal(db, clock, world["bob"], text)
    assert str(error).startswith("extras.storages[0].name: you have no grant for storage 'refs'")
    assert error.details[0]["path"] == "extras.storages[0].name"
    # A role's own declaration of the same storage replaces the job's.
    both = job("[{name: data, mountPath: /mnt/a}]", "[{name: data, mountPath: /mnt/b}]", extras=plugin)
    assert [m.target for m in mounts(db, world["alice"], both)] == ["/mnt/b", "/mnt/refs"]


def test_storage_views_an_admin_sees_all_grants_a_user_only_what_they_may_mount(db, clock, world) -> None:
    with db.session() as s:
        views = {v.name: v for v in storage_service.storage_views(s, s.get(UserRow, world["root"].id))}
        assert sorted(views) == ["data", "private", "refs"]
        assert [(g.grantee, g.readOnly) for g in views["data"].grants] == [("@cv", False), ("bob", True)]
        assert views["data"].path == "/srv/data" and views["data"].kind == "nfs"
        bob = storage_service.storage_views(s, s.get(UserRow, world["bob"].id))
        assert [(v.name, v.access, [g.grantee for g in v.grants]) for v in bob] == [("data", "read-only", ["bob"])]
        with pytest.raises(NotFound):
            storage_service.storage_views(s, s.get(UserRow, world["bob"].id), "private")


def test_names_paths_and_duplicates_are_checked(db, clock, world) -> None:
    with db.session() as s:
        with pytest.raises(Conflict):
            storage_service.create_storage(s, "data", "/x", read_only=False, kind="", description="", clock=clock)
        with pytest.raises(Conflict, match="'home' is each user's own storage"):
            storage_service.create_storage(s, "home", "/x", read_only=False, kind="", description="", clock=clock)
        with pytest.raises(Invalid, match="must not contain '..'"):
            storage_service.create_storage(s, "up", "/srv/../etc", read_only=False, kind="", description="",
                                           clock=clock)
        with pytest.raises(Invalid, match="not valid"):
            storage_service.create_storage(s, "Bad Name", "/x", read_only=False, kind="", description="",
                                           clock=clock)
        with pytest.raises(NotFound):
            storage_service.grant_storage(s, "data", "@nosuch", read_only=False)


def test_revoking_a_grant_a_waiting_job_needs_is_refused_unless_forced(db, clock, world) -> None:
    job_id = submit(db, clock, world["alice"], job("[{name: data}]"))
    unrelated = submit(db, clock, world["bob"], job())
    with pytest.raises(Conflict, match=f"jobs? {job_id} \\(alice, WAITING\\)"), db.session() as s:
        removal.revoke_storage_grant(s, "data", "@cv", force=False, by=s.get(UserRow, world["root"].id), clock=clock)
    with db.session() as s:
        result = removal.revoke_storage_grant(s, "data", "@cv", force=True, by=s.get(UserRow, world["root"].id),
                                              clock=clock)
    assert result.stoppedJobs == [job_id]
    with db.session() as s:
        assert s.get(JobRow, job_id).state == "STOPPED" and s.get(JobRow, unrelated).state == "WAITING"
    # Bob's own grant was never what alice's job needed; taking it back needs no force.
    with db.session() as s:
        assert removal.revoke_storage_grant(s, "data", "bob", force=False, by=s.get(UserRow, world["root"].id),
                                            clock=clock).stoppedJobs == []


def test_deleting_a_storage_in_use_is_refused_unless_forced_and_so_is_removing_the_member(db, clock, world) -> None:
    job_id = submit(db, clock, world["alice"], job(role_storages="[{name: data}]"))
    with pytest.raises(Conflict, match="cannot remove alice from group cv"), db.session() as s:
        removal.remove_member(s, "cv", "alice", force=False, by=s.get(UserRow, world["root"].id), clock=clock)
    with pytest.raises(Conflict, match="cannot delete storage data: jobs mount it"), db.session() as s:
        removal.delete_storage(s, "data", force=False, by=s.get(UserRow, world["root"].id), clock=clock)
    with db.session() as s:
        assert removal.delete_storage(s, "private", force=False, by=s.get(UserRow, world["root"].id),
                                      clock=clock).stoppedJobs == []
        result = removal.delete_storage(s, "data", force=True, by=s.get(UserRow, world["root"].id), clock=clock)
    assert result.stoppedJobs == [job_id] and result.done == "deleted storage data (its files are untouched)"
    with db.session() as s:
        assert [v.name for v in storage_service.storage_views(s, s.get(UserRow, world["root"].id))] == ["refs"]


def test_home_and_group_storages_follow_the_settings_and_membership(db, clock, world) -> None:
    home_job = job("[{name: home, mountPath: /workspace/me}, {name: '@cv'}]")
    assert refusal(db, clock, world["alice"], home_job).status == 422  # not enabled
    with db.session() as s:
        storage_service.set_builtin_roots(s, home="/homes", group="/groups")
    submit(db, clock, world["alice"], home_job)
    assert mounts(db, world["alice"], home_job) == [
        PlannedMount("home", "/homes/alice", "/workspace/me", False, 0o700, "/homes/alice"),
        PlannedMount("@cv", "/groups/cv", "/groups/cv", False, 0o770, "/groups/cv"),
    ]
    error = refusal(db, clock, world["bob"], home_job)
    assert error.status == 403 and "storages[1].name: you have no grant for storage '@cv'" in str(error)
    with db.session() as s:
        names = [v.name for v in storage_service.storage_views(s, s.get(UserRow, world["alice"].id))]
    assert names == ["data", "refs", "home", "@cv"]
    # Turned off after submit: the launch cannot mount it, and says why.
    with db.session() as s:
        storage_service.set_builtin_roots(s, home=None, group="/groups")
    with pytest.raises(StorageUnavailable, match="storage 'home' \\(storages\\[0\\]\\) cannot be mounted any more: "
                                                 "no storage named 'home'; home storages are not enabled"):
        mounts(db, world["alice"], home_job)


def test_a_deleted_user_s_storage_grants_go_with_them(db, clock, world) -> None:
    with db.session() as s:
        removal.delete_user(s, "bob", force=False, by=s.get(UserRow, world["root"].id), clock=clock)
    with db.session() as s:
        data = storage_service.storage_views(s, s.get(UserRow, world["root"].id), "data")[0]
    assert [g.grantee for g in data.grants] == ["@cv"]


# -- issue 27: where a job may mount a storage ------------------------------------------------


@pytest.mark.parametrize(("storages", "path", "shown"), [
    ("[{name: data, subPath: fsp, mountPath: /usr/bin/setpriv}]", "storages[0].mountPath", "/usr/bin/setpriv"),
    ("[{name: data, mountPath: /etc/x/y}]", "storages[0].mountPath", "in a system path (/etc)"),
    ("[{name: data, mountPath: /usr/local/bin/x}]", "storages[0].mountPath", "/usr/local/bin/x"),
    ("[{name: refs}, {name: data, mountPath: /home/alice}]", "storages[1].mountPath", "/home/alice"),
    ("[{name: data, mountPath: /mnt/a}, {name: refs, mountPath: /mnt/a/b}]", "storages[1].mountPath",
     "inside the mount point of 'data'"),
    ("[{name: data, mountPath: /mnt/a}, {name: refs, mountPath: /mnt/a}]", "storages[1].mountPath",
     "at the mount point of 'data'"),
])
def test_a_mount_path_outside_the_mount_roots_or_inside_another_is_refused_at_its_field(
        db, clock, world, storages, path, shown) -> None:
    error = refusal(db, clock, world["alice"], job(storages))
    assert isinstance(error, Invalid) and error.details[0]["path"] == path, error.details
    assert str(error).startswith(f"{path}: ") and shown in str(error)


def test_a_sub_path_with_an_image_is_refused_at_its_field(db, clock, world) -> None:
    """An engine opens a bind's source by its path, after the check: a link another job swaps
    in meanwhile would land any host folder in the container (issue 27's red team)."""
    text = job("[{name: data, subPath: alice/x, mountPath: /mnt/x}]")
    text = text.replace("name: j\n", "name: j\nimage: 'python:3.12'\n")
    error = refusal(db, clock, world["alice"], text)
    assert isinstance(error, Invalid) and error.details[0]["path"] == "storages[0].subPath", error.details
    assert "a job with an image cannot mount a storage's subPath" in str(error)
    submit(db, clock, world["alice"], job("[{name: data, subPath: alice/x, mountPath: /mnt/x}]"))  # no image: fine


def test_mount_paths_the_roots_allow_and_the_storage_s_own_path_are_accepted(db, clock, world) -> None:
    # OpenPAI's /mnt/<name>, a root itself, the task's private /tmp; a storage's own path
    # (the admin's) whatever it is, with or without subPath.
    plugin = "{com.microsoft.pai.runtimeplugin: [{plugin: teamwise_storage, parameters: {storageConfigNames: [data]}}]}"
    for text in (job(extras=plugin), job("[{name: data, mountPath: /data}]"),
                 job("[{name: data, mountPath: /tmp/in}]"), job("[{name: data, mountPath: /srv/data}, {name: refs}]"),
                 job("[{name: data, subPath: alice, mountPath: /srv/data/alice}]")):
        submit(db, clock, world["alice"], text)


def test_the_mount_roots_are_the_admin_s_setting_and_checked_again_at_launch(db, clock, world) -> None:
    text = job("[{name: data, mountPath: /scratch/data}]")
    assert refusal(db, clock, world["alice"], text).details[0]["path"] == "storages[0].mountPath"
    with db.session() as s:
        storage_service.set_mount_roots(s, ["/scratch"])
    submit(db, clock, world["alice"], text)
    assert [m.target for m in mounts(db, world["alice"], text)] == ["/scratch/data"]
    # A job stored under the old setting (or before it existed) fails its launch, saying why.
    with db.session() as s:
        storage_service.set_mount_roots(s, ["/mnt"])
    with pytest.raises(StorageUnavailable, match=r"storages\[0\].mountPath: a storage may be mounted only under /mnt"):
        mounts(db, world["alice"], text)
    with db.session() as s, pytest.raises(ValueError, match="system path /usr"):
        storage_service.set_mount_roots(s, ["/usr/local"])


def test_a_sandbox_hides_every_storage_s_path(db, world) -> None:
    with db.session() as s:
        assert storage_service.storage_paths(s) == ("/srv/data", "/srv/private", "/srv/refs")
        storage_service.set_builtin_roots(s, home="/homes", group="/groups")
        assert storage_service.storage_paths(s) == ("/groups", "/homes", "/srv/data", "/srv/private", "/srv/refs")
