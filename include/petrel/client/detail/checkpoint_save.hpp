// Petrel: a client's part of saving a checkpoint: the manifest it writes from the servers'
// answers to the checkpoint call.
#pragma once

#include <petrel/consistency/policy.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/log.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/remote_call.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace petrel::detail {

/// The table a checkpoint saves, as the client knows it.
struct save_target {
    std::string dir;
    clock_type cut = 0; // the clock the servers saved at
    std::uint32_t table = 0;
    wire::scalar_type key_type = wire::scalar_type::u64;
    wire::scalar_type value_type = wire::scalar_type::f32;
    std::size_t width = 1;
    std::uint32_t self = 0; // the client's node, in log lines
    logger log;
};

/// Writes `dir/table-<id>/manifest.json` from the servers' answers to the checkpoint call
/// (each a `saved_shard`): the table's shape, its update rule and each shard. Fails with the
/// decoding error of an answer that is not a `saved_shard`, or with
/// `errc::checkpoint_failed` (logged, naming why) when no server answered, the servers
/// hold the table with different update rules, or the manifest cannot be written.
[[nodiscard]] PETREL_DECL std::error_code finish_save(const save_target& target,
                                                      const std::vector<raw_result>& answers);

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/checkpoint_save.ipp>
#endif
