#!/bin/bash
# Dynamic Cluster launch made only of environment variables: the Dynamic Cluster tutorial's run.sh, ported to graphpar.
#
#   bash examples/run_dynamic_cluster.sh train.py [ARGS...]
#
# Starts 1 scheduler and MS_WORKER_NUM workers as separate background commands, exactly as MindSpore's run.sh does
# (the scheduler runs the same script; its init() serves the workers and exits without training), then waits for
# all of them and exits non-zero if any failed. Logs: $LOG_DIR/scheduler.log and $LOG_DIR/worker_$i.log.
# Settings (environment): MS_WORKER_NUM (default 8), MS_SCHED_HOST (127.0.0.1), MS_SCHED_PORT (8117),
# MS_TOPO_TIMEOUT (cluster timeout, seconds), DEVICES_PER_WORKER (CPU devices each worker simulates, default 1),
# LOG_DIR (default .), PYTHON (default python3).
set -e
if [ $# -lt 1 ]; then
    echo "Please run the script as: bash run_dynamic_cluster.sh SCRIPT [ARGS...]"
    exit 2
fi
SCRIPT=$1
shift
LOG_DIR=${LOG_DIR:-.}
PYTHON=${PYTHON:-python3}
mkdir -p "$LOG_DIR"

export MS_WORKER_NUM=${MS_WORKER_NUM:-8}
export MS_SCHED_HOST=${MS_SCHED_HOST:-127.0.0.1}
export MS_SCHED_PORT=${MS_SCHED_PORT:-8117}
export XLA_FLAGS="--xla_force_host_platform_device_count=${DEVICES_PER_WORKER:-1}"

# Launch 1 scheduler.
export MS_ROLE=MS_SCHED
$PYTHON "$SCRIPT" "$@" > "$LOG_DIR/scheduler.log" 2>&1 &
pids=($!)
echo "scheduler start success!"

# Launch the workers.
export MS_ROLE=MS_WORKER
for ((i = 0; i < MS_WORKER_NUM; i++)); do
    $PYTHON "$SCRIPT" "$@" > "$LOG_DIR/worker_$i.log" 2>&1 &
    pids+=($!)
    echo "worker ${i} start success with pid ${!}"
done

status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
exit $status
