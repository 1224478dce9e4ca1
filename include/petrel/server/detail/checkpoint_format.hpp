// Petrel: the checkpoint format: limits, the shard file's header, names and payload blocks.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/wire/header.hpp>

#include <cereal/cereal.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace petrel::detail {

/// "PTCK" read as a little-endian 32-bit number: the first bytes of a shard file.
inline constexpr std::uint32_t checkpoint_magic = 0x4B435450;
/// Magic, format version and header length, each a little-endian `std::uint32_t`.
inline constexpr std::size_t checkpoint_prefix_bytes = 12;
/// The most bytes of the Cereal header of a shard file.
inline constexpr std::uint32_t checkpoint_max_header_bytes = 4096;
/// The longest updater name and shard file name.
inline constexpr std::size_t checkpoint_max_name = 256;
/// The most shards of one table.
inline constexpr std::size_t checkpoint_max_shards = std::size_t{1} << 16;
/// The largest `width` and `state_width`.
inline constexpr std::uint32_t checkpoint_max_width = std::uint32_t{1} << 24;
/// The deepest nesting of arrays and objects in a manifest's JSON text.
inline constexpr int checkpoint_max_json_depth = 32;
/// The largest manifest file.
inline constexpr std::uint64_t checkpoint_max_manifest_bytes = std::uint64_t{64} << 20;
/// Payloads are compressed in blocks of this many bytes (the last one may be shorter).
inline constexpr std::size_t checkpoint_block_bytes = std::size_t{4} << 20;

/// The name of a scalar type in manifests: "u32", "u64", "f32", "f64".
[[nodiscard]] constexpr std::string_view checkpoint_type_name(wire::scalar_type t) noexcept {
    switch (t) {
    case wire::scalar_type::u32:
        return "u32";
    case wire::scalar_type::u64:
        return "u64";
    case wire::scalar_type::f32:
        return "f32";
    case wire::scalar_type::f64:
        return "f64";
    case wire::scalar_type::none:
        break;
    }
    return "none";
}

/// The name of a scalar type for messages, also when it is not a known type.
[[nodiscard]] PETREL_DECL std::string checkpoint_type_text(wire::scalar_type t);

/// The scalar type named `name` by `checkpoint_type_name`, or `scalar_type::none`.
[[nodiscard]] constexpr wire::scalar_type
checkpoint_type_from_name(std::string_view name) noexcept {
    for (const auto t : {wire::scalar_type::u32, wire::scalar_type::u64, wire::scalar_type::f32,
                         wire::scalar_type::f64}) {
        if (checkpoint_type_name(t) == name) {
            return t;
        }
    }
    return wire::scalar_type::none;
}

[[nodiscard]] constexpr bool is_checkpoint_key_type(wire::scalar_type t) noexcept {
    return t == wire::scalar_type::u32 || t == wire::scalar_type::u64;
}

[[nodiscard]] constexpr bool is_checkpoint_value_type(wire::scalar_type t) noexcept {
    return t == wire::scalar_type::f32 || t == wire::scalar_type::f64;
}

/// `a * b`, or nothing when it overflows.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_mul(std::uint64_t a,
                                                                 std::uint64_t b) noexcept {
    if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) {
        return std::nullopt;
    }
    return a * b;
}

/// `a + b`, or nothing when it overflows.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a,
                                                                 std::uint64_t b) noexcept {
    if (a > std::numeric_limits<std::uint64_t>::max() - b) {
        return std::nullopt;
    }
    return a + b;
}

/// "0x" and 16 lowercase hex digits: how manifests write checksums (JSON numbers lose
/// precision above 2^53 in many readers).
[[nodiscard]] PETREL_DECL std::string hex64(std::uint64_t v);

/// The number `hex64` wrote, or nothing.
[[nodiscard]] PETREL_DECL std::optional<std::uint64_t> parse_hex64(std::string_view s) noexcept;

/// Whether `name` may name a shard file: a plain file name within the table's
/// directory, not empty, no path separators, no "..", no control characters.
[[nodiscard]] PETREL_DECL bool is_plain_file_name(std::string_view name) noexcept;

/// Writes a string of at most `checkpoint_max_name` bytes, length first.
/// @throws std::length_error when it is longer.
template <class Archive>
void save_checkpoint_name(Archive& ar, const std::string& s) {
    if (s.size() > checkpoint_max_name) {
        throw std::length_error("checkpoint name longer than 256 bytes");
    }
    ar(static_cast<std::uint32_t>(s.size()));
    ar(cereal::binary_data(s.data(), s.size()));
}

/// Reads what `save_checkpoint_name` wrote; checks the length before allocating.
/// @throws std::length_error when it is longer than `checkpoint_max_name`.
template <class Archive>
void load_checkpoint_name(Archive& ar, std::string& s) {
    std::uint32_t n = 0;
    ar(n);
    if (n > checkpoint_max_name) {
        throw std::length_error("checkpoint name longer than 256 bytes");
    }
    s.resize(n);
    ar(cereal::binary_data(s.data(), n));
}

