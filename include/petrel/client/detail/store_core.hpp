// Petrel: what every operation of one store shares: its identity, its checked requests,
// and the parts below it (links, resender, worker gate, sending path).
#pragma once

#include <petrel/client/detail/resender.hpp>
#include <petrel/client/detail/router.hpp>
#include <petrel/client/detail/send_pipeline.hpp>
#include <petrel/client/detail/server_links.hpp>
#include <petrel/client/detail/slices.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/compression_options.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace petrel {
class member;
class worker_node;
} // namespace petrel

namespace petrel::detail {

struct worker_clock;

/// What a store's requests say about it: fixed once the store is made.
struct store_identity {
    std::uint32_t node = 0;   // the sender of its requests
    std::uint32_t table = 0;  // the table it reads and writes
    std::uint32_t worker = 0; // its index in the servers' clocks (`wire::no_worker`: a reader)
    wire::scalar_type key_type = wire::scalar_type::u64;
    wire::scalar_type value_type = wire::scalar_type::f32;
    std::size_t width = 1; // values per key

    /// The bytes of one key's row of values.
    [[nodiscard]] std::size_t row_bytes() const noexcept {
        return width * wire::size_of(value_type);
    }
};

/// A store's options without its types (see `kv_store_options`).
struct store_settings {
    store_identity id;
    std::vector<std::string> servers; // without a job: the servers, in ring order
    ring_options ring;                // without a job: the ring's shape
    std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
    bool key_caching = false;
    std::size_t key_cache_bytes = 0;
    wire::compression_options compression;
    policy_traits policy{};
    /// Where saves write their manifests (`worker_node::checkpoint_root`).
    std::filesystem::path checkpoint_root;
};

/// A request checked, and its keys and values copied into pooled buffers (or shared with
/// the caller), before the initiating call returns.
struct prepared_request {
    std::error_code error;
    shared_bytes keys; // sorted, unique keys of the store's key type; a range push has none
    shared_bytes values;
    std::size_t count = 0;
    /// A range request: every key of `range`, sent as runs.
    std::optional<key_range<std::uint64_t>> range;
    /// What is wrong with the request, in more detail than `error` says (logged).
    std::string why;
};

/// The state one store's operations share, compiled once: its identity and settings, the
/// job's declaration of its table, and its parts (server links, resender, worker gate,
/// sending path). The typed `kv_store` adapts the caller's data; the named operations
/// (`push_op`, `pull_op`, `call_op`) send through this.
///
/// Lock order: the parts' own (server links → resender → worker clock → leaf locks); the
/// core itself has no lock, its fields are fixed once it is made.
///
/// @par Thread Safety
/// All member functions may be called concurrently.
class store_core {
public:
    /// A store on the servers of `s.servers`, without a job. @throws std::invalid_argument
    /// when the settings are inconsistent (no servers, a server listed twice, width 0 or
    /// above 2^32 - 1, bad ring options).
    PETREL_DECL store_core(any_transport transport, store_settings s);

    /// A store of `worker` in a job: it takes the worker's node, rank, request timeout and
    /// clock, the table's declared width and dense range, and follows every view.
    /// @throws std::invalid_argument when the width or the types contradict the table's
    /// declaration, or the worker has no view.
    PETREL_DECL store_core(worker_node& worker, store_settings s);

    /// Stops following views and closes (see `close`).
    PETREL_DECL ~store_core();

    store_core(const store_core&) = delete;
    store_core& operator=(const store_core&) = delete;

    /// The settings as final (a job's worker sets node, worker, width and timeout).
    [[nodiscard]] const store_settings& settings() const noexcept { return s_; }
    [[nodiscard]] const store_identity& id() const noexcept { return s_.id; }
    [[nodiscard]] const logger& log() const noexcept { return log_; }
    [[nodiscard]] any_transport& transport() noexcept { return transport_; }
    [[nodiscard]] asio::any_io_executor executor() const { return transport_.get_executor(); }
    [[nodiscard]] buffer_pool& pool() const { return *transport_.pool(); }
    /// A reader's store: pulls only.
    [[nodiscard]] bool read_only() const noexcept { return read_only_; }

    [[nodiscard]] const std::shared_ptr<send_pipeline>& pipe() const noexcept { return pipe_; }
    [[nodiscard]] const std::shared_ptr<worker_clock>& clock() const noexcept { return clock_; }
    [[nodiscard]] const std::shared_ptr<resender>& resends() const noexcept { return resender_; }
    [[nodiscard]] worker_gate& gate() const noexcept { return *gate_; }

    /// A fresh update id for a push (random start per store, never 0).
    [[nodiscard]] std::uint64_t next_update_id() noexcept {
        return next_update_.fetch_add(1, std::memory_order_relaxed);
    }

    /// When an operation started now is due (the request timeout from now).
    [[nodiscard]] PETREL_DECL std::chrono::steady_clock::time_point deadline() const;

    /// The placement by the newest view adopted.
    [[nodiscard]] PETREL_DECL std::shared_ptr<const route_table> placement() const;

    /// The view that places this store's keys.
    [[nodiscard]] PETREL_DECL std::shared_ptr<const membership_view> view() const;

    /// A request of this store's table, worker and types, without range or payload.
    [[nodiscard]] PETREL_DECL wire::message blank_request(wire::message_kind kind) const;

    /// The slices of `p` by owning server (see `cut_slices`), with values for a push.
    [[nodiscard]] PETREL_DECL std::error_code cut(const prepared_request& p, bool with_values,
                                                  std::vector<slice>& out) const;

    /// The failure report of slice `s` (logs a lost connection naming the server).
    [[nodiscard]] PETREL_DECL failure_report report_of(const slice& s) const;

    /// Refuses keys outside the table's declared dense range; logs what is wrong with a
    /// refused request (the error code alone cannot name the key or the shapes).
    PETREL_DECL void check(prepared_request& p, std::string_view op) const;

    /// "values of shape [6, 3] for 2 keys; expected [2, 4] (or [8]): width 4 ..."
    [[nodiscard]] PETREL_DECL std::string shape_error(std::span<const std::size_t> shape,
                                                      std::size_t keys) const;

    /// A range request: every key of `range`; `with_keys` lists them (for a pull's
    /// result). The largest key is reserved.
    [[nodiscard]] PETREL_DECL prepared_request prepare_range(key_range<std::uint64_t> range,
                                                             bool with_keys) const;

    /// `bytes` copied into a pooled buffer.
    [[nodiscard]] PETREL_DECL shared_bytes copy(std::span<const std::byte> bytes) const;

    /// Completes every waiting operation with `errc::shut_down` and closes the links (and
    /// the transport, unless it is a job's worker's). Idempotent.
    PETREL_DECL void close();

private:
    PETREL_DECL void adopt_declaration(const worker_node& worker);
    PETREL_DECL void make_parts();

    any_transport transport_;
    store_settings s_;
    logger log_;
    /// The job's declaration of this table: its dense keys, and whether the width came
    /// from it.
    std::optional<key_range<std::uint64_t>> dense_;
    bool declared_width_ = false;
    bool read_only_ = false;
    bool owns_transport_ = true;
    std::shared_ptr<member> member_;
    std::size_t subscription_ = 0;
    std::atomic<std::uint64_t> next_update_;
    std::shared_ptr<send_pipeline> pipe_;
    std::shared_ptr<worker_clock> clock_;
    std::shared_ptr<resender> resender_;
    std::shared_ptr<server_links> links_;
    std::shared_ptr<worker_gate> gate_;
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/store_core.ipp>
#endif
