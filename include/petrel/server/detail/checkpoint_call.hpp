// Petrel: the built-in call that saves a server's rows of a table (see kv_store::save).
#pragma once

#include <petrel/server/checkpoint.hpp>
#include <petrel/wire/remote_call.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace petrel::detail {

/// A server's answer to the checkpoint call: its shard, and what the manifest records of
/// the table's shape.
struct saved_shard {
    shard_info shard;
    std::uint32_t state_width = 0;
    std::string updater;
    bool dense = false;
    std::uint64_t dense_begin = 0;
    std::uint64_t dense_end = 0;
    /// No push of a clock >= this was in the server's table when it wrote its shard.
    std::uint64_t clock_limit = 0;

    template <class Archive>
    void save(Archive& ar) const {
        ar(shard, state_width);
        save_checkpoint_name(ar, updater);
        ar(dense, dense_begin, dense_end, clock_limit);
    }
    template <class Archive>
    void load(Archive& ar) {
        ar(shard, state_width);
        load_checkpoint_name(ar, updater);
        ar(dense, dense_begin, dense_end, clock_limit);
    }
};

} // namespace petrel::detail
