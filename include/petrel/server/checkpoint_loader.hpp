// Petrel: reading a checkpoint back into tables, for a server's restore.
#pragma once

#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/make_table.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/wire/header.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace petrel::detail {

/// One table of a checkpoint, read and built: its rows, and the clocks its manifest
/// records (`checkpoint_manifest::clock`, `clock_limit`).
struct loaded_table {
    std::unique_ptr<table_base> table;
    std::uint64_t clock = 0;
    std::uint64_t clock_limit = 0;
};

/// "123" → 123 for a table directory's id (`table-<id>`): decimal digits only, at most
/// 2^32 - 1; nothing otherwise.
[[nodiscard]] inline bool parse_table_id(std::string_view text, std::uint32_t& id) noexcept {
    if (text.empty() || text.size() > 10) {
        return false;
    }
    std::uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') {
            return false;
        }
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (v > 0xFFFFFFFFu) {
        return false;
    }
    id = static_cast<std::uint32_t>(v);
    return true;
}

/// An empty table for the checkpoint `m` (its manifest at `where`): as `declared` (which
/// must match it: types, width, update rule, dense range), or sparse and summing when
/// not declared (null).
/// @throws checkpoint_error naming `where` and the difference
[[nodiscard]] inline std::unique_ptr<table_base>
table_for_checkpoint(const checkpoint_manifest& m, const std::filesystem::path& where,
                     const table_registry::entry* declared) {
    const auto id = std::to_string(m.table_id);
    wire::message_header h;
    h.key_type = m.key_type;
    h.value_type = m.value_type;
    h.width = m.width;
    if (!declared) {
        if (m.updater != "sum" || m.state_width != 0 || m.dense) {
            throw checkpoint_error(where, "table " + id + " was saved with update rule '" +
                                              m.updater + "'; declare it in the table_registry");
        }
        return make_table(h);
    }
    auto table = declared->make();
    if (auto ec = table->check(h)) {
        throw checkpoint_error(where,
                               "table " + id + " does not match its declaration: " + ec.message());
    }
    const auto dense = table->dense_keys();
    const bool same_dense =
        dense ? (m.dense && dense->begin == m.dense_begin && dense->end == m.dense_end) : !m.dense;
    if (table->updater_name() != m.updater || table->state_values() != m.state_width ||
        !same_dense) {
        throw checkpoint_error(where, "table " + id + " was saved with update rule '" + m.updater +
                                          "' (" + std::to_string(m.state_width) +
                                          " state values per key" +
                                          (m.dense ? ", dense" : ", sparse") +
                                          "), which its declaration does not match");
    }
    return table;
}

/// Reads every table of the checkpoint in `dir` (written by `kv_store::save`: one
/// `table-<id>` directory per table, each with its manifest and shards), keeping the rows
/// whose key `owns(table_id, key)` accepts (every row when `owns` is empty). Tables are
/// built as `tables` declares them (see `table_for_checkpoint`). Every manifest and shard
/// is checked (sizes against `max_shard_bytes`, checksums, contents) before it is used.
/// @throws checkpoint_error naming the file and the problem, also when `dir` is not a
///   directory or holds no table; std::bad_alloc
[[nodiscard]] inline std::map<std::uint32_t, loaded_table>
load_checkpoint(const std::filesystem::path& dir, const table_registry* tables,
                const std::function<bool(std::uint32_t, std::uint64_t)>& owns,
                std::uint64_t max_shard_bytes) {
    namespace fs = std::filesystem;
    std::error_code fec;
    if (!fs::is_directory(dir, fec)) {
        throw checkpoint_error(dir, "is not a directory");
    }
    std::map<std::uint32_t, loaded_table> loaded;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        std::uint32_t id = 0;
        if (!name.starts_with("table-") || !entry.is_directory() ||
            !parse_table_id(std::string_view(name).substr(6), id)) {
            continue;
        }
        const auto manifest = read_manifest(entry.path());
        const auto where = manifest_path(entry.path());
        if (manifest.table_id != id) {
            throw checkpoint_error(where, "records table " + std::to_string(manifest.table_id) +
                                              " in the directory of table " + std::to_string(id));
        }
        auto table = table_for_checkpoint(manifest, where, tables ? tables->find(id) : nullptr);
        const std::function<bool(std::uint64_t)> keep = [&owns, id](std::uint64_t k) {
            return !owns || owns(id, k);
        };
        for (const auto& shard : manifest.shards) {
            const auto rows =
                read_shard(entry.path() / shard.file, manifest, shard, max_shard_bytes);
            try {
                table->load(rows, keep);
            } catch (const std::out_of_range& e) {
                throw checkpoint_error(entry.path() / shard.file, e.what());
            }
        }
        loaded.emplace(id, loaded_table{std::move(table), manifest.clock, manifest.clock_limit});
    }
    if (loaded.empty()) {
        throw checkpoint_error(dir, "holds no table checkpoint (table-<id>/manifest.json)");
    }
    return loaded;
}

} // namespace petrel::detail
