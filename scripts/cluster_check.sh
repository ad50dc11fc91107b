#!/usr/bin/env bash
# Real engines on this machine: a one-node SLURM cluster and a Ray head, both on
# localhost, each running a small sweep whose records must equal an in-process
# sweep's (tests/test_cluster.py, marked `cluster`).
#
#   scripts/cluster_check.sh              set up what is missing, run the cluster tests, stop it all
#   scripts/cluster_check.sh start slurm  start munged, slurmctld, slurmd (prints the env to use)
#   scripts/cluster_check.sh start ray    start a Ray head on 127.0.0.1
#   scripts/cluster_check.sh stop [slurm|ray]  stop what `start` started, by process id
#
# Needs root (it installs slurm-wlm and munge with apt-get if they are missing, and
# runs the daemons). Everything it writes lives under $LRT_CLUSTER_DIR
# (/tmp/lrtransfer-engines): its own slurm.conf (passed as SLURM_CONF, so /etc/slurm is not
# touched), spool and log folders, Ray's temp dir, and one pid file per daemon it
# started. A daemon that was already running (munged, or a whole SLURM cluster
# answering `sinfo`) is used and left alone.
#
# Exit codes: 0 set up (or all tests passed); 1 a test failed; 77 the engines cannot
# be set up here (not root, no apt-get, a failed install: the reason on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=${LRT_CLUSTER_DIR:-/tmp/lrtransfer-engines}
PY=${PYTHON:-.venv/bin/python}
BIN=$(dirname "$PY")
RAY_PORT=${LRT_RAY_PORT:-6389}
mkdir -p "$STATE/pids"

skip() { echo "cluster_check: cannot set up: $*" >&2; exit 77; }
say() { echo "cluster_check: $*" >&2; }

started() { echo "$2" > "$STATE/pids/$1"; }

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
    local n=$1; shift
    for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    return 1
}

install_slurm() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
    [ "$(id -u)" = 0 ] || skip "slurm-wlm and munge are not installed and this is not root"
    command -v apt-get >/dev/null || skip "slurm-wlm and munge are not installed and there is no apt-get"
    say "installing slurm-wlm and munge"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; } \
        > "$STATE/apt.log" 2>&1 || skip "apt-get install slurm-wlm munge failed (see $STATE/apt.log)"
}

start_slurm() {
    export SLURM_CONF="$STATE/slurm.conf"
    local system=/etc/slurm/slurm.conf
    if [ ! -f "$STATE/pids/slurmctld" ] && [ -f $system ] && SLURM_CONF=$system timeout 20 sinfo >/dev/null 2>&1; then
        skip "a SLURM cluster is already running here; point the tests at it yourself"
    fi
    [ "$(id -u)" = 0 ] || skip "starting slurmctld and slurmd needs root"
    install_slurm
    local host; host=$(hostname)
    mkdir -p "$STATE/slurmctld" "$STATE/slurmd" "$STATE/log" /run/munge
    cat > "$SLURM_CONF" <<EOF
ClusterName=lrtcheck
SlurmctldHost=$host
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmdSpoolDir=$STATE/slurmd
StateSaveLocation=$STATE/slurmctld
SlurmUser=root
AuthType=auth/munge
# A requeued job may start again after this many seconds (default 120).
AuthInfo=cred_expire=10
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=$host CPUs=$(nproc) RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    if ! pgrep -x munged >/dev/null; then
        [ -f /etc/munge/munge.key ] || mungekey -c
        chown munge:munge /etc/munge/munge.key /run/munge
        chmod 400 /etc/munge/munge.key
        runuser -u munge -- /usr/sbin/munged
        wait_for 10 test -s /run/munge/munged.pid || skip "munged did not start"
        started munged "$(cat /run/munge/munged.pid)"
    fi
    if [ ! -f "$STATE/pids/slurmctld" ]; then
        /usr/sbin/slurmctld
        wait_for 15 test -s "$STATE/slurmctld.pid" || skip "slurmctld did not start (see $STATE/log/slurmctld.log)"
        started slurmctld "$(cat "$STATE/slurmctld.pid")"
        /usr/sbin/slurmd
        wait_for 15 test -s "$STATE/slurmd.pid" || skip "slurmd did not start (see $STATE/log/slurmd.log)"
        started slurmd "$(cat "$STATE/slurmd.pid")"
    fi
    wait_for 30 bash -c "sinfo -h -o %T | grep -qx idle" || skip "the node did not become idle (see $STATE/log/)"
    say "SLURM up: partition debug on $host"
    echo "export SLURM_CONF=$SLURM_CONF"
}

