#include <petrel/transport/detail/handshake.hpp>

#include <petrel/core/error.hpp>

#include "support/tls.hpp"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/ssl/context.hpp>
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

using petrel::detail::tcp_stream;

/// Two connected loopback streams, each on its own strand of `io` (with TLS over them
/// when `tls` is given, their TLS handshakes yet to run).
struct socket_pair {
    tcp_stream a;
    tcp_stream b;
};

socket_pair connected(asio::io_context& io, asio::ssl::context* a_tls = nullptr,
                      asio::ssl::context* b_tls = nullptr) {
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    asio::ip::tcp::socket a(asio::make_strand(io));
    asio::ip::tcp::socket b(asio::make_strand(io));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
    auto wrap = [](asio::ip::tcp::socket s, asio::ssl::context* tls) {
        return tls ? tcp_stream(std::move(s), *tls) : tcp_stream(std::move(s));
    };
    return {wrap(std::move(a), a_tls), wrap(std::move(b), b_tls)};
}

/// The outcome of running the handshake on `s` in the background.
std::future<std::error_code> shake(tcp_stream& s, const std::string& secret, bool initiator,
                                   std::chrono::milliseconds timeout = 5s,
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
        asio::write(s.a.socket(), asio::buffer("next", 4));
        std::array<char, 4> got{};
        asio::read(s.b.socket(), asio::buffer(got));
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
        asio::write(a.socket(), asio::buffer(junk));
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
        asio::write(a.socket(), asio::buffer(hello));
        std::array<std::byte, auth_hello::bytes> theirs{};
        asio::read(a.socket(), asio::buffer(theirs));
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
        CHECK_FALSE(b.socket().is_open());
    }
}

namespace {

/// Both ends' TLS handshakes (a the client), then the secret's over TLS when `secret` is
/// given, run to their ends.
struct tls_ends {
    asio::io_context io;
    socket_pair s;
    std::error_code client;
    std::error_code server;
    std::string client_reason;
    std::string server_reason;

    tls_ends(asio::ssl::context& a, asio::ssl::context& b, const std::string& secret = "")
        : s(connected(io, &a, &b)) {
        auto run = [secret](tcp_stream& end, bool initiator,
                            std::string* reason) -> asio::awaitable<std::error_code> {
            auto ec = co_await petrel::detail::tls_handshake(end, initiator, 5s, reason);
            if (ec) {
                end.close(); // as the transport does
            } else if (!secret.empty()) {
                ec = co_await petrel::detail::authenticate(end, secret, initiator, 5s);
            }
            co_return ec;
        };
        auto fa =
            asio::co_spawn(s.a.get_executor(), run(s.a, true, &client_reason), asio::use_future);
        auto fb =
            asio::co_spawn(s.b.get_executor(), run(s.b, false, &server_reason), asio::use_future);
        std::thread runner([&] { io.run(); });
        server = fb.get();
        client = fa.get();
        runner.join();
    }

    /// What the client sends through TLS, the server reads; the socket carries other bytes.
    bool in_step() {
        const std::string text = "frames go through TLS";
        asio::write(*s.a.tls(), asio::buffer(text));
        std::string got(text.size(), '\0');
        asio::read(*s.b.tls(), asio::buffer(got));
        return got == text;
    }
};

} // namespace

TEST_CASE("handshake: TLS: two nodes whose certificates one authority signed verify each "
          "other, and the secret's handshake runs through TLS",
          "[transport][auth][tls][security]") {
    const auto a = petrel::detail::make_tls_context(petrel::test::tls_of());
    const auto b = petrel::detail::make_tls_context(petrel::test::tls_of());
    SECTION("TLS alone") {
        tls_ends h(*a, *b);
        CHECK_FALSE(h.client);
        CHECK_FALSE(h.server);
        CHECK(h.in_step());
    }
    SECTION("TLS, then the secret") {
        tls_ends h(*a, *b, "s3cret-of-the-job");
        CHECK_FALSE(h.client);
        CHECK_FALSE(h.server);
        CHECK(h.in_step());
    }
}

