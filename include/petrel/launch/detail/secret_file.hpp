// Petrel: reading and checking a job's secret.
#pragma once

#include <petrel/launch/launcher.hpp>

#include <cstddef>
#include <fstream>
#include <string>
#include <string_view>

namespace petrel::detail {

/// The shortest secret taken, and the longest (a secret file is read no further).
inline constexpr std::size_t min_secret_bytes = 16;
inline constexpr std::size_t max_secret_bytes = 4096;

/// Refuses a secret too short or too long with a `config_error` that names `where` it
/// came from and its length, never the secret.
inline void check_secret(const std::string& secret, std::string_view where) {
    if (secret.size() < min_secret_bytes || secret.size() > max_secret_bytes) {
        throw config_error("petrel: " + std::string(where) + ": the secret has " +
                           std::to_string(secret.size()) + " bytes, expected " +
                           std::to_string(min_secret_bytes) + " to " +
                           std::to_string(max_secret_bytes) +
                           " (for example: head -c 32 /dev/urandom | base64 > FILE)");
    }
}

/// The secret in the file at `path`, without a final line break (LF or CRLF), read no
/// further than one byte past `max_secret_bytes`; `where` names the file's origin in
/// errors. @throws config_error when it cannot be read or is too short or too long.
[[nodiscard]] inline std::string read_secret_file(const std::string& path, std::string_view where) {
    std::ifstream in(path, std::ios::binary);
    std::string secret(max_secret_bytes + 1, '\0');
    if (in) {
        in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
    }
    if (!in && !in.eof()) {
        throw config_error("petrel: " + std::string(where) + ": cannot read the secret file");
    }
    secret.resize(static_cast<std::size_t>(in.gcount()));
    if (!secret.empty() && secret.back() == '\n') {
        secret.pop_back();
        if (!secret.empty() && secret.back() == '\r') {
            secret.pop_back();
        }
    }
    check_secret(secret, where);
    return secret;
}

} // namespace petrel::detail
