// Petrel: the checkpoint format: type names, checksum text, file names, table shapes and the
// payloads' snappy blocks.
#ifndef PETREL_SERVER_IMPL_CHECKPOINT_FORMAT_IPP
#define PETREL_SERVER_IMPL_CHECKPOINT_FORMAT_IPP

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>

#include <snappy.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <system_error>

namespace petrel::detail {

PETREL_DECL std::string checkpoint_type_text(wire::scalar_type t) {
    const auto name = checkpoint_type_name(t);
    if (name != "none") {
        return std::string(name);
    }
    return "unknown (" + std::to_string(static_cast<unsigned>(t)) + ")";
}

PETREL_DECL std::string hex64(std::uint64_t v) {
    std::string s = "0x0000000000000000";
    for (std::size_t i = s.size(); v != 0; v >>= 4) {
        s[--i] = "0123456789abcdef"[v & 0xF];
    }
    return s;
}

PETREL_DECL std::optional<std::uint64_t> parse_hex64(std::string_view s) noexcept {
    if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    const auto* end = s.data() + s.size();
    const auto [p, ec] = std::from_chars(s.data() + 2, end, v, 16);
    if (ec != std::errc{} || p != end) {
        return std::nullopt;
    }
    return v;
}

PETREL_DECL bool is_plain_file_name(std::string_view name) noexcept {
    if (name.empty() || name.size() > checkpoint_max_name || name == "." ||
        name.find("..") != std::string_view::npos) {
        return false;
    }
    return std::none_of(name.begin(), name.end(), [](char c) {
        return c == '/' || c == '\\' || c == ':' || static_cast<unsigned char>(c) < 0x20;
    });
}

PETREL_DECL std::optional<std::array<std::uint64_t, 3>>
checkpoint_payload_bytes(wire::scalar_type key_type, wire::scalar_type value_type,
                         std::uint32_t width, std::uint32_t state_width, std::uint64_t rows) {
    const auto keys = checked_mul(rows, wire::size_of(key_type));
    const auto row_values = checked_mul(width, wire::size_of(value_type));
    const auto row_state = checked_mul(state_width, wire::size_of(value_type));
    if (!keys || !row_values || !row_state) {
        return std::nullopt;
    }
    const auto values = checked_mul(rows, *row_values);
    const auto state = checked_mul(rows, *row_state);
    if (!values || !state) {
        return std::nullopt;
    }
    return std::array<std::uint64_t, 3>{*keys, *values, *state};
}

PETREL_DECL std::string check_table_shape(wire::scalar_type key_type, wire::scalar_type value_type,
                                          std::uint32_t width, std::uint32_t state_width,
                                          const std::string& updater) {
    if (!is_checkpoint_key_type(key_type)) {
        return "key type " + checkpoint_type_text(key_type) + " is not u32 or u64";
    }
    if (!is_checkpoint_value_type(value_type)) {
        return "value type " + checkpoint_type_text(value_type) + " is not f32 or f64";
    }
    if (width == 0 || width > checkpoint_max_width) {
        return "width " + std::to_string(width) + " is not in [1, 2^24]";
    }
    if (state_width > checkpoint_max_width) {
        return "state width " + std::to_string(state_width) + " exceeds 2^24";
    }
    if (updater.size() > checkpoint_max_name) {
        return "updater name longer than 256 bytes";
    }
    return {};
}

PETREL_DECL std::vector<std::byte> compress_payload(std::span<const std::byte> in) {
    std::vector<std::byte> out;
    if (in.empty()) {
        return out;
    }
    out.reserve(in.size() / 2 + 64);
    for (std::size_t pos = 0; pos < in.size();) {
        const std::size_t n = std::min(checkpoint_block_bytes, in.size() - pos);
        const std::size_t at = out.size();
        out.resize(at + 4 + snappy::MaxCompressedLength(n));
        std::size_t stored = 0;
        snappy::RawCompress(reinterpret_cast<const char*>(in.data() + pos), n,
                            reinterpret_cast<char*>(out.data() + at + 4), &stored);
        const auto length = static_cast<std::uint32_t>(stored);
        std::memcpy(out.data() + at, &length, sizeof length);
        out.resize(at + 4 + stored);
        pos += n;
    }
    return out;
}

PETREL_DECL std::string check_payload(std::span<const std::byte> in, std::uint64_t uncompressed) {
    std::size_t pos = 0;
    for (std::uint64_t left = uncompressed; left > 0;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(checkpoint_block_bytes, left));
        std::uint32_t stored = 0;
        if (in.size() - pos < sizeof stored) {
            return "truncated (a block length is missing)";
        }
        std::memcpy(&stored, in.data() + pos, sizeof stored);
        pos += sizeof stored;
        if (stored > in.size() - pos) {
            return "truncated (a block needs " + std::to_string(stored) + " bytes, " +
                   std::to_string(in.size() - pos) + " are left)";
        }
        const auto* p = reinterpret_cast<const char*>(in.data() + pos);
        std::size_t length = 0;
        if (!snappy::IsValidCompressedBuffer(p, stored) ||
            !snappy::GetUncompressedLength(p, stored, &length)) {
            return "corrupt compressed data";
        }
        if (length != n) {
            return "a block uncompresses to " + std::to_string(length) + " bytes, not " +
                   std::to_string(n);
        }
        pos += stored;
        left -= n;
    }
    if (pos != in.size()) {
        return std::to_string(in.size() - pos) + " bytes follow the last block";
    }
    return {};
}

PETREL_DECL bool uncompress_payload(std::span<const std::byte> in, std::span<std::byte> out) {
    std::size_t pos = 0;
    for (std::size_t done = 0; done < out.size();) {
        const std::size_t n = std::min(checkpoint_block_bytes, out.size() - done);
        std::uint32_t stored = 0;
        std::memcpy(&stored, in.data() + pos, sizeof stored);
        pos += sizeof stored;
        if (!snappy::RawUncompress(reinterpret_cast<const char*>(in.data() + pos), stored,
                                   reinterpret_cast<char*>(out.data() + done))) {
            return false;
        }
        pos += stored;
        done += n;
    }
    return true;
}

PETREL_DECL std::error_code resolve_checkpoint_dir(const std::filesystem::path& root,
                                                   std::string_view dir, std::filesystem::path& out,
                                                   std::string& why) {
    if (dir.empty()) {
        why = "the checkpoint directory is empty";
        return errc::invalid_argument;
    }
    if (dir.size() > checkpoint_max_dir_bytes) {
        why = "the checkpoint directory is longer than " +
              std::to_string(checkpoint_max_dir_bytes) + " bytes";
        return errc::invalid_argument;
    }
    const auto shown = [dir] { return "\"" + printable(dir, 256) + "\""; };
    if (dir.find('\0') != std::string_view::npos) {
        why = "the checkpoint directory " + shown() + " holds a NUL byte";
        return errc::invalid_argument;
    }
    std::filesystem::path p{std::string(dir)};
    if (root.empty()) {
        out = std::move(p);
        return {};
    }
    if (p.has_root_name() || p.has_root_directory()) {
        why = "the checkpoint directory " + shown() +
              " is absolute: name a directory under the checkpoint root (--checkpoint-root)";
        return errc::invalid_argument;
    }
    for (const auto& part : p) {
        if (part == "..") {
            why = "the checkpoint directory " + shown() +
                  " holds \"..\": name a directory under the checkpoint root (--checkpoint-root)";
            return errc::invalid_argument;
        }
    }
    out = root / p;
    return {};
}

} // namespace petrel::detail

#endif // PETREL_SERVER_IMPL_CHECKPOINT_FORMAT_IPP
