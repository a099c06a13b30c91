"""The bubblewrap sandbox: its command line, and what a task inside it sees, as root and not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled

from trainyard.backends import sandboxjoin
from trainyard.backends.sandbox import (
    LAUNCH_ENV,
    MOUNT_FD_BASE,
    Identity,
    Sandbox,
    StorageMount,
    find_sandbox,
    mount_fds,
    sandbox_argv,
)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to switch accounts)")
NOBODY = 65534


def _fake_sandbox(*, user_namespace: bool, hidden: tuple[Path, ...] = ()) -> Sandbox:
    return Sandbox("/usr/bin/bwrap", "/usr/bin/env", "/bin/sh", user_namespace=user_namespace, hidden=hidden)


def _run(argv: list[str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run a sandbox's command line as the supervisor does: with the launch env only."""
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=scaled(30), cwd="/", env=LAUNCH_ENV)


def test_the_command_line_hides_then_binds_back_and_drops_privileges_as_root(tmp_path: Path) -> None:
    home, state, work_root = tmp_path / "home", tmp_path / "home" / "state", tmp_path / "work"
    work = work_root / "1" / "0" / "w-0-0"
    for d in (state / "t", work, work_root / "1" / "0" / ".shm"):
        d.mkdir(parents=True)
    starter = ("/usr/bin/python3.11", "-I", "-S", str(state / "supervisor" / "sandboxjoin.py"))
    argv = sandbox_argv(
        _fake_sandbox(user_namespace=False, hidden=(home,)), ["/bin/bash", "script"],
        hidden=(state, work_root, tmp_path / "missing"), work_dir=work, shm_dir=work_root / "1" / "0" / ".shm",
        stop_file=state / "t" / "stop.json", spec_file=state / "t" / "spec.json",
        bound=(work_root / "1" / "0" / "w-0-0.sh",), identity=Identity(1234, 1235, (1235, 44)), starter=starter,
    )
    text = " ".join(argv)
    assert argv[:2] == ["/usr/bin/env", "--ignore-signal=TERM,USR1,USR2,HUP,INT"]
    # The state dir lies inside the home: one tmpfs covers both. A missing path gets none
    # (bwrap would create its mount point on the host).
    assert f"--perms 0711 --tmpfs {home} " in text and f"--tmpfs {state} " not in text and "missing" not in text
    assert f"--perms 0711 --tmpfs {work_root} " in text
    assert "--unshare-pid" in argv and "--unshare-ipc" in argv and "--unshare-user" not in argv
    assert "--perms 1777 --tmpfs /tmp" in text and f"--bind {work_root}/1/0/.shm /dev/shm" in text
    # Folders inside a tmpfs leading to what is bound back are made searchable first.
    assert text.index(f"--dir {work_root}/1") < text.index(f"--dir {work_root}/1/0") < text.index(f"--bind {work}")
    assert f"--ro-bind {work_root}/1/0/w-0-0.sh" in text and f"--ro-bind {state}/t {state}/t" in text
    # The task's start: the starter, bound read-only (it lies in the hidden state dir), with
    # where the task's env is, never the env itself; it drops to the account.
    assert f"--ro-bind {starter[-1]} {starter[-1]}" in text
    start = argv.index(starter[0])
    assert argv[start - 2:start] == ["/usr/bin/env", "--default-signal=TERM,USR1,USR2,HUP,INT"]
    assert argv[start:] == [*starter, "--stop", f"{state}/t/stop.json", "--spec", f"{state}/t/spec.json",
                            "--cwd", str(work), "--drop", "1234:1235:1235,44", "--", "/bin/bash", "script"]
    assert "setpriv" not in text


def test_storages_are_bound_from_descriptors_over_covered_paths_and_private_top_folders(tmp_path: Path) -> None:
    """The root is the host's top-level entries over bwrap's tmpfs (never ``/`` whole); every
    storage's path is covered; a target outside every tmpfs gets its top-level folder of its
    own; each storage comes from a descriptor the supervisor opened (``mount_fds``)."""
    storage, other, work = tmp_path / "s", tmp_path / "other", tmp_path / "w"
    for d in (storage / "sub", other, work):
        d.mkdir(parents=True)
    mounts = [StorageMount(storage, "sub", Path("/data/in"), True), StorageMount(storage, "", storage, False)]
    argv = sandbox_argv(_fake_sandbox(user_namespace=True), ["true"], hidden=(), work_dir=work, shm_dir=work,
                        stop_file=work / "stop.json", spec_file=work / "spec.json", mounts=mounts,
                        storage_paths=(other, tmp_path / "missing"))
    text = " ".join(argv)
    assert "--dev-bind / /" not in text and "--dev-bind /usr /usr" in text
    assert f"--symlink {os.readlink('/bin')} /bin" in text if os.path.islink("/bin") else "--dev-bind /bin /bin" in text
    assert "--dev-bind /data " not in text and "--perms 0755 --dir /data " in text
    assert f"--tmpfs {other} " in text and f"--tmpfs {storage} " in text and "missing" not in text
    assert f"--ro-bind-fd {MOUNT_FD_BASE} /data/in " in text and f"--bind-fd {MOUNT_FD_BASE + 1} {storage} " in text
    assert mount_fds(mounts) == [[MOUNT_FD_BASE, str(storage), "sub"], [MOUNT_FD_BASE + 1, str(storage), ""]]
    assert text.index(f"--tmpfs {storage} ") < text.index("--ro-bind-fd")


