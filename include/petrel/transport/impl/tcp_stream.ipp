// Petrel: the TLS context of a transport (see <petrel/transport/detail/tcp_stream.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_TCP_STREAM_IPP
#define PETREL_TRANSPORT_IMPL_TCP_STREAM_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>

#include <asio/ssl/context.hpp>

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <system_error>

namespace petrel::detail {

PETREL_DECL std::shared_ptr<asio::ssl::context> make_tls_context(const tls_files& f) {
    const auto missing = f.certificate.empty()   ? "certificate (--tls-cert)"
                         : f.private_key.empty() ? "private key (--tls-key)"
                         : f.authority.empty()   ? "authority (--tls-ca)"
                                                 : nullptr;
    if (missing != nullptr) {
        throw std::system_error(make_error_code(errc::invalid_argument),
                                std::string("petrel: TLS needs a certificate, its private key "
                                            "and the authority's certificates; the ") +
                                    missing + " is not given");
    }
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    // No renegotiation, no compression: a record carries frames and nothing else changes.
    SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    auto load = [](const std::string& what, const std::string& file, auto&& step) {
        std::error_code ec;
        step(ec);
        if (ec) {
            throw std::system_error(ec, "petrel: cannot use " + what + " '" + file + "'");
        }
    };
    load("the TLS certificate", f.certificate,
         [&](std::error_code& ec) { ctx->use_certificate_chain_file(f.certificate, ec); });
    // (OpenSSL also refuses a key that is not the certificate's: "key values mismatch".)
    load("the TLS private key", f.private_key, [&](std::error_code& ec) {
        ctx->use_private_key_file(f.private_key, asio::ssl::context::pem, ec);
    });
    load("the TLS authority's certificates", f.authority,
         [&](std::error_code& ec) { ctx->load_verify_file(f.authority, ec); });
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    return ctx;
}

} // namespace petrel::detail

#endif
