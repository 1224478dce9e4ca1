# Compiler cache for the builds of scripts/test. Sourced, not run:
#
#   source scripts/lib/ccache.sh
#   petrel_use_ccache SOURCE_ROOT
#
# When ccache is on PATH and PETREL_CCACHE is not 0, exports what makes CMake compile
# through it (CMAKE_CXX_COMPILER_LAUNCHER, read when a build tree is first configured)
# and prints the version and base directory. Paths under SOURCE_ROOT are rewritten
# relative to it (CCACHE_BASEDIR) and the working directory is left out of the hash
# (CCACHE_NOHASHDIR), so clones at any path share hits. Variables already set win.

petrel_use_ccache() {
    local root="$1"
    if [[ "${PETREL_CCACHE:-1}" == 0 ]] || ! command -v ccache >/dev/null 2>&1; then
        return 0
    fi
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
    export CCACHE_NOHASHDIR=1
    export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
    export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-10G}"
    echo "==> ccache: $(ccache --version | head -n 1), base directory ${CCACHE_BASEDIR}"
}
