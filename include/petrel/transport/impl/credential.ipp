// Petrel: the reader's credential (see <petrel/transport/credential.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_CREDENTIAL_IPP
#define PETREL_TRANSPORT_IMPL_CREDENTIAL_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/credential.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <stdexcept>
#include <system_error>

namespace petrel {

PETREL_DECL std::string reader_credential(std::string_view job_secret) {
    if (job_secret.empty()) {
        throw std::invalid_argument("petrel: a reader's credential needs the job's secret");
    }
    static constexpr std::string_view label = "petrel reader credential 1";
    std::array<unsigned char, 32> mac{};
    unsigned int length = 0;
    if (HMAC(EVP_sha256(), job_secret.data(), static_cast<int>(job_secret.size()),
             reinterpret_cast<const unsigned char*>(label.data()), label.size(), mac.data(),
             &length) == nullptr ||
        length != mac.size()) {
        throw std::system_error(make_error_code(errc::auth_failed), "petrel: HMAC-SHA256 failed");
    }
    static constexpr std::string_view digits = "0123456789abcdef";
    std::string out;
    out.reserve(2 * mac.size());
    for (const unsigned char b : mac) {
        out += digits[b >> 4];
        out += digits[b & 0xf];
    }
    return out;
}

} // namespace petrel

#endif
