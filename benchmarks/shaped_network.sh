#!/usr/bin/env bash
# Runs petrel_bench on a shaped network: inside a network namespace of its own whose
# loopback link is limited by tc, so that servers, workers and the raw Asio baseline all
# talk over a link like a real cluster's instead of an unlimited loopback. The link gets
# netem (a rate and a delay per packet) where the kernel has it, else tbf (the rate only;
# the lines then say "link_delay":"none"). Needs root (ip netns, tc); exits 77 (skipped)
# otherwise.
#
#   benchmarks/shaped_network.sh BENCH RATE DELAY [petrel_bench arguments...]
#   benchmarks/shaped_network.sh build/release/benchmarks/petrel_bench 1gbit 0.1ms --case sparse
#
# Every line petrel_bench prints gets "network" and "link_delay" fields; the adaptive
# compression cases are told the link's speed (--link-gbps) unless the arguments say.
# The namespace is deleted on exit, whatever happens.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: $0 BENCH RATE DELAY [petrel_bench arguments...]" >&2
    exit 2
fi
bench="$(realpath "$1")"
rate="$2"
delay="$3"
shift 3

if [[ "$(id -u)" -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "shaped network benchmark skipped: needs root, ip and tc (iproute2)" >&2
    exit 77
fi

case "$rate" in
*gbit) gbps="${rate%gbit}" ;;
*mbit) gbps="$(awk -v m="${rate%mbit}" 'BEGIN { print m / 1000 }')" ;;
*)
    echo "$0: RATE must end in gbit or mbit (for example 1gbit, 10gbit, 500mbit)" >&2
    exit 2
    ;;
esac

ns="petrel-shaped-$$"
cleanup() {
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if ! ip netns add "$ns" 2>/dev/null || ! ip -n "$ns" link set lo up; then
    echo "shaped network benchmark skipped: network namespaces are not available here" >&2
    exit 77
fi
# Loopback carries both directions, so the rate is shared by them, like a half-duplex link.
if ! ip netns exec "$ns" tc qdisc add dev lo root netem rate "$rate" delay "$delay" limit 100000 \
    2>/dev/null; then
    # No netem in this kernel: a token bucket with 1 ms of burst (at least one 64 KiB
    # loopback packet) and 20 ms of queue.
    burst_bytes="$(awk -v g="$gbps" 'BEGIN { b = g * 1e9 / 8 / 1000; if (b < 131072) b = 131072; printf "%d", b }')"
    limit_bytes="$(awk -v g="$gbps" -v b="$burst_bytes" 'BEGIN { l = g * 1e9 / 8 / 50; if (l < 4 * b) l = 4 * b; printf "%d", l }')"
    if ! ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst "$burst_bytes" \
        limit "$limit_bytes"; then
        echo "shaped network benchmark skipped: tc can shape neither with netem nor tbf" >&2
        exit 77
    fi
    delay="none"
    echo "shaped network: netem is not available here; shaping the rate only (tbf)" >&2
fi

args=("$@")
has_link=0
for a in "${args[@]}"; do
    [[ "$a" == "--link-gbps" ]] && has_link=1
done
if [[ $has_link -eq 0 ]]; then
    args+=(--link-gbps "$gbps")
fi

ip netns exec "$ns" "$bench" "${args[@]}" |
    sed -u -e "s/^{/{\"network\":\"${rate}\",\"link_delay\":\"${delay}\",/"
exit "${PIPESTATUS[0]}"
