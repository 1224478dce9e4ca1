// Petrel: the files a node's mutual TLS is made from.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

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

/// The process rank a certificate names: its subject's common name is `rank-N` (N in
/// decimal, without leading zeros); none for any other name. With ranked certificates
/// (`--tls-ranks`, `manager_options::ranked_certificates`) a server or worker registers
/// only with the rank its certificate names.
[[nodiscard]] inline std::optional<std::uint32_t>
certificate_rank(std::string_view common_name) noexcept {
    constexpr std::string_view prefix = "rank-";
    if (!common_name.starts_with(prefix)) {
        return std::nullopt;
    }
    const auto digits = common_name.substr(prefix.size());
    if (digits.empty() || (digits.size() > 1 && digits[0] == '0') ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
        return std::nullopt;
    }
    std::uint32_t rank = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (ec != std::errc{} || end != digits.data() + digits.size()) {
        return std::nullopt;
    }
    return rank;
}

} // namespace petrel
