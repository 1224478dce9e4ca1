#include <petrel/transport/tls_files.hpp>

#include <catch2/catch.hpp>

TEST_CASE("tls_files: TLS is asked for once any of the three files is named", "[transport][tls]") {
    CHECK_FALSE(petrel::tls_files{}.enabled());
    CHECK(petrel::tls_files{.certificate = "node.pem"}.enabled());
    CHECK(petrel::tls_files{.private_key = "node.key"}.enabled());
    CHECK(petrel::tls_files{.authority = "ca.pem"}.enabled());
    CHECK(petrel::tls_files{"node.pem", "node.key", "ca.pem"}.enabled());
}

TEST_CASE("tls_files: a certificate names a rank by its common name rank-N, nothing else",
          "[transport][tls]") {
    CHECK(petrel::certificate_rank("rank-0") == 0u);
    CHECK(petrel::certificate_rank("rank-7") == 7u);
    CHECK(petrel::certificate_rank("rank-4294967295") == 4294967295u);
    for (const auto* other : {"", "rank-", "rank-01", "rank--1", "rank-4294967296", "rank-1x",
                              "Rank-1", "rank 1", "node rank-1", "petrel test node"}) {
        INFO(other);
        CHECK_FALSE(petrel::certificate_rank(other));
    }
}
