// Petrel: the mutual challenge-response that opens every connection of a job with a
// secret, before any frame.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/transport/credential.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>

#include <asio/awaitable.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace petrel::detail {

/// Both ends of a connection prove that they know the job's secret, each over a fresh
/// nonce of the other, before anything else is sent:
///
///     initiator → acceptor   hello: "PTRLAUTH", version 1, nonce Ni (32 random bytes)
///     acceptor  → initiator  hello: "PTRLAUTH", version 1, nonce Na
///     initiator → acceptor   HMAC-SHA256(secret, "petrel auth 1 initiator" ‖ Na ‖ Ni)
///     acceptor  → initiator  HMAC-SHA256(secret, "petrel auth 1 acceptor" ‖ Ni ‖ Na)
///
/// The acceptor sends its proof only after checking the initiator's, and the two proofs
/// are made under different labels, so neither end's proof can be replayed or reflected
/// as the other's. Proofs are compared in constant time. The hellos say nothing about the
/// job; a peer without the secret learns only that it failed.
struct auth_hello {
    static constexpr std::array<char, 8> magic{'P', 'T', 'R', 'L', 'A', 'U', 'T', 'H'};
    static constexpr std::uint8_t version = 1;
    static constexpr std::size_t bytes = 8 + 1 + 32;
    std::array<std::byte, 32> nonce{};

    /// A hello with a fresh nonce (OpenSSL's `RAND_bytes`). @throws std::system_error
    /// when the generator fails.
    [[nodiscard]] PETREL_DECL static auth_hello fresh();
    /// The hello's bytes as sent.
    [[nodiscard]] PETREL_DECL std::array<std::byte, bytes> encode() const noexcept;
    /// Reads a hello; false when `in` is not one (wrong magic or version).
    [[nodiscard]] PETREL_DECL static bool parse(std::span<const std::byte, bytes> in,
                                                auth_hello& out) noexcept;
};

using auth_proof = std::array<std::byte, 32>;

/// The proof one end sends: `initiator` says which end it is; `theirs` is the other end's
/// nonce and `ours` its own.
[[nodiscard]] PETREL_DECL auth_proof make_proof(std::string_view secret, bool initiator,
                                                const auth_hello& theirs, const auth_hello& ours);

/// Whether `got` is the proof the other end must send (`initiator`: which end that other
/// end is), compared in constant time.
[[nodiscard]] PETREL_DECL bool check_proof(std::string_view secret, bool initiator,
                                           const auth_hello& theirs, const auth_hello& ours,
                                           const auth_proof& got);

/// Runs the handshake on a connected `stream` (over TLS once its handshake ran) as the initiator
/// (the connecting end) or the acceptor, within `timeout` (the stream is closed when it runs out).
/// The secret is copied into the operation: the caller need not keep it alive. `credential` says
/// what the secret is: an acceptor with the job's secret (`access::full`) also admits an initiator
/// that proves the reader's credential made from it (`reader_credential`), and then proves that
/// credential itself; `*granted`, when given, is set to what the peer proved once it succeeded.
/// Completes with no error once both ends proved the secret; with `errc::auth_failed` when the
/// peer's hello or proof is wrong, or it closes after its hello; with `errc::connection_closed`
/// when it closes before its hello; with `errc::timed_out`, or the socket's error,
/// otherwise.
[[nodiscard]] PETREL_DECL asio::awaitable<std::error_code>
authenticate(tcp_stream& stream, std::string secret, bool initiator,
             std::chrono::milliseconds timeout, access credential = access::full,
             access* granted = nullptr);

/// Runs the TLS handshake of a `stream` made with TLS, as the client (`initiator`, the
/// connecting end) or the server, within `timeout` (the stream is closed when it runs
/// out). Completes with no error once both ends verified each other's certificate; with
/// `errc::tls_failed` when TLS refused the peer or the peer refused this end (OpenSSL's
/// reason in `*reason`, when given); with `errc::connection_closed` when the peer closed
/// without a word of TLS (a listener at its connection limit, or a node without TLS); with
/// `errc::timed_out`, or the socket's error, otherwise.
[[nodiscard]] PETREL_DECL asio::awaitable<std::error_code>
tls_handshake(tcp_stream& stream, bool initiator, std::chrono::milliseconds timeout,
              std::string* reason = nullptr);

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/handshake.ipp>
#endif
