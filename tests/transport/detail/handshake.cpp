#include <petrel/transport/detail/handshake.hpp>

#include <petrel/core/error.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/strand.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <utility>

using namespace std::chrono_literals;
using petrel::detail::auth_hello;
using petrel::detail::auth_proof;
using petrel::detail::check_proof;
using petrel::detail::make_proof;

namespace {

/// Two connected loopback sockets, each on its own strand of `io`.
struct socket_pair {
    asio::ip::tcp::socket a;
    asio::ip::tcp::socket b;
};

socket_pair connected(asio::io_context& io) {
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    asio::ip::tcp::socket a(asio::make_strand(io));
    asio::ip::tcp::socket b(asio::make_strand(io));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
    return {std::move(a), std::move(b)};
}

/// The outcome of running the handshake on `s` in the background.
std::future<std::error_code> shake(asio::ip::tcp::socket& s, const std::string& secret,
                                   bool initiator, std::chrono::milliseconds timeout = 5s,
                                   petrel::access credential = petrel::access::full,
                                   petrel::access* granted = nullptr) {
    return asio::co_spawn(
        s.get_executor(),
        petrel::detail::authenticate(s, secret, initiator, timeout, credential, granted),
        asio::use_future);
}

/// One handshake between two loopback sockets, run to its end: the initiator holds
/// `initiator_secret` for `claimed` access, the acceptor `acceptor_secret` for `held`.
struct both_ends {
    asio::io_context io;
    socket_pair s = connected(io);
    std::error_code initiator;
    std::error_code acceptor;
    petrel::access initiator_granted = petrel::access::full;
    petrel::access acceptor_granted = petrel::access::full;

    both_ends(const std::string& initiator_secret, const std::string& acceptor_secret,
              petrel::access claimed = petrel::access::full,
              petrel::access held = petrel::access::full) {
        // What each end grants starts as the other of what is claimed, so that a check
        // that it was granted can fail.
        const auto other =
            claimed == petrel::access::full ? petrel::access::read_only : petrel::access::full;
        initiator_granted = other;
        acceptor_granted = other;
        auto fa = shake(s.a, initiator_secret, true, 5s, claimed, &initiator_granted);
        auto fb = shake(s.b, acceptor_secret, false, 5s, held, &acceptor_granted);
        std::thread runner([&] { io.run(); });
        acceptor = fb.get();
        if (acceptor) {
            s.b.close(); // as the transport does, after its delay
        }
        initiator = fa.get();
        runner.join();
    }

    /// Whether the stream is in step: what the initiator writes next, the acceptor reads
    /// first.
    bool in_step() {
        asio::write(s.a, asio::buffer("next", 4));
        std::array<char, 4> got{};
        asio::read(s.b, asio::buffer(got));
        return std::string(got.data(), 4) == "next";
    }
};

} // namespace

TEST_CASE("handshake: a hello carries a fresh nonce behind the magic and version",
          "[transport][auth]") {
    const auto h1 = auth_hello::fresh();
    const auto h2 = auth_hello::fresh();
    CHECK(h1.nonce != h2.nonce);
    const auto bytes = h1.encode();
    CHECK(std::memcmp(bytes.data(), "PTRLAUTH", 8) == 0);
    CHECK(bytes[8] == std::byte{1});
    auth_hello back;
    REQUIRE(auth_hello::parse(bytes, back));
    CHECK(back.nonce == h1.nonce);

    auto bad = bytes;
    bad[0] = std::byte{'X'};
    CHECK_FALSE(auth_hello::parse(bad, back));
    bad = bytes;
    bad[8] = std::byte{2}; // another version
    CHECK_FALSE(auth_hello::parse(bad, back));
    // A Petrel frame where a hello belongs (a peer without a secret) is no hello.
    std::array<std::byte, auth_hello::bytes> frame{};
    frame[0] = std::byte{0x50};
    frame[1] = std::byte{0x54};
    CHECK_FALSE(auth_hello::parse(frame, back));
}

