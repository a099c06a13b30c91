#!/usr/bin/env bash
# A throwaway one-machine Slurm cluster for Trainyard's tests, without systemd.
#
#   scripts/dev-slurm.sh start   install (if needed), configure, start; print the SLURM_CONF line
#   scripts/dev-slurm.sh stop    cancel every job, stop slurmd/slurmctld/munged, remove the network
#   scripts/dev-slurm.sh conf    print the SLURM_CONF line
#
# `start` and `conf` print exactly one line on stdout:
#   SLURM_CONF=/tmp/trainyard-slurm/slurm.conf
# and everything else on stderr, so a caller can do
#   line="$(scripts/dev-slurm.sh start)" && export "$line"
#
# The cluster: one slurmctld, NODES virtual nodes n1..nN (one slurmd each, all on this
# machine), each declaring 8 CPUs, 16000 MiB and 4 fake GPUs (char devices
# that behave like /dev/null; Slurm sets CUDA_VISIBLE_DEVICES from them as for real ones),
# declared as a site that shares GPUs declares them (docs/slurm.md, "GPUs"): one GRES type
# per device (gpu:i0..i3, so that a job can ask for given devices) and 1000 shards of each
# (shard:i0:1000..., Trainyard's thousandths of a GPU),
# in the default partition `debug` (n1 alone is also in `first`, to test partition
# filtering). Scheduling is tuned for tests (no batching delay). Where the cgroup v1
# memory controller is mounted (this project's machines), jobs are held to their --mem by
# Slurm's task/cgroup plugin (memory is a consumable resource: CR_Core_Memory), as on a
# production cluster, and a step the kernel OOM-kills is reported so; cores are
# constrained too, though the fake nodes' 8 CPUs all map onto this machine's. Every
# command is idempotent; starting a stopped cluster starts it with a clean state (no
# jobs, no drained nodes). Needs root.
#
# Each node is a machine of its own on the network: its slurmd (and so every task Slurm
# starts there) runs in a network namespace of its own, ty<PORT>-n<I>, whose only way out
# is a veth on a bridge, ty<PORT>br, holding SUBNET.1/24 on this machine (slurmctld, the
# server, the tests); node nI is SUBNET.<I+1>. A node's 127.0.0.1 is its own: a port a
# task opens is reached at its node's address, and anything that only worked because
# every node was this machine's loopback fails here as on a real cluster. A node reaches
# this machine's other addresses through its default route (the bridge), and the world
# beyond (its name server) masqueraded as this machine (iptables NAT). The names and
# SUBNET derive from PORT, so that several dev clusters (one per ROOT and PORT) can run at
# once; `stop` removes the namespaces, the veths, the bridge and its iptables rules. The
# slurmds enter their namespace with `nsenter --net=` (not `ip netns exec`, which
# remounts /sys and hides the cgroup controllers from task/cgroup).
# Machines that cannot make network namespaces (an unprivileged container, no veth
# support) opt out with TRAINYARD_SLURM_NETNS=0: every node is then 127.0.0.1, as before.
#
# Job ids start at PORT * 1000: Slurm's cgroups are named by node and job id
# (slurm_n1/uid_0/job_<id>), so two dev clusters must not hand out the same ids.
#
# A node whose slurmd stops answering is NODE_FAIL after SlurmdTimeout (15 s here, not 300),
# and a node set DOWN comes back by itself once its slurmd registers (ReturnToService=2).
#
# Settings (environment):
#   TRAINYARD_SLURM_ROOT    state directory (default /tmp/trainyard-slurm)
#   TRAINYARD_SLURM_NODES   number of virtual nodes (default 4)
#   TRAINYARD_SLURM_PORT    slurmctld port; slurmd ports follow it (default 16817, 16818..)
#   TRAINYARD_SLURM_NETNS   1 (default): nodes in network namespaces; 0: all on 127.0.0.1
#   TRAINYARD_SLURM_SUBNET  the nodes' /24, as its first three numbers (default 10.77.<PORT % 256>;
#                           Podman's default network holds 10.88.0.0/16)
set -euo pipefail

ROOT="${TRAINYARD_SLURM_ROOT:-/tmp/trainyard-slurm}"
NODES="${TRAINYARD_SLURM_NODES:-4}"
PORT="${TRAINYARD_SLURM_PORT:-16817}"
CONF="$ROOT/slurm.conf"
MUNGE_DIR="$ROOT/munge"
MUNGE_SOCKET="$MUNGE_DIR/run/munge.socket"
NETNS="${TRAINYARD_SLURM_NETNS:-1}"

