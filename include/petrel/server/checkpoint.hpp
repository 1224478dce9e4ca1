// Petrel: checkpoint files: each server's rows of a table, and a manifest per table.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/wire/header.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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

/// The manifest of table `table_id`'s checkpoint in `dir` (written by `kv_store::save`):
/// its shape, its shards and the clock of the cut, from which a restored job resumes.
/// @throws checkpoint_error naming the manifest when it is missing or malformed.
[[nodiscard]] PETREL_DECL checkpoint_manifest read_checkpoint(const std::filesystem::path& dir,
                                                              std::uint32_t table_id);

} // namespace petrel

// Writing and reading the files, which use the types above.
#include <petrel/server/detail/checkpoint_file.hpp>
#include <petrel/server/detail/checkpoint_manifest_io.hpp>
