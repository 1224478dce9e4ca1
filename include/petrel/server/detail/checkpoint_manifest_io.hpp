// Petrel: checkpoint manifests: one JSON file per table, written last, read back strictly.
#pragma once

#include <petrel/core/config.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace petrel {

// Defined in <petrel/server/checkpoint.hpp>, which includes this header.
struct checkpoint_manifest;

namespace detail {

/// What is wrong with a manifest, or an empty string.
[[nodiscard]] PETREL_DECL std::string check_manifest(const checkpoint_manifest& m);

/// The text of `manifest.json`: one JSON object with the manifest's fields, types by
/// name ("u64"), checksums as "0x" and 16 hex digits (JSON numbers lose precision above
/// 2^53 in many readers), indented by 4.
/// @throws std::invalid_argument when a string is not UTF-8; std::bad_alloc
[[nodiscard]] PETREL_DECL std::string manifest_json(const checkpoint_manifest& m);

/// Reads the text `manifest_json` wrote (or an older Petrel did: `clock_limit` may be
/// missing). Strict JSON (RFC 8259, UTF-8, no comments), nested at most
/// `checkpoint_max_json_depth` deep; members may come in any order; unknown ones are
/// skipped; every known one must be present, once, of its type.
/// @throws checkpoint_error naming `file`: "malformed manifest: ..." (where, for text
///   that is not JSON) when the text is not such a manifest; another format version or
///   unknown types said as such.
[[nodiscard]] PETREL_DECL checkpoint_manifest parse_manifest_json(const std::filesystem::path& file,
                                                                  std::string_view json);

/// Writes `table_dir/manifest.json` (creating the directory), through a temporary file
/// renamed once complete. Write it after every shard: its presence marks the checkpoint
/// complete. The shards are written in increasing server order.
/// @throws std::invalid_argument when the manifest is not well formed (see
///   `read_manifest`); checkpoint_error when the file cannot be written.
PETREL_DECL void write_manifest(const std::filesystem::path& table_dir,
                                const checkpoint_manifest& manifest);

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
[[nodiscard]] PETREL_DECL checkpoint_manifest read_manifest(const std::filesystem::path& table_dir);

} // namespace detail

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/server/impl/checkpoint_manifest_io.ipp>
#endif
