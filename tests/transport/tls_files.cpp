#include <petrel/transport/tls_files.hpp>

#include <catch2/catch.hpp>

TEST_CASE("tls_files: TLS is asked for once any of the three files is named", "[transport][tls]") {
    CHECK_FALSE(petrel::tls_files{}.enabled());
    CHECK(petrel::tls_files{.certificate = "node.pem"}.enabled());
    CHECK(petrel::tls_files{.private_key = "node.key"}.enabled());
    CHECK(petrel::tls_files{.authority = "ca.pem"}.enabled());
    CHECK(petrel::tls_files{"node.pem", "node.key", "ca.pem"}.enabled());
}
