// Petrel: checkpoint shard files: atomic writes, whole-file reads, and the parsing of a shard.
#ifndef PETREL_SERVER_IMPL_CHECKPOINT_FILE_IPP
#define PETREL_SERVER_IMPL_CHECKPOINT_FILE_IPP

#include <petrel/core/detail/checksum.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_file.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/wire/detail/streambuf.hpp>

#include <cereal/archives/binary.hpp>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <istream>
#include <limits>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#endif

namespace petrel::detail {

PETREL_DECL void sync_directory(const std::filesystem::path& dir) noexcept {
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

PETREL_DECL void write_file_atomically(const std::filesystem::path& file,
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

PETREL_DECL std::vector<std::byte> read_file_of_size(const std::filesystem::path& file,
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

PETREL_DECL std::string check_shard_table(const shard_table& t) {
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

PETREL_DECL shard_table parse_shard(const std::filesystem::path& file,
                                    std::span<const std::byte> bytes,
                                    const checkpoint_manifest& manifest, const shard_info& expected,
                                    std::uint64_t max_bytes) {
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

PETREL_DECL shard_info write_shard(const std::filesystem::path& file, std::uint32_t server,
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

PETREL_DECL shard_table read_shard(const std::filesystem::path& file,
                                   const checkpoint_manifest& manifest, const shard_info& expected,
                                   std::uint64_t max_bytes) {
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

} // namespace petrel::detail

#endif // PETREL_SERVER_IMPL_CHECKPOINT_FILE_IPP
