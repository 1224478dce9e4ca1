#!/usr/bin/env bash
# What a trainer's translation unit costs to compile, against what its dependencies alone
# cost, in one run on this machine. Compiles (-c, no linking):
#   - benchmarks/compile_time/dependencies_only.cpp: Asio with coroutines, Cereal, xtensor,
#     snappy and OpenSSL included and used (the baseline);
#   - examples/readme_example.cpp header-only (the default) and against the compiled
#     library (PETREL_SEPARATE_COMPILATION: Petrel's non-template bodies are not compiled
#     in the unit, they are linked from libpetrel.a);
#   - the compiled library's own unit (built once per install, for reference).
# Each is compiled --repeat times (default 1); the median time is kept, with the largest
# peak memory. --only measures the baseline and the one named. Prints one JSON line per unit:
#   {"tu":..., "mode":..., "seconds":..., "peak_kb":..., "ratio_to_baseline":...}
# Usage: benchmarks/compile_time.sh [--repeat N] [--cxx COMPILER] [--flags "FLAGS"]
#                                   [--only dependencies|header-only|compiled|library]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
repeat=1
cxx=${CXX:-g++}
flags="-O2"
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --cxx) cxx=$2; shift 2 ;;
    --flags) flags=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compile_time.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$only" in
'' | dependencies | header-only | compiled | library) ;;
*) echo "compile_time.sh: --only takes dependencies, header-only, compiled or library" >&2; exit 2 ;;
esac
case "$repeat" in '' | *[!0-9]* | 0) echo "compile_time.sh: --repeat takes a count" >&2; exit 2 ;; esac
# 77: what ctest counts as skipped.
[ -x /usr/bin/time ] || { echo "compile_time.sh: needs /usr/bin/time (Debian package time)" >&2; exit 77; }

common=(-std=c++20 -DASIO_STANDALONE -DASIO_NO_DEPRECATED -I "$root/include")
case "$("$cxx" --version | head -n1)" in
*clang*) common+=(-DASIO_HAS_CO_AWAIT=1 -DASIO_HAS_STD_COROUTINE=1) ;;
esac
# shellcheck disable=SC2206 # the flags are words
common+=($flags)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#include <petrel/impl/src.hpp>\n' > "$work/petrel_compiled.cpp"

# measure NAME MODE SOURCE [EXTRA FLAGS...]: prints "seconds peak_kb" (median, largest).
measure() {
    local source=$3
    shift 3
    local times=() peak=0
    for _ in $(seq "$repeat"); do
        /usr/bin/time -f '%e %M' -o "$work/time" \
            "$cxx" "${common[@]}" "$@" -c "$source" -o "$work/unit.o"
        read -r seconds kb < "$work/time"
        times+=("$seconds")
        [ "$kb" -gt "$peak" ] && peak=$kb
    done
    local median
    median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$median $peak"
}

line() { # tu mode seconds peak_kb baseline_seconds
    awk -v tu="$1" -v mode="$2" -v s="$3" -v kb="$4" -v base="$5" 'BEGIN {
        printf "{\"tu\":\"%s\",\"mode\":\"%s\",\"seconds\":%.2f,\"peak_kb\":%d,\"ratio_to_baseline\":%.2f}\n",
            tu, mode, s, kb, s / base }'
}

wanted() { [ -z "$only" ] || [ "$only" = "$1" ]; }

read -r base_s base_kb < <(measure baseline dependencies "$here/compile_time/dependencies_only.cpp")
line dependencies_only.cpp dependencies "$base_s" "$base_kb" "$base_s"
if wanted header-only; then
    read -r s kb < <(measure readme header-only "$root/examples/readme_example.cpp")
    line readme_example.cpp header-only "$s" "$kb" "$base_s"
fi
if wanted compiled; then
    read -r s kb < <(measure readme compiled "$root/examples/readme_example.cpp" \
        -DPETREL_SEPARATE_COMPILATION)
    line readme_example.cpp compiled "$s" "$kb" "$base_s"
fi
if wanted library; then
    read -r s kb < <(measure library library "$work/petrel_compiled.cpp" \
        -DPETREL_SEPARATE_COMPILATION)
    line petrel_compiled.cpp library "$s" "$kb" "$base_s"
fi