# All chatter to stderr; fd 3 is the real stdout, for the SLURM_CONF line only.
exec 3>&1 1>&2

log() { printf 'dev-slurm: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "$NODES" in ''|*[!0-9]*|0) die "TRAINYARD_SLURM_NODES must be a positive number, got '$NODES'" ;; esac
case "$PORT" in ''|*[!0-9]*) die "TRAINYARD_SLURM_PORT must be a number, got '$PORT'" ;; esac
case "$PORT" in ?????|????|???|??|?) ;; *) die "TRAINYARD_SLURM_PORT must be at most 5 digits, got '$PORT'" ;; esac
case "$NETNS" in 0|1) ;; *) die "TRAINYARD_SLURM_NETNS must be 0 or 1, got '$NETNS'" ;; esac
SUBNET="${TRAINYARD_SLURM_SUBNET:-10.77.$((10#$PORT % 256))}"
# This instance's network names (interface names have at most 15 characters).
NET_TAG="ty$((10#$PORT))"
BRIDGE="${NET_TAG}br"
if ! printf '%s\n' "$SUBNET" | grep -Eq '^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){2}$'; then
    die "TRAINYARD_SLURM_SUBNET must be three numbers like 10.77.0, got '$SUBNET'"
fi
[ "$NETNS" -eq 0 ] || [ "$NODES" -le 250 ] || die "at most 250 nodes fit in the nodes' /24"
case "$ROOT" in /*) ;; *) die "TRAINYARD_SLURM_ROOT must be an absolute path, got '$ROOT'" ;; esac
case "$ROOT" in *[!A-Za-z0-9/._-]*) die "TRAINYARD_SLURM_ROOT may only hold letters, digits and /._- (it goes into slurm.conf)" ;; esac
[ "$(id -u)" -eq 0 ] || die "run as root: slurmd and munged need it (the dev cluster is meant for CI and dev machines)"

export SLURM_CONF="$CONF"

# ---------------------------------------------------------------- processes

# The pid in a pid file, if that process is alive (not a zombie) and is the named daemon.
live_pid() {
    local file="$1" name="$2" pid state
    [ -f "$file" ] || return 1
    pid="$(tr -dc 0-9 < "$file")"
    [ -n "$pid" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
    # In a container without an init, dead daemons linger as zombies: kill -0 succeeds.
    state="$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
    case "$state" in Z|X|'') return 1 ;; esac
    echo "$pid"
}

# Signal a daemon from its pid file (only if it is that daemon) and wait until it is gone.
stop_daemon() {
    local file="$1" name="$2" pid i
    pid="$(live_pid "$file" "$name")" || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do
        live_pid "$file" "$name" >/dev/null || return 0
        sleep 0.1
    done
    log "$name (pid $pid) ignored SIGTERM for 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

# Close every file descriptor above 2 in the current (sub)shell, so that daemons never
# hold the caller's stdout pipe (fd 3) or our lock (fd 9) open.
close_extra_fds() {
    local fd
    for fd in $(ls /proc/$BASHPID/fd 2>/dev/null); do
        if [ "$fd" -gt 2 ] 2>/dev/null; then
            eval "exec $fd>&-" 2>/dev/null || true
        fi
    done
}

# ---------------------------------------------------------------- install

have_binaries() {
    local bin
    for bin in munged mungekey slurmctld slurmd sbatch scontrol squeue scancel sinfo; do
        command -v "$bin" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1 || return 1
    done
}

install_slurm() {
    log "installing Debian packages: munge slurmctld slurmd slurm-client"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available; install munge and Slurm (slurmctld, slurmd, client) yourself"
    # Keep the packages' scripts from starting services: a policy-rc.d that refuses every
    # start, only if the machine has none, removed afterwards.
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy"
        made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    {
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends munge slurmctld slurmd slurm-client
    } || rc=$?
    if [ "$made_policy" -eq 1 ]; then
        rm -f "$policy"
        trap - EXIT
    fi
    [ "$rc" -eq 0 ] || die "apt-get failed (exit $rc)"
}

# ---------------------------------------------------------------- configuration

write_file_if_changed() {
    local path="$1" content="$2"
    if [ ! -f "$path" ] || [ "$(cat "$path")" != "$content" ]; then
        printf '%s\n' "$content" > "$path.tmp"
        mv "$path.tmp" "$path"
        CONFIG_CHANGED=1
    fi
}

write_config() {
    local host last_port task_plugin select_params cgroup_conf
    host="$(hostname -s)"
    # slurmd 22.05 always loads a cgroup plugin; v1's init does nothing without systemd.
    # Limits need the v1 memory controller (the v2 plugin needs systemd, absent here).
    if grep -qs '^cgroup /sys/fs/cgroup/memory cgroup .*memory' /proc/mounts; then
        task_plugin=task/cgroup select_params=CR_Core_Memory
        cgroup_conf="CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainCores=yes"
    else
        log "no cgroup v1 memory controller: jobs' --mem and CPUs are not enforced on this dev cluster"
        task_plugin=task/none select_params=CR_Core cgroup_conf="CgroupPlugin=cgroup/v1"
    fi
    last_port=$((PORT + NODES))
    mkdir -p "$ROOT" "$ROOT/state" "$ROOT/spool" "$ROOT/log" "$ROOT/run" "$ROOT/gpu"
    chmod 755 "$ROOT"
    local i
    for i in $(seq "$NODES"); do mkdir -p "$ROOT/spool/n$i"; done
    for i in 0 1 2 3; do
        # Clones of /dev/null: slurmd 22.05 needs File= for every GPU or it drops them.
        [ -c "$ROOT/gpu/fakegpu$i" ] || { rm -f "$ROOT/gpu/fakegpu$i"; mknod -m 666 "$ROOT/gpu/fakegpu$i" c 1 3; }
    done
    # One GRES type per device (i<N>: /dev/nvidia<N> on a real node) and 1000 shards of each.
    local gres="" gres_conf=""
    for i in 0 1 2 3; do
        gres="$gres,gpu:i$i:1" gres_conf="$gres_conf
NodeName=n[1-$NODES] Name=gpu Type=i$i File=$ROOT/gpu/fakegpu$i"
    done
    for i in 0 1 2 3; do
        gres="$gres,shard:i$i:1000" gres_conf="$gres_conf
NodeName=n[1-$NODES] Name=shard Type=i$i Count=1000 File=$ROOT/gpu/fakegpu$i"
    done
    gres="${gres#,}" gres_conf="${gres_conf#?}"
    CONFIG_CHANGED=0
    write_file_if_changed "$CONF" "# Written by scripts/dev-slurm.sh: a test cluster, not for production.
ClusterName=trainyard-dev
SlurmctldHost=$host($(ctld_addr))
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=$select_params
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1,sched_interval=1
ReturnToService=2
SlurmdTimeout=15
FirstJobId=$((10#$PORT * 1000))
SlurmdParameters=config_overrides
KillWait=2
MinJobAge=300
GresTypes=gpu,shard
NodeName=n[1-$NODES] NodeHostname=$host NodeAddr=$(nodes_addr) Port=[$((PORT + 1))-$last_port] CPUs=8 RealMemory=16000 Gres=$gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=first Nodes=n1 MaxTime=INFINITE State=UP"
    write_file_if_changed "$ROOT/gres.conf" "$gres_conf"
    write_file_if_changed "$ROOT/cgroup.conf" "$cgroup_conf"
}

# ---------------------------------------------------------------- network

node_ns() { printf '%s-n%s' "$NET_TAG" "$1"; }      # node nI's network namespace
node_veth() { printf '%sn%s' "$NET_TAG" "$1"; }     # its veth's end on this machine
node_addr() { printf '%s.%s' "$SUBNET" "$(($1 + 1))"; }

# slurm.conf's addresses: slurmctld's, and the nodes' (a hostlist: nI is the I-th).
ctld_addr() { if [ "$NETNS" -eq 1 ]; then printf '%s.1' "$SUBNET"; else printf '127.0.0.1'; fi; }
nodes_addr() { if [ "$NETNS" -eq 1 ]; then printf '%s.[2-%s]' "$SUBNET" "$((NODES + 1))"; else printf '127.0.0.1'; fi; }

forward_rule() { printf '%s\n' FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT; }
# The nodes' traffic to the rest of the world leaves with this machine's address, so that
# they reach its name server as real nodes reach theirs: without an answer, each lookup
# (torch's of its peers' names, say) would wait out the resolver's timeout.
nat_rule() { printf '%s\n' POSTROUTING -t nat -s "$SUBNET.0/24" '!' -o "$BRIDGE" -j MASQUERADE; }

# The bridge (SUBNET.1 on this machine) and one namespace per node, each with a veth on
# the bridge (SUBNET.<I+1>, as eth0), its own loopback up, and its default route through
# the bridge. Idempotent: what exists already is kept.
setup_network() {
    command -v ip >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 \
        || die "network namespaces need ip (iproute2) and nsenter (util-linux); or set TRAINYARD_SLURM_NETNS=0"
    local held
    held="$(ip -4 -o addr show to "$SUBNET.0/24" 2>/dev/null | awk -v br="$BRIDGE" '$2 != br {print $2}' | head -n 1)"
    [ -z "$held" ] || die "interface $held already holds an address in $SUBNET.0/24: set TRAINYARD_SLURM_SUBNET to a free /24"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "creating bridge $BRIDGE ($SUBNET.1/24)"
        ip link add "$BRIDGE" type bridge \
            || die "cannot create a bridge (no permission or no kernel support?); set TRAINYARD_SLURM_NETNS=0 to run every node on 127.0.0.1"
    fi
    ip addr replace "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # Where bridged traffic goes through iptables (br_netfilter) and FORWARD's policy is DROP.
    if command -v iptables >/dev/null 2>&1; then
        # shellcheck disable=SC2046
        iptables -C $(forward_rule) 2>/dev/null || iptables -I $(forward_rule) 2>/dev/null \
            || log "could not add an iptables FORWARD rule for $BRIDGE; nodes may not reach each other"
        # shellcheck disable=SC2046
        iptables -C $(nat_rule) 2>/dev/null || iptables -A $(nat_rule) 2>/dev/null \
            || log "could not add an iptables MASQUERADE rule for $SUBNET.0/24; nodes may not reach a name server"
    fi
    if [ "$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null)" = 0 ]; then
        log "enabling IPv4 forwarding (net.ipv4.ip_forward=1) for the nodes' traffic beyond this machine"
        echo 1 > /proc/sys/net/ipv4/ip_forward 2>/dev/null || log "could not enable IPv4 forwarding"
    fi
    local i ns veth
    for i in $(seq "$NODES"); do
        ns="$(node_ns "$i")" veth="$(node_veth "$i")"
        [ -e "/run/netns/$ns" ] || ip netns add "$ns" || die "cannot create network namespace $ns; set TRAINYARD_SLURM_NETNS=0"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip -n "$ns" link del eth0 2>/dev/null || true  # a half-made one from an interrupted start
            ip link add "$veth" type veth peer name "${veth}p"
            ip link set "${veth}p" netns "$ns"
            ip -n "$ns" link set "${veth}p" name eth0
        fi
        ip link set "$veth" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr replace "$(node_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route replace default via "$SUBNET.1"
    done
}

# The pids of the processes in a node's namespace (left by a killed slurmd: its steps).
ns_pids() { ip netns pids "$1" 2>/dev/null || true; }

# Remove every namespace, veth and the bridge this instance made (whatever NODES was then),
# ending what still runs in them (the dev cluster's own job steps), and wait until the
# kernel has really removed the links (it does so asynchronously).
teardown_network() {
    command -v ip >/dev/null 2>&1 || return 0
    local ns pids veth i
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NET_TAG}-n[0-9]+\$" || true); do
        pids="$(ns_pids "$ns")"
        if [ -n "$pids" ]; then
            log "ending what still runs in $ns: $(echo $pids)"
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            for i in $(seq 50); do [ -n "$(ns_pids "$ns")" ] || break; sleep 0.1; done
            pids="$(ns_pids "$ns")"
            # shellcheck disable=SC2086
            [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        fi
        log "removing network namespace $ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    for veth in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${NET_TAG}n[0-9]+\$" || true); do
        ip link del "$veth" 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "removing bridge $BRIDGE"
        ip link del "$BRIDGE" 2>/dev/null || true
    fi
    if command -v iptables >/dev/null 2>&1; then
        # shellcheck disable=SC2046
        while iptables -C $(forward_rule) 2>/dev/null; do iptables -D $(forward_rule) || break; done
        # shellcheck disable=SC2046
        while iptables -C $(nat_rule) 2>/dev/null; do iptables -D $(nat_rule) || break; done
    fi
    for i in $(seq 100); do
        ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -qE "^${NET_TAG}(br|n[0-9]+)(@|\$)" || return 0
        sleep 0.1
    done
    log "warning: links of $NET_TAG are still there after 10 s"
}

# ---------------------------------------------------------------- daemons

start_munge() {
    if live_pid "$MUNGE_DIR/munged.pid" munged >/dev/null; then
        return 0
    fi
    id munge >/dev/null 2>&1 || die "user 'munge' does not exist (is the munge package installed?)"
    mkdir -p "$MUNGE_DIR/run"
    chown munge:munge "$MUNGE_DIR" "$MUNGE_DIR/run"
    chmod 700 "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR/run"  # 0700 fails: "Socket is inaccessible"
    chmod 711 "$MUNGE_DIR"       # clients must reach the socket through it
    if [ ! -s "$MUNGE_DIR/munge.key" ]; then
        rm -f "$MUNGE_DIR/munge.key"
        setpriv --reuid=munge --regid=munge --clear-groups mungekey -c -k "$MUNGE_DIR/munge.key"
    fi
    chown munge:munge "$MUNGE_DIR/munge.key"
    chmod 600 "$MUNGE_DIR/munge.key"
    log "starting munged (socket $MUNGE_SOCKET)"
    (close_extra_fds; cd / && setpriv --reuid=munge --regid=munge --clear-groups munged \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" --log-file="$MUNGE_DIR/munged.log" \
        --pid-file="$MUNGE_DIR/munged.pid" --seed-file="$MUNGE_DIR/munged.seed") \
        || die "munged did not start; see $MUNGE_DIR/munged.log"
}

controller_answers() {
    scontrol ping 2>/dev/null | grep -q 'is UP'
}

start_slurmctld() {
    if live_pid "$ROOT/run/slurmctld.pid" slurmctld >/dev/null; then
        return 0
    fi
    log "starting slurmctld (clean state; log $ROOT/log/slurmctld.log)"
    # -c: a dev cluster starts empty (no jobs, no drained nodes left from an earlier run).
    (close_extra_fds; cd / && slurmctld -c -f "$CONF") || die "slurmctld did not start; see $ROOT/log/slurmctld.log"
}

start_slurmd() {
    local i
    for i in $(seq "$NODES"); do
        if live_pid "$ROOT/run/slurmd-n$i.pid" slurmd >/dev/null; then
            continue
        fi
        if [ "$NETNS" -eq 1 ]; then
            log "starting slurmd for node n$i ($(node_addr "$i"), namespace $(node_ns "$i"))"
            (close_extra_fds; cd / && nsenter --net="/run/netns/$(node_ns "$i")" slurmd -f "$CONF" -N "n$i") \
                || die "slurmd n$i did not start; see $ROOT/log/slurmd-n$i.log"
        else
            log "starting slurmd for node n$i"
            (close_extra_fds; cd / && slurmd -f "$CONF" -N "n$i") || die "slurmd n$i did not start; see $ROOT/log/slurmd-n$i.log"
        fi
    done
}

wait_for() {
    local what="$1" seconds="$2" i
    shift 2
    for i in $(seq $((seconds * 10))); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    die "timed out after ${seconds}s waiting for $what; logs are in $ROOT/log"
}

all_nodes_up() {
    # Every node answers and is schedulable (idle, mixed or allocated; not down/unknown).
    local states
    states="$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)" || return 1  # a node per partition: once
    [ "$(printf '%s\n' "$states" | grep -c -E ' (idle|mix|alloc)$')" -eq "$NODES" ]
}

print_conf() {
    printf 'SLURM_CONF=%s\n' "$CONF" >&3
}

lock() {
    exec 9>"/tmp/trainyard-slurm.lock"
    flock -w 300 9 || die "timed out waiting for /tmp/trainyard-slurm.lock"
}

cmd_stop() {
    lock
    if [ -f "$CONF" ] && live_pid "$ROOT/run/slurmctld.pid" slurmctld >/dev/null && controller_answers; then
        log "cancelling every job"
        scancel --quiet --full --state=PENDING 2>/dev/null || true
        scancel --quiet --full 2>/dev/null || true
    fi
    local i
    for i in $(seq "$NODES"); do stop_daemon "$ROOT/run/slurmd-n$i.pid" slurmd; done
    stop_daemon "$ROOT/run/slurmctld.pid" slurmctld
    stop_daemon "$MUNGE_DIR/munged.pid" munged
    teardown_network
}

cmd_start() {
    lock
    have_binaries || install_slurm
    have_binaries || die "Slurm installed, but munged/slurmctld/slurmd/sbatch are not on PATH"
    write_config
    if [ "$CONFIG_CHANGED" -eq 1 ] && live_pid "$ROOT/run/slurmctld.pid" slurmctld >/dev/null; then
        log "configuration changed: restarting the cluster"
        exec 9>&-
        cmd_stop
        exec 9>&-
        lock
    fi
    if [ "$NETNS" -eq 1 ]; then
        setup_network
    else
        teardown_network  # one left from an earlier start with namespaces
    fi
    start_munge
    wait_for "munged's socket" 10 test -S "$MUNGE_SOCKET"
    start_slurmctld
    wait_for "slurmctld to answer" 20 controller_answers
    start_slurmd
    wait_for "all $NODES nodes to be up" 30 all_nodes_up
    log "cluster up: $(sinfo -h -N -o '%N:%t' | sort -u | tr '\n' ' ')"
    print_conf
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    conf) print_conf ;;
    *) echo "usage: $0 start|stop|conf" >&2; exit 2 ;;
esac
