// Petrel: checkpoint shard files: written whole or not at all, read back checked.
#pragma once

#include <petrel/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace petrel {

// Defined in <petrel/server/checkpoint.hpp>, which includes this header.
struct shard_table;
struct shard_info;
struct checkpoint_manifest;

namespace detail {

/// The message of an `errno` value.
[[nodiscard]] inline std::string last_error_text(int error) {
    return std::generic_category().message(error);
}

/// Flushes a directory's entries (a rename in it) to storage; best effort.
PETREL_DECL void sync_directory(const std::filesystem::path& dir) noexcept;

/// Writes `pieces` to `file` + ".tmp", flushes it to storage, and renames it to `file`,
/// so that `file` is either absent, its previous version, or complete. Creates the
/// parent directories. Removes the temporary file when it fails.
/// @throws checkpoint_error naming the file and why it could not be written.
PETREL_DECL void write_file_atomically(const std::filesystem::path& file,
                                       std::span<const std::span<const std::byte>> pieces);

/// Reads the whole of `file`, which must be exactly `expected` bytes long.
/// @throws checkpoint_error when it cannot be read or has another size.
[[nodiscard]] PETREL_DECL std::vector<std::byte>
read_file_of_size(const std::filesystem::path& file, std::uint64_t expected);

/// What is wrong with the table's shape, or an empty string.
[[nodiscard]] PETREL_DECL std::string check_shard_table(const shard_table& t);

/// Parses the bytes of a shard file (already checked against `expected`'s size and
/// checksum). Every size is checked against the bytes present and against `max_bytes`
/// before anything is allocated.
/// @throws checkpoint_error naming `file` and the problem.
[[nodiscard]] PETREL_DECL shard_table parse_shard(const std::filesystem::path& file,
                                                  std::span<const std::byte> bytes,
                                                  const checkpoint_manifest& manifest,
                                                  const shard_info& expected,
                                                  std::uint64_t max_bytes);

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
PETREL_DECL shard_info write_shard(const std::filesystem::path& file, std::uint32_t server,
                                   const shard_table& table);

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
[[nodiscard]] PETREL_DECL shard_table read_shard(const std::filesystem::path& file,
                                                 const checkpoint_manifest& manifest,
                                                 const shard_info& expected,
                                                 std::uint64_t max_bytes);

} // namespace detail

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/server/impl/checkpoint_file.ipp>
#endif
