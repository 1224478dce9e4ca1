// Petrel: bounded strings in control bodies and views.
#pragma once

#include <cereal/archives/binary.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace petrel::detail {

/// Limits a view decoder enforces before it allocates.
inline constexpr std::uint32_t max_view_nodes = 1u << 16;
inline constexpr std::uint32_t max_text_bytes = 4096;
/// The longest part of a name or id a peer sent (a job id) that a log line repeats.
inline constexpr std::size_t max_logged_id_bytes = 128;

template <class Archive>
void save_text(Archive& ar, const std::string& s) {
    const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(s.size(), max_text_bytes));
    ar(n);
    ar(cereal::binary_data(s.data(), n));
}

template <class Archive>
void load_text(Archive& ar, std::string& s) {
    std::uint32_t n = 0;
    ar(n);
    if (n > max_text_bytes) {
        throw std::length_error("text field too long");
    }
    s.resize(n);
    ar(cereal::binary_data(s.data(), n));
}

/// Reads a flag written as a `bool` (one byte), refusing a byte other than 0 or 1 (read
/// straight into a `bool`, it would be a value no `bool` holds).
template <class Archive>
bool load_flag(Archive& ar) {
    std::uint8_t b = 0;
    ar(b);
    if (b > 1) {
        throw std::domain_error("a flag that is neither 0 nor 1");
    }
    return b == 1;
}

/// Reads a count and refuses it above `limit` before anything is allocated.
template <class Archive>
std::uint32_t load_count(Archive& ar, std::uint32_t limit, const char* what) {
    std::uint32_t n = 0;
    ar(n);
    if (n > limit) {
        throw std::length_error(std::string("too many ") + what);
    }
    return n;
}

} // namespace petrel::detail
