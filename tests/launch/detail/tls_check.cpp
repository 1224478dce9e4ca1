#include <petrel/launch/detail/tls_check.hpp>

#include "support/tls.hpp"

#include <catch2/catch.hpp>

#include <system_error>

using petrel::detail::check_tls;

TEST_CASE("tls_check: TLS files must make a context; with ranked certificates, this process's "
          "must name its rank",
          "[launch][security][tls]") {
    petrel::settings s;
    CHECK_NOTHROW(check_tls(s)); // no TLS
    s.tls = petrel::test::tls_of("node");
    CHECK_NOTHROW(check_tls(s));
    s.tls.private_key = petrel::test::tls_path("stranger.key");
    CHECK_THROWS_WITH(check_tls(s), Catch::Contains("stranger.key"));

    s.tls_ranks = true;
    s.tls = petrel::test::tls_of("node");
    CHECK_THROWS_WITH(check_tls(s), Catch::Contains("node.pem' is named 'petrel test node', "
                                                    "not rank-0, the rank of this process"));
    s.tls = petrel::test::tls_of("rank-0");
    CHECK_NOTHROW(check_tls(s));
    s.launch.rank = 2;
    CHECK_THROWS_WITH(check_tls(s), Catch::Contains("is named 'rank-0', not rank-2"));
    s.tls = petrel::test::tls_of("rank-2");
    CHECK_NOTHROW(check_tls(s));
}
