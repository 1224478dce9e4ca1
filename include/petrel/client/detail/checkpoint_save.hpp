// Petrel: the save operation: the checkpoint call to every server, then the manifest the
// client writes from their answers.
#pragma once

#include <petrel/client/detail/call_op.hpp>
#include <petrel/client/detail/store_core.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/remote_call.hpp>

#include <asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// The table a checkpoint saves, as the client knows it.
struct save_target {
    std::filesystem::path dir; // resolved under the checkpoint root
    clock_type cut = 0;        // the clock the servers saved at
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
                                                      const std::vector<shared_bytes>& answers);

/// Where the store's save to `dir` writes its manifest: `dir` under the checkpoint root
/// (`detail::resolve_checkpoint_dir`, as the servers resolve it), or
/// `errc::invalid_argument` for a directory out of the root, logged with the reason.
[[nodiscard]] PETREL_DECL std::error_code
resolve_save_dir(const store_core& core, std::string_view dir, std::filesystem::path& out);

/// A save with its handler, `void(std::error_code)`: a checkpoint call whose completion
/// writes the manifest (`finish_save`) before it runs the handler.
template <typename Handler>
class save_op_for final : public call_op {
public:
    save_op_for(Handler handler, const asio::any_io_executor& ex, save_target target,
                std::size_t servers)
        : call_op(servers), target_(std::move(target)),
          done_(std::in_place, std::move(handler), ex) {}

private:
    void deliver(std::error_code ec, std::vector<shared_bytes> answers) override {
        auto d = std::move(*done_); // only the one caller that claimed the fan-in gets here
        done_.reset();
        std::move(d).dispatch(ec ? ec : finish_save(target_, answers));
    }

    save_target target_;
    std::optional<completion<Handler, asio::any_io_executor>> done_;
};

/// The initiation of `kv_store::save` (for `asio::async_initiate`): the built-in
/// checkpoint call over the whole key space, at the clock a pull would read now.
struct initiate_save {
    store_core* core;

    template <typename Handler>
    void operator()(Handler&& handler, std::string dir) const {
        using handler_type = std::decay_t<Handler>;
        const auto& id = core->id();
        save_target target{{},
                           core->gate().read_gate().first,
                           id.table,
                           id.key_type,
                           id.value_type,
                           id.width,
                           id.node,
                           core->log()};
        prepared_call c;
        c.error = resolve_save_dir(*core, dir, target.dir);
        c.range = {0, id.key_type == wire::scalar_type::u32 ? key_space_end<std::uint32_t>
                                                            : key_space_end<std::uint64_t>};
        if (!c.error) {
            try {
                c.body = shared_bytes::copy_of(encode_call(checkpoint_call, dir));
            } catch (const std::exception&) {
                c.error = errc::invalid_argument;
            }
        }
        start_call(
            *core, c,
            [&](std::size_t servers) {
                return std::make_shared<save_op_for<handler_type>>(
                    std::forward<Handler>(handler), core->executor(), std::move(target), servers);
            },
            [&](std::error_code ec) {
                completion<handler_type, asio::any_io_executor>(std::forward<Handler>(handler),
                                                                core->executor())
                    .post(ec);
            });
    }
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/checkpoint_save.ipp>
#endif
