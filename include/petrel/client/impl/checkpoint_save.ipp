// Petrel: a client's part of saving a checkpoint (see
// <petrel/client/detail/checkpoint_save.hpp>).
#ifndef PETREL_CLIENT_IMPL_CHECKPOINT_SAVE_IPP
#define PETREL_CLIENT_IMPL_CHECKPOINT_SAVE_IPP

#include <petrel/client/detail/checkpoint_save.hpp>
#include <petrel/core/error.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>

#include <algorithm>
#include <exception>
#include <stdexcept>

namespace petrel::detail {

PETREL_DECL std::error_code resolve_save_dir(const store_core& core, std::string_view dir,
                                             std::filesystem::path& out) {
    std::string why;
    const auto ec = resolve_checkpoint_dir(core.settings().checkpoint_root, dir, out, why);
    if (ec && core.log()) {
        core.log()(log_level::error, "petrel worker " + std::to_string(core.id().node) +
                                         ": checkpoint refused: " + why);
    }
    return ec;
}

PETREL_DECL std::error_code finish_save(const save_target& target,
                                        const std::vector<shared_bytes>& answers) {
    try {
        std::vector<saved_shard> shards(answers.size());
        for (std::size_t i = 0; i < answers.size(); ++i) {
            if (auto ec = decode_result(answers[i].span(), shards[i])) {
                return ec;
            }
        }
        if (shards.empty()) {
            throw std::runtime_error("no server answered");
        }
        std::sort(shards.begin(), shards.end(),
                  [](const auto& a, const auto& b) { return a.shard.server < b.shard.server; });
        checkpoint_manifest m;
        m.table_id = target.table;
        m.key_type = target.key_type;
        m.value_type = target.value_type;
        m.width = static_cast<std::uint32_t>(target.width);
        m.state_width = shards.front().state_width;
        m.updater = shards.front().updater;
        m.dense = shards.front().dense;
        m.dense_begin = shards.front().dense_begin;
        m.dense_end = shards.front().dense_end;
        m.clock = target.cut;
        m.clock_limit = target.cut;
        for (const auto& s : shards) {
            m.clock_limit = std::max(m.clock_limit, s.clock_limit);
            if (s.state_width != m.state_width || s.updater != m.updater || s.dense != m.dense) {
                throw std::runtime_error("the servers hold table " + std::to_string(target.table) +
                                         " with different update rules ('" + m.updater + "' and '" +
                                         s.updater + "')");
            }
            m.shards.push_back(s.shard);
        }
        write_manifest(table_dir(target.dir, target.table), m);
        return {};
    } catch (const std::exception& e) {
        if (target.log) {
            target.log(log_level::error, "petrel worker " + std::to_string(target.self) +
                                             ": checkpoint failed: " + e.what());
        }
        return errc::checkpoint_failed;
    }
}

} // namespace petrel::detail

#endif
