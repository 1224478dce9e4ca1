# What a worker's translation unit reads of Petrel: a file that includes only
# <petrel/kv_store.hpp>, preprocessed as the compiled library's users build it
# (PETREL_SEPARATE_COMPILATION), must reach no server storage, no checkpoint writer or
# manifest code, no JSON reader, no compiled-once bodies (impl/) and no cluster
# internals. Only Petrel's headers are checked (-MM leaves out the system's, where
# Asio's own <unistd.h> and <fcntl.h> come from).
#
# cmake -DCXX=<compiler> -DINCLUDE_DIR=<include/> -DWORK_DIR=<dir> -P include_hygiene.cmake
foreach(var CXX INCLUDE_DIR WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "include_hygiene: ${var} is not set")
    endif()
endforeach()

file(MAKE_DIRECTORY "${WORK_DIR}")
set(tu "${WORK_DIR}/worker_tu.cpp")
file(WRITE "${tu}" "#include <petrel/kv_store.hpp>\n")
execute_process(
    COMMAND "${CXX}" -std=c++20 -DASIO_STANDALONE -DASIO_NO_DEPRECATED
            -DPETREL_SEPARATE_COMPILATION -I "${INCLUDE_DIR}" -MM "${tu}"
    OUTPUT_VARIABLE deps
    ERROR_VARIABLE errors
    RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "include_hygiene: preprocessing failed:\n${errors}")
endif()

string(REGEX MATCHALL "petrel/[^ \\\n]+" headers "${deps}")
list(REMOVE_DUPLICATES headers)
list(LENGTH headers count)
set(bad "")
foreach(h IN LISTS headers)
    if(h MATCHES "^petrel/(server/|impl/|cluster/detail/member_state|.*/impl/)")
        list(APPEND bad "${h}")
    endif()
endforeach()
if(bad)
    list(JOIN bad "\n  " text)
    message(FATAL_ERROR
        "include_hygiene: <petrel/kv_store.hpp> reaches headers a worker must not read:\n  ${text}")
endif()
if(count LESS 10)
    message(FATAL_ERROR "include_hygiene: only ${count} Petrel headers found: is -MM working?")
endif()
message(STATUS "include_hygiene: <petrel/kv_store.hpp> reads ${count} Petrel headers, none of "
               "the server's, the checkpoint files' or compiled-once bodies")
