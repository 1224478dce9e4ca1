# Findxxhash
# ----------
#
# Finds xxHash's header, used header-only (XXH_INLINE_ALL: nothing to link).
#
# Imported target:
#
#   xxhash::xxhash
#     INTERFACE IMPORTED target carrying the include directory of xxhash.h.
#
# Result variables:
#
#   xxhash_FOUND         - TRUE if xxhash.h was found
#   xxhash_INCLUDE_DIRS  - include directory containing xxhash.h
#   xxhash_VERSION       - version string, e.g. 0.8.1 (from XXH_VERSION_MAJOR,
#                          XXH_VERSION_MINOR and XXH_VERSION_RELEASE in xxhash.h)
#
# Cache variables:
#
#   xxhash_INCLUDE_DIR   - directory containing xxhash.h
#
# Hints: set xxhash_ROOT or CMAKE_PREFIX_PATH to search a custom prefix.

find_path(xxhash_INCLUDE_DIR
    NAMES xxhash.h
    DOC "Directory containing xxHash's header xxhash.h")
mark_as_advanced(xxhash_INCLUDE_DIR)

if(xxhash_INCLUDE_DIR AND EXISTS "${xxhash_INCLUDE_DIR}/xxhash.h")
    foreach(_xxh_part MAJOR MINOR RELEASE)
        file(STRINGS "${xxhash_INCLUDE_DIR}/xxhash.h" _xxh_line
            REGEX "^#[ \t]*define[ \t]+XXH_VERSION_${_xxh_part}[ \t]+[0-9]+")
        string(REGEX REPLACE "^#[ \t]*define[ \t]+XXH_VERSION_${_xxh_part}[ \t]+([0-9]+).*$" "\\1"
            _xxh_${_xxh_part} "${_xxh_line}")
    endforeach()
    if(_xxh_MAJOR MATCHES "^[0-9]+$" AND _xxh_MINOR MATCHES "^[0-9]+$"
       AND _xxh_RELEASE MATCHES "^[0-9]+$")
        set(xxhash_VERSION "${_xxh_MAJOR}.${_xxh_MINOR}.${_xxh_RELEASE}")
    endif()
    unset(_xxh_part)
    unset(_xxh_line)
    unset(_xxh_MAJOR)
    unset(_xxh_MINOR)
    unset(_xxh_RELEASE)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxhash
    REQUIRED_VARS xxhash_INCLUDE_DIR
    VERSION_VAR xxhash_VERSION)

if(xxhash_FOUND)
    set(xxhash_INCLUDE_DIRS "${xxhash_INCLUDE_DIR}")
    if(NOT TARGET xxhash::xxhash)
        add_library(xxhash::xxhash INTERFACE IMPORTED)
        set_target_properties(xxhash::xxhash PROPERTIES
            INTERFACE_INCLUDE_DIRECTORIES "${xxhash_INCLUDE_DIR}")
    endif()
endif()
