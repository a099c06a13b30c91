"""`yard doctor` on Slurm: checks a running cluster end to end, from the server's machine.

In order, each step needing the one before (a check that cannot run says why, as SKIP):

1. Slurm's client commands are on PATH; munge encodes and decodes a credential through the
   socket ``slurm.conf`` names (``AuthInfo``); slurmctld answers ``scontrol ping``.
2. The configuration Trainyard relies on (``scontrol show config``): select/cons_tres with
   memory as a consumable, GresTypes (gpu, and shard for fractional GPUs), root jobs
   allowed, task/cgroup, ConstrainDevices, SlurmdTimeout.
3. The nodes' states (of ``slurm_partition``): down, drained or not responding, with Slurm's
   reason.
4. One short step on every usable node (``srun --nodelist=NODE``, ``doctornode.py`` under
   the node's ``/usr/bin/python3``), all at once. It listens on a port of the task range and
   the server connects to the node's ``NodeAddr`` there; it reads back a nonce the server
   wrote into ``<state_dir>/doctor/`` and writes a file beside it (owned by root when root
   wrote it: else the export squashes root); it tries bubblewrap and Podman, looks up the
   task accounts, counts the GPUs NVML sees (against the node's GRES), finds NVIDIA's MPS
   control program and nvidia-smi (a node with GPUs but without them runs a task given part
   of a GPU unenforced) and gives its Python version and clock.

Each check is one line (``backends/doctor.Check``), merged over the nodes, with the fix.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.backends.doctor import Account, Check, Status, fail, merged, ok, skip, warn
from trainyard.backends.slurm.backend import PORT_RANGE
from trainyard.backends.slurm.commands import SlurmCommands, SlurmError, munge_socket
from trainyard.backends.slurm.nodes import gpus_of, in_partition, is_schedulable, node_gres

NODE_PYTHON = "/usr/bin/python3"
MIN_NODE_PYTHON = (3, 11)
# How long a probe step may wait for its node (a busy node may hold it back), and then run.
START_SECONDS = 30
PROBE_SECONDS = 20
CLOCK_SKEW_SECONDS = 30.0
SLURMD_TIMEOUT_SECONDS = 60
_RESUME = "`scontrol update nodename={node} state=resume`"


@dataclass
class Probe:
    """What one node's probe step said (``doctornode.py``), and what the server saw of it."""

    node: str
    address: str
    listening: int | None = None
    connect_error: str = ""
    node_time: float | None = None
    arrived: float | None = None
    result: dict[str, Any] | None = None
    failure: str = ""  # the step did not run, or said nothing
    lines: list[str] = field(default_factory=list)


def check_slurm(
    state_dir: Path,
    *,
    partition: str | None = None,
    accounts: Sequence[Account] = (),
    slurm_conf: str | None = None,
) -> list[Check]:
    """Every check of this module, in order (see the module's docstring)."""
    try:
        commands = SlurmCommands(slurm_conf)
    except SlurmError as exc:
        return [fail("slurm commands", str(exc), "install slurm-client (Debian) on this machine")]
    checks = [ok("slurm commands", f"sbatch, srun, scontrol on PATH; SLURM_CONF={commands.slurm_conf or '(default)'}")]
    checks.append(check_munge(munge_socket(commands.slurm_conf)))
    controller = check_controller(commands, munge_failed=checks[-1].status == Status.FAIL)
    checks.append(controller)
    if controller.status == Status.FAIL:
        return [*checks, skip("cluster", "the rest needs slurmctld: fix the line above first")]
    try:
        config, nodes = read_config(commands), commands.nodes()
    except SlurmError as exc:
        return [*checks, fail("cluster", f"slurmctld answered the ping but not the questions: {exc}",
                              "check slurmctld's log (SlurmctldLogFile) and that this machine's Slurm is its version")]
    checks += check_config(config, as_root=os.geteuid() == 0)
    records = [r for r in nodes if in_partition(r, partition)]
    checks.append(check_nodes(records, partition))
    checks.append(check_gpu_sharing(records))
    usable = [r for r in records if is_schedulable(r.get("State", ""))]
    if not usable:
        return [*checks, skip("node probes", "no usable node to run them on")]
    try:
        probes = run_probes(commands, state_dir, usable, accounts, partition=partition)
    except OSError as exc:
        return [*checks, fail("shared dir", f"cannot write the probe's nonce into {state_dir}/doctor: {exc}",
                              "run yard doctor as the account that runs yard up (root), on the server's machine")]
    checks += node_checks(probes, {r["NodeName"]: r for r in usable}, accounts, state_dir)
    return checks