/// The Cereal header of a shard file, after its fixed prefix.
struct checkpoint_shard_header {
    std::uint32_t table_id = 0;
    std::uint32_t server = 0;
    wire::scalar_type key_type = wire::scalar_type::none;
    wire::scalar_type value_type = wire::scalar_type::none;
    std::uint32_t width = 0;
    std::uint32_t state_width = 0;
    std::string updater;
    std::uint64_t rows = 0;
    /// Stored bytes of the keys, values and state payloads.
    std::array<std::uint64_t, 3> compressed{};
    /// Their bytes once uncompressed.
    std::array<std::uint64_t, 3> uncompressed{};

    template <class Archive>
    void save(Archive& ar) const {
        ar(table_id, server, key_type, value_type, width, state_width);
        save_checkpoint_name(ar, updater);
        ar(rows);
        for (std::size_t i = 0; i < compressed.size(); ++i) {
            ar(compressed[i], uncompressed[i]);
        }
    }

    template <class Archive>
    void load(Archive& ar) {
        ar(table_id, server, key_type, value_type, width, state_width);
        load_checkpoint_name(ar, updater);
        ar(rows);
        for (std::size_t i = 0; i < compressed.size(); ++i) {
            ar(compressed[i], uncompressed[i]);
        }
    }
};

/// The payloads of a shard file, in file order, for messages.
inline constexpr std::array<const char*, 3> checkpoint_payload_names{"keys", "values", "state"};

/// The payload sizes a table's shape implies: keys, values, state; nothing on overflow.
[[nodiscard]] PETREL_DECL std::optional<std::array<std::uint64_t, 3>>
checkpoint_payload_bytes(wire::scalar_type key_type, wire::scalar_type value_type,
                         std::uint32_t width, std::uint32_t state_width, std::uint64_t rows);

/// The first row whose key is not above the previous one, or `rows` when keys ascend.
template <typename Key>
[[nodiscard]] std::uint64_t first_unsorted_key(const std::byte* keys, std::uint64_t rows) noexcept {
    Key previous{};
    for (std::uint64_t i = 0; i < rows; ++i) {
        Key k;
        std::memcpy(&k, keys + i * sizeof(Key), sizeof(Key));
        if (i > 0 && k <= previous) {
            return i;
        }
        previous = k;
    }
    return rows;
}

[[nodiscard]] inline std::uint64_t
first_unsorted_key(wire::scalar_type key_type, const std::byte* keys, std::uint64_t rows) noexcept {
    return key_type == wire::scalar_type::u32 ? first_unsorted_key<std::uint32_t>(keys, rows)
                                              : first_unsorted_key<std::uint64_t>(keys, rows);
}

/// What is wrong with a table's types, widths and update rule name, or an empty string
/// (shared by shard tables and manifests).
[[nodiscard]] PETREL_DECL std::string
check_table_shape(wire::scalar_type key_type, wire::scalar_type value_type, std::uint32_t width,
                  std::uint32_t state_width, const std::string& updater);

/// Compresses `in` with snappy in blocks of `checkpoint_block_bytes`, each block stored
/// as its compressed length (little-endian `std::uint32_t`) then its bytes.
[[nodiscard]] PETREL_DECL std::vector<std::byte> compress_payload(std::span<const std::byte> in);

/// Checks every block of a payload `compress_payload` wrote (its framing, that snappy
/// accepts it, and its uncompressed length) without allocating.
/// @return what is wrong, or an empty string.
[[nodiscard]] PETREL_DECL std::string check_payload(std::span<const std::byte> in,
                                                    std::uint64_t uncompressed);

/// Uncompresses a payload `check_payload` accepted into `out` (already sized).
/// @return whether snappy accepted every block.
[[nodiscard]] PETREL_DECL bool uncompress_payload(std::span<const std::byte> in,
                                                  std::span<std::byte> out);

/// The directory of table `table_id`'s checkpoint within `dir`: `dir/table-<id>`.
[[nodiscard]] inline std::filesystem::path table_dir(const std::filesystem::path& dir,
                                                     std::uint32_t table_id) {
    return dir / ("table-" + std::to_string(table_id));
}

/// The name of server `server`'s shard file: "shard-<server>.bin".
[[nodiscard]] inline std::string shard_file_name(std::uint32_t server) {
    return "shard-" + std::to_string(server) + ".bin";
}

/// The longest checkpoint directory a save may name, in bytes.
inline constexpr std::size_t checkpoint_max_dir_bytes = 4096;

/// Where the checkpoint directory `dir`, named by a save (a peer's text), lies on this
/// host. With a `root` (`--checkpoint-root`), `dir` must be a relative path without ".."
/// and the result is `root/dir`, so that no caller reaches a file outside the root; with
/// no root (a job whose nodes share one process), `dir` as given. A directory that is
/// empty, longer than `checkpoint_max_dir_bytes` or holds a NUL byte is always refused.
/// Links inside the root are followed: whoever may write there is trusted.
/// @return the directory, or `errc::invalid_argument` with what is wrong in `why`.
[[nodiscard]] PETREL_DECL std::error_code resolve_checkpoint_dir(const std::filesystem::path& root,
                                                                 std::string_view dir,
                                                                 std::filesystem::path& out,
                                                                 std::string& why);

/// The manifest of the checkpoint in `table_dir`: `table_dir/manifest.json`.
[[nodiscard]] inline std::filesystem::path manifest_path(const std::filesystem::path& table_dir) {
    return table_dir / "manifest.json";
}

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/server/impl/checkpoint_format.ipp>
#endif
