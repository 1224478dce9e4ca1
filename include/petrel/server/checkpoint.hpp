// Petrel: checkpoint files: each server's rows of a table, and a manifest per table.
#pragma once

#include <petrel/core/detail/checksum.hpp>
#include <petrel/server/detail/json.hpp>
#include <petrel/wire/detail/streambuf.hpp>
#include <petrel/wire/header.hpp>

#include <cereal/archives/binary.hpp>
#include <cereal/cereal.hpp>

#include <snappy.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <istream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace petrel {

/// The version of the checkpoint format: shard files and manifests carry it, and readers
/// refuse every other version.
inline constexpr std::uint32_t checkpoint_format_version = 1;

/// One table's rows on one server, as raw little-endian arrays: what a server saves to
/// its shard file and gets back from it.
///
/// Row `i` has key `keys[i]`, values `values[i * width .. (i + 1) * width)` and optimizer
/// state `state[i * state_width .. (i + 1) * state_width)` (state has the value type).
struct shard_table {
    std::uint32_t table_id = 0;
    /// `u32` or `u64`.
    wire::scalar_type key_type = wire::scalar_type::u64;
    /// `f32` or `f64`; also the type of the optimizer state.
    wire::scalar_type value_type = wire::scalar_type::f32;
    /// Values per key, at least 1.
    std::uint32_t width = 1;
    /// Optimizer state values per key (0 for updaters that keep none).
    std::uint32_t state_width = 0;
    /// The update rule's name, e.g. "adam" (at most 256 bytes).
    std::string updater;
    std::uint64_t rows = 0;
    /// `rows * size_of(key_type)` bytes, keys strictly ascending.
    std::vector<std::byte> keys;
    /// `rows * width * size_of(value_type)` bytes.
    std::vector<std::byte> values;
    /// `rows * state_width * size_of(value_type)` bytes.
    std::vector<std::byte> state;

    friend bool operator==(const shard_table&, const shard_table&) = default;
};

/// What the manifest records of one shard file, so that a reader can tell that the file
/// is complete and is the one written for this checkpoint.
///
/// A server returns it from writing its shard; it travels in the server's reply (Cereal,
/// see `save`/`load` below) to the worker that writes the manifest.
struct shard_info {
    /// The file's name within the table's directory ("shard-3.bin"): a plain name, no
    /// directories.
    std::string file;
    /// The index of the server that wrote it.
    std::uint32_t server = 0;
    std::uint64_t rows = 0;
    /// The file's size.
    std::uint64_t bytes = 0;
    /// The XXH64 hash of the whole file (`detail::checksum`).
    std::uint64_t checksum = 0;

    friend bool operator==(const shard_info&, const shard_info&) = default;
};

/// One table's checkpoint: what every shard holds and where the shards are.
///
/// Written as JSON to `DIR/table-<id>/manifest.json` (see `detail::write_manifest`) after every
/// shard file, so a table directory without a manifest is an incomplete checkpoint.
struct checkpoint_manifest {
    std::uint32_t format_version = checkpoint_format_version;
    std::uint32_t table_id = 0;
    wire::scalar_type key_type = wire::scalar_type::u64;
    wire::scalar_type value_type = wire::scalar_type::f32;
    std::uint32_t width = 1;
    std::uint32_t state_width = 0;
    std::string updater;
    /// Whether the table is dense over the keys `[dense_begin, dense_end)`.
    bool dense = false;
    std::uint64_t dense_begin = 0;
    std::uint64_t dense_end = 0;
    /// The job's clock at the cut, counted from the job's first iteration (across
    /// restores): every push of clocks < `clock` is in the checkpoint. A restored job's
    /// workers resume at this clock.
    std::uint64_t clock = 0;
    /// No push of a clock >= `clock_limit` is in the checkpoint; pushes of clocks in
    /// [`clock`, `clock_limit`) may be, in part. Under `sequential` the two are equal (an
    /// exact cut); under `bounded_delay` and `eventual` the servers apply pushes as they
    /// arrive, so workers ahead of the saving one may have added some. Manifests written
    /// without it read as `clock`.
    std::uint64_t clock_limit = 0;
    /// One per server that wrote a shard, in increasing server order.
    std::vector<shard_info> shards;

    friend bool operator==(const checkpoint_manifest&, const checkpoint_manifest&) = default;
};

/// A checkpoint file is missing, incomplete, corrupt, or not the one the manifest
/// records; or it could not be written.
///
/// `what()` names the file and the problem, e.g.
/// "checkpoint file /ckpt/table-7/shard-1.bin: checksum mismatch: ...".
class checkpoint_error : public std::runtime_error {
public:
    /// @throws std::bad_alloc
    checkpoint_error(const std::filesystem::path& file, const std::string& problem)
        : std::runtime_error("checkpoint file " + file.string() + ": " + problem),
          path_(std::make_shared<const std::filesystem::path>(file)) {}

