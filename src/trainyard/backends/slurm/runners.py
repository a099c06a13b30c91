"""The fixed scripts every Slurm job of Trainyard runs (two shell scripts, and the task
sampler the task runner starts beside each task); they hold no job data.

A job's strings (its name, env values, commands) never appear in a batch script or on
an ``#SBATCH`` line: the batch script is this fixed text, its per-task arguments are
numbers and validated paths passed as argv, and each task reads its env (NUL-separated
``NAME=value`` pairs, handed to ``env`` as literal arguments) and its commands
(``script.sh``, run by bash exactly as written) from files in its task directory.
"""

from __future__ import annotations

# Usage: gang-runner.sh TASK_RUNNER HET [GROUP CPUS MEM_MB GRES TASK_DIR]...  (GRES: gpu:2, gpu:a100:1, none)
GANG_RUNNER = r"""#!/bin/bash
# Trainyard's batch script for one gang (written by the Slurm backend; holds no job data).
# Starts one step per task, inside the task's own component (node) of the allocation and
# with the task's own CPUs, memory and GPUs, then waits for every step.
set -u
runner="$1"
het="$2"
shift 2
while [ "$#" -ge 5 ]; do
    group="$1" cpus="$2" mem="$3" gres="$4" dir="$5"
    shift 5
    step=(srun --nodes=1 --ntasks=1 --cpus-per-task="$cpus" --mem="$mem" --gres="$gres" --kill-on-bad-exit=0
          --output="$dir/output.log" --open-mode=append)
    if [ "$het" = 1 ]; then step+=(--het-group="$group"); fi
    # A task with an image on a cluster with Pyxis: the step itself runs in the container
    # (srun --container-image ...; NUL-separated options written by the backend).
    if [ -e "$dir/container.pyxis" ]; then
        mapfile -d '' -t pyxis < "$dir/container.pyxis"
        step+=("${pyxis[@]}")
    fi
    (
        "${step[@]}" /bin/bash "$runner" "$dir"
        rc=$?
        # The task runner records the task's own status; srun's failure only stands in
        # when the task runner could not record one (the step failed to start, or was
        # killed). srun's 0 proves nothing about the task: then Slurm's state decides.
        if [ "$rc" -ne 0 ] && [ ! -e "$dir/exit" ]; then
            printf '%s\n' "$rc" > "$dir/exit.srun.$$" && mv -n "$dir/exit.srun.$$" "$dir/exit"
            rm -f "$dir/exit.srun.$$"
        fi
    ) &
done
wait
"""