def test_as_root_a_sandbox_needs_an_identity_and_it_never_hides_the_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="identity"):
        sandbox_argv(_fake_sandbox(user_namespace=False), ["true"], hidden=(), work_dir=tmp_path,
                     shm_dir=tmp_path, stop_file=tmp_path / "stop.json", spec_file=tmp_path / "spec.json")
    with pytest.raises(ValueError, match="cannot hide /"):
        sandbox_argv(_fake_sandbox(user_namespace=True), ["true"], hidden=(Path("/"),), work_dir=tmp_path,
                     shm_dir=tmp_path, stop_file=tmp_path / "stop.json", spec_file=tmp_path / "spec.json")
    with pytest.raises(ValueError, match="beside its stop file"):
        sandbox_argv(_fake_sandbox(user_namespace=True), ["true"], hidden=(), work_dir=tmp_path,
                     shm_dir=tmp_path, stop_file=tmp_path / "stop.json", spec_file=tmp_path / "x" / "spec.json")


def test_find_sandbox_none_and_unknown_modes() -> None:
    assert find_sandbox("none") == (None, "the task sandbox is turned off (task_sandbox=none)")
    with pytest.raises(ValueError, match="one of auto, bwrap, none"):
        find_sandbox("docker")  # type: ignore[arg-type]


def test_find_sandbox_says_why_without_bwrap(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox, why = find_sandbox("auto")
    assert sandbox is None and "apt-get install bubblewrap" in why
    with pytest.raises(ValueError, match="task_sandbox=bwrap, but bubblewrap cannot be used here"):
        find_sandbox("bwrap")


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A folder outside /tmp (each sandbox has its own) that any account may pass through."""
    base = Path(tempfile.mkdtemp(prefix="trainyard-sandbox-", dir="/var/lib" if os.geteuid() == 0 else None))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _layout(base: Path, owner: int) -> dict[str, Path]:
    paths = {
        "home": base / "home", "secret": base / "home" / "client.json", "state": base / "home" / "state",
        "other": base / "work" / "2" / "0" / "w-0-0", "work": base / "work" / "1" / "0" / "w-0-0",
        "shm": base / "work" / "1" / "0" / ".shm", "stop": base / "home" / "state" / "1" / "stop.json",
        "spec": base / "home" / "state" / "1" / "spec.json",
    }
    for key in ("state", "other", "work", "shm"):
        paths[key].mkdir(parents=True)
    paths["stop"].parent.mkdir(parents=True)
    paths["secret"].write_text("admin token")
    _write_spec(paths["spec"], {})
    (paths["other"] / "theirs.txt").write_text("other task's file")
    for key in ("work", "shm"):
        os.chown(paths[key], owner, owner)
    return paths


def _write_spec(path: Path, env: dict[str, str]) -> None:
    """The task's spec.json as the backend writes it (root's, 0600), with the task's env."""
    path.write_text(json.dumps({"env": {**LAUNCH_ENV, **env}}))
    path.chmod(0o600)


