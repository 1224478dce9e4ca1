#!/usr/bin/env bash
# Tests scripts/lib/ccache.sh: what it exports, when it stays off, and that two copies of
# a project at different paths share hits through it.
#
#   tests/scripts/ccache.sh SOURCE_ROOT CXX_COMPILER
#
# Exits 77 (skipped) when ccache is not installed.
set -euo pipefail

root="$1"
cxx="$2"
source "$root/scripts/lib/ccache.sh"

# What the caller (scripts/test) may have exported must not decide the outcome.
unset CMAKE_CXX_COMPILER_LAUNCHER CCACHE_BASEDIR CCACHE_NOHASHDIR CCACHE_SLOPPINESS \
    CCACHE_MAXSIZE CCACHE_DIR PETREL_CCACHE

fail() {
    echo "FAILED: $*" >&2
    exit 1
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Turned off, or not installed: nothing is exported.
(
    PETREL_CCACHE=0
    petrel_use_ccache "$tmp" >/dev/null
    [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]] || fail "PETREL_CCACHE=0 still set a launcher"
)
(
    mkdir "$tmp/empty"
    PATH="$tmp/empty"
    petrel_use_ccache "$tmp" >/dev/null
    [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]] || fail "a launcher without ccache on PATH"
)
grep -q '^petrel_use_ccache "\$PWD"$' "$root/scripts/test" ||
    fail "scripts/test does not call petrel_use_ccache with its source tree"

if ! command -v ccache >/dev/null 2>&1; then
    echo "ccache is not installed: skipped"
    exit 77
fi

# A small project, copied to two paths; its header is found through an absolute -I.
mkdir -p "$tmp/one/project/include"
cat >"$tmp/one/project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(cached CXX)
add_executable(cached main.cpp)
target_include_directories(cached PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include")
CMAKE
cat >"$tmp/one/project/include/cached.hpp" <<'CPP'
#pragma once
inline int answer() { return 42; }
CPP
cat >"$tmp/one/project/main.cpp" <<'CPP'
#include <cached.hpp>
int main() { return answer() == 42 ? 0 : 1; }
CPP
mkdir -p "$tmp/two/elsewhere"
cp -r "$tmp/one/project" "$tmp/two/elsewhere/project"

export CCACHE_DIR="$tmp/cache"
stat_of() { ccache --print-stats | awk -v k="$1" '$1 == k { print $2 }'; }

build() { # SOURCE_ROOT: configures and builds there as scripts/test does
    (
        cd "$1"
        unset CMAKE_CXX_COMPILER_LAUNCHER CCACHE_BASEDIR
        petrel_use_ccache "$PWD" >"$tmp/said"
        line="$(cat "$tmp/said")"
        [[ "$line" == "==> ccache: "*", base directory $PWD" ]] || fail "printed: $line"
        [[ "$CMAKE_CXX_COMPILER_LAUNCHER" == ccache && "$CCACHE_BASEDIR" == "$PWD" &&
            "$CCACHE_NOHASHDIR" == 1 ]] || fail "not exported as expected"
        CXX="$cxx" cmake -S . -B build >/dev/null
        cmake --build build >/dev/null
        ./build/cached
    )
}

# (Configuring compiles too: CMake's compiler checks go through the launcher.)
ccache --zero-stats >/dev/null
build "$tmp/one/project"
first="$(stat_of cache_miss)"
[[ "$first" -ge 1 ]] || fail "the first build did not compile through ccache"

ccache --zero-stats >/dev/null
build "$tmp/two/elsewhere/project"
hits="$(stat_of direct_cache_hit)"
misses="$(stat_of cache_miss)"
[[ "$hits" == "$first" && "$misses" == 0 ]] ||
    fail "the copy at another path: $hits hits and $misses misses, not $first hits"
echo "ccache: the copy at another path hit the cache for all $first compilations"