def check_munge(sock: str) -> Check:
    """A credential encoded and decoded through munged's socket (``munge -n | unmunge``)."""
    name = "munge"
    munge, unmunge = shutil.which("munge"), shutil.which("unmunge")
    if munge is None or unmunge is None:
        return skip(name, "munge's client is not installed here (Debian: munge); slurmctld's answer below tells")
    try:
        cred = subprocess.run([munge, f"--socket={sock}", "-n"], capture_output=True, text=True, timeout=10,
                              check=False, stdin=subprocess.DEVNULL)
        back = cred.returncode == 0 and subprocess.run(
            [unmunge, f"--socket={sock}"], input=cred.stdout, capture_output=True, text=True, timeout=10,
            check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        return fail(name, f"munge could not run: {exc}", "reinstall munge")
    if cred.returncode != 0:
        return fail(name, f"munge cannot encode through {sock}: {_last_line(cred.stderr)}",
                    "start munged on this machine (systemctl start munge), or point slurm.conf's AuthInfo at its "
                    "socket; every machine needs the same /etc/munge/munge.key")
    if not back:
        return fail(name, f"munge cannot decode its own credential through {sock}",
                    "restart munged; check /etc/munge/munge.key is owned by munge, mode 0400")
    return ok(name, f"a credential encoded and decoded through {sock}")


def check_controller(commands: SlurmCommands, *, munge_failed: bool) -> Check:
    name = "slurmctld"
    done = commands.run(["scontrol", "ping"], check=False)
    if "is UP" in done.stdout:
        return ok(name, _last_line(done.stdout.split("\n", 1)[0]))
    errors = done.stderr
    if munge_failed or "authentication" in errors.lower() or "munge" in errors.lower():
        return fail(name, f"slurmctld refuses this machine's credentials: {_last_line(errors) or done.stdout}",
                    "fix munge (the line above): the same munge.key on every machine, munged running")
    return fail(name, f"slurmctld does not answer: {_first_line(done.stdout)} {_last_line(errors)}".strip(),
                "start slurmctld (systemctl start slurmctld) and check SlurmctldHost/SlurmctldPort in slurm.conf "
                "and the firewall between this machine and it")


def read_config(commands: SlurmCommands) -> dict[str, str]:
    """``scontrol show config`` (slurm.conf and cgroup.conf) as ``{Key: value}``."""
    config: dict[str, str] = {}
    for line in commands.run(["scontrol", "show", "config"]).stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def check_config(config: Mapping[str, str], *, as_root: bool) -> list[Check]:
    """The settings of ``slurm.conf``/``cgroup.conf`` Trainyard relies on, one line each."""
    checks = []
    select = config.get("SelectType", "")
    params = config.get("SelectTypeParameters", "").upper()
    if select == "select/cons_tres" and "MEMORY" in params:
        checks.append(ok("select plugin", f"{select}, {params}"))
    elif select in ("select/cons_tres", "select/cons_res"):
        checks.append(warn("select plugin", f"{select}, {params or 'no parameters'}",
                           "SelectType=select/cons_tres and SelectTypeParameters=CR_Core_Memory: GPU shards need "
                           "cons_tres, and --mem is only counted when memory is a consumable resource"))
    else:
        checks.append(fail("select plugin", f"{select or 'unknown'}: whole nodes only",
                           "SelectType=select/cons_tres, SelectTypeParameters=CR_Core_Memory in slurm.conf"))
    gres = {item.split(":")[0] for item in config.get("GresTypes", "").split(",") if item and item != "(null)"}
    if "shard" in gres:
        checks.append(ok("gres types", ",".join(sorted(gres))))
    else:
        checks.append(warn("gres types", f"GresTypes={','.join(sorted(gres)) or '(none)'}: no shard GRES, so "
                           "fractional GPUs are refused on this cluster",
                           "GresTypes=gpu,shard and shard GRES per GPU in slurm.conf and gres.conf (docs/cluster.md)"))
    if as_root and config.get("DisableRootJobs", "No").lower().startswith("y"):
        checks.append(fail("root jobs", "DisableRootJobs=YES, but Trainyard submits as root and drops to each "
                           "user's account on the node", "DisableRootJobs=NO in slurm.conf"))
    else:
        checks.append(ok("root jobs", f"DisableRootJobs={config.get('DisableRootJobs', 'No')}"))
    if "task/cgroup" in config.get("TaskPlugin", ""):
        checks.append(ok("task limits", f"TaskPlugin={config['TaskPlugin']}"))
    else:
        checks.append(warn("task limits", f"TaskPlugin={config.get('TaskPlugin', '?')}: tasks' CPU and memory are "
                           "not enforced", "TaskPlugin=task/cgroup in slurm.conf, ConstrainRAMSpace=yes and "
                           "ConstrainCores=yes in cgroup.conf"))
    if config.get("ConstrainDevices", "no").lower() == "yes":
        checks.append(ok("gpu devices", "ConstrainDevices=yes: a task opens only its own GPUs"))
    else:
        checks.append(warn("gpu devices", "ConstrainDevices=no: a task can open another job's GPU",
                           "ConstrainDevices=yes in cgroup.conf, and File= for every GPU in gres.conf"))
    timeout = _seconds(config.get("SlurmdTimeout", ""))
    if timeout is not None and timeout > SLURMD_TIMEOUT_SECONDS:
        checks.append(warn("node timeout", f"SlurmdTimeout={timeout} s: a dead node's jobs are retried only "
                           "that long after it dies", f"SlurmdTimeout={SLURMD_TIMEOUT_SECONDS} (or less) in "
                           "slurm.conf"))
    else:
        checks.append(ok("node timeout", f"SlurmdTimeout={config.get('SlurmdTimeout', '?')}"))
    return checks


def check_gpu_sharing(records: Sequence[Mapping[str, str]]) -> Check:
    """Whether each node's GPUs are pinned (one GRES type per device) and shareable (1000
    shards each): a type named otherwise (``a100_0``, not ``a100_i0``) silently gives
    whole GPUs only, picked by Slurm."""
    layouts = {r["NodeName"]: node_gres(r.get("Gres", ""))[1] for r in records}
    with_gpus = {node: layout for node, layout in layouts.items() if layout.types}
    if not with_gpus:
        return skip("gpu sharing", "no node declares GPUs (Gres=gpu:...)")
    unpinned = sorted(node for node, layout in with_gpus.items() if not layout.pinned)
    unshared = sorted(node for node, layout in with_gpus.items() if layout.pinned and not layout.shards)
    if not unpinned and not unshared:
        return ok("gpu sharing", f"every GPU of {len(with_gpus)} node{'s' if len(with_gpus) > 1 else ''} pinned by "
                  "its own GRES type, with 1000 shards")
    found = ([f"{', '.join(unpinned)}: GRES types are not one per device (<model>_i<N>), so Slurm picks the "
              "devices and fractions are refused"] if unpinned else []) + \
        ([f"{', '.join(unshared)}: no shard:<type>:1000 per GPU, so fractions are refused"] if unshared else [])
    return warn("gpu sharing", "; ".join(found),
                "in slurm.conf and gres.conf name each GPU's type <model>_i<N> (N its index) and give it "
                "shard:<model>_i<N>:1000 (docs/cluster.md, section 5)")


def check_nodes(records: Sequence[Mapping[str, str]], partition: str | None) -> Check:
    """Down, drained or silent nodes, with Slurm's reason; FAIL when none is usable."""
    where = f" of partition {partition}" if partition else ""
    if not records:
        return fail("nodes", f"Slurm has no node{where}", "declare the nodes in slurm.conf (NodeName=...)"
                    + (" and in that partition" if partition else ""))
    bad, fixes = [], []
    for record in records:
        state, node = record.get("State", "UNKNOWN"), record["NodeName"]
        if is_schedulable(state):
            continue
        reason = record.get("Reason", "")
        bad.append(f"{node} {state}" + (f" ({reason})" if reason and reason != "(null)" else ""))
        if "DOWN" in state or state.endswith("*") or "NOT_RESPONDING" in state:
            fixes.append(f"{node}: start slurmd there and check its munge key and clock, then " + _RESUME.format(
                node=node))
        else:
            fixes.append(f"{node}: once the reason is dealt with, " + _RESUME.format(node=node))
    if not bad:
        return ok("nodes", f"{len(records)} node{'s' if len(records) > 1 else ''}{where}, all usable")
    usable = len(records) - len(bad)
    status = Status.WARN if usable else Status.FAIL
    return Check("nodes", status, f"{usable} of {len(records)} usable; no new work on " + ", ".join(bad),
                 "; ".join(fixes))


def run_probes(
    commands: SlurmCommands,
    state_dir: Path,
    records: Sequence[Mapping[str, str]],
    accounts: Sequence[Account],
    *,
    partition: str | None = None,
) -> dict[str, Probe]:
    """One probe step on each node, all at once; the server connects to each as it listens."""
    folder = state_dir / "doctor"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    nonce = secrets.token_hex(16)
    nonce_file = folder / nonce
    nonce_file.write_text(nonce + "\n")
    script = importlib.resources.files("trainyard.backends.slurm").joinpath("doctornode.py").read_text()
    probes = {r["NodeName"]: Probe(r["NodeName"], r.get("NodeAddr") or r["NodeName"]) for r in records}
    try:
        threads = []
        for node, probe in probes.items():
            request = {"nonce_file": str(nonce_file), "nonce": nonce, "node_file": f"{nonce_file}.{node}",
                       "token": secrets.token_hex(8), "ports": [PORT_RANGE.start, PORT_RANGE.stop],
                       "accounts": sorted({a.name for a in accounts}), "wait_seconds": PROBE_SECONDS}
            argv = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--mem=64", "--time=2",
                    f"--immediate={START_SECONDS}", "--job-name=trainyard-doctor", "--quiet",
                    *([f"--partition={partition}"] if partition else []),
                    NODE_PYTHON, "-I", "-c", script, json.dumps(request)]
            thread = threading.Thread(target=_probe, args=(commands, argv, probe, request["token"]), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(START_SECONDS + PROBE_SECONDS + 30)
        for probe in probes.values():
            written = Path(f"{nonce_file}.{probe.node}")
            if probe.result is not None and probe.result["shared"].get("wrote"):
                probe.result["shared"]["seen_here"] = written.is_file()
    finally:
        for leftover in folder.glob(f"{nonce}*"):
            leftover.unlink(missing_ok=True)
    return probes


def _probe(commands: SlurmCommands, argv: list[str], probe: Probe, token: str) -> None:
    """Run one probe step; connect to the node when it listens; keep what it says."""
    try:
        process = subprocess.Popen(argv, env=dict(commands.env), cwd="/", stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        probe.failure = f"srun could not run: {exc}"
        return
    timer = threading.Timer(START_SECONDS + PROBE_SECONDS + 20, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            probe.lines.append(line)
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if "listening" in said:
                probe.arrived, probe.node_time = time.time(), said.get("time")
                probe.listening = said["listening"]
                if probe.listening is None:
                    probe.connect_error = f"the node could not listen: {said.get('error')}"
                else:
                    probe.connect_error = _connect(probe.address, probe.listening, token)
            elif "result" in said:
                probe.result = said["result"]
        stderr = process.stderr.read() if process.stderr else ""
        process.wait()
    finally:
        timer.cancel()
    if probe.result is None:
        why = _last_line(stderr) or f"srun exited with {process.returncode}"
        if "execve" in stderr and NODE_PYTHON in stderr:
            why = f"no {NODE_PYTHON} on the node"
        probe.failure = why


# srun's words when the step never reached the node's slurmd, or slurmd could not trust it.
_UNREACHED = ("Communication connection failure", "Zero Bytes were transmitted", "Unable to contact",
              "Connection refused", "Protocol authentication error", "Invalid authentication credential",
              "Credential", "Node not responding")


def _probe_fix(failures: Sequence[str]) -> str:
    """What to do about the nodes no probe step came back from, by what srun said."""
    if any(word.lower() in failure.lower() for failure in failures for word in _UNREACHED):
        return ("slurmd on that node does not answer, or cannot trust this machine: start slurmd there, give it "
                "the cluster's munge key (munge -n | ssh NODE unmunge), check its clock, and that it reaches "
                "slurmctld's port; then run yard doctor again")
    return (f"each node needs {NODE_PYTHON} (python3 >= 3.11) and must take a 1-CPU step within "
            f"{START_SECONDS} s; the reasons above say which is missing")


def _connect(address: str, port: int, token: str) -> str:
    try:
        with socket.create_connection((address, port), timeout=5) as conn:
            conn.sendall(token.encode())
    except OSError as exc:
        return f"{address}:{port}: {exc.strerror or exc}"
    return ""


def node_checks(
    probes: Mapping[str, Probe], records: Mapping[str, Mapping[str, str]], accounts: Sequence[Account],
    state_dir: Path,
) -> list[Check]:
    """The probes' findings, one line per check over all nodes."""
    ran = {node: p for node, p in probes.items() if p.result is not None}
    missing = [f"{node}: {p.failure}" for node, p in probes.items() if p.result is None]
    checks = []
    if missing:
        checks.append(fail("node probes", "no answer from " + "; ".join(missing), _probe_fix(missing)))
    else:
        checks.append(ok("node probes", f"a step ran on each of {len(probes)} nodes"))
    per_check: list[tuple[str, str, Callable[[Probe], Check]]] = [
        ("python", f"{NODE_PYTHON} >= {'.'.join(map(str, MIN_NODE_PYTHON))} on every node", _python),
        ("shared dir", f"{state_dir} seen and written at the same path from every node", _shared),
        ("sandbox", "bubblewrap works on every node", _bwrap),
        ("podman", "podman on every node", _podman),
        ("task ports", f"this machine reaches every node on ports {PORT_RANGE.start}-{PORT_RANGE.stop - 1}", _ports),
        ("clock", f"every node's clock within {CLOCK_SKEW_SECONDS:.0f} s of this machine's", _clock),
    ]
    for name, all_ok, judge in per_check:
        checks.append(merged(name, [judge(p) for p in ran.values()], all_ok=all_ok))
    checks.append(_gres(ran, records))
    checks.append(_shares(ran, records))
    checks.append(_accounts(ran, accounts))
    return checks


def _python(p: Probe) -> Check:
    assert p.result is not None
    version = tuple(p.result["python"])
    text = ".".join(map(str, version))
    if version >= MIN_NODE_PYTHON:
        return ok("python", text)
    return fail("python", f"{p.node}: {NODE_PYTHON} is {text}",
                f"install Python >= 3.11 as {NODE_PYTHON} on {p.node} (Debian bookworm's python3): the task runner's "
                "helpers run under it")


def _shared(p: Probe) -> Check:
    assert p.result is not None
    found, uid = p.result["shared"], p.result["uid"]
    if not found.get("read") or not found.get("wrote"):
        return fail("shared dir", f"{p.node}: {found.get('error')}",
                    "mount the shared directory (NFS) at the same path on every node, read-write (docs/cluster.md)")
    if not found.get("seen_here"):
        return fail("shared dir", f"{p.node} wrote a file this machine does not see",
                    "the nodes and this machine must mount the same export at the same path")
    if uid == 0 and found.get("owner") != 0:
        return fail("shared dir", f"root on {p.node} writes as uid {found.get('owner')} (root_squash)",
                    "export the directory with no_root_squash to the compute nodes (and this machine): the task "
                    "runner writes each task's status there as root")
    note = "" if uid == 0 else f" (probed as uid {uid}, not root: root_squash not checked; run yard doctor as root)"
    return ok("shared dir", f"{p.node} ok{note}")


def _bwrap(p: Probe) -> Check:
    assert p.result is not None
    found = p.result["bwrap"]
    if found.get("ok"):
        return ok("sandbox", "")
    if found.get("path") is None:
        return warn("sandbox", f"{p.node}: no bubblewrap", f"apt-get install bubblewrap on {p.node}")
    return warn("sandbox", f"{p.node}: bwrap fails: {found.get('error')}",
                f"make bubblewrap work on {p.node} as root (its version, and user namespaces if it is not setuid)")


def _podman(p: Probe) -> Check:
    assert p.result is not None
    found = p.result["podman"]
    if found.get("ok"):
        return ok("podman", found.get("version", ""))
    return warn("podman", f"{p.node}: {found.get('error')}: jobs with an image fail there",
                f"apt-get install podman on {p.node}")


def _ports(p: Probe) -> Check:
    assert p.result is not None
    reached = p.result["port"]
    if p.connect_error or not reached.get("reached"):
        why = p.connect_error or reached.get("error", "")
        return fail("task ports", f"this machine cannot reach {p.node} at {why}",
                    f"let this machine open TCP connections to the nodes' NodeAddr on ports {PORT_RANGE.start}-"
                    f"{PORT_RANGE.stop - 1} (the proxy, port-forward and sessions use them)")
    ephemeral = p.result.get("ephemeral_ports")
    if ephemeral and ephemeral[0] < PORT_RANGE.stop and ephemeral[1] >= PORT_RANGE.start:
        return warn("task ports", f"{p.node}: outgoing connections use ports {ephemeral[0]}-{ephemeral[1]}, "
                    "which overlap the task range", "sysctl net.ipv4.ip_local_port_range='32768 60999' on "
                    f"{p.node}")
    return ok("task ports", "")


def _clock(p: Probe) -> Check:
    if p.node_time is None or p.arrived is None:
        return skip("clock", f"{p.node}: no time from the node")
    skew = p.node_time - p.arrived  # the line's own travel time makes it <= 0 on a synced node
    if abs(skew) <= CLOCK_SKEW_SECONDS:
        return ok("clock", "")
    return warn("clock", f"{p.node}'s clock is {skew:+.0f} s off this machine's",
                "run chrony (or another NTP client) on every machine: munge refuses credentials 5 minutes off")


def _gres(ran: Mapping[str, Probe], records: Mapping[str, Mapping[str, str]]) -> Check:
    """GRES against NVML: where a node has no NVML (the dev cluster's fake GPUs), not checked."""
    parts, unchecked = [], []
    for node, p in ran.items():
        assert p.result is not None
        declared = len(gpus_of(records[node].get("Gres", "")))
        seen = p.result["gpus"].get("count")
        if seen is None:
            unchecked.append(node)
        elif seen != declared:
            parts.append(fail("gres", f"{node}: Slurm declares {declared} GPUs, NVML sees {seen}",
                              f"fix {node}'s Gres= in slurm.conf and gres.conf (File=/dev/nvidia[0-{max(seen, 1) - 1}]"
                              " in order, or AutoDetect=nvml)"))
        else:
            parts.append(ok("gres", ""))
    if not parts:
        return skip("gres", "no NVML on " + ", ".join(sorted(unchecked)) + ": GRES not checked")
    result = merged("gres", parts, all_ok="every node's GPU GRES matches the GPUs NVML sees")
    if unchecked and result.status == Status.OK:
        return ok("gres", result.detail + f" (no NVML on {', '.join(sorted(unchecked))}: not checked)")
    return result


def _shares(ran: Mapping[str, Probe], records: Mapping[str, Mapping[str, str]]) -> Check:
    """Whether each node with GPUs can hold a task given part of one to its share (NVIDIA MPS,
    ``slurm/mpsstep``); one without runs such a task unenforced, its status says so."""
    lacking = []
    for node, p in ran.items():
        assert p.result is not None
        found = p.result.get("mps") or {}
        if gpus_of(records[node].get("Gres", "")) and not (found.get("control") and found.get("smi")):
            lacking.append(node)
    if lacking:
        return warn("gpu shares", f"no nvidia-cuda-mps-control and nvidia-smi on {', '.join(sorted(lacking))}: a task "
                    "given part of a GPU there can use all of its memory and compute",
                    "install the NVIDIA driver's utilities (nvidia-cuda-mps-control, nvidia-smi) on those nodes, "
                    "with their devices in the Default compute mode")
    return ok("gpu shares", "NVIDIA MPS on every node with GPUs: one daemon per user per device holds each share")


def _accounts(ran: Mapping[str, Probe], accounts: Sequence[Account]) -> Check:
    """Every task account known here exists on every node with the same uid and gid."""
    name = "node accounts"
    if not accounts:
        return skip(name, "no task account to look for (no user in the store, none in task_account_map)")
    parts = []
    for account in accounts:
        if account.uid is None:
            continue  # the server's own check says so
        absent, differ = [], []
        for node, p in ran.items():
            assert p.result is not None
            there = p.result["accounts"].get(account.name)
            if there is None:
                absent.append(node)
            elif tuple(there) != (account.uid, account.gid):
                differ.append(f"{node} {there[0]}:{there[1]}")
        if absent:
            parts.append(fail(name, f"{account.name} ({account.user}'s tasks) is missing on {', '.join(absent)}",
                              f"create {account.name} on every node with uid {account.uid} and gid {account.gid} "
                              "(or serve accounts from LDAP/SSSD to all machines)"))
        if differ:
            parts.append(fail(name, f"{account.name} is {account.uid}:{account.gid} here but "
                              + ", ".join(differ), f"give {account.name} the same uid and gid on every machine"))
        if not absent and not differ:
            parts.append(ok(name, ""))
    checked = [a.name for a in accounts if a.uid is not None]
    return merged(name, parts, all_ok=f"{', '.join(checked)}: same uid and gid on every node") if parts else skip(
        name, "no task account exists on this machine yet (see accounts above)")


def _seconds(text: str) -> int | None:
    match = re.match(r"(\d+)", text)
    return int(match.group(1)) if match else None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""

