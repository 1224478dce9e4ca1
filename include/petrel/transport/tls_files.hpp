// Petrel: the files a node's mutual TLS is made from.
#pragma once

#include <string>

namespace petrel {

/// The files of mutual TLS (PEM): this node's certificate (chain), its private key, and
/// the certificates of the authority that signs every node's certificate in the job.
/// All three or none.
struct tls_files {
    std::string certificate{};
    std::string private_key{};
    std::string authority{};
    [[nodiscard]] bool enabled() const noexcept {
        return !certificate.empty() || !private_key.empty() || !authority.empty();
    }
};

} // namespace petrel
