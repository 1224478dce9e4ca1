# FindAsio
# --------
#
# Finds standalone (non-Boost) Asio, a header-only library.
#
# Imported target:
#
#   Asio::Asio
#     INTERFACE IMPORTED target carrying the include directory and the
#     compile definitions ASIO_STANDALONE and ASIO_NO_DEPRECATED. It links
#     Threads::Threads. When the consuming compiler is Clang it also defines
#     ASIO_HAS_CO_AWAIT=1 and ASIO_HAS_STD_COROUTINE=1: Asio 1.22 only
#     detects coroutine support on Clang through <experimental/coroutine>,
#     while Clang 14 in C++20 mode with libstdc++ 12 provides <coroutine>.
#     This is expressed with $<CXX_COMPILER_ID:Clang> so it follows the
#     compiler of the project that consumes the target.
#
# Result variables:
#
#   Asio_FOUND         - TRUE if asio.hpp was found
#   Asio_INCLUDE_DIRS  - include directory containing asio.hpp
#   Asio_VERSION       - version string, e.g. 1.22.1 (from ASIO_VERSION in
#                        asio/version.hpp, encoded as 102201)
#
# Cache variables:
#
#   Asio_INCLUDE_DIR   - directory containing asio.hpp
#
# Hints: set Asio_ROOT or CMAKE_PREFIX_PATH to search a custom prefix.

find_path(Asio_INCLUDE_DIR
    NAMES asio.hpp
    DOC "Directory containing the standalone Asio header asio.hpp")
mark_as_advanced(Asio_INCLUDE_DIR)

if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
    file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_version_line
        REGEX "^#[ \t]*define[ \t]+ASIO_VERSION[ \t]+[0-9]+")
    string(REGEX REPLACE "^#[ \t]*define[ \t]+ASIO_VERSION[ \t]+([0-9]+).*$" "\\1"
        _asio_version_number "${_asio_version_line}")
    if(_asio_version_number MATCHES "^[0-9]+$")
        math(EXPR _asio_major "${_asio_version_number} / 100000")
        math(EXPR _asio_minor "${_asio_version_number} / 100 % 1000")
        math(EXPR _asio_patch "${_asio_version_number} % 100")
        set(Asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
        set(Asio_VERSION_MAJOR "${_asio_major}")
        set(Asio_VERSION_MINOR "${_asio_minor}")
        set(Asio_VERSION_PATCH "${_asio_patch}")
    endif()
    unset(_asio_version_line)
    unset(_asio_version_number)
    unset(_asio_major)
    unset(_asio_minor)
    unset(_asio_patch)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio
    REQUIRED_VARS Asio_INCLUDE_DIR
    VERSION_VAR Asio_VERSION)

if(Asio_FOUND)
    set(Asio_INCLUDE_DIRS "${Asio_INCLUDE_DIR}")

    if(NOT TARGET Threads::Threads)
        set(THREADS_PREFER_PTHREAD_FLAG ON)
        find_package(Threads REQUIRED)
    endif()

    if(NOT TARGET Asio::Asio)
        add_library(Asio::Asio INTERFACE IMPORTED)
        set_target_properties(Asio::Asio PROPERTIES
            INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}"
            INTERFACE_COMPILE_DEFINITIONS
                "ASIO_STANDALONE;ASIO_NO_DEPRECATED;$<$<CXX_COMPILER_ID:Clang>:ASIO_HAS_CO_AWAIT=1>;$<$<CXX_COMPILER_ID:Clang>:ASIO_HAS_STD_COROUTINE=1>"
            INTERFACE_LINK_LIBRARIES Threads::Threads)
    endif()
endif()