# Usage: task-runner.sh TASK_DIR
TASK_RUNNER = r"""#!/bin/bash
# Runs one Trainyard task inside its Slurm step (written by the Slurm backend; holds no job data).
# The task's env is TASK_DIR/env, NUL-separated NAME=value pairs passed to env(1) as
# arguments (never evaluated); its commands are TASK_DIR/script.sh, run by bash as written.
# Nothing else of this step's environment reaches the task but Slurm's own variables, as
# with --export=NONE (SLURM_*, SLURMD_NODENAME, and PMI_*/PMIX_* for MPI launchers): the
# env file holds the whole clean environment.
set -u
dir="$1"
# The task's output goes straight to its log, appended as srun's --output appends Slurm's
# own messages there: through slurmstepd's pipe, its last lines could reach the file after
# the exit file had said that the task ended, and a reader of the log would miss them.
exec >> "$dir/output.log" 2>&1
# A bare task runs in TASK_DIR/work. A sandboxed one (TASK_DIR/sandbox.json) has its work dir
# beside TASK_DIR, its account's, and bwrap changes into it; a container's is its --workdir
# (as the account: beside TASK_DIR too). This shell, root, then stays in the task's directory.
if [ -e "$dir/sandbox.json" ] || [ -e "$dir/container.argv" ]; then cd "$dir" || exit 1
else cd "$dir/work" || exit 1; fi
mapfile -d '' -t assignments < "$dir/env" || exit 1
# The task's ports (TASK_DIR/ports, one a line: its own and MASTER_PORT) must be free on
# this node before it starts: the server that chose them cannot probe the node. A port
# another program holds is a platform fault, not the task's: the runner records it in
# TASK_DIR/fault, starts nothing and ends with 0 and no exit file (so the gang runner writes
# none either); the backend reads the fault as a task that ended without an exit status,
# which the controller retries as a new attempt, with new ports. Each port is bound on the
# wildcard addresses with SO_REUSEADDR (a listener there, or a socket bound without it,
# holds the port; a closed connection in TIME_WAIT does not) with the node's python3, or
# else looked up among the listening sockets of /proc/net/tcp and tcp6. A program that
# takes a port between this check and the task's own bind is not caught.
held_ports() {
    local ports=() hex=() port
    while IFS= read -r port; do
        case "$port" in ''|*[!0-9]*) continue ;; esac
        ports+=("$port")
    done < "$dir/ports"
    [ "${#ports[@]}" -gt 0 ] || return 0
    if command -v python3 > /dev/null 2>&1; then
        python3 -I -S -c '
import errno, socket, sys
for port in map(int, sys.argv[1:]):
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                print(port)
                break
        finally:
            sock.close()
' "${ports[@]}"
        return 0
    fi
    for port in "${ports[@]}"; do hex+=("$(printf '%04X' "$port")"); done
    cat /proc/net/tcp /proc/net/tcp6 2> /dev/null | awk -v want=" ${hex[*]} " \
        '$4 == "0A" { n = split($2, a, ":"); if (index(want, " " a[n] " ")) print a[n] }' | sort -u |
        while IFS= read -r port; do echo "$((16#$port))"; done
}
if [ -s "$dir/ports" ]; then
    held="$(held_ports | tr '\n' ' ')"
    held="${held% }"
    if [ -n "$held" ]; then
        fault="port(s) $held already held on node ${SLURMD_NODENAME-$(hostname)} by another program"
        fault+="; the task was not started"
        echo "trainyard: $fault"
        printf '%s\n' "$fault" > "$dir/fault.tmp" && mv -f "$dir/fault.tmp" "$dir/fault"
        exit 0
    fi
fi
# The task's datasets (TASK_DIR/datasets.json, the server's): each complete in this node's
# cache before the task starts, fetched or found there, and marked as used by this shell,
# which lives as long as the task (dataset-step.py, as root, with the cache's code beside it:
# backends/datacache.py; a second task on this node waits for the first one's fetch, then
# finds it). A fetch that fails ends the task unrun, saying why in its log. A stop that comes
# meanwhile (its SIGURG, with TASK_DIR/relay.stop: the relay below is not there yet) ends the
# fetch and the task unrun at once, instead of after the stop's whole grace period.
datasets=
if [ -e "$dir/datasets.json" ]; then
    datasets=1
    /usr/bin/python3 -I -S "${0%/*}/dataset-step.py" fetch "$dir" "$$" < /dev/null &
    fetching=$!
    # The SIGURG goes to a watcher of its own, as the task's relays do (below): this shell's
    # wait, cut short by a trap, could lose the fetch's status.
    (
        trap '[ -f "$dir/relay.stop" ] && kill "$fetching" 2> /dev/null' URG
        [ -f "$dir/relay.stop" ] && kill "$fetching" 2> /dev/null  # asked before the trap was set
        while kill -0 "$fetching" 2> /dev/null; do sleep 1 & wait "$!"; done
    ) < /dev/null &
    watcher=$!
    wait "$fetching"
    fetched=$?
    kill "$watcher" 2> /dev/null
    if [ -f "$dir/relay.stop" ]; then
        printf '%s\n' 143 > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
        exit 143
    fi
    if [ "$fetched" -ne 0 ]; then
        printf '%s\n' 127 > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
        exit 127
    fi
fi
# A task with part of a GPU (TASK_DIR/mps.json, the server's: shares.py): its owner's MPS
# daemon of that device runs on this node before it starts, started or reused by
# mps-step.py (as root; the daemon as the owner's account, outside this step's cgroups),
# which writes the client's variables for task-start.py (TASK_DIR/mps.env); it is released
# after the task, and quit after the owner's last such task here (or by its keeper, when a
# killed step could not release it). What fails is said in the log, and the task runs unenforced.
mps=
if [ -e "$dir/mps.json" ]; then
    mps=1
    /usr/bin/python3 -I -S "${0%/*}/mps-step.py" acquire "$dir" "$$" < /dev/null
fi
slurm=()
for name in "${!SLURM@}" "${!PMI@}"; do slurm+=("$name=${!name}"); done
# Slurm sets CUDA_VISIBLE_DEVICES to the GPUs of this step; pinning comes last, so that
# a job's env can never widen its own GPU allocation. No GPUs: hide them all.
if [ -n "${SLURM_STEP_GPUS-}" ] && [ -n "${CUDA_VISIBLE_DEVICES-}" ]; then
    pinning=("CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" "NVIDIA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES")
else
    pinning=("CUDA_VISIBLE_DEVICES=" "NVIDIA_VISIBLE_DEVICES=none")
fi
# The same pinning for the commands `yard exec` runs beside the task (exec-runner.sh).
printf '%s\0' "${pinning[@]}" > "$dir/pinning"
# Gloo (torch.distributed) binds to the address this node's hostname resolves to, which is
# often a loopback one (Debian's 127.0.1.1; the dev cluster's namespaces share one hostname):
# its peers on other nodes then cannot connect. Unless the job names one, GLOO_SOCKET_IFNAME
# is the interface this node reaches MASTER_ADDR through (its own address's, on the master's
# node); nothing where that is the loopback or `ip` is missing.
network=()
gloo_ifname() {
    local entry master= addr src ifname
    for entry in "${assignments[@]}"; do
        case "$entry" in
            GLOO_SOCKET_IFNAME=*) return ;;
            MASTER_ADDR=*) master="${entry#MASTER_ADDR=}" ;;
        esac
    done
    case "$master" in ''|-*|*[!A-Za-z0-9._-]*) return ;; esac
    command -v ip > /dev/null 2>&1 || return
    addr="$(getent ahostsv4 "$master" 2> /dev/null | awk '{ print $1; exit }')"
    src="$(ip -o -4 route get "${addr:-$master}" 2> /dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')"
    [ -n "$src" ] || return
    ifname="$(ip -o -4 addr show to "$src/32" 2> /dev/null | awk '{ print $2; exit }')"
    case "$ifname" in ''|lo|*[!A-Za-z0-9_.@-]*) return ;; esac
    network=("GLOO_SOCKET_IFNAME=${ifname%@*}")
}
gloo_ifname
# A stop or a suspension reaches the task's whole process group at once, from the relay
# shell below, as on the local backend (one killpg): the backend writes the signal to deliver in
# TASK_DIR/relay.<what> (TERM, or the job's suspend signal) and then has Slurm send SIGURG
# to the step (scancel --signal=URG), which every other process ignores by default. Slurm
# itself signals a step's processes one by one, deepest first (proctrack/linuxproc), so a
# script waiting on a child (`python train.py & wait`) would see the child die and exit 0
# before its own trap ran. Each relay file is delivered once. The signals Slurm sends
# itself (a full scancel, a time limit) still reach every process; this shell outlives
# them to record the task's exit status. A trapped signal is back to its default in the
# task, which may trap it itself.
declare -A relayed=()
task=
interrupted=
# Slurm's own SIGTERM once a stop's grace period is over, or a stop had none (the backend
# writes TASK_DIR/grace.over just before its cancel): the task has had its grace, and its
# process group gets SIGKILL at once, not when slurmd's wait for the step ends (KillWait, and
# at least 5 s); this shell then records its status. Not a container's: its engine's client
# and the cgroup's keeper must outlive the SIGTERM they proxy and clean up after.
kill_after_grace() {
    [ -n "$task" ] && [ -e "$dir/grace.over" ] && [ ! -e "$dir/container.argv" ] || return 0
    kill -s KILL -- "-$task" 2> /dev/null
}
relay() {  # [WHAT]: only relay.WHAT
    local file what sig
    for file in "$dir"/relay.${1:-*}; do
        what="${file##*/relay.}"
        case "$what" in *.*) continue ;; esac  # relay.stop.tmp: being written
        [ -f "$file" ] && [ -z "${relayed[$what]-}" ] && [ -n "$task" ] || continue
        sig="$(head -c 16 "$file")"
        case "$sig" in ''|*[!A-Z0-9+]*) continue ;; esac
        relayed[$what]=1
        kill -s "$sig" -- "-$task" 2> /dev/null
    done
}
trap 'interrupted=1' INT HUP USR1 USR2
trap 'interrupted=1; kill_after_grace' TERM
# A task with an image (TASK_DIR/container.*, written by the backend): the container engine's
# client runs in this step, in the foreground, so the signals reach it and it proxies them
# into the container. Its variables go in an env file (never the engine's environment, which
# stays clean); the step's GPUs become CDI devices; the image is pulled first where missing,
# timed, into TASK_DIR/image.json.
engine_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root)
cgroup_helper="${0%/*}/container-cgroup.py"
run_container() {
    # Run in the background, as the leader of the task's process group: it outlives the
    # relayed signals (a pull is interrupted, and ends the task) and becomes the engine.
    trap ':' TERM INT HUP USR1 USR2
    local image prefix=() command=() exists=() pull=() devices=() gpu started seconds
    image="$(cat "$dir/container.image")" || return 125
    mapfile -d '' -t prefix < "$dir/container.argv" || return 125
    mapfile -d '' -t command < "$dir/container.command" || return 125
    mapfile -d '' -t exists < "$dir/container.exists" || return 125
    mapfile -d '' -t pull < "$dir/container.pull" || return 125
    # The container sees only the step's GPUs, numbered from 0 (CDI devices by the node's index).
    local visible=()
    if [ -n "${SLURM_STEP_GPUS-}" ]; then
        IFS=, read -r -a gpus <<< "$SLURM_STEP_GPUS"
        for gpu in "${gpus[@]}"; do devices+=(--device "nvidia.com/gpu=$gpu"); visible+=("${#visible[@]}"); done
    fi
    local cuda
    cuda="$(IFS=,; echo "${visible[*]}")"
    { cat "$dir/container.env"; printf '%s\n' "${slurm[@]}" "${network[@]}" "CUDA_VISIBLE_DEVICES=$cuda" \
        NVIDIA_VISIBLE_DEVICES=void CUDA_DEVICE_ORDER=PCI_BUS_ID; } > "$dir/container.step.env" || return 125
    node="${SLURMD_NODENAME-$(hostname)}"
    if env -i -- "${engine_env[@]}" "${exists[@]}" > /dev/null 2>&1; then
        printf '{"image": "%s", "node": "%s", "ok": true, "pulled": false, "seconds": 0}\n' "$image" "$node" \
            > "$dir/image.json"
    else
        echo "trainyard: pulling $image on node $node"
        started=$(date +%s.%N)
        # Its output goes to the task log and to pull.out, whose last line the backend reads
        # to tell a pull that cannot succeed (manifest unknown, denied) from a network fault.
        env -i -- "${engine_env[@]}" "${pull[@]}" 2>&1 | tee "$dir/pull.out"
        if [ "${PIPESTATUS[0]}" != 0 ]; then
            seconds=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $started}")
            printf '{"image": "%s", "node": "%s", "ok": false, "seconds": %s, "error": "%s"}\n' "$image" "$node" \
                "$seconds" "could not pull $image on node $node (see the task log)" > "$dir/image.json"
            echo "trainyard: could not pull $image on node $node"
            return 125
        fi
        seconds=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $started}")
        printf '{"image": "%s", "node": "%s", "ok": true, "pulled": true, "seconds": %s}\n' \
            "$image" "$node" "$seconds" > "$dir/image.json"
    fi
    # A Python environment the image cannot run (its python links to the node's interpreter):
    # the backend's record of why becomes image.json, and the task ends before it starts.
    if [ -e "$dir/container.check" ]; then
        local check=()
        mapfile -d '' -t check < "$dir/container.check" || return 125
        if ! env -i -- "${engine_env[@]}" "${check[@]}"; then
            cp "$dir/container.check_failed" "$dir/image.json"
            echo "trainyard: the job's Python environment cannot run in $image (see image.json)"
            return 125
        fi
    fi
    # Its memory limit (container.memory, container.parent: engine options): the container
    # sits in a memory cgroup of Trainyard's that holds it, which container-cgroup.py makes
    # on this node, watches for OOM kills (recorded in TASK_DIR/container.json) and removes
    # (backends/containercgroup.py); where it cannot (no python3 3.10+, no memory
    # controller, not root), the engine holds the container to it, and a kill there is a
    # plain SIGKILL.
    local limits=() watcher=() python
    if [ -e "$dir/container.memory" ]; then
        mapfile -d '' -t limits < "$dir/container.memory" || return 125
        if python="$(command -v python3)" && "$python" -I -S "$cgroup_helper" check "$dir"; then
            mapfile -d '' -t limits < "$dir/container.parent" || return 125
            watcher=("$python" -I -S "$cgroup_helper" run "$dir")
        fi
    fi
    exec env -i -- "${engine_env[@]}" "${watcher[@]}" "${prefix[@]}" "${limits[@]}" "${devices[@]}" "$image" \
        "${command[@]}"
}
# Beside the task: the sampler of its process tree (task-sampler.py, writes $dir/metrics.json),
# when the node has a python3. It is no part of the task and never decides its status.
sampler=
if [ -r "${0%/*}/task-sampler.py" ] && command -v python3 > /dev/null 2>&1; then
    python3 "${0%/*}/task-sampler.py" "$dir" "$$" < /dev/null > /dev/null 2> "$dir/sampler.log" &
    sampler=$!
fi
# The task runs in a process group of its own (job control on for its start only), and
# this shell waits for it: a trap interrupts `wait` but not the task, so it waits again
# until the task has ended, and $? is then the task's own status.
set -m
if [ -e "$dir/container.argv" ]; then
    run_container &
elif [ -e "$dir/sandbox.json" ]; then
    # In the task's bubblewrap sandbox, as its owner's account (task-start.py, as root: it
    # execs bwrap, whose last step drops to the account); Slurm's variables and the pinning
    # reach it here, the task's own env from its env file.
    env -i -- "${slurm[@]}" "${pinning[@]}" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        /usr/bin/python3 -I -S "${0%/*}/task-start.py" "$dir" &
else
    env -i -- "${slurm[@]}" "${network[@]}" "${assignments[@]}" "${pinning[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID \
        /bin/bash "$dir/script.sh" &
fi
task=$!
set +m
# bwrap's pid and start time, for `yard exec` to join its sandbox (exec-runner.sh).
if [ -e "$dir/sandbox.json" ]; then
    stat="$(< "/proc/$task/stat")" && read -r -a fields <<< "${stat##*) }" &&
        printf '%s:%s\n' "$task" "${fields[19]}" > "$dir/sandbox.pid"
fi
# The relays come to a shell of their own, not to this one: bash's `wait` below, cut short
# by a trapped SIGURG just as the task ended, could lose the task's status and wait for
# ever on the sampler (seen under load: the task gone, this shell in wait, no exit file).
# A stop asked for before the relay shell knew its task is delivered as it starts: its
# SIGURG came before the trap was set, and none follows. (A suspension's task finds its
# suspend file as it starts.)
(
    pause=
    trap relay URG
    trap 'kill $pause 2> /dev/null; exit 0' TERM
    relay stop
    # Not past this runner ($$ in a subshell): one killed outright (SIGKILL, an OOM kill)
    # would leave this loop behind, outside the step where Slurm tracks by process tree.
    while kill -0 $$ 2> /dev/null; do
        sleep 60 & pause=$!
        # Cut short by a relay (above 128): the pause still runs. Else it ended, and its pid
        # may be another process's by now: no kill.
        wait "$pause" || [ "$?" -le 128 ] || kill "$pause" 2> /dev/null
    done
) < /dev/null &
relayer=$!
while :; do
    interrupted=
    wait "$task"
    rc=$?
    if [ -z "$interrupted" ] && ! kill -0 "$task" 2> /dev/null; then break; fi
done
# Reaped: its process group's number may be another's by the time Slurm's SIGTERM comes
# (the releases below can wait on the user's MPS lock): kill_after_grace kills nothing now.
task=
kill "$relayer" 2> /dev/null
if [ -n "$sampler" ]; then kill "$sampler" 2> /dev/null; fi
# Its datasets are no longer in use here (the node's report says so before the exit file).
if [ -n "$datasets" ]; then
    /usr/bin/python3 -I -S "${0%/*}/dataset-step.py" release "$dir" "$$" < /dev/null > /dev/null
fi
if [ -n "$mps" ]; then
    /usr/bin/python3 -I -S "${0%/*}/mps-step.py" release "$dir" "$$" < /dev/null
fi
# Slurm's task/cgroup holds the step to its --mem in a memory cgroup this shell shares
# with the task; the kernel counts there the processes it killed at that limit (v1:
# memory.oom_control, v2: memory.events; read as backends/cgroups.py reads them). Written
# before the exit file, so that the backend sees both or neither.
oom_kills() {
    local controllers path file
    while IFS=: read -r _ controllers path; do
        case ",$controllers," in
            *,memory,*) file="/sys/fs/cgroup/memory$path/memory.oom_control" ;;
            ,,) file="/sys/fs/cgroup$path/memory.events" ;;
            *) continue ;;
        esac
        if [ -r "$file" ]; then
            awk '$1 == "oom_kill" { print $2; found = 1 } END { if (!found) print 0 }' "$file"
            return
        fi
    done < /proc/self/cgroup
    echo 0
}
kills="$(oom_kills)"
case "$kills" in ''|*[!0-9]*|0) ;; *) printf '%s\n' "$kills" > "$dir/oom" ;; esac
printf '%s\n' "$rc" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
exit "$rc"
"""

