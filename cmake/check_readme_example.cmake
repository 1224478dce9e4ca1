# Fails unless README.md quotes examples/readme_example.cpp verbatim, from its first
# #include line to its end, inside a ```cpp block. Run with -DREADME=... -DEXAMPLE=...
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)
string(FIND "${example}" "#include" start)
if(start LESS 0)
    message(FATAL_ERROR "${EXAMPLE} has no #include line")
endif()
string(SUBSTRING "${example}" ${start} -1 body)
string(FIND "${readme}" "```cpp\n${body}```" found)
if(found LESS 0)
    message(FATAL_ERROR "README.md does not quote ${EXAMPLE} (from its first #include to "
                        "its end) in a ```cpp block: update the README")
endif()
message(STATUS "README.md quotes ${EXAMPLE}")
