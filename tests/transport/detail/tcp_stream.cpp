#include <petrel/transport/detail/tcp_stream.hpp>

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/handshake.hpp>

#include "support/tls.hpp"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::make_tls_context;
using petrel::detail::tcp_stream;
using petrel::test::tls_path;

namespace {

/// The message of the `std::system_error` that making a context from `f` throws.
std::string refusal_of(const petrel::tls_files& f) {
    try {
        (void)make_tls_context(f);
    } catch (const std::system_error& e) {
        return e.what();
    }
    return "";
}

/// Sends `bytes` from one end of a loopback connection to the other through tcp_stream's
/// asynchronous operations (with TLS over both when `tls` is given, the receiving end's
/// from `tls_b` when given) and returns what arrived; the names each end saw its peer
/// show (sender's first) go to `names`.
std::vector<std::byte> carry(const std::vector<std::byte>& bytes, asio::ssl::context* tls,
                             asio::ssl::context* tls_b = nullptr,
                             std::array<std::string, 2>* names = nullptr) {
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    asio::ip::tcp::socket a(asio::make_strand(io));
    asio::ip::tcp::socket b(asio::make_strand(io));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
    auto wrap = [](asio::ip::tcp::socket s, asio::ssl::context* c) {
        return c ? tcp_stream(std::move(s), *c) : tcp_stream(std::move(s));
    };
    tcp_stream sa = wrap(std::move(a), tls);
    tcp_stream sb = wrap(std::move(b), tls_b ? tls_b : tls);
    // The moves leave each TLS layer where it was: its operations run on it.
    tcp_stream ma = std::move(sa);
    tcp_stream mb = std::move(sb);
    auto send = [&]() -> asio::awaitable<void> {
        if (ma.tls()) {
            REQUIRE_FALSE(co_await petrel::detail::tls_handshake(ma, true, 5s));
        }
        if (names) {
            (*names)[0] = ma.peer_name();
        }
        std::size_t at = 0;
        while (at < bytes.size()) {
            at += co_await ma.async_write_some(
                asio::buffer(bytes.data() + at, std::min<std::size_t>(bytes.size() - at, 70000)),
                asio::use_awaitable);
        }
    };
    auto receive = [&]() -> asio::awaitable<std::vector<std::byte>> {
        if (mb.tls()) {
            REQUIRE_FALSE(co_await petrel::detail::tls_handshake(mb, false, 5s));
        }
        if (names) {
            (*names)[1] = mb.peer_name();
        }
        std::vector<std::byte> got(bytes.size());
        std::size_t at = 0;
        while (at < got.size()) {
            at += co_await mb.async_read_some(asio::buffer(got.data() + at, got.size() - at),
                                              asio::use_awaitable);
        }
        co_return got;
    };
    auto sent = asio::co_spawn(ma.get_executor(), send(), asio::use_future);
    auto received = asio::co_spawn(mb.get_executor(), receive(), asio::use_future);
    std::thread runner([&] { io.run(); });
    sent.get();
    auto got = received.get();
    runner.join();
    return got;
}

} // namespace

TEST_CASE("tcp_stream: a TLS context needs all three files, readable, the key the "
          "certificate's",
          "[transport][tls]") {
    CHECK_FALSE(petrel::tls_files{}.enabled());
    CHECK(make_tls_context(petrel::test::tls_of()) != nullptr);

    auto f = petrel::test::tls_of();
    f.authority.clear();
    CHECK(f.enabled());
    CHECK_THAT(refusal_of(f), Catch::Contains("--tls-ca"));
    f = petrel::test::tls_of();
    f.private_key.clear();
    CHECK_THAT(refusal_of(f), Catch::Contains("--tls-key"));

    f = petrel::test::tls_of();
    f.certificate = tls_path("missing.pem");
    CHECK_THAT(refusal_of(f), Catch::Contains("missing.pem"));
    f = petrel::test::tls_of();
    f.authority = tls_path("make.sh"); // not a certificate
    CHECK_THAT(refusal_of(f), Catch::Contains("make.sh"));

    f = petrel::test::tls_of();
    f.private_key = tls_path("stranger.key"); // another certificate's key
    CHECK_THAT(refusal_of(f), Catch::Contains("stranger.key") && Catch::Contains("mismatch"));
}

TEST_CASE("tcp_stream: bytes cross plain and through TLS, in order, and a moved stream keeps "
          "its TLS layer",
          "[transport][tls]") {
    std::vector<std::byte> bytes(1 << 20);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<std::byte>(i * 131 % 251);
    }
    CHECK(carry(bytes, nullptr) == bytes);
    const auto tls = make_tls_context(petrel::test::tls_of());
    CHECK(carry(bytes, tls.get()) == bytes);
}

TEST_CASE("tcp_stream: each end of a TLS connection reads the name its peer's certificate "
          "shows; a certificate file's name",
          "[transport][tls]") {
    const std::vector<std::byte> bytes(1000, std::byte{7});
    std::array<std::string, 2> names;
    CHECK(carry(bytes, nullptr, nullptr, &names) == bytes);
    CHECK(names == std::array<std::string, 2>{"", ""}); // plain TCP: none
    const auto node = make_tls_context(petrel::test::tls_of("node"));
    const auto rank1 = make_tls_context(petrel::test::tls_of("rank-1"));
    CHECK(carry(bytes, node.get(), rank1.get(), &names) == bytes);
    CHECK(names[0] == "rank-1");
    CHECK(names[1] == "petrel test node");

    CHECK(petrel::detail::certificate_name(tls_path("rank-2.pem")) == "rank-2");
    CHECK(petrel::detail::certificate_name(tls_path("node.pem")) == "petrel test node");
    CHECK_THROWS_WITH(petrel::detail::certificate_name(tls_path("make.sh")),
                      Catch::Contains("cannot read a certificate") && Catch::Contains("make.sh"));
    CHECK_THROWS_WITH(petrel::detail::certificate_name(tls_path("missing.pem")),
                      Catch::Contains("missing.pem"));
}