# Beside the runners: the container's memory cgroup (``backends/containercgroup.py``, run
# by the task runner as ``python3 -I -S container-cgroup.py check|run TASK_DIR ...``: the
# name in TASK_RUNNER).
CGROUP_HELPER = "container-cgroup.py"

# Usage: python3 task-sampler.py TASK_DIR RUNNER_PID   (@INTERVAL@: set when the backend installs it)
# Started by the task runner beside the task, inside the task's step (so on the compute
# node that runs it): every INTERVAL seconds it writes TASK_DIR/metrics.json with the
# figures of the runner's process tree (the task and all its descendants, itself left
# out), from /proc, and of the step's GPUs (Slurm's ids in SLURM_STEP_GPUS) through NVML:
# each device's figures, their mean utilisation, and the GPU memory of the tree's
# processes. It ends when the runner does. The compute node's python3 needs nothing of
# Trainyard's: the standard library, and pynvml (nvidia-ml-py) for GPU figures, which are
# left out ("n/a") where it is not installed or NVML does not answer. Its NVML reading is
# ``backends/nvml_devices.py``, installed beside it (NVML_MODULE).
NVML_MODULE = "nvml_devices.py"
TASK_SAMPLER = r'''"""Trainyard's task sampler (written by the Slurm backend; holds no job data)."""
import importlib.util
import json
import os
import signal
import socket
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    # ppid, utime + stime + cutime + cstime (ticks), start time (ticks since boot)
    return int(fields[1]), sum(int(x) for x in fields[11:15]), int(fields[19])


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def io_bytes(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            pairs = dict(line.split(":", 1) for line in f if ":" in line)
        return int(pairs["read_bytes"]), int(pairs["write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def tree(root, me):
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            found = stat(int(name))
            if found is not None:
                stats[int(name)] = found
    children = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    pids, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, ()))
    return {pid: stats[pid] for pid in pids}


def uptime():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def step_gpus():
    """Slurm's ids of this step's GPUs (the numbers of their /dev/nvidia* files)."""
    ids = [i.strip() for i in os.environ.get("SLURM_STEP_GPUS", "").split(",") if i.strip()]
    return [int(i) for i in ids] if all(i.isdigit() for i in ids) else []


class Gpus:
    """The step's GPUs through NVML (nvml_devices.py, beside this script), if it can."""

    def __init__(self, ids):
        self.ids, self.devices = ids, None
        if not ids:
            return  # a step without GPUs: nothing to measure
        if importlib.util.find_spec("pynvml") is None:
            print("no GPU figures: pynvml (nvidia-ml-py) is not installed for", sys.executable, file=sys.stderr)
            return
        import nvml_devices

        problem = nvml_devices.start()
        if problem is not None:
            print("no GPU figures: NVML did not start:", problem, file=sys.stderr)
            return
        self.devices = {i: nvml_devices.index_of_minor(i) for i in ids}
        self.read = nvml_devices.read_device

    def figures(self, pids):
        """(each GPU's figures, their mean utilisation, the GPU MiB of ``pids``); None: n/a."""
        if self.devices is None:
            return [], None, None
        gpus, utils, used = [], [], 0
        for slurm_id, index in self.devices.items():
            device = self.read(index)
            gpus.append({"index": slurm_id, "healthy": device.healthy, "util_pct": device.util_pct,
                         "memory_used_mb": device.memory_used_mb, "memory_total_mb": device.memory_total_mb,
                         "temperature_c": device.temperature_c, "power_w": device.power_w,
                         "ecc_errors": device.ecc_errors})
            utils.append(device.util_pct)
            used += sum(device.process_memory.get(pid, 0) for pid in pids)
        util = None if None in utils else sum(utils) / len(utils)
        return gpus, util, used // MIB


def measure(runner, me, node, gpus, before):
    """One round: the record of the runner's tree and the counters for the next round
    (monotonic, cpu seconds, read bytes, write bytes); no record while the tree is empty."""
    procs = tree(runner, me)
    now = time.monotonic()
    if not procs:
        return None, before
    cpu = sum(ticks for _, ticks, _ in procs.values()) / TICKS
    ios = [io_bytes(pid) for pid in procs]
    read = None if None in ios else sum(i[0] for i in ios)
    write = None if None in ios else sum(i[1] for i in ios)
    if before is None:  # first sight: the average over the task's life so far
        started = min(start for _, _, start in procs.values()) / TICKS
        before = (now - max(uptime() - started, 1e-3), 0.0, 0 if read is not None else None,
                  0 if write is not None else None)
    elapsed = now - before[0]

    def rate(value, earlier):
        if value is None or earlier is None or elapsed <= 0:
            return None
        return max(0, value - earlier) / elapsed

    record = {
        "at": time.time(), "node": node, "pids": sorted(procs),
        "cpu_cores": max(0.0, cpu - before[1]) / elapsed if elapsed > 0 else None,
        "memory_mb": sum(rss_bytes(pid) for pid in procs) // MIB,
        "disk_read_bytes_per_s": rate(read, before[2]),
        "disk_write_bytes_per_s": rate(write, before[3]),
    }
    record["gpus"], record["gpu_util_pct"], record["gpu_memory_mb"] = gpus.figures(procs)
    return record, (now, cpu, read, write)


def main():
    # Slurm's own signals reach every process of the step: they are the task's, not the sampler's.
    for name in ("SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    task_dir, runner, interval = sys.argv[1], int(sys.argv[2]), float("@INTERVAL@")
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    me = os.getpid()
    gpus = Gpus(step_gpus())
    before = None
    while os.getppid() == runner:
        record, before = measure(runner, me, node, gpus, before)
        if record is not None:
            tmp = os.path.join(task_dir, f"metrics.json.{me}")
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, os.path.join(task_dir, "metrics.json"))
        time.sleep(interval if record is not None else 0.2)  # the task's process may not be forked yet


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
'''
