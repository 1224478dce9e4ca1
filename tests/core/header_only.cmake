# Header-only, the server's, the manager's and a member's bodies are included from the end
# of their state headers (detail/*_state.hpp), once the state is complete: each state
# header must compile as a unit's first and only include, with warnings as errors.
#
# cmake -DCXX=<compiler> -DINCLUDE_DIR=<include/> -DWORK_DIR=<dir> -P header_only.cmake
foreach(var CXX INCLUDE_DIR WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "header_only: ${var} is not set")
    endif()
endforeach()

set(headers petrel/server/detail/server_state.hpp petrel/cluster/detail/manager_state.hpp
            petrel/cluster/detail/member_state.hpp)
file(MAKE_DIRECTORY "${WORK_DIR}")
foreach(h IN LISTS headers)
    string(MAKE_C_IDENTIFIER "${h}" name)
    set(tu "${WORK_DIR}/${name}.cpp")
    file(WRITE "${tu}" "#include <${h}>\n")
    execute_process(
        COMMAND "${CXX}" -std=c++20 -DASIO_STANDALONE -DASIO_NO_DEPRECATED
                -DASIO_HAS_CO_AWAIT=1 -DASIO_HAS_STD_COROUTINE=1 -I "${INCLUDE_DIR}"
                -Wall -Wextra -Wpedantic -Werror -fsyntax-only "${tu}"
        OUTPUT_VARIABLE output
        ERROR_VARIABLE output
        RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "header_only: a unit that includes only <${h}> does not compile "
                            "header-only:\n${output}")
    endif()
endforeach()
list(LENGTH headers count)
message(STATUS "header_only: the ${count} state headers compile as a unit's first include")