install_ray() {
    "$PY" -c "import ray, hydra_plugins.hydra_ray_launcher" 2>/dev/null && return 0
    say "installing the ray extra"
    "$BIN/pip" install --quiet -e ".[ray]" --config-settings editable_mode=compat > "$STATE/pip.log" 2>&1 \
        || skip "pip install '.[ray]' failed (see $STATE/pip.log)"
}

start_ray() {
    install_ray
    # Short: Ray's socket paths must stay under 108 bytes.
    export RAY_TMPDIR="$STATE/ray" RAY_AUTH_MODE=disabled
    mkdir -p "$RAY_TMPDIR"
    if [ ! -f "$STATE/pids/ray" ]; then
        # --block keeps `ray start` in the foreground as the parent of the head's
        # processes: ending its process group ends them all, and nobody else's Ray.
        setsid "$BIN/ray" start --head --block --node-ip-address=127.0.0.1 --port="$RAY_PORT" \
            --num-cpus=2 --include-dashboard=false --disable-usage-stats > "$STATE/ray.log" 2>&1 &
        started ray $!
    fi
    wait_for 60 "$PY" -c "import ray; ray.init(address='127.0.0.1:$RAY_PORT', logging_level='error'); ray.shutdown()" \
        || skip "the Ray head did not come up (see $STATE/ray.log)"
    say "Ray up at 127.0.0.1:$RAY_PORT"
    echo "export RAY_TMPDIR=$RAY_TMPDIR RAY_AUTH_MODE=disabled LRT_RAY_ADDRESS=127.0.0.1:$RAY_PORT"
}

stop_all() {  # stop_all [slurm|ray]: what `start` started (both by default)
    local f pid name names="ray slurmd slurmctld munged"
    case "${1:-}" in slurm) names="slurmd slurmctld munged" ;; ray) names=ray ;; esac
    for name in $names; do
        f="$STATE/pids/$name"
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        if [ "$name" = ray ]; then
            kill -TERM -- "-$pid" 2>/dev/null || true  # its process group (setsid)
        else
            kill -TERM "$pid" 2>/dev/null || true
        fi
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if [ "$name" = ray ]; then kill -KILL -- "-$pid" 2>/dev/null || true; else kill -KILL "$pid" 2>/dev/null || true; fi
        rm -f "$f"
        say "stopped $name ($pid)"
    done
}

case "${1:-check}" in
    start)
        case "${2:-}" in
            slurm) start_slurm ;;
            ray) start_ray ;;
            *) echo "error: start what? '${2:-}'; valid: slurm, ray" >&2; exit 2 ;;
        esac ;;
    stop) stop_all "${2:-}" ;;
    check)
        # The tests start and stop the engines themselves (through this script). The ray
        # extra goes in first, so the Ray tests run rather than skip at collection; a failed
        # install leaves them skipped, with the reason.
        ( install_ray ) || true
        exec "$PY" -m pytest -m "${LRT_CLUSTER_MARKS:-cluster or not slow}" tests/test_cluster.py -v -rs -s "${@:2}" ;;
    *) echo "error: unknown command '$1'; valid: check, start slurm, start ray, stop" >&2; exit 2 ;;
esac
