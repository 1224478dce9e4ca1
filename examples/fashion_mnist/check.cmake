# Checks runs of the fashion_mnist example (for ctest).
#
#   cmake -DPROGRAM=path/to/fashion_mnist -DMODE=smoke -DWORK_DIR=dir -P check.cmake
#       One short run (1 epoch of softmax on 6,000 images, 2 servers, 2 workers): exit
#       status 0, a CSV log with its header and one epoch, and `test_accuracy=0.xxxx` as
#       the last line of stdout. Then bad input: an unknown option, a bad consistency and a
#       missing data directory each end with status 2 and a message naming the problem.
#
#   cmake -DPROGRAM=path/to/fashion_mnist -DMODE=agreement -DWORK_DIR=dir -P check.cmake
#       Softmax regression under `sequential`, once with 1 worker and batch 128 and once
#       with 4 workers and batch 32 (the same 128 images per update): both reach a test
#       accuracy of at least 0.84, and the two accuracies differ by at most 0.5 points.
cmake_minimum_required(VERSION 3.25)

foreach(var PROGRAM MODE WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "check.cmake: -D${var}=... is required")
    endif()
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs the program with ARGN; sets <prefix>_status, <prefix>_out and <prefix>_err.
function(run_program prefix)
    execute_process(COMMAND "${PROGRAM}" ${ARGN}
                    WORKING_DIRECTORY "${WORK_DIR}"
                    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    set(${prefix}_status "${status}" PARENT_SCOPE)
    set(${prefix}_out "${out}" PARENT_SCOPE)
    set(${prefix}_err "${err}" PARENT_SCOPE)
endfunction()

# Checks a run that must succeed and end with `test_accuracy=D.DDDD`; sets <var> to the
# accuracy in units of 0.0001.
function(final_accuracy prefix var)
    if(NOT "${${prefix}_status}" STREQUAL "0")
        message(FATAL_ERROR "${prefix}: exit status ${${prefix}_status}\n"
                            "stdout:\n${${prefix}_out}\nstderr:\n${${prefix}_err}")
    endif()
    string(STRIP "${${prefix}_out}" out)
    string(REGEX REPLACE ".*\n" "" last "${out}")
    if(NOT last MATCHES "^test_accuracy=([01])\\.([0-9][0-9][0-9][0-9])$")
        message(FATAL_ERROR "${prefix}: the last line is \"${last}\", "
                            "expected test_accuracy=D.DDDD\nstdout:\n${${prefix}_out}")
    endif()
    set(whole "${CMAKE_MATCH_1}")
    # The fraction without leading zeros, as a plain decimal for math(EXPR).
    string(REGEX REPLACE "^0+([0-9])" "\\1" fraction "${CMAKE_MATCH_2}")
    math(EXPR value "${whole} * 10000 + ${fraction}")
    set(${var} "${value}" PARENT_SCOPE)
    message(STATUS "${prefix}: ${last}")
endfunction()

# Checks a run that must fail with status 2 and a message matching `pattern`.
function(expect_refusal prefix pattern)
    if(NOT "${${prefix}_status}" STREQUAL "2")
        message(FATAL_ERROR "${prefix}: exit status ${${prefix}_status}, expected 2\n"
                            "stdout:\n${${prefix}_out}\nstderr:\n${${prefix}_err}")
    endif()
    if(NOT "${${prefix}_err}" MATCHES "${pattern}")
        message(FATAL_ERROR "${prefix}: stderr does not match \"${pattern}\":\n"
                            "${${prefix}_err}")
    endif()
    message(STATUS "${prefix}: refused as expected")
endfunction()

if(MODE STREQUAL "smoke")
    set(csv "${WORK_DIR}/smoke.csv")
    file(REMOVE "${csv}")
    run_program(smoke --model softmax --epochs 1 --servers 2 --workers 2 --train-limit 6000
                --test-limit 2000 --no-plot --csv "${csv}")
    final_accuracy(smoke accuracy)
    if(NOT EXISTS "${csv}")
        message(FATAL_ERROR "smoke: no CSV log at ${csv}")
    endif()
    file(STRINGS "${csv}" lines)
    list(LENGTH lines count)
    list(GET lines 0 header)
    if(NOT count EQUAL 2 OR NOT header MATCHES "^epoch,seconds,train_loss,train_accuracy,")
        message(FATAL_ERROR "smoke: the CSV log should hold a header and one epoch:\n"
                            "${lines}")
    endif()
    if(accuracy LESS 5000)
        message(FATAL_ERROR "smoke: one epoch of softmax should pass 0.5 (got ${accuracy})")
    endif()

    run_program(flag --model softmax --epochs 1 --no-such-option)
    expect_refusal(flag "unknown option --no-such-option")
    run_program(consistency --consistency bounded_delay:3)
    expect_refusal(consistency "--consistency")
    run_program(data --data "${WORK_DIR}/no-such-directory")
    expect_refusal(data "no-such-directory/train-images-idx3-ubyte.gz")
elseif(MODE STREQUAL "agreement")
    run_program(one_worker --model softmax --consistency sequential --servers 2 --workers 1
                --batch 128 --min-accuracy 0.84 --no-plot --csv "${WORK_DIR}/one_worker.csv")
    final_accuracy(one_worker a1)
    run_program(four_workers --model softmax --consistency sequential --servers 2 --workers 4
                --batch 32 --min-accuracy 0.84 --no-plot --csv "${WORK_DIR}/four_workers.csv")
    final_accuracy(four_workers a4)
    math(EXPR diff "${a1} - ${a4}")
    if(diff LESS 0)
        math(EXPR diff "0 - ${diff}")
    endif()
    if(diff GREATER 50)
        message(FATAL_ERROR "1 worker (${a1}) and 4 workers (${a4}) differ by ${diff} "
                            "ten-thousandths, more than 0.5 points")
    endif()
    message(STATUS "1 worker and 4 workers agree within ${diff} ten-thousandths")
else()
    message(FATAL_ERROR "check.cmake: MODE must be smoke or agreement")
endif()
