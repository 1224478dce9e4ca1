#include <petrel/transport/detail/address.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using petrel::detail::format_host_port;
using petrel::detail::parse_host_port;

TEST_CASE("address: host and port, IPv6 in brackets, any host", "[transport]") {
    const auto v4 = parse_host_port("10.0.0.1:9100");
    REQUIRE(v4);
    CHECK(v4->host == "10.0.0.1");
    CHECK(v4->port == 9100);
    const auto v6 = parse_host_port("[::1]:80");
    REQUIRE(v6);
    CHECK(v6->host == "::1");
    CHECK(v6->port == 80);
    const auto any = parse_host_port(":0");
    REQUIRE(any);
    CHECK(any->host.empty());
    CHECK(any->port == 0);
}

TEST_CASE("address: text without a valid port is refused", "[transport]") {
    for (const char* bad : {"", "host", "host:", "host:x1", "host:1x", "host:65536", "host:-1",
                            "host:99999999999999999999"}) {
        INFO(bad);
        CHECK_FALSE(parse_host_port(bad));
    }
}

TEST_CASE("address: a formatted address reads back as its host and port", "[transport]") {
    CHECK(format_host_port("127.0.0.1", 9100) == "127.0.0.1:9100");
    CHECK(format_host_port("::1", 80) == "[::1]:80");
    for (const std::string host : {"example.org", "0.0.0.0", "fe80::1", "::"}) {
        for (const std::uint16_t port :
             {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{65535}}) {
            const auto back = parse_host_port(format_host_port(host, port));
            REQUIRE(back);
            CHECK(back->host == host);
            CHECK(back->port == port);
        }
    }
}
