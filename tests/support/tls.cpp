#include "support/tls.hpp"

#include <string>

// Only this unit is given the certificates' folder, an absolute path: the other test units
// compile the same wherever the source tree is, so a compiler cache shares them between
// clones (in the presets that compile each test file alone).
#ifndef PETREL_TEST_TLS_DIR
#error "PETREL_TEST_TLS_DIR names the folder of the test certificates (tests/CMakeLists.txt)"
#endif

namespace petrel::test {

std::string tls_path(const std::string& file) {
    return std::string(PETREL_TEST_TLS_DIR) + "/" + file;
}

} // namespace petrel::test
