# Runs the README's "Installing" commands: a fresh configure of the source tree with the
# tests, examples and benchmarks off, a build (the compiled library) and an install into a
# prefix, then the consumer project tests/consumer (quoted by the README as app/), built
# against that prefix, its header-only and its compiled-once program each run.
#
#   cmake -DSOURCE_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DREADME=... -DVERSION=...
#         [-DGENERATOR=...] [-DCXX_COMPILER=...] [-DCXX_FLAGS=...] [-DEXE_LINKER_FLAGS=...]
#         -P install_and_consume.cmake
#
# The commands below are the README's, byte for byte (checked first). Running them, the
# paths `petrel` (the source tree), `app` (the consumer) and `/opt/petrel` (the prefix)
# become SOURCE_DIR, CONSUMER_DIR and WORK_DIR/prefix; the build directories land in
# WORK_DIR. Each configure is also given the test's generator, compiler and flags (the
# consumer's with warnings as errors, below), and the Petrel configure
# CMAKE_DISABLE_FIND_PACKAGE_<name> for every dependency of the tests, examples and
# benchmarks: a REQUIRED search for one of them fails the configure.
set(install_commands [=[
cmake -S petrel -B petrel-build -DPETREL_BUILD_TESTS=OFF -DPETREL_BUILD_EXAMPLES=OFF -DPETREL_BUILD_BENCHMARKS=OFF
cmake --build petrel-build
cmake --install petrel-build --prefix /opt/petrel
]=])
set(consumer_commands [=[
cmake -S app -B app-build -DCMAKE_PREFIX_PATH=/opt/petrel
cmake --build app-build
app-build/app
app-build/app_compiled
]=])
set(not_needed Catch2 ZLIB xtensor-blas BLAS LAPACK OpenBLAS)

foreach(var IN ITEMS SOURCE_DIR CONSUMER_DIR WORK_DIR README VERSION)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "install_and_consume.cmake: -D${var}=... is required")
    endif()
endforeach()

# The README quotes the commands and the consumer project verbatim.
file(READ "${README}" readme)
file(READ "${CONSUMER_DIR}/CMakeLists.txt" consumer_cmake)
file(READ "${CONSUMER_DIR}/main.cpp" consumer_main)
foreach(quote IN ITEMS "```sh\n${install_commands}```" "```cmake\n${consumer_cmake}```"
                       "```cpp\n${consumer_main}```" "```sh\n${consumer_commands}```")
    string(FIND "${readme}" "${quote}" found)
    if(found LESS 0)
        message(FATAL_ERROR "README.md does not quote, in its \"Installing\" section:\n"
                            "${quote}\n(tests/package/install_and_consume.cmake runs these "
                            "commands; tests/consumer is the app/ project)")
    endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(common_options --no-warn-unused-cli)
if(GENERATOR)
    list(APPEND common_options -G "${GENERATOR}")
endif()
foreach(var IN ITEMS CXX_COMPILER EXE_LINKER_FLAGS)
    if(DEFINED ${var})
        list(APPEND common_options "-DCMAKE_${var}=${${var}}")
    endif()
endforeach()
# The consumer's header-only program compiles every .ipp in a user's unit (it includes
# all.hpp): in strict C++20, with warnings as errors at the Release type's optimisation.
# The include directories of imported targets are then not system ones (CMake's default
# makes them so, which silences their warnings): Petrel's headers under the prefix are
# warned about; the dependencies', in the compiler's own search path, stay quiet.
set(consumer_options ${common_options} -DCMAKE_NO_SYSTEM_FROM_IMPORTED=ON
    -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_COMPILE_WARNING_AS_ERROR=ON
    "-DCMAKE_CXX_FLAGS=${CXX_FLAGS} -Wall -Wextra -Wpedantic")
if(DEFINED CXX_FLAGS)
    list(APPEND common_options "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
endif()

string(REPLACE "\n" ";" lines "${install_commands}${consumer_commands}")
foreach(line IN LISTS lines)
    if(line STREQUAL "")
        continue()
    endif()
    separate_arguments(words UNIX_COMMAND "${line}")
    set(command "")
    set(extra "")
    foreach(word IN LISTS words)
        if(word STREQUAL "cmake")
            set(word "${CMAKE_COMMAND}")
        elseif(word STREQUAL "petrel")
            set(word "${SOURCE_DIR}")
            set(extra ${common_options})
            foreach(package IN LISTS not_needed)
                list(APPEND extra "-DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON")
            endforeach()
        elseif(word STREQUAL "app")
            set(word "${CONSUMER_DIR}")
            set(extra ${consumer_options} -DCMAKE_BUILD_TYPE=Release)
        elseif(word MATCHES "^app-build/app")
            set(word "${WORK_DIR}/${word}")
        else()
            string(REPLACE "/opt/petrel" "${prefix}" word "${word}")
        endif()
        list(APPEND command "${word}")
    endforeach()
    list(APPEND command ${extra})
    message(STATUS "README: ${line}")
    execute_process(COMMAND ${command}
        WORKING_DIRECTORY "${WORK_DIR}"
        RESULT_VARIABLE result
        OUTPUT_VARIABLE output
        ERROR_VARIABLE output)
    if(NOT result EQUAL 0)
        list(JOIN command " " shown)
        message(FATAL_ERROR "failed (${result}): ${shown}\n${output}")
    endif()
    if(line MATCHES "^app-build/" AND NOT output STREQUAL "petrel ${VERSION}\n")
        message(FATAL_ERROR "${line} printed \"${output}\", expected \"petrel ${VERSION}\"")
    endif()
endforeach()

# What the README says the install writes.
foreach(file IN ITEMS include/petrel/petrel.hpp lib/libpetrel.a lib/cmake/petrel/petrelConfig.cmake
                      lib/cmake/petrel/petrelConfigVersion.cmake
                      lib/cmake/petrel/petrelTargets.cmake lib/cmake/petrel/FindAsio.cmake
                      lib/cmake/petrel/Findxxhash.cmake)
    if(NOT EXISTS "${prefix}/${file}")
        message(FATAL_ERROR "the install did not write ${file} under the prefix")
    endif()
endforeach()

# The consumer found this prefix's package, not another installed Petrel, and ran.
file(STRINGS "${WORK_DIR}/app-build/CMakeCache.txt" petrel_dir REGEX "^petrel_DIR:")
file(REAL_PATH "${prefix}" real_prefix)
string(FIND "${petrel_dir}" "petrel_DIR:PATH=${prefix}/" at)
string(FIND "${petrel_dir}" "petrel_DIR:PATH=${real_prefix}/" at_real)
if(NOT at EQUAL 0 AND NOT at_real EQUAL 0)
    message(FATAL_ERROR "the consumer did not use the installed package: ${petrel_dir}")
endif()
message(STATUS "installed into ${prefix}; both consumers printed: petrel ${VERSION}")
