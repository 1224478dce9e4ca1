// Petrel: the TLS context of a transport (see <petrel/transport/detail/tcp_stream.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_TCP_STREAM_IPP
#define PETREL_TRANSPORT_IMPL_TCP_STREAM_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>

#include <asio/ssl/context.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <system_error>

namespace petrel::detail {

/// The subject's common name of `cert` (UTF-8), or empty.
inline std::string common_name_of(X509* cert) {
    X509_NAME* subject = cert != nullptr ? X509_get_subject_name(cert) : nullptr;
    const int at =
        subject != nullptr ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
    if (at < 0) {
        return {};
    }
    unsigned char* text = nullptr;
    const int n =
        ASN1_STRING_to_UTF8(&text, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
    std::string out;
    if (n > 0 && text != nullptr) {
        out.assign(reinterpret_cast<const char*>(text), static_cast<std::size_t>(n));
    }
    OPENSSL_free(text);
    return out;
}

PETREL_DECL std::string certificate_name(const std::string& file) {
    std::unique_ptr<BIO, decltype(&BIO_free)> in(BIO_new_file(file.c_str(), "r"), &BIO_free);
    std::unique_ptr<X509, decltype(&X509_free)> cert(
        in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr, &X509_free);
    if (!cert) {
        ERR_clear_error(); // what OpenSSL queued about the file is told in the message
        throw std::system_error(make_error_code(errc::invalid_argument),
                                "petrel: cannot read a certificate from '" + file + "'");
    }
    return common_name_of(cert.get());
}

PETREL_DECL std::string tcp_stream::peer_name() {
    if (!tls_) {
        return {};
    }
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    std::unique_ptr<X509, decltype(&X509_free)> cert(
        SSL_get1_peer_certificate(tls_->native_handle()), &X509_free);
#else
    std::unique_ptr<X509, decltype(&X509_free)> cert(
        SSL_get_peer_certificate(tls_->native_handle()), &X509_free);
#endif
    return common_name_of(cert.get());
}

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
