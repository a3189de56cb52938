#!/usr/bin/env bash
# A two-node Slurm cluster on this one host, to try (and test) tuner's slurm.sbatch for real.
#
#   sudo scripts/slurm-local.sh up       install slurm-wlm + munge if missing, start munged,
#                                        slurmctld and two slurmd (node1, node2, both 127.0.0.1)
#   sudo scripts/slurm-local.sh status   sinfo
#   sudo scripts/slurm-local.sh down     stop the daemons this script started
#
# Then: export SLURM_CONF=/var/lib/tuner-slurm/slurm.conf; sbatch --wait build/slurm.sbatch
# Everything lives under $TUNER_SLURM_DIR (default /var/lib/tuner-slurm); `up` is idempotent
# (a running cluster is reused). Needs root: Slurm's daemons and apt-get do.
set -euo pipefail

dir="${TUNER_SLURM_DIR:-/var/lib/tuner-slurm}"
conf="$dir/slurm.conf"
ctld_port="${TUNER_SLURM_PORT:-16817}"
host="$(hostname -s)"

die() { echo "slurm-local: $*" >&2; exit 1; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        return
    fi
    [ "$(id -u)" = 0 ] || die "needs root to install slurm-wlm and munge"
    timeout 600 apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q slurm-wlm munge
}

hosts() {
    # node1 and node2 are this host: `scontrol show hostnames` hands out these names.
    for n in node1 node2; do
        grep -qE "^[0-9.]+[[:space:]].*\b$n\b" /etc/hosts || echo "127.0.0.1 $n" >> /etc/hosts
    done
}

munge_up() {
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if ! munge -n >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
        mkdir -p "$dir"
        touch "$dir/munged.ours"  # `down` stops only a munged that `up` started
        for _ in $(seq 50); do munge -n >/dev/null 2>&1 && return; sleep 0.2; done
        die "munged did not start"
    fi
}

write_conf() {
    mkdir -p "$dir/state" "$dir/log" "$dir/spool"
    cat > "$conf" <<CONF
# Written by scripts/slurm-local.sh: two nodes on one host.
ClusterName=tunerlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=60
InactiveLimit=0
NodeName=node1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 1)) CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 2)) CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
    [ "$(id -u)" = 0 ] || die "needs root (Slurm's daemons run as root here)"
    install
    hosts
    munge_up
    if alive "$dir/slurmctld.pid" && SLURM_CONF="$conf" timeout 10 sinfo -h >/dev/null 2>&1; then
        echo "slurm-local: already up ($conf)"
        return
    fi
    stop_slurm
    write_conf
    slurmctld -f "$conf" -c  # -c: fresh state, so "idle" below means the nodes registered now
    for n in node1 node2; do slurmd -f "$conf" -N "$n"; done
    for _ in $(seq 100); do
        idle="$(SLURM_CONF="$conf" timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | grep -c idle || true)"
        [ "$idle" = 2 ] && { echo "slurm-local: up, 2 nodes idle ($conf)"; return; }
        sleep 0.3
    done
    SLURM_CONF="$conf" sinfo -N >&2 || true
    tail -n 20 "$dir/log/"*.log >&2 || true
    die "the nodes did not come up"
}

stop_slurm() {
    for f in "$dir"/slurmd-node1.pid "$dir"/slurmd-node2.pid "$dir/slurmctld.pid"; do
        if alive "$f"; then kill "$(cat "$f")"; fi
    done
    for _ in $(seq 50); do
        alive "$dir/slurmctld.pid" || alive "$dir/slurmd-node1.pid" || alive "$dir/slurmd-node2.pid" || break
        sleep 0.2
    done
}

down() {
    stop_slurm
    if [ -e "$dir/munged.ours" ] && alive /run/munge/munged.pid; then
        kill "$(cat /run/munge/munged.pid)"
    fi
    rm -f "$dir/munged.ours"
    echo "slurm-local: down"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) SLURM_CONF="$conf" sinfo -N ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