    /// The file (or directory) the problem is about.
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return *path_; }

private:
    // Shared, so that copying the exception never throws.
    std::shared_ptr<const std::filesystem::path> path_;
};

namespace detail {

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
[[nodiscard]] inline std::string checkpoint_type_text(wire::scalar_type t) {
    const auto name = checkpoint_type_name(t);
    if (name != "none") {
        return std::string(name);
    }
    return "unknown (" + std::to_string(static_cast<unsigned>(t)) + ")";
}

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
[[nodiscard]] inline std::string hex64(std::uint64_t v) {
    std::string s = "0x0000000000000000";
    for (std::size_t i = s.size(); v != 0; v >>= 4) {
        s[--i] = "0123456789abcdef"[v & 0xF];
    }
    return s;
}

/// The number `hex64` wrote, or nothing.
[[nodiscard]] inline std::optional<std::uint64_t> parse_hex64(std::string_view s) noexcept {
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

/// Whether `name` may name a shard file: a plain file name within the table's
/// directory, not empty, no path separators, no "..", no control characters.
[[nodiscard]] inline bool is_plain_file_name(std::string_view name) noexcept {
    if (name.empty() || name.size() > checkpoint_max_name || name == "." ||
        name.find("..") != std::string_view::npos) {
        return false;
    }
    return std::none_of(name.begin(), name.end(), [](char c) {
        return c == '/' || c == '\\' || c == ':' || static_cast<unsigned char>(c) < 0x20;
    });
}

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

} // namespace detail

/// Cereal: writes a shard's record (for a server's reply to the worker that writes the
/// manifest): the file name, length first, then the numbers.
/// @throws std::length_error when the file name is longer than 256 bytes.
template <class Archive>
void save(Archive& ar, const shard_info& s) {
    detail::save_checkpoint_name(ar, s.file);
    ar(s.server, s.rows, s.bytes, s.checksum);
}

/// Cereal: reads what `save` wrote, checking the name's length before allocating.
/// @throws std::length_error when the file name is longer than 256 bytes;
///   std::domain_error when it is not a plain file name (see `read_manifest`); what the
///   archive throws on truncated input.
template <class Archive>
void load(Archive& ar, shard_info& s) {
    detail::load_checkpoint_name(ar, s.file);
    ar(s.server, s.rows, s.bytes, s.checksum);
    if (!detail::is_plain_file_name(s.file)) {
        throw std::domain_error("shard file name is not a plain file name");
    }
}

namespace detail {

/// The payload sizes a table's shape implies: keys, values, state; nothing on overflow.
[[nodiscard]] inline std::optional<std::array<std::uint64_t, 3>>
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
[[nodiscard]] inline std::string check_table_shape(wire::scalar_type key_type,
                                                   wire::scalar_type value_type,
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

/// What is wrong with the table's shape, or an empty string.
[[nodiscard]] inline std::string check_shard_table(const shard_table& t) {
    if (auto why = check_table_shape(t.key_type, t.value_type, t.width, t.state_width, t.updater);
        !why.empty()) {
        return why;
    }
    const auto sizes =
        checkpoint_payload_bytes(t.key_type, t.value_type, t.width, t.state_width, t.rows);
    const std::array<std::size_t, 3> have{t.keys.size(), t.values.size(), t.state.size()};
    for (std::size_t i = 0; i < have.size(); ++i) {
        if (!sizes || (*sizes)[i] != have[i]) {
            return std::string(checkpoint_payload_names[i]) + " hold " + std::to_string(have[i]) +
                   " bytes, not the " + std::to_string(t.rows) + " rows the table says";
        }
    }
    if (const auto at = first_unsorted_key(t.key_type, t.keys.data(), t.rows); at != t.rows) {
        return "keys are not strictly ascending (row " + std::to_string(at) + ")";
    }
    return {};
}

/// What is wrong with a manifest, or an empty string.
[[nodiscard]] inline std::string check_manifest(const checkpoint_manifest& m) {
    if (m.format_version != checkpoint_format_version) {
        return "format version " + std::to_string(m.format_version) +
               " is not supported (this build reads version " +
               std::to_string(checkpoint_format_version) + ")";
    }
    if (auto why = check_table_shape(m.key_type, m.value_type, m.width, m.state_width, m.updater);
        !why.empty()) {
        return why;
    }
    if (m.dense && m.dense_begin >= m.dense_end) {
        return "dense key range [" + std::to_string(m.dense_begin) + ", " +
               std::to_string(m.dense_end) + ") is empty";
    }
    if (m.shards.size() > checkpoint_max_shards) {
        return std::to_string(m.shards.size()) + " shards, more than 65536";
    }
    std::vector<std::string_view> names;
    names.reserve(m.shards.size());
    std::uint64_t rows = 0;
    for (std::size_t i = 0; i < m.shards.size(); ++i) {
        const auto& s = m.shards[i];
        if (!is_plain_file_name(s.file)) {
            return "shard file name \"" + s.file.substr(0, checkpoint_max_name) +
                   "\" is not a plain file name";
        }
        if (i > 0 && s.server <= m.shards[i - 1].server) {
            return "shards are not in strictly increasing server order (server " +
                   std::to_string(s.server) + ")";
        }
        if (s.bytes < checkpoint_prefix_bytes) {
            return "shard " + s.file + " is recorded with " + std::to_string(s.bytes) +
                   " bytes, too few for a shard file";
        }
        const auto sum = checked_add(rows, s.rows);
        if (!sum) {
            return "shard row counts overflow";
        }
        rows = *sum;
        names.push_back(s.file);
    }
    std::sort(names.begin(), names.end());
    if (const auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end()) {
        return "shard file " + std::string(*dup) + " is listed twice";
    }
    return {};
}

/// Compresses `in` with snappy in blocks of `checkpoint_block_bytes`, each block stored
/// as its compressed length (little-endian `std::uint32_t`) then its bytes.
[[nodiscard]] inline std::vector<std::byte> compress_payload(std::span<const std::byte> in) {
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

/// Checks every block of a payload `compress_payload` wrote (its framing, that snappy
/// accepts it, and its uncompressed length) without allocating.
/// @return what is wrong, or an empty string.
[[nodiscard]] inline std::string check_payload(std::span<const std::byte> in,
                                               std::uint64_t uncompressed) {
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

/// Uncompresses a payload `check_payload` accepted into `out` (already sized).
/// @return whether snappy accepted every block.
[[nodiscard]] inline bool uncompress_payload(std::span<const std::byte> in,
                                             std::span<std::byte> out) {
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

/// The message of an `errno` value.
[[nodiscard]] inline std::string last_error_text(int error) {
    return std::generic_category().message(error);
}

/// Flushes a directory's entries (a rename in it) to storage; best effort.
inline void sync_directory(const std::filesystem::path& dir) noexcept {
#if defined(__unix__) || defined(__APPLE__)
    const std::string name = dir.empty() ? std::string(".") : dir.string();
    const int fd = ::open(name.c_str(), O_RDONLY);
    if (fd >= 0) {
        (void)::fsync(fd);
        (void)::close(fd);
    }
#else
    (void)dir;
#endif
}

/// Writes `pieces` to `file` + ".tmp", flushes it to storage, and renames it to `file`,
/// so that `file` is either absent, its previous version, or complete. Creates the
/// parent directories. Removes the temporary file when it fails.
/// @throws checkpoint_error naming the file and why it could not be written.
inline void write_file_atomically(const std::filesystem::path& file,
                                  std::span<const std::span<const std::byte>> pieces) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = file.parent_path();
    if (!dir.empty()) {
        fs::create_directories(dir, ec);
        if (ec) {
            throw checkpoint_error(dir, "cannot create the directory: " + ec.message());
        }
    }
    fs::path tmp = file;
    tmp += ".tmp";
    std::FILE* f = std::fopen(tmp.string().c_str(), "wb");
    if (f == nullptr) {
        throw checkpoint_error(tmp, "cannot create: " + last_error_text(errno));
    }
    auto fail = [&](const fs::path& which, const std::string& what) {
        if (f != nullptr) {
            std::fclose(f);
        }
        std::error_code ignored;
        fs::remove(tmp, ignored);
        return checkpoint_error(which, what);
    };
    for (const auto piece : pieces) {
        if (!piece.empty() && std::fwrite(piece.data(), 1, piece.size(), f) != piece.size()) {
            throw fail(tmp, "cannot write: " + last_error_text(errno));
        }
    }
    if (std::fflush(f) != 0) {
        throw fail(tmp, "cannot write: " + last_error_text(errno));
    }
#if defined(__unix__) || defined(__APPLE__)
    if (::fsync(::fileno(f)) != 0) {
        throw fail(tmp, "cannot flush to storage: " + last_error_text(errno));
    }
#endif
    const int closed = std::fclose(f);
    f = nullptr;
    if (closed != 0) {
        throw fail(tmp, "cannot write: " + last_error_text(errno));
    }
    fs::rename(tmp, file, ec);
    if (ec) {
        throw fail(file, "cannot rename " + tmp.filename().string() + " to it: " + ec.message());
    }
    sync_directory(dir);
}

/// Reads the whole of `file`, which must be exactly `expected` bytes long.
/// @throws checkpoint_error when it cannot be read or has another size.
[[nodiscard]] inline std::vector<std::byte> read_file_of_size(const std::filesystem::path& file,
                                                              std::uint64_t expected) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) {
        throw checkpoint_error(file, "cannot read: " + ec.message());
    }
    if (size < expected) {
        throw checkpoint_error(file, "truncated: " + std::to_string(size) +
                                         " bytes, the manifest records " +
                                         std::to_string(expected));
    }
    if (size > expected) {
        throw checkpoint_error(file, "has " + std::to_string(size) +
                                         " bytes, more than the manifest records (" +
                                         std::to_string(expected) + ")");
    }
    std::FILE* f = std::fopen(file.string().c_str(), "rb");
    if (f == nullptr) {
        throw checkpoint_error(file, "cannot open: " + last_error_text(errno));
    }
    struct file_closer {
        void operator()(std::FILE* p) const noexcept { std::fclose(p); }
    };
    const std::unique_ptr<std::FILE, file_closer> closer(f);
    std::vector<std::byte> bytes(static_cast<std::size_t>(expected));
    if (!bytes.empty() && std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
        throw checkpoint_error(file, std::ferror(f) != 0
                                         ? "cannot read: " + last_error_text(errno)
                                         : std::string("truncated while it was read"));
    }
    if (std::fgetc(f) != EOF) {
        throw checkpoint_error(file, "grew while it was read");
    }
    return bytes;
}

/// Parses the bytes of a shard file (already checked against `expected`'s size and
/// checksum). Every size is checked against the bytes present and against `max_bytes`
/// before anything is allocated.
/// @throws checkpoint_error naming `file` and the problem.
[[nodiscard]] inline shard_table parse_shard(const std::filesystem::path& file,
                                             std::span<const std::byte> bytes,
                                             const checkpoint_manifest& manifest,
                                             const shard_info& expected, std::uint64_t max_bytes) {
    auto error = [&](const std::string& problem) { return checkpoint_error(file, problem); };
    if (bytes.size() < checkpoint_prefix_bytes) {
        throw error("truncated: " + std::to_string(bytes.size()) +
                    " bytes, too few for a shard file");
    }
    std::array<std::uint32_t, 3> prefix{};
    std::memcpy(prefix.data(), bytes.data(), checkpoint_prefix_bytes);
    const auto [magic, version, header_bytes] = prefix;
    if (magic != checkpoint_magic) {
        throw error("not a Petrel checkpoint shard (wrong magic number)");
    }
    if (version != checkpoint_format_version) {
        throw error("format version " + std::to_string(version) +
                    " is not supported (this build reads version " +
                    std::to_string(checkpoint_format_version) + ")");
    }
    if (header_bytes > checkpoint_max_header_bytes) {
        throw error("malformed header: " + std::to_string(header_bytes) + " bytes, more than 4096");
    }
    bytes = bytes.subspan(checkpoint_prefix_bytes);
    if (header_bytes > bytes.size()) {
        throw error("truncated: the header needs " + std::to_string(header_bytes) + " bytes, " +
                    std::to_string(bytes.size()) + " are left");
    }
    checkpoint_shard_header h;
    try {
        wire::detail::span_source source(bytes.first(header_bytes));
        std::istream in(&source);
        cereal::BinaryInputArchive ar(in);
        ar(h);
        if (!source.at_end()) {
            throw std::length_error("bytes left over");
        }
    } catch (const std::exception& e) {
        throw error(std::string("malformed header: ") + e.what());
    }
    bytes = bytes.subspan(header_bytes);

    if (!is_checkpoint_key_type(h.key_type)) {
        throw error("unknown key type " + checkpoint_type_text(h.key_type));
    }
    if (!is_checkpoint_value_type(h.value_type)) {
        throw error("unknown value type " + checkpoint_type_text(h.value_type));
    }
    if (h.width == 0 || h.width > checkpoint_max_width || h.state_width > checkpoint_max_width) {
        throw error("widths " + std::to_string(h.width) + " and " + std::to_string(h.state_width) +
                    " are out of range");
    }
    if (h.table_id != manifest.table_id) {
        throw error("written for table " + std::to_string(h.table_id) + ", not table " +
                    std::to_string(manifest.table_id));
    }
    if (h.server != expected.server) {
        throw error("written by server " + std::to_string(h.server) + ", not server " +
                    std::to_string(expected.server));
    }
    if (h.key_type != manifest.key_type || h.value_type != manifest.value_type) {
        throw error("holds " + checkpoint_type_text(h.key_type) + " keys and " +
                    checkpoint_type_text(h.value_type) + " values, the manifest says " +
                    checkpoint_type_text(manifest.key_type) + " and " +
                    checkpoint_type_text(manifest.value_type));
    }
    if (h.width != manifest.width || h.state_width != manifest.state_width) {
        throw error("width " + std::to_string(h.width) + " and state width " +
                    std::to_string(h.state_width) + ", the manifest says " +
                    std::to_string(manifest.width) + " and " +
                    std::to_string(manifest.state_width));
    }
    if (h.updater != manifest.updater) {
        throw error("written with updater \"" + h.updater + "\", the manifest says \"" +
                    manifest.updater + "\"");
    }
    if (h.rows != expected.rows) {
        throw error("holds " + std::to_string(h.rows) + " rows, the manifest records " +
                    std::to_string(expected.rows));
    }
    const auto sizes =
        checkpoint_payload_bytes(h.key_type, h.value_type, h.width, h.state_width, h.rows);
    if (!sizes || *sizes != h.uncompressed) {
        throw error("malformed header: payload sizes do not match " + std::to_string(h.rows) +
                    " rows");
    }
    std::uint64_t total = 0;
    std::uint64_t stored = 0;
    for (std::size_t i = 0; i < sizes->size(); ++i) {
        const auto t = checked_add(total, (*sizes)[i]);
        const auto s = checked_add(stored, h.compressed[i]);
        if (!t || !s) {
            throw error("malformed header: payload sizes overflow");
        }
        total = *t;
        stored = *s;
    }
    if (total > max_bytes || total > std::numeric_limits<std::size_t>::max()) {
        throw error("holds " + std::to_string(total) + " bytes of rows, more than the limit of " +
                    std::to_string(max_bytes));
    }
    if (stored > bytes.size()) {
        throw error("truncated: the payloads need " + std::to_string(stored) + " bytes, " +
                    std::to_string(bytes.size()) + " are left");
    }
    if (stored < bytes.size()) {
        throw error(std::to_string(bytes.size() - stored) + " bytes follow the payloads");
    }
    std::array<std::span<const std::byte>, 3> payloads;
    for (std::size_t i = 0; i < payloads.size(); ++i) {
        payloads[i] = bytes.first(static_cast<std::size_t>(h.compressed[i]));
        bytes = bytes.subspan(payloads[i].size());
        if (auto problem = check_payload(payloads[i], h.uncompressed[i]); !problem.empty()) {
            throw error(std::string(checkpoint_payload_names[i]) + " payload: " + problem);
        }
    }

    shard_table t;
    t.table_id = h.table_id;
    t.key_type = h.key_type;
    t.value_type = h.value_type;
    t.width = h.width;
    t.state_width = h.state_width;
    t.updater = std::move(h.updater);
    t.rows = h.rows;
    std::array<std::vector<std::byte>*, 3> out{&t.keys, &t.values, &t.state};
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i]->resize(static_cast<std::size_t>(h.uncompressed[i]));
        if (!uncompress_payload(payloads[i], *out[i])) {
            throw error(std::string(checkpoint_payload_names[i]) +
                        " payload: corrupt compressed data");
        }
    }
    if (const auto at = first_unsorted_key(t.key_type, t.keys.data(), t.rows); at != t.rows) {
        throw error("keys are not strictly ascending (row " + std::to_string(at) + ")");
    }
    return t;
}

/// The text of `manifest.json`: one JSON object with the manifest's fields, types by
/// name ("u64"), checksums as "0x" and 16 hex digits (JSON numbers lose precision above
/// 2^53 in many readers).
/// @throws std::bad_alloc
[[nodiscard]] inline std::string manifest_json(const checkpoint_manifest& m) {
    std::string out = "{\n";
    auto field = [&](std::string_view indent, std::string_view name) {
        out += indent;
        append_json_string(out, name);
        out += ": ";
    };
    auto number = [&](std::string_view indent, std::string_view name, std::uint64_t v) {
        field(indent, name);
        out += std::to_string(v);
        out += ",\n";
    };
    auto text = [&](std::string_view indent, std::string_view name, std::string_view v) {
        field(indent, name);
        append_json_string(out, v);
        out += ",\n";
    };
    number("    ", "format_version", m.format_version);
    number("    ", "table_id", m.table_id);
    text("    ", "key_type", checkpoint_type_name(m.key_type));
    text("    ", "value_type", checkpoint_type_name(m.value_type));
    number("    ", "width", m.width);
    number("    ", "state_width", m.state_width);
    text("    ", "updater", m.updater);
    field("    ", "dense");
    out += m.dense ? "true,\n" : "false,\n";
    number("    ", "dense_begin", m.dense_begin);
    number("    ", "dense_end", m.dense_end);
    number("    ", "clock", m.clock);
    number("    ", "clock_limit", std::max(m.clock_limit, m.clock));
    field("    ", "shards");
    out += m.shards.empty() ? "[" : "[\n";
    for (std::size_t i = 0; i < m.shards.size(); ++i) {
        const auto& s = m.shards[i];
        out += "        {\n";
        text("            ", "file", s.file);
        number("            ", "server", s.server);
        number("            ", "rows", s.rows);
        number("            ", "bytes", s.bytes);
        field("            ", "checksum");
        append_json_string(out, hex64(s.checksum));
        out += i + 1 < m.shards.size() ? "\n        },\n" : "\n        }\n    ";
    }
    out += "]\n}\n";
    return out;
}

/// Reads the text `manifest_json` wrote. Members may come in any order; unknown ones are
/// skipped; every known one must be present, once.
/// @throws json_error when the text is not such a manifest; checkpoint_error (naming
///   `file`) for another format version or unknown types.
[[nodiscard]] inline checkpoint_manifest parse_manifest_json(const std::filesystem::path& file,
                                                             std::string_view json) {
    json_reader r(json);
    checkpoint_manifest m;
    // Bit i: member i of `names` was read.
    auto once = [&r](std::uint32_t& seen, std::span<const std::string_view> names,
                     std::string_view key) -> std::size_t {
        const auto at =
            static_cast<std::size_t>(std::find(names.begin(), names.end(), key) - names.begin());
        if (at < names.size()) {
            if ((seen >> at & 1u) != 0) {
                r.fail("member \"" + std::string(key) + "\" appears twice");
            }
            seen |= 1u << at;
        }
        return at;
    };
    auto missing = [&r](std::uint32_t seen, std::span<const std::string_view> names,
                        std::string_view where) {
        for (std::size_t i = 0; i < names.size(); ++i) {
            if ((seen >> i & 1u) == 0) {
                r.fail(std::string(where) + " has no member \"" + std::string(names[i]) + "\"");
            }
        }
    };
    auto u32 = [&r](std::string_view name) {
        const auto v = r.u64();
        if (v > std::numeric_limits<std::uint32_t>::max()) {
            r.fail(std::string(name) + " " + std::to_string(v) + " does not fit in 32 bits");
        }
        return static_cast<std::uint32_t>(v);
    };
    auto type = [&](std::string_view what) {
        const auto name = r.string(16);
        const auto t = checkpoint_type_from_name(name);
        if (t == wire::scalar_type::none) {
            throw checkpoint_error(file, "unknown " + std::string(what) + " \"" + name + "\"");
        }
        return t;
    };
    static constexpr std::array<std::string_view, 12> fields{
        "format_version", "table_id", "key_type",    "value_type", "width", "state_width",
        "updater",        "dense",    "dense_begin", "dense_end",  "clock", "shards"};
    static constexpr std::array<std::string_view, 5> shard_fields{"file", "server", "rows", "bytes",
                                                                  "checksum"};
    std::uint32_t seen = 0;
    std::optional<std::uint64_t> clock_limit; // optional: older manifests have none
    r.object([&](std::string_view key) {
        if (key == "clock_limit") {
            if (clock_limit) {
                r.fail("member \"clock_limit\" appears twice");
            }
            clock_limit = r.u64();
            return;
        }
        switch (once(seen, fields, key)) {
        case 0:
            m.format_version = u32(key);
            if (m.format_version != checkpoint_format_version) {
                throw checkpoint_error(file, "format version " + std::to_string(m.format_version) +
                                                 " is not supported (this build reads version " +
                                                 std::to_string(checkpoint_format_version) + ")");
            }
            break;
        case 1:
            m.table_id = u32(key);
            break;
        case 2:
            m.key_type = type("key type");
            break;
        case 3:
            m.value_type = type("value type");
            break;
        case 4:
            m.width = u32(key);
            break;
        case 5:
            m.state_width = u32(key);
            break;
        case 6:
            m.updater = r.string(checkpoint_max_name);
            break;
        case 7:
            m.dense = r.boolean();
            break;
        case 8:
            m.dense_begin = r.u64();
            break;
        case 9:
            m.dense_end = r.u64();
            break;
        case 10:
            m.clock = r.u64();
            break;
        case 11:
            r.array([&] {
                if (m.shards.size() == checkpoint_max_shards) {
                    r.fail("more than 65536 shards");
                }
                shard_info s;
                std::uint32_t shard_seen = 0;
                r.object([&](std::string_view name) {
                    switch (once(shard_seen, shard_fields, name)) {
                    case 0:
                        s.file = r.string(checkpoint_max_name);
                        break;
                    case 1:
                        s.server = u32(name);
                        break;
                    case 2:
                        s.rows = r.u64();
                        break;
                    case 3:
                        s.bytes = r.u64();
                        break;
                    case 4: {
                        const auto v = parse_hex64(r.string(18));
                        if (!v) {
                            r.fail("checksum is not \"0x\" and up to 16 hex digits");
                        }
                        s.checksum = *v;
                        break;
                    }
                    default:
                        r.skip();
                    }
                });
                missing(shard_seen, shard_fields, "a shard");
                m.shards.push_back(std::move(s));
            });
            break;
        default:
            r.skip();
        }
    });
    missing(seen, fields, "the manifest");
    r.finish();
    m.clock_limit = clock_limit.value_or(m.clock);
    if (m.clock_limit < m.clock) {
        throw checkpoint_error(file, "clock_limit " + std::to_string(m.clock_limit) +
                                         " is below clock " + std::to_string(m.clock));
    }
    return m;
}

/// The directory of table `table_id`'s checkpoint within `dir`: `dir/table-<id>`.
[[nodiscard]] inline std::filesystem::path table_dir(const std::filesystem::path& dir,
                                                     std::uint32_t table_id) {
    return dir / ("table-" + std::to_string(table_id));
}

/// The name of server `server`'s shard file: "shard-<server>.bin".
[[nodiscard]] inline std::string shard_file_name(std::uint32_t server) {
    return "shard-" + std::to_string(server) + ".bin";
}

/// The manifest of the checkpoint in `table_dir`: `table_dir/manifest.json`.
[[nodiscard]] inline std::filesystem::path manifest_path(const std::filesystem::path& table_dir) {
    return table_dir / "manifest.json";
}

/// Writes server `server`'s rows of a table to `file` (normally
/// `table_dir(dir, id) / shard_file_name(server)`), creating its directory.
///
/// The file is `file + ".tmp"` until it is complete and flushed to storage, then renamed:
/// a crash never leaves a partial file under the final name. An existing file is
/// replaced.
///
/// File layout: "PTCK" magic, format version, header length (little-endian
/// `std::uint32_t` each); the header (Cereal binary: table id, server, key and value
/// types, widths, updater name, rows, and the stored and uncompressed bytes of each
/// payload); then the keys, values and state payloads, each compressed with snappy in
/// blocks of 4 MiB, every block preceded by its compressed length (`std::uint32_t`).
///
/// @return the file's name, server, rows, size and checksum, for the manifest.
/// @throws std::invalid_argument when the table is not well formed: unknown types,
///   width 0, payload sizes that do not match its rows, keys not strictly ascending.
/// @throws checkpoint_error when the file cannot be written.
inline shard_info write_shard(const std::filesystem::path& file, std::uint32_t server,
                              const shard_table& table) {
    if (auto problem = check_shard_table(table); !problem.empty()) {
        throw std::invalid_argument("petrel::detail::write_shard: " + problem);
    }
    checkpoint_shard_header h;
    h.table_id = table.table_id;
    h.server = server;
    h.key_type = table.key_type;
    h.value_type = table.value_type;
    h.width = table.width;
    h.state_width = table.state_width;
    h.updater = table.updater;
    h.rows = table.rows;
    const std::array<const std::vector<std::byte>*, 3> in{&table.keys, &table.values, &table.state};
    std::array<std::vector<std::byte>, 3> payloads;
    for (std::size_t i = 0; i < in.size(); ++i) {
        payloads[i] = compress_payload(*in[i]);
        h.compressed[i] = payloads[i].size();
        h.uncompressed[i] = in[i]->size();
    }
    std::vector<std::byte> header;
    {
        wire::detail::vector_sink sink(header);
        std::ostream os(&sink);
        cereal::BinaryOutputArchive ar(os);
        ar(h);
    }
    const std::array<std::uint32_t, 3> prefix{checkpoint_magic, checkpoint_format_version,
                                              static_cast<std::uint32_t>(header.size())};
    const auto prefix_bytes = std::as_bytes(std::span(prefix));
    const std::array<std::span<const std::byte>, 5> pieces{prefix_bytes, header, payloads[0],
                                                           payloads[1], payloads[2]};
    checksum64 hash;
    std::uint64_t bytes = 0;
    for (const auto piece : pieces) {
        hash.update(piece);
        bytes += piece.size();
    }
    write_file_atomically(file, pieces);
    return shard_info{file.filename().string(), server, table.rows, bytes, hash.digest()};
}

/// Reads a shard file `write_shard` wrote, as the manifest records it.
///
/// Checks, in order: the file's size against `expected.bytes` (and `max_bytes`), its
/// checksum against `expected.checksum`, then its contents: magic and format version,
/// the header's sizes against the bytes present and `max_bytes` before allocating, that
/// it was written for `manifest`'s table, types, widths and updater by server
/// `expected.server` with `expected.rows` rows, every compressed block, and that keys
/// are strictly ascending. Nothing is returned unless everything holds.
///
/// @param max_bytes the most bytes the file, and separately its uncompressed rows, may
///   take.
/// @throws checkpoint_error naming `file` and the problem ("truncated", "checksum
///   mismatch", "written for table 8, not table 7", ...).
/// @throws std::bad_alloc
[[nodiscard]] inline shard_table read_shard(const std::filesystem::path& file,
                                            const checkpoint_manifest& manifest,
                                            const shard_info& expected, std::uint64_t max_bytes) {
    if (expected.bytes > max_bytes || expected.bytes > std::numeric_limits<std::size_t>::max()) {
        throw checkpoint_error(file, "the manifest records " + std::to_string(expected.bytes) +
                                         " bytes, more than the limit of " +
                                         std::to_string(max_bytes));
    }
    const auto bytes = read_file_of_size(file, expected.bytes);
    if (const auto sum = checksum(bytes); sum != expected.checksum) {
        throw checkpoint_error(file, "checksum mismatch: the file hashes to " + hex64(sum) +
                                         ", the manifest records " + hex64(expected.checksum) +
                                         " (corrupt, or not the file of this checkpoint)");
    }
    return parse_shard(file, bytes, manifest, expected, max_bytes);
}

/// Writes `table_dir/manifest.json` (creating the directory), through a temporary file
/// renamed once complete. Write it after every shard: its presence marks the checkpoint
/// complete. The shards are written in increasing server order.
/// @throws std::invalid_argument when the manifest is not well formed (see
///   `read_manifest`); checkpoint_error when the file cannot be written.
inline void write_manifest(const std::filesystem::path& table_dir,
                           const checkpoint_manifest& manifest) {
    checkpoint_manifest m = manifest;
    std::sort(m.shards.begin(), m.shards.end(),
              [](const shard_info& a, const shard_info& b) { return a.server < b.server; });
    if (auto problem = check_manifest(m); !problem.empty()) {
        throw std::invalid_argument("petrel::detail::write_manifest: " + problem);
    }
    const std::string text = manifest_json(m);
    const std::array<std::span<const std::byte>, 1> pieces{
        std::as_bytes(std::span(text.data(), text.size()))};
    write_file_atomically(manifest_path(table_dir), pieces);
}

/// Reads `table_dir/manifest.json`.
///
/// Refuses a missing manifest (the checkpoint is incomplete: the manifest is written
/// last), one larger than 64 MiB, malformed JSON or missing fields, another format
/// version, unknown key or value types, widths outside [1, 2^24], an empty dense range,
/// more than 65536 shards, shard file names that are not plain names (a '/', "..",
/// longer than 256 bytes), shards out of server order or listed twice. It does not
/// check that the manifest's table id matches the directory's name.
///
/// @throws checkpoint_error naming the manifest's path and the problem.
[[nodiscard]] inline checkpoint_manifest read_manifest(const std::filesystem::path& table_dir) {
    namespace fs = std::filesystem;
    const fs::path file = manifest_path(table_dir);
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (status.type() == fs::file_type::not_found) {
        throw checkpoint_error(file, "missing: the checkpoint of this table is incomplete (its "
                                     "manifest is written last) or was never made");
    }
    if (ec) {
        throw checkpoint_error(file, "cannot read: " + ec.message());
    }
    if (status.type() != fs::file_type::regular) {
        throw checkpoint_error(file, "not a regular file");
    }
    const auto size = fs::file_size(file, ec);
    if (ec) {
        throw checkpoint_error(file, "cannot read: " + ec.message());
    }
    if (size > checkpoint_max_manifest_bytes) {
        throw checkpoint_error(file, "malformed manifest: " + std::to_string(size) +
                                         " bytes, more than 64 MiB");
    }
    const auto bytes = read_file_of_size(file, size);

    checkpoint_manifest m;
    try {
        m = parse_manifest_json(
            file, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (const json_error& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    }
    if (auto problem = check_manifest(m); !problem.empty()) {
        throw checkpoint_error(file, problem);
    }
    return m;
}

} // namespace detail

} // namespace petrel
