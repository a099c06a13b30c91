"""On the default `yard up` (as root, as CI runs it), bob's job finds nothing of alice's.

The same holds, by the sandbox alone, for `yard up` run as an unprivileged user (nobody
here) where user namespaces work: then alice's and bob's tasks share nobody's account.

Alice runs a job whose secret sits everywhere a secret can: in the job's secrets, its env,
its command line, its output, its work dir, world-readable files in /tmp and /dev/shm.
While it runs, bob's job tries every route to it and prints what each route gave.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server, running_server, wait_until
from trainyard.backends.local.isolation import DEFAULT_WORK_ROOT
from trainyard.client import Client

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALICE_SECRET = f"alice-secret-{uuid.uuid4().hex}"
BOB_SECRET = f"bob-secret-{uuid.uuid4().hex}"

ALICE_JOB = f"""
name: alice-long
secrets: {{token: {ALICE_SECRET}}}
taskRoles:
  main:
    resourcePerInstance: {{gpu: 1, cpu: 0.5, memoryMB: 128}}
    env: {{MY_TOKEN: "<% $secrets.token %>"}}
    commands:
      - id -un
      - cat "$TRAINYARD_SECRETS_DIR/token" > secret-copy.txt
      - 'echo "file:$(cat "$TRAINYARD_SECRETS_DIR/token") env:$MY_TOKEN gpus:$CUDA_VISIBLE_DEVICES pwd:$PWD"'
      - cp secret-copy.txt /tmp/alice-tmp && cp secret-copy.txt /dev/shm/alice-shm
      - chmod 644 /tmp/alice-tmp /dev/shm/alice-shm secret-copy.txt
      - python3 check.py
      - echo ready
      - exec python3 -c 'import time; time.sleep(600)' <% $secrets.token %>
"""

# Bob's job: try each path it is given, every process it can see, and whatever a glob finds.
# Each route prints one line, "ROUTE <label>: <READ|LISTED|DENIED> <path>: <what it gave>",
# so anything bob could read lands in his log, where the test looks for alice's secret.
SNOOP = """
import glob, json, os
targets = json.loads(os.environ["SNOOP_TARGETS"])
patterns = json.loads(os.environ["SNOOP_GLOBS"])

def attempt(label, path):
    try:
        if os.path.isdir(path):
            print(f"ROUTE {label}: LISTED {path}: {sorted(os.listdir(path))}")
        else:
            with open(path, "rb") as f:
                print(f"ROUTE {label}: READ {path}: {f.read(1 << 16)!r}")
    except OSError as exc:
        print(f"ROUTE {label}: DENIED {path}: {type(exc).__name__} {exc.strerror}")

for label, path in targets.items():
    attempt(label, path)
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print(f"PROCESSES {len(pids)}")
for pid in pids:
    attempt("proc-environ", f"/proc/{pid}/environ")
    attempt("proc-cmdline", f"/proc/{pid}/cmdline")
for pattern in patterns:
    found = glob.glob(pattern, recursive=True)
    print(f"GLOB {pattern}: {len(found)}")
    for path in found:
        attempt("glob", path)
"""

BOB_JOB = """
name: bob-snoop
secrets: {token: %(bob_secret)s}
taskRoles:
  main:
    env:
      BOB_TOKEN: "<%% $secrets.token %%>"
      SNOOP_TARGETS: '%(targets)s'
      SNOOP_GLOBS: '%(globs)s'
    commands:
      - id -un
      - |
        python3 - <<'PY'
%(snoop)s
        PY
