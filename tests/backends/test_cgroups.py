"""Finding a node's cgroup layout and acting on a task's cgroup plan (``backends/cgroups``).

This machine has cgroup v1 (hybrid); v2 cannot run here, so the v2 path is checked
against a folder laid out as a v2 hierarchy — the one stand-in of these tests: the kernel
would create the interface files itself, here the code's writes create them.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.backends import cgroups

V1_MOUNTS = """\
sysfs /sys sysfs rw 0 0
tmpfs {root} tmpfs rw,mode=755 0 0
cgroup {root}/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0
cgroup {root}/memory cgroup rw,memory 0 0
cgroup2 {root}/unified cgroup2 rw 0 0
"""
V1_OWN = "4:memory:/system.slice/trainyard.service\n1:cpu,cpuacct:/system.slice/trainyard.service\n0::/\n"


def _v1_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "cgroup"
    for controller in ("memory", "cpu,cpuacct"):
        (root / controller / "system.slice" / "trainyard.service").mkdir(parents=True)
    mounts, own = tmp_path / "mounts", tmp_path / "own"
    mounts.write_text(V1_MOUNTS.format(root=root))
    own.write_text(V1_OWN)
    return root, mounts, own


def _v2_tree(tmp_path: Path, enabled: str = "cpu io memory pids") -> tuple[Path, Path, Path]:
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text(enabled + "\n")
    mounts, own = tmp_path / "mounts", tmp_path / "own"
    mounts.write_text(f"proc /proc proc rw 0 0\ncgroup2 {root} cgroup2 rw,nsdelegate 0 0\n")
    own.write_text("0::/system.slice/trainyard.service\n")
    return root, mounts, own


def test_v1_task_cgroups_go_under_the_servers_own_cgroup_of_each_controller(tmp_path: Path) -> None:
    root, mounts, own = _v1_tree(tmp_path)
    layout = cgroups.detect(str(mounts), str(own))
    assert isinstance(layout, cgroups.CgroupLayout), layout
    service = "system.slice/trainyard.service"
    assert layout.version == 1 and layout.note == ""
    assert layout.memory == str(root / "memory" / service / "trainyard")
    assert layout.cpu == str(root / "cpu,cpuacct" / service / "trainyard")


def test_v1_without_a_cpu_controller_enforces_memory_and_says_cpu_is_not(tmp_path: Path) -> None:
    root, mounts, own = _v1_tree(tmp_path)
    mounts.write_text("".join(line for line in mounts.read_text().splitlines(True) if "cpuacct" not in line))
    layout = cgroups.detect(str(mounts), str(own))
    assert isinstance(layout, cgroups.CgroupLayout)
    assert layout.cpu is None and layout.note == "CPU limits are not enforced: no cgroup v1 cpu controller is mounted"
    plan = cgroups.task_plan(layout, "t", cpu_milli=500, memory_mb=0)
    assert plan is None  # asks for CPU only, which cannot be enforced here


def test_no_cgroup_mount_at_all_says_why(tmp_path: Path) -> None:
    mounts, own = tmp_path / "mounts", tmp_path / "own"
    mounts.write_text("proc /proc proc rw 0 0\n")
    own.write_text("0::/\n")
    assert cgroups.detect(str(mounts), str(own)) == (
        "no cgroup memory controller is mounted (neither v1 nor v2 with the memory controller)")
    assert cgroups.detect(str(tmp_path / "missing"), str(own)).startswith("cannot read the cgroup mounts")


def test_v2_needs_the_memory_controller_enabled_at_the_root(tmp_path: Path) -> None:
    root, mounts, own = _v2_tree(tmp_path, enabled="cpu pids")
    assert cgroups.detect(str(mounts), str(own)) == (
        f"the memory controller is not enabled in {root}/cgroup.subtree_control")


def test_v2_task_cgroups_go_under_trainyard_at_the_root_with_controllers_handed_down(tmp_path: Path) -> None:
    root, mounts, own = _v2_tree(tmp_path)
    layout = cgroups.detect(str(mounts), str(own))
    assert isinstance(layout, cgroups.CgroupLayout), layout
    # Not under the server's own cgroup: a cgroup with processes cannot hand controllers down.
    assert (layout.version, layout.memory, layout.cpu) == (2, str(root / "trainyard"), str(root / "trainyard"))
    mine = layout.under("local-abc")
    for level in ("trainyard", "trainyard/local-abc"):  # what the kernel lists as available
        (root / level).mkdir(parents=True, exist_ok=True)
        (root / level / "cgroup.controllers").write_text("cpu memory\n")

    plan = cgroups.task_plan(mine, "7-0-main-0-0", cpu_milli=1500, memory_mb=100)
    assert plan is not None
    task = root / "trainyard" / "local-abc" / "7-0-main-0-0"
    assert plan["dirs"] == [str(task)] and plan["memory"] == plan["cpu"] == str(task)
    (task).mkdir()
    (task / "memory.swap.max").write_text("max\n")  # the kernel has it when swap is accounted
    cgroups.create(plan)
    assert (task / "memory.max").read_text() == str(100 * 1024 * 1024)
    assert (task / "memory.swap.max").read_text() == "0"
    assert (task / "cpu.max").read_text() == "150000 100000"
    # Each level above the task hands memory and cpu down (one controller per write; the
    # stand-in keeps the last).
    for level in ("trainyard", "trainyard/local-abc"):
        assert (root / level / "cgroup.subtree_control").read_text() in ("+memory", "+cpu")
    assert not (task / "cgroup.subtree_control").exists()

    cgroups.join(plan, 4242)
    assert (task / "cgroup.procs").read_text() == "4242"
    assert cgroups.oom_kills(plan) == 0
    (task / "memory.events").write_text("low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgroups.oom_kills(plan) == 1 and cgroups.oom_killed(str(task))


def test_v1_oom_kills_come_from_oom_control_and_from_failcnt_on_old_kernels(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    assert cgroups.oom_kill_count(str(memory)) is None and not cgroups.oom_killed(str(memory))
    (memory / "memory.failcnt").write_text("0\n")
    assert cgroups.oom_kill_count(str(memory)) == 0
    (memory / "memory.failcnt").write_text("12\n")
    assert cgroups.oom_kill_count(str(memory)) == 1  # only a sign that the limit was hit
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cgroups.oom_kill_count(str(memory)) == 2 and cgroups.oom_killed(str(memory))


def test_a_plan_asks_for_what_the_task_asked_and_nothing_when_it_asked_nothing(tmp_path: Path) -> None:
    layout = cgroups.CgroupLayout(1, "/m/trainyard", "/c/trainyard", ("/m", "/c"))
    assert cgroups.task_plan(layout, "t", cpu_milli=0, memory_mb=0) is None
    plan = cgroups.task_plan(layout, "t", cpu_milli=1, memory_mb=0)
    assert plan is not None and plan["dirs"] == ["/c/trainyard/t"] and plan["memory"] is None
    assert plan["cpu_quota_us"] == cgroups.MIN_CPU_QUOTA_US  # the kernel's least
    plan = cgroups.task_plan(layout, "t", cpu_milli=2000, memory_mb=64)
    assert plan is not None and plan["dirs"] == ["/c/trainyard/t", "/m/trainyard/t"]
    assert (plan["cpu_quota_us"], plan["memory_bytes"]) == (200_000, 64 * 1024 * 1024)
