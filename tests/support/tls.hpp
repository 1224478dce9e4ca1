// Test support: the certificates of the TLS tests (tests/support/tls/make.sh).
#pragma once

#include <petrel/transport/connection.hpp>

#include <string>

namespace petrel::test {

/// The path of a file of the test certificates (defined in tests/support/tls.cpp, the one
/// unit that is given their folder).
std::string tls_path(const std::string& file);

/// A node's TLS files: `node` (signed by the test authority) or `stranger` (signed by
/// another), trusting `authority` (`ca` or `other_ca`).
inline tls_files tls_of(const std::string& node = "node", const std::string& authority = "ca") {
    return {tls_path(node + ".pem"), tls_path(node + ".key"), tls_path(authority + ".pem")};
}

} // namespace petrel::test
