#!/usr/bin/env bash
# Trains the fashion_mnist example on 5 processes under the PETREL_* launcher (3 servers,
# 2 workers, one replica per key range, sequential) twice: once as it is, once with
# server 2's process killed with SIGKILL after the first epoch. The second job must
# complete (every other process exits 0, the manager reports the failover) with a test
# accuracy within a point of the first. Every process started here is stopped by its
# process id on exit.
#
#   failover.sh PROGRAM WORK_DIR
set -u
program=$1
work=$2
mkdir -p "$work"
size=5
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
}
trap cleanup EXIT
# Starts the job's processes; the outputs go to $work/$1-rank<r>.{out,csv}.
start() {
    rm -f "$work/$1"-rank*.out "$work/$1"-rank*.csv # no epoch lines of an earlier run
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    pids=()
    for rank in $(seq 0 $((size - 1))); do
        PETREL_RANK=$rank PETREL_SIZE=$size PETREL_LOCAL_SIZE=$size \
            PETREL_ROOT=127.0.0.1:$port PETREL_SERVERS=3 PETREL_HEARTBEAT_TIMEOUT=5000 \
            "$program" --model softmax --epochs 3 --train-limit 20000 --test-limit 5000 \
            --no-plot --csv "$work/$1-rank$rank.csv" >"$work/$1-rank$rank.out" 2>&1 &
        pids+=($!)
    done
}

# Waits for the processes of ranks $2...; fails naming the first that did not exit 0.
finish() {
    local run=$1
    shift
    local status=0
    for rank in "$@"; do
        if ! wait "${pids[$rank]}"; then
            echo "failover: $run: rank $rank failed:"
            cat "$work/$run-rank$rank.out"
            status=1
        fi
    done
    return $status
}

accuracy_of() {
    grep -o 'test_accuracy=[0-9.]*' "$work/$1-rank3.out" | tail -1 | cut -d= -f2
}

start plain
finish plain 0 1 2 3 4 || exit 1
pids=()
plain=$(accuracy_of plain)
echo "failover: without a failure, test_accuracy=$plain"

start killed
# The first worker (rank 3) writes a line per epoch to its CSV log: kill after the first.
for _ in $(seq 1 600); do
    if [ -f "$work/killed-rank3.csv" ] && [ "$(wc -l <"$work/killed-rank3.csv")" -ge 2 ]; then
        break
    fi
    sleep 0.1
done
if ! kill -0 "${pids[1]}" 2>/dev/null; then
    echo "failover: the server process (rank 1) ended before it could be killed"
    cat "$work/killed-rank1.out"
    exit 1
fi
kill -9 "${pids[1]}"
echo "failover: killed rank 1 (server 2, pid ${pids[1]}) after epoch 1"
finish killed 0 2 3 4 || exit 1
wait "${pids[1]}" 2>/dev/null
pids=()
grep -q "moved to their replicas" "$work/killed-rank0.out" || {
    echo "failover: the manager did not report the failover:"
    cat "$work/killed-rank0.out"
    exit 1
}
killed=$(accuracy_of killed)
echo "failover: with server 2 killed, test_accuracy=$killed"
awk -v a="$killed" -v b="$plain" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.01) }' || {
    echo "failover: the accuracies differ by more than a point"
    exit 1
}