def _starter_for_nobody(base: Path) -> tuple[str, ...]:
    """The task's start as a non-root server (here: nobody) runs it: a Python it can run,
    and a copy of ``sandboxjoin`` it can read (this checkout may lie in root's home)."""
    python = os.path.realpath(os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON", "/usr/bin/python3"))
    copy = base / "sandboxjoin.py"
    assert sandboxjoin.__file__ is not None
    shutil.copyfile(sandboxjoin.__file__, copy)
    copy.chmod(0o644)
    probe = subprocess.run(["runuser", "-u", "nobody", "--", python, "-I", "-S", "-c", "import ctypes"],
                           capture_output=True, timeout=scaled(30), cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"no Python that nobody can run ({python}; TRAINYARD_TEST_NONROOT_PYTHON names one)")
    return (python, "-I", "-S", str(copy))


SNOOP = (
    'id -u; ls /proc | grep -c "^[0-9]"; cat "$1/home/client.json" || echo no-home;'
    ' cat "$1/work/2/0/w-0-0/theirs.txt" || echo no-other; echo mine > here && cat here;'
    ' echo scratch > /tmp/x && echo shm > /dev/shm/y && echo wrote-scratch'
)


@needs_bwrap
@needs_root
def test_as_root_the_task_runs_as_its_account_and_sees_only_its_own(public_dir: Path) -> None:
    paths = _layout(public_dir, NOBODY)
    sandbox, why = find_sandbox("bwrap", hidden=[paths["home"]])
    assert sandbox is not None, why
    argv = sandbox_argv(
        sandbox, ["/bin/sh", "-c", SNOOP, "snoop", str(public_dir)], hidden=(paths["state"], public_dir / "work"),
        work_dir=paths["work"], shm_dir=paths["shm"], stop_file=paths["stop"], spec_file=paths["spec"],
        identity=Identity(NOBODY, NOBODY, ()),
    )
    done = _run(argv)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0] == str(NOBODY) and int(lines[1]) <= 4  # its own processes only
    assert lines[2:] == ["no-home", "no-other", "mine", "wrote-scratch"]
    assert (paths["work"] / "here").read_text() == "mine\n" and (paths["shm"] / "y").exists()


@needs_bwrap
@needs_root
def test_without_root_a_user_namespace_hides_the_same(public_dir: Path) -> None:
    """The non-root server's sandbox, run as nobody: what `yard up` as a plain user gets."""
    paths = _layout(public_dir, NOBODY)
    for path in (public_dir / "home", paths["state"], paths["stop"].parent, paths["secret"], paths["spec"]):
        os.chown(path, NOBODY, NOBODY)  # the server's own files, as a non-root server has them
    probe = subprocess.run(["runuser", "-u", "nobody", "--", "bwrap", "--unshare-user", "--dev-bind", "/", "/",
                            "true"], capture_output=True, timeout=scaled(30))
    if probe.returncode != 0:
        pytest.skip(f"unprivileged user namespaces do not work here: {probe.stderr!r}")
    sandbox, why = find_sandbox("bwrap", hidden=[paths["home"]], as_root=False)
    assert sandbox is not None and sandbox.user_namespace, why
    argv = sandbox_argv(
        sandbox, ["/bin/sh", "-c", SNOOP, "snoop", str(public_dir)], hidden=(paths["state"], public_dir / "work"),
        work_dir=paths["work"], shm_dir=paths["shm"], stop_file=paths["stop"], spec_file=paths["spec"],
        starter=_starter_for_nobody(public_dir),
    )
    done = _run(argv, ("runuser", "-u", "nobody", "--"))
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0] == str(NOBODY) and int(lines[1]) <= 4
    assert lines[2:] == ["no-home", "no-other", "mine", "wrote-scratch"]
    # Outside the sandbox the same account reads it all: only the sandbox keeps it out.
    outside = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(paths["secret"])], capture_output=True,
                             text=True, timeout=scaled(30))
    assert outside.stdout == "admin token"


@needs_bwrap
@needs_root
@pytest.mark.parametrize("as_root", [True, False], ids=["as root", "user namespace"])
def test_the_job_dir_is_bound_back_writable_inside_the_hidden_work_root(public_dir: Path, as_root: bool) -> None:
    paths = _layout(public_dir, NOBODY)
    job_dir = public_dir / "work" / "1" / "jobdir"
    job_dir.mkdir()
    os.chown(job_dir, NOBODY, NOBODY)
    prefix: tuple[str, ...] = ()
    starter = None
    if not as_root:
        os.chown(paths["stop"].parent, NOBODY, NOBODY)
        os.chown(paths["spec"], NOBODY, NOBODY)
        probe = subprocess.run(["runuser", "-u", "nobody", "--", "bwrap", "--unshare-user", "--dev-bind", "/", "/",
                                "true"], capture_output=True, timeout=scaled(30))
        if probe.returncode != 0:
            pytest.skip(f"unprivileged user namespaces do not work here: {probe.stderr!r}")
        prefix = ("runuser", "-u", "nobody", "--")
        starter = _starter_for_nobody(public_dir)
    sandbox, why = find_sandbox("bwrap", hidden=[paths["home"]], as_root=as_root)
    assert sandbox is not None, why
    script = 'echo 17 > "$1/ckpt" && cat "$1/ckpt"; ls "$2" || echo no-other'
    argv = sandbox_argv(
        sandbox, ["/bin/sh", "-c", script, "save", str(job_dir), str(paths["other"])],
        hidden=(paths["state"], public_dir / "work"), work_dir=paths["work"], shm_dir=paths["shm"],
        stop_file=paths["stop"], spec_file=paths["spec"], writable=(job_dir,),
        identity=Identity(NOBODY, NOBODY, ()) if as_root else None, starter=starter,
    )
    done = _run(argv, prefix)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["17", "no-other"]  # the job's directory, and nothing else of the root
    assert (job_dir / "ckpt").read_text() == "17\n"


