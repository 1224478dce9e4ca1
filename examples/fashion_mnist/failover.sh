#!/usr/bin/env bash
# Trains the fashion_mnist example on 5 processes (3 servers, 2 workers, one replica per
# key range, sequential) twice: once as it is, once with server 2's process (rank 1)
# killed with SIGKILL after the first epoch. The second job must complete (every other
# process exits 0, the manager reports the failover) with a test accuracy within a point
# of the first. Every process started here is stopped by its process id on exit.
#
#   failover.sh PROGRAM WORK_DIR [petrel|mpirun]
#
# petrel (the default) starts the ranks with the PETREL_* variables; mpirun starts them
# with `mpirun -np 5` (Open MPI, with recovery on so that a killed rank does not end the
# job), which the program detects on its own. Without mpirun the test is skipped
# (exit status 77).
set -u
program=$1
work=$2
launcher=${3:-petrel}
mkdir -p "$work"
size=5
# The job's secret, shared by its processes through a file only this user can read.
secret=$work/job.secret
(umask 077 && head -c 32 /dev/urandom | base64 >"$secret")
pids=()     # what this script started: the ranks, or mpirun
ranks=()    # the process id of each rank of the current job
cleanup() {
    for p in "${pids[@]}" "${ranks[@]}"; do
        kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
}
trap cleanup EXIT

if [ "$launcher" = mpirun ] && ! command -v mpirun >/dev/null 2>&1; then
    echo "failover: mpirun not found (scripts/setup installs openmpi-bin): skipped"
    exit 77
fi

args=(--model softmax --epochs 3 --train-limit 20000 --test-limit 5000 --no-plot)

# Starts the job's processes; the outputs go to $work/$1-rank<r>.{out,csv} (under mpirun
# each rank's exit status goes to the last line of its .out: "exit status N").
start() {
    rm -f "$work/$1"-rank*.out "$work/$1"-rank*.csv # no epoch lines of an earlier run
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    pids=()
    ranks=()
    if [ "$launcher" = mpirun ]; then
        # Each rank names its own files after the rank Open MPI gives it.
        FAILOVER_PROGRAM=$program FAILOVER_OUT=$work/$1 PETREL_ROOT=127.0.0.1:$port \
            PETREL_SERVERS=3 PETREL_HEARTBEAT_TIMEOUT=5000 PETREL_SECRET_FILE=$secret \
            mpirun --allow-run-as-root --oversubscribe --mca orte_enable_recovery 1 \
            --mca orte_abort_on_non_zero_status 0 -np $size \
            -x FAILOVER_PROGRAM -x FAILOVER_OUT -x PETREL_ROOT -x PETREL_SERVERS \
            -x PETREL_HEARTBEAT_TIMEOUT -x PETREL_SECRET_FILE \
            bash -c 'r=$OMPI_COMM_WORLD_RANK; "$FAILOVER_PROGRAM" "$@" --csv "$FAILOVER_OUT-rank$r.csv" >"$FAILOVER_OUT-rank$r.out" 2>&1; echo "exit status $?" >>"$FAILOVER_OUT-rank$r.out"' \
            failover "${args[@]}" >"$work/$1-mpirun.out" 2>&1 &
        pids+=($!)
        # The ranks: the program's processes whose environment names this job's files.
        for _ in $(seq 1 300); do
            ranks=()
            for p in $(pgrep -f -- "$program"); do
                env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
                if grep -qx "FAILOVER_OUT=$work/$1" <<<"$env"; then
                    r=$(grep '^OMPI_COMM_WORLD_RANK=' <<<"$env" | cut -d= -f2)
                    [ -n "$r" ] && ranks[$r]=$p
                fi
            done
            [ ${#ranks[@]} -eq $size ] && break
            sleep 0.1
        done
        if [ ${#ranks[@]} -ne $size ]; then
            echo "failover: $1: mpirun did not start $size ranks:"
            cat "$work/$1-mpirun.out"
            exit 1
        fi
    else
        for rank in $(seq 0 $((size - 1))); do
            PETREL_RANK=$rank PETREL_SIZE=$size PETREL_LOCAL_SIZE=$size \
                PETREL_ROOT=127.0.0.1:$port PETREL_SERVERS=3 PETREL_HEARTBEAT_TIMEOUT=5000 \
                PETREL_SECRET_FILE=$secret "$program" "${args[@]}" --csv "$work/$1-rank$rank.csv" \
                >"$work/$1-rank$rank.out" 2>&1 &
            pids+=($!)
            ranks+=($!)
        done
    fi
}

# Waits for every process of the job; fails naming each of ranks $2... that did not
# exit 0.
finish() {
    local run=$1
    shift
    local -A code=()
    if [ "$launcher" = mpirun ]; then
        wait "${pids[@]}" 2>/dev/null
        for rank in "$@"; do
            code[$rank]=$(tail -1 "$work/$run-rank$rank.out" | sed -n 's/^exit status //p')
        done
    else
        for rank in $(seq 0 $((size - 1))); do
            wait "${ranks[$rank]}" 2>/dev/null
            code[$rank]=$?
        done
    fi
    local status=0
    for rank in "$@"; do
        if [ "${code[$rank]}" != 0 ]; then
            echo "failover: $run: rank $rank failed:"
            cat "$work/$run-rank$rank.out"
            status=1
        fi
    done
    pids=()
    ranks=()
    return $status
}

accuracy_of() {
    grep -o 'test_accuracy=[0-9.]*' "$work/$1-rank3.out" | tail -1 | cut -d= -f2
}

start plain
finish plain 0 1 2 3 4 || exit 1
plain=$(accuracy_of plain)
echo "failover ($launcher): without a failure, test_accuracy=$plain"

start killed
# The first worker (rank 3) writes a line per epoch to its CSV log: kill after the first.
for _ in $(seq 1 600); do
    if [ -f "$work/killed-rank3.csv" ] && [ "$(wc -l <"$work/killed-rank3.csv")" -ge 2 ]; then
        break
    fi
    sleep 0.1
done
target=${ranks[1]}
if ! kill -0 "$target" 2>/dev/null; then
    echo "failover: the server process (rank 1) ended before it could be killed"
    cat "$work/killed-rank1.out"
    exit 1
fi
kill -9 "$target"
echo "failover ($launcher): killed rank 1 (server 2, pid $target) after epoch 1"
finish killed 0 2 3 4 || exit 1
grep -q "moved to their replicas" "$work/killed-rank0.out" || {
    echo "failover: the manager did not report the failover:"
    cat "$work/killed-rank0.out"
    exit 1
}
killed=$(accuracy_of killed)
echo "failover ($launcher): with server 2 killed, test_accuracy=$killed"
awk -v a="$killed" -v b="$plain" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.01) }' || {
    echo "failover: the accuracies differ by more than a point"
    exit 1
}
