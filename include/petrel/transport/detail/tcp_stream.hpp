// Petrel: a connection's byte stream: a TCP socket, or TLS over one.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/transport/connection.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <asio/ssl/stream.hpp>

#include <memory>
#include <string>
#include <utility>

namespace petrel::detail {

/// The TLS context of a transport whose options name certificate files
/// (`transport_options::tls`): TLS 1.2 or later, this node's certificate chain and key,
/// and peers verified against the authority's certificates on both ends (a peer without
/// a certificate it signed fails the handshake). One context serves the connections
/// this node accepts and those it makes. @throws std::system_error naming the file when
/// one cannot be read or the key does not match the certificate.
[[nodiscard]] PETREL_DECL std::shared_ptr<asio::ssl::context> make_tls_context(const tls_files& f);

/// The subject's common name of the first certificate in PEM file `file`; empty when it
/// has none. @throws std::system_error naming the file when it holds no certificate.
[[nodiscard]] PETREL_DECL std::string certificate_name(const std::string& file);

/// A connected TCP socket, read and written either directly or through TLS, so that a
/// connection's loops and its handshake are written once for both. Models Asio's
/// AsyncReadStream and AsyncWriteStream for the completion tokens Petrel uses
/// (`use_awaitable`, alone or under `redirect_error`: both kinds of stream give the same
/// awaitable type for them).
class tcp_stream {
public:
    using socket_type = asio::ip::tcp::socket;
    using tls_type = asio::ssl::stream<socket_type>;
    using executor_type = socket_type::executor_type;

    /// Plain TCP on `socket`.
    explicit tcp_stream(socket_type socket) : plain_(std::move(socket)) {}
    /// TLS over `socket` with `context`; its handshake is yet to run (`tls()->async_handshake`).
    tcp_stream(socket_type socket, asio::ssl::context& context)
        : plain_(socket_type(socket.get_executor())),
          tls_(std::make_unique<tls_type>(std::move(socket), context)) {}

    tcp_stream(tcp_stream&&) noexcept = default;
    tcp_stream& operator=(tcp_stream&&) noexcept = default;

    [[nodiscard]] executor_type get_executor() noexcept { return socket().get_executor(); }

    /// The TCP socket beneath (options, addresses, closing).
    [[nodiscard]] socket_type& socket() noexcept { return tls_ ? tls_->next_layer() : plain_; }
    [[nodiscard]] const socket_type& socket() const noexcept {
        return tls_ ? tls_->next_layer() : plain_;
    }

    /// The TLS layer, or null for plain TCP.
    [[nodiscard]] tls_type* tls() noexcept { return tls_.get(); }

    /// The subject's common name of the certificate the peer showed in the TLS handshake
    /// (verified against the authority); empty for plain TCP, before the handshake, and
    /// for a certificate without one. Call it between operations, not during one.
    [[nodiscard]] PETREL_DECL std::string peer_name();

    template <typename MutableBuffers, typename Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        if (tls_) {
            return tls_->async_read_some(buffers, std::forward<Token>(token));
        }
        return plain_.async_read_some(buffers, std::forward<Token>(token));
    }

    /// Through TLS, a write takes from the first buffer only (a record at a time), as
    /// Asio's `ssl::stream` does.
    template <typename ConstBuffers, typename Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        if (tls_) {
            return tls_->async_write_some(buffers, std::forward<Token>(token));
        }
        return plain_.async_write_some(buffers, std::forward<Token>(token));
    }

    /// Closes the socket (what a TLS layer has not sent is lost: no close_notify, which
    /// the connection's framing does not need).
    void close() noexcept {
        std::error_code ignored;
        socket().shutdown(socket_type::shutdown_both, ignored);
        socket().close(ignored);
    }

private:
    socket_type plain_;             // unused (closed) under TLS
    std::unique_ptr<tls_type> tls_; // at a stable address for its operations
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/tcp_stream.ipp>
#endif