@needs_bwrap
@needs_root
def test_a_stop_requested_before_the_task_starts_keeps_it_from_starting(public_dir: Path) -> None:
    paths = _layout(public_dir, NOBODY)
    paths["stop"].write_text("{}")
    sandbox, why = find_sandbox("bwrap", hidden=[paths["home"]])
    assert sandbox is not None, why
    argv = sandbox_argv(sandbox, ["/bin/sh", "-c", "echo started > here"], hidden=(), work_dir=paths["work"],
                        shm_dir=paths["shm"], stop_file=paths["stop"], spec_file=paths["spec"],
                        identity=Identity(NOBODY, NOBODY, ()))
    done = _run(argv)
    assert done.returncode == 143 and not (paths["work"] / "here").exists()


@needs_bwrap
@needs_root
def test_as_root_only_the_task_gets_its_env_and_nothing_runs_as_root_with_it(public_dir: Path) -> None:
    """What starts a task (env, bwrap, the task's start: root) runs with the launch env;
    the task, dropped to its account, gets the spec's env, and only the task. Each process
    that sees the task's ``LD_DEBUG_OUTPUT`` writes a file there, owned by whoever it runs
    as: before the launch env, root's ``env``, ``bwrap``, ``sh`` and ``setpriv`` did too.
    And the task runs as a shell expects: SIGPIPE is not ignored (Python ignores it)."""
    paths = _layout(public_dir, NOBODY)
    seen = public_dir / "seen"
    seen.mkdir(mode=0o1777)
    seen.chmod(0o1777)
    env = {"MARK": "the task's own", "LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(seen / "ld")}
    _write_spec(paths["spec"], env)
    sandbox, why = find_sandbox("bwrap", hidden=[paths["home"]])
    assert sandbox is not None, why
    script = 'echo "$MARK"; grep SigIgn /proc/self/status; yes | head -1'
    argv = sandbox_argv(sandbox, ["/bin/sh", "-c", script], hidden=(paths["state"],), work_dir=paths["work"],
                        shm_dir=paths["shm"], stop_file=paths["stop"], spec_file=paths["spec"],
                        identity=Identity(NOBODY, NOBODY, ()))
    done = _run(argv)
    assert done.returncode == 0, done.stderr
    mark, ignored, yes = done.stdout.splitlines()
    assert mark == "the task's own" and yes == "y"
    assert int(ignored.split()[1], 16) & (1 << (13 - 1)) == 0, ignored  # SIGPIPE (13) not ignored
    owners = {f.stat().st_uid for f in seen.iterdir()}
    assert owners == {NOBODY}, sorted((f.name, f.stat().st_uid) for f in seen.iterdir())


def test_the_task_start_refuses_a_stop_and_bad_options(tmp_path: Path) -> None:
    """``sandboxjoin --stop``, run here without a sandbox or a drop: it execs the command
    with the spec's env (and PWD), or exits 143 when the stop file exists."""
    spec, stop = tmp_path / "spec.json", tmp_path / "stop.json"
    spec.write_text(json.dumps({"env": {"PATH": "/usr/bin:/bin", "MARK": "mine"}}))
    starter = [sys.executable, "-I", "-S", str(sandboxjoin.__file__)]
    argv = [*starter, "--stop", str(stop), "--spec", str(spec), "--cwd", str(tmp_path), "--",
            "sh", "-c", 'echo "$MARK $PWD"; env | sort | cut -d= -f1 | tr "\\n" " "']
    done = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(30), env={"PATH": "/usr/bin:/bin",
                                                                                  "LEAK": "x"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"mine {tmp_path}"
    assert set(done.stdout.splitlines()[1].split()) <= {"MARK", "PATH", "PWD", "SHLVL", "_"}, done.stdout
    stop.write_text("{}")
    assert subprocess.run(argv, capture_output=True, timeout=scaled(30)).returncode == 143
    both = [*starter, "--sandbox", "1:2", "--stop", str(stop), "--spec", str(spec), "--cwd", "/", "--", "true"]
    refused = subprocess.run(both, capture_output=True, text=True, timeout=scaled(30))
    assert refused.returncode == 2 and "not both" in refused.stderr