TEST_CASE("handshake: a proof holds only for its secret, its end and its nonces",
          "[transport][auth]") {
    const std::string secret = "correct horse battery staple";
    const auto i = auth_hello::fresh();
    const auto a = auth_hello::fresh();
    // The initiator's proof, as the acceptor checks it.
    const auth_proof from_initiator = make_proof(secret, true, a, i);
    CHECK(check_proof(secret, true, i, a, from_initiator));
    CHECK_FALSE(check_proof("correct horse battery stapler", true, i, a, from_initiator));
    // Not valid as the acceptor's proof (no reflection), nor over other nonces (no replay).
    CHECK_FALSE(check_proof(secret, false, a, i, from_initiator));
    CHECK_FALSE(check_proof(secret, true, auth_hello::fresh(), a, from_initiator));
    CHECK_FALSE(check_proof(secret, true, i, auth_hello::fresh(), from_initiator));
    // The acceptor's proof, as the initiator checks it.
    const auth_proof from_acceptor = make_proof(secret, false, i, a);
    CHECK(check_proof(secret, false, a, i, from_acceptor));
    CHECK(from_acceptor != from_initiator);
    auto flipped = from_acceptor;
    flipped[31] ^= std::byte{1};
    CHECK_FALSE(check_proof(secret, false, a, i, flipped));
}

TEST_CASE("handshake: two ends with one secret both succeed", "[transport][auth]") {
    both_ends h("s3cret-of-the-job", "s3cret-of-the-job");
    CHECK_FALSE(h.initiator);
    CHECK_FALSE(h.acceptor);
    CHECK(h.in_step());
}

TEST_CASE("handshake: ends with different secrets both fail, and the acceptor sends no proof",
          "[transport][auth]") {
    both_ends h("one secret", "another secret");
    CHECK(h.acceptor == petrel::errc::auth_failed);
    CHECK(h.initiator == petrel::errc::auth_failed);
}

TEST_CASE("handshake: an acceptor with the job's secret admits a reader's credential made from "
          "it, as read-only",
          "[transport][auth][security]") {
    const std::string secret = "s3cret-of-the-job";
    const auto reader = petrel::reader_credential(secret);
    using petrel::access;
    SECTION("the job's secret: full access") {
        both_ends h(secret, secret);
        CHECK_FALSE(h.initiator);
        CHECK_FALSE(h.acceptor);
        CHECK(h.acceptor_granted == access::full);
    }
    SECTION("the reader's credential: read-only, and the stream is in step") {
        both_ends h(reader, secret, access::read_only);
        CHECK_FALSE(h.initiator);
        CHECK_FALSE(h.acceptor);
        CHECK(h.acceptor_granted == access::read_only);
        CHECK(h.initiator_granted == access::read_only);
        CHECK(h.in_step());
    }
    SECTION("another job's reader credential fails") {
        both_ends h(petrel::reader_credential("another job's secret"), secret, access::read_only);
        CHECK(h.acceptor == petrel::errc::auth_failed);
        CHECK(h.initiator == petrel::errc::auth_failed);
    }
    SECTION("an acceptor that holds only a reader's credential admits no one with more") {
        both_ends h(secret, reader, access::full, access::read_only);
        CHECK(h.acceptor == petrel::errc::auth_failed);
        CHECK(h.initiator == petrel::errc::auth_failed);
    }
}

TEST_CASE("handshake: a peer that is no Petrel node, or says nothing, fails in time",
          "[transport][auth]") {
    SECTION("garbage where a hello belongs") {
        asio::io_context io;
        auto [a, b] = connected(io);
        auto fb = shake(b, "secret", false);
        std::thread runner([&] { io.run(); });
        std::array<char, auth_hello::bytes> junk{};
        junk.fill('G');
        asio::write(a, asio::buffer(junk));
        CHECK(fb.get() == petrel::errc::auth_failed);
        runner.join();
    }
    SECTION("a peer that closes before its hello: a closed connection, not a refusal") {
        asio::io_context io;
        auto [a, b] = connected(io);
        auto fb = shake(b, "secret", false);
        a.close();
        std::thread runner([&] { io.run(); });
        CHECK(fb.get() == petrel::errc::connection_closed);
        runner.join();
    }
    SECTION("a peer that closes after its hello refused the secret") {
        asio::io_context io;
        auto [a, b] = connected(io);
        auto fb = shake(b, "secret", true);
        std::thread runner([&] { io.run(); });
        const auto hello = auth_hello::fresh().encode();
        asio::write(a, asio::buffer(hello));
        std::array<std::byte, auth_hello::bytes> theirs{};
        asio::read(a, asio::buffer(theirs));
        a.close();
        CHECK(fb.get() == petrel::errc::auth_failed);
        runner.join();
    }
    SECTION("silence") {
        asio::io_context io;
        auto [a, b] = connected(io);
        const auto t0 = std::chrono::steady_clock::now();
        auto fb = shake(b, "secret", false, 200ms);
        std::thread runner([&] { io.run(); });
        CHECK(fb.get() == petrel::errc::timed_out);
        CHECK(std::chrono::steady_clock::now() - t0 < 5s);
        runner.join();
        CHECK_FALSE(b.is_open());
    }
}
