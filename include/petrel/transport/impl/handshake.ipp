// Petrel: the connection handshake (see <petrel/transport/detail/handshake.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_HANDSHAKE_IPP
#define PETREL_TRANSPORT_IMPL_HANDSHAKE_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/credential.hpp>
#include <petrel/transport/detail/handshake.hpp>

#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/ssl/error.hpp>
#include <asio/ssl/stream_base.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>
#include <string>

namespace petrel::detail {

PETREL_DECL auth_hello auth_hello::fresh() {
    auth_hello h;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(h.nonce.data()),
                   static_cast<int>(h.nonce.size())) != 1) {
        throw std::system_error(make_error_code(errc::auth_failed),
                                "petrel: the random generator gave no nonce");
    }
    return h;
}

PETREL_DECL std::array<std::byte, auth_hello::bytes> auth_hello::encode() const noexcept {
    std::array<std::byte, bytes> out{};
    std::memcpy(out.data(), magic.data(), magic.size());
    out[magic.size()] = std::byte{version};
    std::memcpy(out.data() + magic.size() + 1, nonce.data(), nonce.size());
    return out;
}

PETREL_DECL bool auth_hello::parse(std::span<const std::byte, bytes> in, auth_hello& out) noexcept {
    if (std::memcmp(in.data(), magic.data(), magic.size()) != 0 ||
        in[magic.size()] != std::byte{version}) {
        return false;
    }
    std::memcpy(out.nonce.data(), in.data() + magic.size() + 1, out.nonce.size());
    return true;
}

PETREL_DECL auth_proof make_proof(std::string_view secret, bool initiator, const auth_hello& theirs,
                                  const auth_hello& ours) {
    const std::string_view label = initiator ? "petrel auth 1 initiator" : "petrel auth 1 acceptor";
    std::string input(label);
    input.append(reinterpret_cast<const char*>(theirs.nonce.data()), theirs.nonce.size());
    input.append(reinterpret_cast<const char*>(ours.nonce.data()), ours.nonce.size());
    auth_proof out{};
    unsigned int length = 0;
    const unsigned char* made =
        HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
             reinterpret_cast<const unsigned char*>(input.data()), input.size(),
             reinterpret_cast<unsigned char*>(out.data()), &length);
    if (made == nullptr || length != out.size()) {
        throw std::system_error(make_error_code(errc::auth_failed), "petrel: HMAC-SHA256 failed");
    }
    return out;
}