"""


NOBODY = 65534
# How the non-root server is started: as nobody, keeping the environment (PYTHONPATH).
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")
# A Python nobody can run, with trainyard installed: this one often lives in a private home
# (pyenv under /root), so .ci/run installs the checkout into a venv of Debian's python3 and
# names it here, and requires the non-root run (TRAINYARD_REQUIRE_NONROOT=1).
NONROOT_PYTHON = os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON") or sys.executable


@dataclass
class Cluster:
    server: Server
    admin: Client
    alice: Client
    bob: Client
    as_root: bool  # False: the server runs as nobody, and so does every task

    @property
    def state_dir(self) -> Path:
        (state,) = [p for p in (self.server.home / "local").iterdir() if not p.name.endswith("-environments")]
        return state

    @property
    def work_root(self) -> Path | None:
        """Where work dirs go: a tree of their own under task accounts, else the task dirs."""
        return DEFAULT_WORK_ROOT / self.state_dir.name if self.as_root else None

    def account(self, user: str) -> str:
        return f"ty-{user}" if self.as_root else "nobody"

    def task_dir(self, job: int) -> Path:
        return self.state_dir / "tasks" / str(job) / "0" / "main-0-0"

    def work_dir(self, job: int) -> Path:
        root = self.work_root
        return self.task_dir(job) / "work" if root is None else root / str(job) / "0" / "main-0-0"


def _cannot(why: str) -> None:
    if os.environ.get("TRAINYARD_REQUIRE_NONROOT"):
        pytest.fail(f"{why} (TRAINYARD_REQUIRE_NONROOT is set)")
    pytest.skip(why)


def _nonroot_prefix(tmp_path_factory) -> tuple[tuple[str, ...], Path]:
    """The prefix that starts `yard up` as nobody, and a home nobody owns; skip where it cannot work."""
    probe = subprocess.run([*AS_NOBODY, NONROOT_PYTHON, "-c", "import trainyard.api.server"], capture_output=True,
                           timeout=scaled(60))
    if probe.returncode != 0:
        _cannot(f"nobody cannot run this Python ({NONROOT_PYTHON}) and trainyard: {probe.stderr[-300:]!r}; "
                "set TRAINYARD_TEST_NONROOT_PYTHON to one it can")
    # The very check the non-root server makes: without a sandbox it isolates nothing (and says so).
    check = ("from trainyard.backends.sandbox import find_sandbox\n"
             "sandbox, why = find_sandbox('auto')\nif sandbox is None: raise SystemExit(why)")
    probe = subprocess.run([*AS_NOBODY, NONROOT_PYTHON, "-c", check], capture_output=True, text=True,
                           timeout=scaled(60))
    if probe.returncode != 0:
        _cannot(f"no sandbox for a non-root server here: {probe.stderr.strip()}")
    base = Path(tempfile.mkdtemp(prefix="isolation-", dir="/var/lib"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    return AS_NOBODY, home


@pytest.fixture(scope="module", params=["root", "non-root"])
def cluster(request, tmp_path_factory) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the default install isolates users with per-user OS accounts: it needs yard up as root")
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")
    as_root = request.param == "root"
    prefix, home = ((), tmp_path_factory.mktemp("home")) if as_root else _nonroot_prefix(tmp_path_factory)
    try:
        with running_server(home, gpus=4, prefix=prefix, python=sys.executable if as_root else NONROOT_PYTHON) as srv:
            admin = srv.admin()
            for name in ("alice", "bob"):
                admin.create_user(name)
            alice = Client(srv.url, admin.create_token(user="alice").token)
            bob = Client(srv.url, admin.create_token(user="bob").token)
            yield Cluster(srv, admin, alice, bob, as_root)
    finally:
        if not as_root:
            shutil.rmtree(home.parent, ignore_errors=True)


def _group(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        try:
            data = Path(f"/proc/{name}/stat").read_bytes() if name.isdigit() else b""
        except OSError:
            continue
        if data and int(data[data.rindex(b")") + 2:].split()[2]) == pgid:
            found.append(int(name))
    return sorted(found)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _mode(path: Path) -> tuple[str, int]:
    info = os.lstat(path)
    return oct(stat.S_IMODE(info.st_mode)), info.st_uid


def alice_project(root: Path) -> Path:
    """The folder alice's job is sent with: her script, a nested package holding her secret, a
    data file, and what .gitignore keeps behind."""
    files = {
        "check.py": "import os\nimport mypkg.deep.mod as m\nprint('workdir:', m.TOKEN.startswith('alice-secret'), "
                    "open('data/table.csv').read().strip(), os.path.exists('scratch.log'))\n",
        "mypkg/__init__.py": "", "mypkg/deep/__init__.py": "", "mypkg/deep/mod.py": f"TOKEN = {ALICE_SECRET!r}\n",
        "data/table.csv": "a,b\n", "scratch.log": "left behind\n", ".gitignore": "*.log\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_bob_finds_nothing_of_alice_on_any_route(cluster: Cluster, tmp_path: Path) -> None:
    alice_job = cluster.alice.submit(ALICE_JOB, workdir=alice_project(tmp_path / "alice-project")).id
    wait_until(lambda: b"ready" in cluster.alice.logs(alice_job), timeout=30, what="alice's job to be ready")
    alice_log = cluster.alice.logs(alice_job).decode()
    assert alice_log.splitlines()[0] == cluster.account("alice")

    # Where alice's secret lies on this machine: the test (root) checks each holds it.
    task_dir, work = cluster.task_dir(alice_job), cluster.work_dir(alice_job)
    holders = {
        "client-file": cluster.server.home / "client.json",
        "spec": task_dir / "spec.json",
        "state-script": task_dir / "script.sh",
        "output-log": task_dir / "output.log",
        "work-file": work / "secret-copy.txt",
        "secret-file": work.with_name(work.name + ".secrets") / "token",
        "shm-file": (work.parent if cluster.as_root else task_dir.parent) / ".shm" / "alice-shm",
        "workdir-file": work / "mypkg" / "deep" / "mod.py",  # her working directory, unpacked
    }
    # Its archive, as handed to her task (0400, hers, in a folder of the server's) and as kept.
    archive = work.with_name(work.name + ".suspend") / "workdir.tar.gz"
    (kept,) = (cluster.server.home / "workdirs").glob("*.tar.gz")
    if cluster.as_root:
        holders["script-copy"] = work.with_suffix(".sh")
    admin_token = json.loads(holders["client-file"].read_text())["token"]
    for label, path in holders.items():
        assert (admin_token if label == "client-file" else ALICE_SECRET) in path.read_text(), label
    # Her task's own processes hold it (in the sandbox, as her account); what started them
    # (bwrap, the group's leader: root's, or the server's account) does not.
    leader = json.loads((task_dir / "pid.json").read_text())["task"]["pid"]
    holding = [pid for pid in _group(leader) if ALICE_SECRET.encode() in _environ(pid)]
    assert holding and leader not in holding, holding
    alice_pid = holding[0]

    # The files alice's account owns are hers alone; the task state is the server's alone.
    alice_uid, server_uid = pwd.getpwnam(cluster.account("alice")).pw_uid, 0 if cluster.as_root else NOBODY
    assert _mode(holders["secret-file"]) == ("0o400", alice_uid)
    if cluster.as_root:
        assert _mode(work) == ("0o700", alice_uid)
    assert _mode(cluster.state_dir) == ("0o700", server_uid)
    assert _mode(cluster.server.home) == ("0o700", server_uid)
    if cluster.as_root:
        assert _mode(holders["script-copy"]) == ("0o400", alice_uid)
    assert _mode(archive) == ("0o400", alice_uid)
    assert "workdir: True a,b False" in alice_log, alice_log  # package, data file, ignored file left behind

    targets = {
        **{label: str(path) for label, path in holders.items()},
        "database": str(cluster.server.home / "trainyard.db"),
        "home-dir": str(cluster.server.home),
        "state-dir": str(cluster.state_dir / "tasks"),
        "pid-file": str(task_dir / "pid.json"),
        "work-dir": str(work),
        "tmp-file": "/tmp/alice-tmp",
        "alice-environ": f"/proc/{alice_pid}/environ",
        "alice-cmdline": f"/proc/{alice_pid}/cmdline",
        "workdir-archive": str(archive),
        "workdir-kept": str(kept),
    }
    if cluster.work_root is not None:
        targets["work-root"] = str(cluster.work_root)
    # Under the work root, this cluster's trees (its work dirs, its environments): other
    # servers' on this machine (other tests') hold nothing of alice's, and their environments
    # are every task's to read by design (0755), which would flood bob's log.
    globs = [f"{cluster.server.home}/**", f"{DEFAULT_WORK_ROOT}/{cluster.state_dir.name}*/**", "/tmp/**",
             "/dev/shm/**", "/var/tmp/**"]
    snoop = "\n".join(f"        {line}" if line else "" for line in SNOOP.strip().splitlines())
    spec = BOB_JOB % {"bob_secret": BOB_SECRET, "targets": json.dumps(targets), "globs": json.dumps(globs),
                      "snoop": snoop}
    bob_job = cluster.bob.wait(cluster.bob.submit(spec).id, timeout=scaled(60))
    out = cluster.bob.logs(bob_job.id).decode(errors="replace")
    assert bob_job.state == "SUCCEEDED", out

    assert ALICE_SECRET not in out and admin_token not in out
    assert out.splitlines()[0] == cluster.account("bob")
    routes = dict(re.findall(r"^ROUTE (\S+): (\S+) ", out, re.MULTILINE))  # the last outcome per label
    for label in targets:
        assert label in routes, f"route {label} was not tried:\n{out}"
    for label in (*holders, "database", "pid-file", "work-dir", "tmp-file", "workdir-archive", "workdir-kept"):
        assert re.search(rf"^ROUTE {label}: DENIED ", out, re.MULTILINE), f"{label}:\n{out}"
    # The folders over the server's files can be passed, not listed. Only as the server's
    # own account (non-root) can bob list them, and find the way to his own task only.
    own = str(bob_job.id)
    if cluster.as_root:
        for label in ("home-dir", "state-dir", "work-root"):
            assert re.search(rf"^ROUTE {label}: DENIED ", out, re.MULTILINE), f"{label}:\n{out}"
    else:
        assert f"ROUTE home-dir: LISTED {targets['home-dir']}: ['local']" in out
        assert f"ROUTE state-dir: LISTED {targets['state-dir']}: ['{own}']" in out
    # /proc shows bob's own processes only, and reading them works: his own secret is there.
    processes = int(re.search(r"^PROCESSES (\d+)$", out, re.MULTILINE).group(1))
    assert 1 <= processes <= 5, out
    assert re.search(r"^ROUTE proc-environ: READ ", out, re.MULTILINE) and BOB_SECRET in out
    assert "sleep(600)" not in out  # alice's command line
    for pattern in globs:
        assert f"GLOB {pattern}: " in out

    # Alice's job is untouched by all this, and still sees what it should.
    assert re.search(rf"file:{ALICE_SECRET} env:{ALICE_SECRET} gpus:\d pwd:{re.escape(str(work))}$",
                     alice_log, re.MULTILINE), alice_log
    cluster.alice.stop(alice_job)
    assert cluster.alice.wait(alice_job, timeout=scaled(60)).state == "STOPPED"


def test_alice_s_two_tasks_still_reach_each_other(cluster: Cluster) -> None:
    job = cluster.alice.submit((EXAMPLES / "distributed-wiring.yaml").read_text()).id
    done = cluster.alice.wait(job, timeout=scaled(60))
    logs = [cluster.alice.logs(job, task=f"worker/{i}").decode() for i in (0, 1)]
    assert done.state == "SUCCEEDED", logs
    assert "wiring OK" in logs[1]


def test_yard_exec_enters_alice_s_sandbox_as_her_task_and_bob_cannot(cluster: Cluster) -> None:
    # As root: setpriv to her account inside the sandbox's namespaces; as nobody: the sandbox's
    # user namespace too (nsenter --user), where the task keeps nobody's uid.
    spec = ("name: inside\ntaskRoles:\n  main:\n    commands:\n      - echo hers > /tmp/in-the-sandbox\n"
            "      - echo started\n      - exec sleep 600\n")
    job = cluster.alice.submit(spec).id
    wait_until(lambda: b"started" in cluster.alice.logs(job), timeout=60, what="alice's task to start")
    token = cluster.alice._http.headers["Authorization"].split()[1]

    def yard(*argv: str, as_token: str = token) -> subprocess.CompletedProcess:
        return cluster.server.yard("exec", str(job), "--", *argv, token=as_token)

    ran = yard("sh", "-c", 'id -un; cat /tmp/in-the-sandbox; pwd; ls /proc | grep -c "^[0-9]"')
    assert ran.returncode == 0, ran.stderr
    user, found, pwd_, processes = ran.stdout.split()
    assert (user, found, pwd_) == (cluster.account("alice"), "hers", str(cluster.work_dir(job)))
    assert int(processes) < 10  # the sandbox's own /proc: its few processes, not the host's
    assert not yard("cat", str(cluster.server.home / "client.json")).stdout  # hidden, as from the task
    bob = cluster.bob._http.headers["Authorization"].split()[1]
    refused = yard("true", as_token=bob)
    assert refused.returncode != 0 and f"no job {job}" in refused.stderr
    cluster.alice.stop(job)