TEST_CASE("handshake: TLS refuses a peer whose certificate another authority signed, or that "
          "has none, or speaks no TLS",
          "[transport][auth][tls][security]") {
    const auto ours = petrel::detail::make_tls_context(petrel::test::tls_of());
    SECTION("a stranger's certificate: refused by both ends, with OpenSSL's reason") {
        // The stranger trusts its own authority only: each end refuses the other's.
        const auto stranger =
            petrel::detail::make_tls_context(petrel::test::tls_of("stranger", "other_ca"));
        tls_ends h(*stranger, *ours);
        CHECK(h.client == petrel::errc::tls_failed);
        CHECK(h.server == petrel::errc::tls_failed);
        CHECK_FALSE(h.client_reason.empty());
        CHECK_FALSE(h.server_reason.empty());
    }
    SECTION("a stranger that trusts our authority is still refused by the server") {
        const auto stranger =
            petrel::detail::make_tls_context(petrel::test::tls_of("stranger", "ca"));
        tls_ends h(*stranger, *ours);
        CHECK(h.server == petrel::errc::tls_failed);
        CHECK_THAT(h.server_reason, Catch::Contains("certificate"));
        // (Under TLS 1.3 the client may finish its handshake before the server's refusal
        // arrives: it learns of it as it reads next.)
    }
    SECTION("a client without a certificate") {
        asio::ssl::context bare(asio::ssl::context::tls);
        bare.set_verify_mode(asio::ssl::verify_none);
        tls_ends h(bare, *ours);
        CHECK(h.server == petrel::errc::tls_failed);
    }
    SECTION("under TLS 1.3 a client refused by the server learns it in the secret's handshake") {
        const auto stranger =
            petrel::detail::make_tls_context(petrel::test::tls_of("stranger", "ca"));
        tls_ends h(*stranger, *ours, "s3cret-of-the-job");
        CHECK(h.server == petrel::errc::tls_failed);
        CHECK(h.client == petrel::errc::tls_failed);
    }
    SECTION("a peer that speaks no TLS: its hello is no TLS record") {
        asio::io_context io;
        auto [a, b] = connected(io, nullptr, ours.get());
        std::string reason;
        auto fb =
            asio::co_spawn(b.get_executor(), petrel::detail::tls_handshake(b, false, 5s, &reason),
                           asio::use_future);
        std::thread runner([&] { io.run(); });
        const auto hello = auth_hello::fresh().encode();
        asio::write(a.socket(), asio::buffer(hello));
        CHECK(fb.get() == petrel::errc::tls_failed);
        CHECK_FALSE(reason.empty());
        runner.join();
    }
    SECTION("silence: the handshake ends at its timeout and closes the socket") {
        asio::io_context io;
        auto [a, b] = connected(io, nullptr, ours.get());
        auto fb = asio::co_spawn(b.get_executor(), petrel::detail::tls_handshake(b, false, 200ms),
                                 asio::use_future);
        std::thread runner([&] { io.run(); });
        CHECK(fb.get() == petrel::errc::timed_out);
        runner.join();
        CHECK_FALSE(b.socket().is_open());
    }
    SECTION("a peer that closes before a word of TLS: a closed connection") {
        asio::io_context io;
        auto [a, b] = connected(io, ours.get(), nullptr);
        auto fa = asio::co_spawn(a.get_executor(), petrel::detail::tls_handshake(a, true, 5s),
                                 asio::use_future);
        std::thread runner([&] { io.run(); });
        std::array<char, 512> sink{};
        std::error_code ec;
        b.socket().read_some(asio::buffer(sink), ec); // the client's hello
        b.close();
        CHECK(fa.get() == petrel::errc::connection_closed);
        runner.join();
    }
}