PETREL_DECL bool check_proof(std::string_view secret, bool initiator, const auth_hello& theirs,
                             const auth_hello& ours, const auth_proof& got) {
    // The proof the other end makes: its nonces are the other way round.
    const auto expected = make_proof(secret, initiator, ours, theirs);
    return CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

namespace handshake_steps {

/// Closes the socket when the handshake's time runs out while it still runs. The timer's
/// handler and the handshake run on the socket's strand; `state` says whether the
/// handshake still runs (0), ended (1) or ran out of time (2).
struct close_on_timeout {
    tcp_stream* stream;
    std::shared_ptr<int> state;
    void operator()(std::error_code e) const {
        if (!e && *state == 0) {
            *state = 2;
            stream->close();
        }
    }
};

/// The peer closed (under TLS, without a close_notify: the stream is cut short).
[[nodiscard]] inline bool closed(std::error_code ec) {
    return ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::ssl::error::stream_truncated;
}

/// Whether `ec` comes from TLS (the peer's certificate or its alert; a closed stream is
/// `closed` first).
[[nodiscard]] inline bool from_tls(std::error_code ec) {
    return ec.category() == asio::error::get_ssl_category() ||
           ec.category() == asio::ssl::error::get_stream_category();
}

/// The handshake's outcome `ec`, or `errc::timed_out` when its time ran out; stops the
/// timer. A TLS error (under TLS 1.3 a client learns that the server refused its
/// certificate only as it reads next, here in the secret's handshake) is `tls_failed`.
inline std::error_code end(int& state, asio::steady_timer& deadline, std::error_code ec) {
    if (state == 2) {
        ec = errc::timed_out;
    } else if (from_tls(ec) && !closed(ec)) {
        ec = errc::tls_failed;
    }
    state = 1;
    deadline.cancel();
    return ec;
}

/// A peer that sent its hello and then closes instead of answering did not prove the
/// secret (it has none, or another, or refused ours).
inline std::error_code refused(std::error_code ec) {
    return closed(ec) ? make_error_code(errc::auth_failed) : ec;
}

/// A peer that closes before its hello has said nothing about secrets: it is no Petrel
/// node of a job with one (a node without a secret answers a hello with its own before
/// it closes, see tcp_connection), or it went away. It fails as a closed connection
/// does, which a request link may try again.
inline std::error_code gone(std::error_code ec) {
    return closed(ec) ? make_error_code(errc::connection_closed) : ec;
}

} // namespace handshake_steps

PETREL_DECL asio::awaitable<std::error_code> authenticate(tcp_stream& socket, std::string secret,
                                                          bool initiator,
                                                          std::chrono::milliseconds timeout,
                                                          access credential, access* granted) {
    using handshake_steps::refused;
    auto state = std::make_shared<int>(0);
    asio::steady_timer deadline(socket.get_executor(), timeout);
    deadline.async_wait(handshake_steps::close_on_timeout{&socket, state});
    const auto ours = auth_hello::fresh();
    const auto hello = ours.encode();
    std::error_code ec;
    co_await asio::async_write(socket, asio::buffer(hello),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        co_return handshake_steps::end(*state, deadline, ec);
    }
    std::array<std::byte, auth_hello::bytes> in{};
    co_await asio::async_read(socket, asio::buffer(in),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        co_return handshake_steps::end(*state, deadline, handshake_steps::gone(ec));
    }
    auth_hello theirs;
    if (!auth_hello::parse(in, theirs)) {
        co_return handshake_steps::end(*state, deadline, errc::auth_failed);
    }
    auth_proof proof{};
    if (initiator) {
        proof = make_proof(secret, true, theirs, ours);
        co_await asio::async_write(socket, asio::buffer(proof),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            co_return handshake_steps::end(*state, deadline, ec);
        }
        co_await asio::async_read(socket, asio::buffer(proof),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            co_return handshake_steps::end(*state, deadline, refused(ec));
        }
        if (!check_proof(secret, false, theirs, ours, proof)) {
            co_return handshake_steps::end(*state, deadline, errc::auth_failed);
        }
        if (granted != nullptr) {
            *granted = credential; // the acceptor proved the key this end holds
        }
        co_return handshake_steps::end(*state, deadline, {});
    }
    co_await asio::async_read(socket, asio::buffer(proof),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        co_return handshake_steps::end(*state, deadline, refused(ec));
    }
    access peer = credential;
    if (!check_proof(secret, true, theirs, ours, proof)) {
        // Not the job's secret: a reader's credential made from it, then?
        if (credential != access::full ||
            !check_proof(secret = reader_credential(secret), true, theirs, ours, proof)) {
            co_return handshake_steps::end(*state, deadline,
                                           errc::auth_failed); // nothing more is sent
        }
        peer = access::read_only;
    }
    proof = make_proof(secret, false, theirs, ours); // under the key the peer proved
    co_await asio::async_write(socket, asio::buffer(proof),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && granted != nullptr) {
        *granted = peer;
    }
    co_return handshake_steps::end(*state, deadline, ec);
}

PETREL_DECL asio::awaitable<std::error_code> tls_handshake(tcp_stream& stream, bool initiator,
                                                           std::chrono::milliseconds timeout,
                                                           std::string* reason) {
    auto state = std::make_shared<int>(0);
    asio::steady_timer deadline(stream.get_executor(), timeout);
    deadline.async_wait(handshake_steps::close_on_timeout{&stream, state});
    std::error_code ec;
    if (stream.tls() == nullptr) {
        ec = make_error_code(errc::invalid_argument); // a stream without TLS
    } else {
        co_await stream.tls()->async_handshake(initiator ? asio::ssl::stream_base::client
                                                         : asio::ssl::stream_base::server,
                                               asio::redirect_error(asio::use_awaitable, ec));
    }
    if (handshake_steps::closed(ec)) {
        ec = make_error_code(errc::connection_closed);
    } else if (handshake_steps::from_tls(ec) && *state != 2 && reason != nullptr) {
        *reason = ec.message();
    }
    co_return handshake_steps::end(*state, deadline, ec);
}

} // namespace petrel::detail

#endif
