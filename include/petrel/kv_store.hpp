// Petrel: the worker-side handle to a table of parameters.
#pragma once

#include <petrel/client/detail/checkpoint_save.hpp>
#include <petrel/client/detail/fan_in.hpp>
#include <petrel/client/detail/resender.hpp>
#include <petrel/client/detail/router.hpp>
#include <petrel/client/detail/send_pipeline.hpp>
#include <petrel/client/detail/server_links.hpp>
#include <petrel/client/detail/slices.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/core/log.hpp>
#include <petrel/fwd.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/compression_options.hpp>
#include <petrel/wire/filter.hpp>
#include <petrel/wire/frame.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/key_cache.hpp>
#include <petrel/wire/message.hpp>
#include <petrel/wire/remote_call.hpp>
#include <petrel/wire/traffic.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <xtensor/xadapt.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xutils.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel {

template <key Key>
struct kv_store_options {
    /// Without a cluster: the servers' addresses. Keys are placed on them by a `ring`
    /// made from this list (in this order), as a job's manager would place them.
    /// Ignored when the store is made from a `worker_node` (the job's view decides).
    std::vector<std::string> servers{};
    /// The ring's shape, without a cluster.
    ring_options ring{};
    /// Which table of the servers this handle reads and writes.
    std::uint32_t table_id = 0;
    /// Values per key: 1 for scalars, the row length for embeddings. 0 (the default): the
    /// table's declared width (`table_spec::width`) for a store made from a worker of a
    /// job that declares the table, else 1. A width that contradicts the declaration is
    /// refused when the store is made.
    std::size_t width = 0;
    /// This node's id, written as the sender of its requests (a worker's own id when
    /// made from a `worker_node`).
    std::uint32_t node_id = 0;
    /// This worker's index in the servers' clocks, below `server_options::workers` (its
    /// rank among the job's workers when made from a `worker_node`).
    std::uint32_t worker = 0;
    /// Every push, pull, call and `clock()` completes by then, with `errc::timed_out` if
    /// no reply came (a worker's request timeout when made from a `worker_node`). It counts
    /// from the call, also while the request waits for this worker's own clock tick or for
    /// a view, and when it is sent again after a dropped connection.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
    /// Key caching: a key list sent to a server before travels as a reference (a number
    /// and a digest) instead of the keys, on pushes and pulls alike. Pays when the same key
    /// sets repeat (a worker's mini-batches over its shard, its whole working set).
    bool key_caching = false;
    /// Bytes of key lists remembered per server (least recently used first out). Keep it
    /// at most the servers' `wire_limits::max_key_cache_bytes`, or references miss (and the
    /// keys are resent).
    std::size_t key_cache_bytes = std::size_t{32} << 20;
    /// Snappy compression of the keys and values this store sends, and of the values the
    /// servers send back for its pulls (see `wire::compression_options`); off by default.
    wire::compression_options compression{};
};

namespace detail {

/// Keys as a contiguous span: a `std::span`, a `std::vector`, an xtensor container...
template <typename Key, typename Keys>
concept contiguous_keys = requires(const Keys& k) {
    { k.data() } -> std::convertible_to<const Key*>;
    { k.size() } -> std::convertible_to<std::size_t>;
};

/// Values in one contiguous array of `Value`: an xtensor container, a `std::vector`...
template <typename Value, typename C>
concept contiguous_values = requires(const C& c) {
    { c.data() } -> std::convertible_to<const Value*>;
    { c.size() } -> std::convertible_to<std::size_t>;
};

} // namespace detail

/// The worker-side handle to one table on a set of servers.
///
/// `push(keys, values, token)` adds values to the servers' rows; `pull(keys, token)`
/// reads them back. Keys must be sorted and unique. The keys are split by owning server
/// (the ring of the job's view), the slices travel in parallel, and a pull's slices are
/// put back in the caller's key order. Values
/// are xtensor expressions of shape `[n]` (scalars) or `[n, width]` (rows); a pull yields
/// a `kv_pairs` whose values adapt the received bytes without copying.
///
/// Every operation takes an Asio completion token, so the same call serves coroutines
/// (`asio::use_awaitable`), plain loops (`asio::use_future`) and callbacks. Keys and values
/// are copied before the call returns, so the caller's buffers may be reused at once.
/// Every operation completes, at the latest after `request_timeout`; when the job's
/// manager declares a server failed, the operations waiting on it complete at once with
/// `errc::node_failed` (and the worker's log names the server).
///
/// @par Example
/// @code
/// // In a job (see petrel::run): placement and addresses come from the manager.
/// petrel::kv_store<std::uint64_t, float> kv(worker);
/// // Without a cluster: a list of server addresses.
/// petrel::kv_store<std::uint64_t, float> kv2(petrel::tcp_transport(io.get_executor()),
///                                            {.servers = {"10.0.0.1:9100", "10.0.0.2:9100"}});
/// std::vector<std::uint64_t> keys{1, 3, 7};
/// xt::xtensor<float, 1> grad = {0.5f, 1.0f, -2.0f};
/// kv.push(keys, grad, asio::use_future).get();
/// auto weights = kv.pull(keys, asio::use_future).get();   // kv_pairs<uint64_t, float>
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread, concurrently.
template <key Key, typename Value, typename Consistency>
class kv_store {
    static_assert(wire::wire_key<Key>, "petrel::kv_store: Key must be std::uint32_t or "
                                       "std::uint64_t");
    static_assert(wire::wire_value<Value>, "petrel::kv_store: Value must be float or double");
    static_assert(consistency_policy<Consistency>,
                  "petrel::kv_store: Consistency must be petrel::sequential, petrel::eventual or "
                  "petrel::bounded_delay<Tau>");

public:
    using key_type = Key;
    using value_type = Value;
    using consistency = Consistency;
    using executor_type = asio::any_io_executor;
    using options_type = kv_store_options<Key>;

    /// A store on the servers listed in `opts.servers`, without a cluster.
    /// @throws std::invalid_argument when the options are inconsistent (no servers, a
    /// server listed twice, width 0, bad ring options).
    kv_store(any_transport transport, options_type opts)
        : transport_(std::move(transport)), opts_(std::move(opts)), log_(transport_.options().log) {
        if (opts_.width == 0) {
            opts_.width = 1;
        }
        check_width();
        if (opts_.servers.empty()) {
            throw std::invalid_argument("petrel::kv_store: no servers given");
        }
        membership_view v;
        v.version = 1;
        std::vector<node_id> ids;
        for (std::size_t i = 0; i < opts_.servers.size(); ++i) {
            for (std::size_t j = 0; j < i; ++j) {
                if (opts_.servers[i] == opts_.servers[j]) {
                    throw std::invalid_argument("petrel::kv_store: server " + opts_.servers[i] +
                                                " is listed twice");
                }
            }
            const auto id = static_cast<node_id>(i + 1);
            v.nodes.push_back({id,
                               node_role::server,
                               node_state::alive,
                               opts_.servers[i],
                               0,
                               static_cast<std::uint32_t>(i),
                               {},
                               {}});
            ids.push_back(id);
        }
        v.ring = ring::balanced(opts_.ring, ids); // throws on bad ring options
        make_parts();
        links_->adopt(std::make_shared<const membership_view>(std::move(v)));
    }

    /// A store of a worker in a job: the job's view says where keys live, and every new
    /// view is followed (a failed server fails its waiting operations at once).
    ///
    /// The store of a reader (a worker of a read-only group) only pulls: its pulls never
    /// wait and return the newest completed clock of each server's ranges (under
    /// `sequential` and `bounded_delay` servers apply the pushes of a clock together once
    /// it is complete, so a pulled row holds every push of the clocks below
    /// `kv_pairs::clocks()` says and none later); pushes, `clock()` and `finish` fail
    /// with `errc::read_only`.
    /// `opts.servers` and `opts.ring` are ignored. @throws std::invalid_argument
    explicit kv_store(worker_node& worker, options_type opts = {})
        : transport_(worker.transport()), opts_(std::move(opts)), log_(transport_.options().log),
          member_(worker.membership_ptr()), owns_transport_(false) {
        adopt_declaration(worker.declared(opts_.table_id));
        check_width();
        opts_.node_id = worker.id();
        opts_.worker = worker.read_only() ? wire::no_worker : worker.rank();
        read_only_ = worker.read_only();
        opts_.request_timeout = worker.request_timeout();
        pipe_->request_timeout = opts_.request_timeout;
        clock_ = worker.clock_of(opts_.table_id);
        if (auto v = worker.view(); !v || v->ring.empty()) {
            throw std::invalid_argument("petrel::kv_store: the worker has no view of its job");
        }
        make_parts();
        // Subscribe first, so that no view between the read below and the subscription
        // is missed (adopt ignores views that are not newer).
        std::weak_ptr<detail::server_links> links = links_;
        std::weak_ptr<detail::resender> resends = resender_;
        subscription_ = member_->subscribe([links, resends](const member::view_ptr& nv) {
            if (auto l = links.lock()) {
                l->adopt(nv);
            }
            if (auto r = resends.lock()) {
                r->review_all(); // requests dropped by a server that failed go elsewhere
            }
        });
        links_->adopt(worker.view()); // servers failed before this store existed fail at once
        if constexpr (Consistency::ordered) {
            resender_->review_all(); // servers that took keys over learn this store has no
                                     // resends
        }
    }

    kv_store(const kv_store&) = delete;
    kv_store& operator=(const kv_store&) = delete;

    /// Completes every operation still waiting with `errc::shut_down`.
    ~kv_store() {
        if (member_) {
            member_->unsubscribe(subscription_);
        }
        close();
    }

    [[nodiscard]] executor_type get_executor() const { return transport_.get_executor(); }
    [[nodiscard]] const options_type& options() const noexcept { return opts_; }

    /// Adds `values` (shape `[n]` or `[n, width]`, any xtensor expression) to the rows
    /// of `keys` (sorted, unique). Completion signature: `void(std::error_code)`.
    template <typename Keys, typename E, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys>
    auto push(const Keys& keys, const xt::xexpression<E>& values, CompletionToken&& token) {
        prepared p = prepare(std::span<const Key>(keys.data(), keys.size()));
        if (!p.error) {
            p.error = copy_values(values.derived_cast(), p);
        }
        filter(p);
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// Adds `values`, `width` per key, given flat.
    template <typename Keys, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys>
    auto push(const Keys& keys, std::span<const Value> values, CompletionToken&& token) {
        return push(keys,
                    xt::adapt(values.data(), values.size(), xt::no_ownership(),
                              std::array<std::size_t, 1>{values.size()}),
                    std::forward<CompletionToken>(token));
    }

    /// Adds `values` without copying them: the message shares `values` (a contiguous
    /// container of `Value`: a row-major xtensor container of shape `[n]` or `[n, width]`,
    /// or a flat `std::vector`) until it is sent. The caller must not modify `values`
    /// before the push completes. Completion signature: `void(std::error_code)`.
    ///
    /// @par Example
    /// @code
    /// auto grad = std::make_shared<xt::xtensor<float, 2>>(xt::zeros<float>({n, width}));
    /// // ... fill *grad each iteration, then:
    /// co_await kv.push(keys, grad, asio::use_awaitable);   // no copy of *grad
    /// @endcode
    template <typename Keys, typename Container, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys> && detail::contiguous_values<Value, Container>
    auto push(const Keys& keys, std::shared_ptr<Container> values, CompletionToken&& token) {
        prepared p = prepare(std::span<const Key>(keys.data(), keys.size()));
        if (!p.error) {
            p.error = share_values(std::move(values), p);
        }
        filter(p);
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// Adds `values` to the rows of `keys`, sharing both buffers instead of copying them
    /// (ps-lite's ZPush): `keys` is a contiguous container of `Key` (sorted, unique), `values`
    /// as for the shared push above. Neither may be modified before the push completes.
    /// Completion signature: `void(std::error_code)`.
    template <typename KeysContainer, typename Container, typename CompletionToken>
    requires detail::contiguous_keys<Key, KeysContainer> &&
        detail::contiguous_values<Value, Container>
    auto push(std::shared_ptr<const KeysContainer> keys, std::shared_ptr<Container> values,
              CompletionToken&& token) {
        prepared p = prepare_shared(std::move(keys));
        if (!p.error) {
            p.error = share_values(std::move(values), p);
        }
        filter(p);
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// Reads the rows of `keys`, sharing the caller's key buffer instead of copying it
    /// (ps-lite's ZPull): the result's keys are that buffer, which must not be modified
    /// while the result is used. Completion signature:
    /// `void(std::error_code, kv_pairs<Key, Value>)`.
    template <typename KeysContainer, typename CompletionToken>
    requires detail::contiguous_keys<Key, KeysContainer>
    auto pull(std::shared_ptr<const KeysContainer> keys, CompletionToken&& token) {
        return initiate_pull(prepare_shared(std::move(keys)), std::forward<CompletionToken>(token));
    }

    /// Reads the rows of `keys` (sorted, unique); rows never pushed read as zeros.
    /// Completion signature: `void(std::error_code, kv_pairs<Key, Value>)`.
    template <typename Keys, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys>
    auto pull(const Keys& keys, CompletionToken&& token) {
        return initiate_pull(prepare(std::span<const Key>(keys.data(), keys.size())),
                             std::forward<CompletionToken>(token));
    }

    /// Adds `values` (shape `[n]` or `[n, width]` with n = `range.size()`, any xtensor
    /// expression) to the rows of every key of `range`. No key list is built or sent:
    /// each server gets its runs of the range as pairs of keys. Completion signature:
    /// `void(std::error_code)`.
    ///
    /// @par Example
    /// @code
    /// xt::xtensor<float, 1> grad = ...;   // one value per key of [0, n)
    /// kv.push(petrel::key_range<std::uint32_t>{0, n}, grad, asio::use_future).get();
    /// @endcode
    template <typename E, typename CompletionToken>
    auto push(key_range<Key> range, const xt::xexpression<E>& values, CompletionToken&& token) {
        prepared p = prepare_range(range, false);
        if (!p.error) {
            p.error = copy_values(values.derived_cast(), p);
        }
        filter(p);
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// As above, sharing `values` instead of copying them (see the keyed overload).
    template <typename Container, typename CompletionToken>
    requires detail::contiguous_values<Value, Container>
    auto push(key_range<Key> range, std::shared_ptr<Container> values, CompletionToken&& token) {
        prepared p = prepare_range(range, false);
        if (!p.error) {
            p.error = share_values(std::move(values), p);
        }
        filter(p);
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// Reads the rows of every key of `range` (keys never pushed read as the table's
    /// initial values). Completion signature:
    /// `void(std::error_code, kv_pairs<Key, Value>)`.
    template <typename CompletionToken>
    auto pull(key_range<Key> range, CompletionToken&& token) {
        return initiate_pull(prepare_range(range, true), std::forward<CompletionToken>(token));
    }

    /// Reads the rows of `keys` (sorted, unique) into the caller's memory `out`, which
    /// must hold `keys.size() × width` values and stay valid until the pull completes.
    /// The rows of each server's reply are copied once, straight to their place in `out`.
    /// Completion signature: `void(std::error_code)`; `out` is unspecified on error.
    ///
    /// @par Example
    /// @code
    /// xt::xtensor<float, 2> w({keys.size(), width});
    /// kv.pull(keys, std::span<float>(w.data(), w.size()), asio::use_future).get();
    /// @endcode
    template <typename Keys, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys>
    auto pull(const Keys& keys, std::span<Value> out, CompletionToken&& token) {
        return initiate_pull_into(prepare(std::span<const Key>(keys.data(), keys.size())), out,
                                  std::forward<CompletionToken>(token));
    }

    /// Reads the rows of every key of `range` into `out` (`range.size() × width` values;
    /// see the keyed overload). Completion signature: `void(std::error_code)`.
    template <typename CompletionToken>
    auto pull(key_range<Key> range, std::span<Value> out, CompletionToken&& token) {
        return initiate_pull_into(prepare_range(range, false), out,
                                  std::forward<CompletionToken>(token));
    }

    /// Sets the filters every later push of this store goes through, in this order (none
    /// by default; an empty list removes them). See `wire::push_filter` and
    /// `wire::significance_filter`.
    ///
    /// @par Example
    /// @code
    /// auto significant = std::make_shared<petrel::wire::significance_filter<std::uint64_t,
    /// float>>(1e-3f); kv.set_filters({significant});
    /// // ... training: small changes wait in the filter's residual ...
    /// kv.flush(asio::use_future).get();   // send what the filters held back
    /// @endcode
    void set_filters(std::vector<std::shared_ptr<wire::push_filter<Key, Value>>> filters) {
        for (const auto& f : filters) {
            if (!f) {
                throw std::invalid_argument("petrel::kv_store::set_filters: a filter is null");
            }
        }
        std::lock_guard lock(mutex_);
        filters_ = std::move(filters);
    }

    /// Pushes what the filters held back (their residuals), so that nothing is lost at the
    /// end of training or before a checkpoint. Completion signature: `void(std::error_code)`.
    template <typename CompletionToken>
    auto flush(CompletionToken&& token) {
        prepared p;
        try {
            auto batch = wire::drain_filters(current_filters(), opts_.width);
            p = from_batch(batch);
        } catch (const std::bad_alloc&) {
            p.error = errc::out_of_memory;
        }
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// What this store sent and received so far, stage by stage (filters, key caching,
    /// compression); see `wire::traffic_stats`.
    [[nodiscard]] wire::traffic_stats traffic() const noexcept { return pipe_->counters.load(); }

    /// This worker's clock on the table: the iterations it has completed (`clock()`
    /// calls, counted over every store of this worker and table).
    [[nodiscard]] clock_type current_clock() const { return gate_->current(); }

    /// Ends this worker's iteration: advances its clock and tells every server once the
    /// iteration's pushes have completed. Returns at once; the task completes when every
    /// server has recorded the clock, or with `errc::timed_out` when that has not happened
    /// within the request timeout (the tick still goes once the pushes before it have
    /// settled). Under `sequential` and `bounded_delay`, the reads of the other workers
    /// wait for these ticks.
    task<void> clock() { return gate_->clock(); }

    /// As `clock()`, completing with the servers' acknowledgement through any token.
    /// Completion signature: `void(std::error_code)`.
    template <typename CompletionToken>
    auto clock(CompletionToken&& token) {
        return clock().async_wait(std::forward<CompletionToken>(token));
    }

    /// Calls `clock()` when it goes out of scope: one iteration as a scope.
    ///
    /// @par Example
    /// @code
    /// for (int i = 0; i < iterations; ++i) {
    ///     auto it = kv.iteration();
    ///     auto w = kv.pull(keys, asio::use_future).get();
    ///     kv.push(keys, gradient(w), asio::use_future).get();
    /// }   // clock() here
    /// @endcode
    class iteration_scope {
    public:
        explicit iteration_scope(kv_store& s) noexcept : store_(&s) {}
        iteration_scope(const iteration_scope&) = delete;
        iteration_scope& operator=(const iteration_scope&) = delete;
        ~iteration_scope() {
            if (store_) {
                store_->clock();
            }
        }

    private:
        kv_store* store_;
    };

    [[nodiscard]] iteration_scope iteration() noexcept { return iteration_scope(*this); }

    /// This worker leaves the table's clock: the servers no longer wait for it. `petrel::run`
    /// does this for every table when a worker's training function returns; without a job,
    /// call it when a worker stops early. Completion signature: `void(std::error_code)`.
    template <typename CompletionToken>
    auto finish(CompletionToken&& token) {
        return gate_->finish().async_wait(std::forward<CompletionToken>(token));
    }

    /// Runs the remote function `name` on every server that owns keys of `range`, over
    /// the rows it stores there, once the range's clocks satisfy the consistency model
    /// (as a pull at the current clock). Every process must have registered the function
    /// in the `function_registry` of its servers. Completion signature:
    /// `void(std::error_code, std::vector<Result>)`, one result per server involved.
    template <typename Result, typename Args, typename CompletionToken>
    auto call(std::string_view name, key_range<Key> range, const Args& args,
              CompletionToken&& token) {
        prepared_call c;
        c.range = range;
        try {
            c.body = shared_bytes::copy_of(detail::encode_call(name, args));
        } catch (const std::exception&) {
            c.error = errc::invalid_argument;
        }
        return asio::async_initiate<CompletionToken, void(std::error_code, std::vector<Result>)>(
            [this](auto handler, prepared_call c) {
                this->template start_call<Result>(std::move(handler), std::move(c));
            },
            token, std::move(c));
    }

    /// As above for a function registered by type (`function_registry::add<F>()`).
    template <remote_function F, typename CompletionToken>
    auto call(key_range<Key> range, const typename F::args_type& args, CompletionToken&& token) {
        return call<typename F::result_type>(std::string_view(F::name), range, args,
                                             std::forward<CompletionToken>(token));
    }

    /// Saves this table to the checkpoint directory `dir`: every server writes its rows
    /// (values and optimizer state) to `dir/table-<id>/shard-<server>.bin`, then this store
    /// writes `dir/table-<id>/manifest.json` with the table's shape, the shards' sizes and
    /// checksums, and the clock of the cut. A job restores it with `--restore dir`
    /// (`config::restore`), also onto another number of servers.
    ///
    /// The servers save once the table's clocks allow a pull at this worker's clock. Under
    /// `sequential`, called between iterations (after `clock()`, before the next push) by
    /// one worker, it is a consistent cut: every push of the earlier clocks is in, no later
    /// one. The directory must be shared by the servers and this worker (one host, or a
    /// shared file system). Completion signature: `void(std::error_code)`;
    /// `errc::checkpoint_failed` when a file could not be written (the log says why).
    ///
    /// @par Example
    /// @code
    /// if (worker.rank() == 0 && kv.current_clock() % 100 == 0) {
    ///     kv.save("/shared/ckpt", asio::use_future).get();
    /// }
    /// @endcode
    template <typename CompletionToken>
    auto save(std::string dir, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler, std::string dir) {
                this->start_save(std::move(handler), std::move(dir));
            },
            token, std::move(dir));
    }

    /// Completes every waiting operation with `errc::shut_down` and closes the
    /// connections; later operations fail the same way. Idempotent.
    void close() {
        links_->close();
        resender_->close();
        if (owns_transport_) {
            transport_.close(); // a worker's transport is shared by its other stores
        }
    }

    /// The view that places this store's keys.
    [[nodiscard]] std::shared_ptr<const membership_view> view() const {
        const auto where = current_placement();
        return where ? where->view : nullptr;
    }

private:
    /// A request checked and copied into pooled buffers before the call returns.
    struct prepared {
        std::error_code error;
        shared_bytes keys; // a range push has none
        shared_bytes values;
        std::size_t count = 0;
        /// A range request: every key of `range`, sent as runs.
        std::optional<key_range<Key>> range;
        /// What is wrong with the request, in more detail than `error` says (logged).
        std::string why;
    };

    using slice = detail::slice;

    /// Where keys go under one view: a link per server and each partition's server.
    using placement = detail::route_table;

    /// Runs the store's filters on a push (before it is split), and counts its payload
    /// before and after them.
    void filter(prepared& p) {
        if (p.error) {
            return;
        }
        const std::uint64_t before = p.keys.size() + p.values.size();
        auto filters = current_filters();
        if (filters.empty() || p.count == 0) {
            pipe_->counters.filter.add({before, before});
            return;
        }
        try {
            wire::filter_batch<Key, Value> batch;
            batch.width = opts_.width;
            batch.keys.resize(p.count);
            if (p.range) {
                for (std::size_t i = 0; i < p.count; ++i) {
                    batch.keys[i] = static_cast<Key>(p.range->begin + i);
                }
            } else {
                std::memcpy(batch.keys.data(), p.keys.data(), p.count * sizeof(Key));
            }
            const auto values = p.values.template as<Value>();
            batch.values.assign(values.begin(), values.end());
            const std::uint64_t counted_before = batch.bytes();
            wire::apply_filters(filters, batch);
            p = from_batch(batch);
            pipe_->counters.filter.add({counted_before, batch.bytes()});
        } catch (const std::bad_alloc&) {
            p.error = errc::out_of_memory;
        }
    }

    /// A keyed push of the rows of `batch`, checked as a caller's push would be.
    prepared from_batch(const wire::filter_batch<Key, Value>& batch) {
        if (batch.values.size() != batch.keys.size() * opts_.width) {
            prepared p;
            p.error = errc::value_count_mismatch; // a filter broke the rows' shape
            return p;
        }
        prepared p = prepare(std::span<const Key>(batch.keys.data(), batch.keys.size()));
        if (!p.error && p.count > 0) {
            pooled_buffer vb = transport_.pool()->acquire(batch.values.size() * sizeof(Value));
            std::memcpy(vb.data(), batch.values.data(), batch.values.size() * sizeof(Value));
            p.values = vb.share();
        }
        return p;
    }

    std::vector<std::shared_ptr<wire::push_filter<Key, Value>>> current_filters() const {
        std::lock_guard lock(mutex_);
        return filters_;
    }

    /// Takes the width from the table's declaration (when the options leave it 0), and
    /// refuses a width or types that contradict it. @throws std::invalid_argument
    void adopt_declaration(const std::optional<declared_table>& d) {
        if (d) {
            auto name = [](wire::scalar_type t) { return std::string(wire::type_name(t)); };
            const auto id = std::to_string(opts_.table_id);
            if (d->key_type != wire::scalar_type_of<Key> ||
                d->value_type != wire::scalar_type_of<Value>) {
                throw std::invalid_argument(
                    "petrel::kv_store: table " + id + " is declared with keys " +
                    name(d->key_type) + " and values " + name(d->value_type) +
                    ", but this store has keys " + name(wire::scalar_type_of<Key>) +
                    " and values " + name(wire::scalar_type_of<Value>));
            }
            dense_ = d->dense;
            declared_width_ = true;
            if (opts_.width == 0) {
                opts_.width = d->width;
            } else if (opts_.width != d->width) {
                throw std::invalid_argument(
                    "petrel::kv_store: kv_store_options::width is " + std::to_string(opts_.width) +
                    " but table " + id + " is declared with width " + std::to_string(d->width) +
                    " (table_spec::width); leave kv_store_options::width unset to take the "
                    "declared one");
            }
        }
        if (opts_.width == 0) {
            opts_.width = 1;
        }
    }

    void check_width() const {
        if (opts_.width == 0 || opts_.width > std::numeric_limits<std::uint32_t>::max()) {
            throw std::invalid_argument("petrel::kv_store: width must be at least 1");
        }
    }

    detail::failure_report failure_report(const slice& s) const {
        return detail::failure_report::of(s, log_, opts_.node_id);
    }

    /// Refuses keys outside the table's declared dense range; logs what is wrong with a
    /// refused request (the error code alone cannot name the key or the shapes).
    void check_request(prepared& p, std::string_view op) const {
        if (!p.error && dense_ && p.count > 0) {
            const std::uint64_t low = p.range ? std::uint64_t{p.range->begin}
                                              : std::uint64_t{p.keys.template as<Key>()[0]};
            const std::uint64_t high = p.range
                                           ? std::uint64_t{p.range->end} - 1
                                           : std::uint64_t{p.keys.template as<Key>()[p.count - 1]};
            if (low < dense_->begin || high >= dense_->end) {
                p.error = errc::key_out_of_range;
                p.why = "key " + std::to_string(low < dense_->begin ? low : high) +
                        " is outside the dense range [" + std::to_string(dense_->begin) + ", " +
                        std::to_string(dense_->end) + ") of table " +
                        std::to_string(opts_.table_id);
            }
        }
        if (p.error && !p.why.empty() && log_) {
            log_(log_level::error, "petrel worker " + std::to_string(opts_.node_id) + ": " +
                                       std::string(op) + " refused (" + p.error.message() +
                                       "): " + p.why);
        }
    }

    template <typename CompletionToken>
    auto initiate_pull(prepared p, CompletionToken&& token) {
        check_request(p, "pull");
        return asio::async_initiate<CompletionToken, void(std::error_code, kv_pairs<Key, Value>)>(
            [this](auto handler, prepared p) {
                this->start_pull(std::move(handler), std::move(p));
            },
            token, std::move(p));
    }

    template <typename CompletionToken>
    auto initiate_pull_into(prepared p, std::span<Value> out, CompletionToken&& token) {
        if (!p.error && out.size() != p.count * opts_.width) {
            p.error = errc::value_count_mismatch;
            p.why = "a pull of " + std::to_string(p.count) + " keys of width " +
                    std::to_string(opts_.width) + " into " + std::to_string(out.size()) +
                    " values; expected " + std::to_string(p.count * opts_.width);
        }
        check_request(p, "pull");
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this, out](auto handler, prepared p) {
                this->start_pull(std::move(handler), std::move(p), out.data());
            },
            token, std::move(p));
    }

    template <typename CompletionToken>
    auto initiate_push(prepared p, CompletionToken&& token) {
        check_request(p, "push");
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler, prepared p) {
                this->start_push(std::move(handler), std::move(p));
            },
            token, std::move(p));
    }

    /// A range request: every key of `range`; `with_keys` lists them for the result.
    prepared prepare_range(key_range<Key> range, bool with_keys) {
        prepared p;
        p.count = range.size();
        p.range = range;
        if (range.end == key_space_end<Key> && !range.empty()) {
            p.error = errc::key_out_of_range; // the largest key is reserved
            return p;
        }
        if (with_keys && p.count > 0) {
            if (p.count > transport_.options().limits.max_frame_bytes / sizeof(Key)) {
                p.error = errc::frame_too_large;
                return p;
            }
            pooled_buffer buf = transport_.pool()->acquire(p.count * sizeof(Key));
            Key* k = buf.template as<Key>();
            for (std::size_t i = 0; i < p.count; ++i) {
                k[i] = static_cast<Key>(range.begin + i);
            }
            p.keys = buf.share();
        }
        return p;
    }

    /// Checks a key list: sorted, unique, without the reserved largest key.
    static prepared check_keys(std::span<const Key> keys) {
        prepared p;
        p.count = keys.size();
        if (std::adjacent_find(keys.begin(), keys.end(), std::greater_equal<Key>{}) != keys.end()) {
            p.error = errc::keys_not_sorted;
        } else if (p.count > 0 && keys.back() == key_space_end<Key>) {
            p.error = errc::key_out_of_range; // the largest key is reserved
        }
        return p;
    }

    prepared prepare(std::span<const Key> keys) {
        prepared p = check_keys(keys);
        if (p.error || p.count == 0) {
            return p;
        }
        pooled_buffer buf = transport_.pool()->acquire(keys.size_bytes());
        std::memcpy(buf.data(), keys.data(), keys.size_bytes());
        p.keys = buf.share();
        return p;
    }

    /// A key list the request shares with the caller instead of copying it.
    template <typename KeysContainer>
    static prepared prepare_shared(std::shared_ptr<const KeysContainer> keys) {
        if (!keys) {
            prepared p;
            p.error = errc::invalid_argument;
            return p;
        }
        const std::span<const Key> k(keys->data(), keys->size());
        prepared p = check_keys(k);
        if (!p.error && p.count > 0) {
            p.keys = shared_bytes(std::shared_ptr<const void>(std::move(keys), k.data()),
                                  std::as_bytes(k));
        }
        return p;
    }

    /// "values of shape [6, 3] for 2 keys; expected [2, 4] (or [8]): width 4 ..."
    std::string shape_error(const std::vector<std::size_t>& shape, std::size_t keys) const {
        std::string s = "values of shape [";
        for (std::size_t i = 0; i < shape.size(); ++i) {
            s += (i ? ", " : "") + std::to_string(shape[i]);
        }
        const auto w = opts_.width;
        return s + "] for " + std::to_string(keys) + " keys; expected [" + std::to_string(keys) +
               ", " + std::to_string(w) + "] (or [" + std::to_string(keys * w) +
               "]): kv_store_options::width is " + std::to_string(w) +
               (dense_ || declared_width_ ? " (the table's declared width)" : "");
    }

    template <typename E>
    std::error_code copy_values(const E& e, prepared& p) {
        const std::size_t w = opts_.width;
        const auto& shape = e.shape();
        const bool ok = (e.dimension() == 1 && shape[0] == p.count * w) ||
                        (e.dimension() == 2 && shape[0] == p.count && shape[1] == w);
        if (!ok) {
            p.why = shape_error(std::vector<std::size_t>(shape.begin(), shape.end()), p.count);
            return errc::value_count_mismatch;
        }
        const std::size_t n = p.count * w;
        if (n == 0) {
            return {};
        }
        pooled_buffer buf = transport_.pool()->acquire(n * sizeof(Value));
        Value* dst = buf.template as<Value>();
        if constexpr (xt::has_data_interface<E>::value &&
                      std::is_same_v<std::remove_cv_t<typename E::value_type>, Value>) {
            if (e.layout() == xt::layout_type::row_major ||
                (e.dimension() == 1 && e.strides()[0] == 1)) {
                std::memcpy(dst, e.data() + e.data_offset(), n * sizeof(Value));
                p.values = buf.share();
                return {};
            }
        }
        auto out = xt::adapt(std::move(dst), n, xt::no_ownership(),
                             std::vector<std::size_t>(shape.begin(), shape.end()));
        out = e;
        p.values = buf.share();
        return {};
    }

    template <typename Container>
    std::error_code share_values(std::shared_ptr<Container> c, prepared& p) {
        if (!c) {
            return errc::invalid_argument;
        }
        const std::size_t w = opts_.width;
        bool ok = c->size() == p.count * w;
        if constexpr (requires {
                          c->shape();
                          c->layout();
                      }) {
            const auto& shape = c->shape();
            ok = ok && (c->layout() == xt::layout_type::row_major || shape.size() == 1) &&
                 ((shape.size() == 1 && shape[0] == p.count * w) ||
                  (shape.size() == 2 && shape[0] == p.count && shape[1] == w));
        }
        if (!ok) {
            std::vector<std::size_t> dims{c->size()};
            if constexpr (requires { c->shape(); }) {
                dims.assign(c->shape().begin(), c->shape().end());
            }
            p.why = shape_error(dims, p.count);
            return errc::value_count_mismatch;
        }
        const Value* data = c->data();
        p.values = shared_bytes(std::shared_ptr<const void>(std::move(c), data),
                                std::as_bytes(std::span(data, p.count * w)));
        return {};
    }

    /// The slices of `p` by owning server (see `detail::cut_slices`).
    std::error_code split(const prepared& p, bool with_values, std::vector<slice>& slices) const {
        detail::slice_source in{p.keys,
                                p.values,
                                std::nullopt,
                                p.count,
                                wire::scalar_type_of<Key>,
                                opts_.width * sizeof(Value)};
        if (p.range) {
            in.range = key_range<std::uint64_t>{p.range->begin, p.range->end};
        }
        return detail::cut_slices(*current_placement(), in, with_values, *transport_.pool(),
                                  transport_.options().limits.max_frame_bytes, slices);
    }

    /// A request of this store's table, worker and types, without range or payload.
    wire::message blank_request(wire::message_kind kind) const {
        wire::message m;
        auto& h = m.header;
        h.kind = kind;
        h.sender = opts_.node_id;
        h.table_id = opts_.table_id;
        h.key_type = wire::scalar_type_of<Key>;
        h.value_type = wire::scalar_type_of<Value>;
        h.width = static_cast<std::uint32_t>(opts_.width);
        h.worker = opts_.worker;
        return m;
    }

    wire::message make_request(wire::message_kind kind, const slice& s) const {
        return detail::make_request(blank_request(kind), s);
    }

    std::shared_ptr<const placement> current_placement() const { return resender_->table(); }

    template <typename Handler>
    void start_push(Handler handler, prepared p) {
        auto slot = asio::get_associated_cancellation_slot(handler);
        detail::completion done(std::move(handler), transport_.get_executor());
        std::vector<slice> slices;
        if (read_only_) {
            p.error = errc::read_only;
        }
        if (auto ec =
                p.error ? p.error : (p.count == 0 ? std::error_code{} : split(p, true, slices))) {
            std::move(done).post(ec);
            return;
        }
        if (slices.empty()) {
            std::move(done).post(std::error_code{});
            return;
        }
        auto [t, settle] = gate_->register_push();
        struct push_state : detail::fan_in_with<decltype(done)> {
            using detail::fan_in_with<decltype(done)>::fan_in_with;
            task_completer<void> settle;
        };
        auto join = std::make_shared<push_state>(std::move(done), slices.size());
        join->settle = std::move(settle);
        detail::abort_on_cancel(slot, join);
        for (const auto& s : slices) {
            auto request = make_request(wire::message_kind::push, s);
            request.header.clock = t;
            if constexpr (Consistency::ordered) {
                request.header.flags |= wire::flag_ordered;
            }
            request.header.update_id = next_update_.fetch_add(1, std::memory_order_relaxed);
            auto r = resender_->make(
                s.server, std::move(request),
                [join, report = failure_report(s), clk = clock_,
                 worker = opts_.worker](std::error_code ec, wire::message&& m) {
                    if (!ec && m.header.kind != wire::message_kind::push_reply) {
                        ec = errc::bad_message_kind;
                    }
                    if (!ec) {
                        clk->adopt_start(worker, m.header.clocks); // a worker that joined late
                    }
                    report(ec);
                    if (join->arrive(ec)) {
                        join->settle.complete({}); // even when cancelled: the next tick waits
                        if (auto d = join->take()) {
                            std::move(*d).dispatch(join->error());
                        }
                    }
                });
            if constexpr (Consistency::ordered) {
                resender_->retain(r);
            }
            resender_->send(s.link, s.cache, std::move(r));
        }
    }

    template <typename Handler>
    void start_pull(Handler handler, prepared p) {
        start_pull_into<false>(std::move(handler), std::move(p), nullptr);
    }

    template <typename Handler>
    void start_pull(Handler handler, prepared p, Value* into) {
        start_pull_into<true>(std::move(handler), std::move(p), into);
    }

    /// A pull whose result is a `kv_pairs` (`Into` false) or whose rows are copied to the
    /// caller's memory `into` (`Into` true, completing with the error only).
    template <bool Into, typename Handler>
    void start_pull_into(Handler handler, prepared p, Value* into) {
        const auto deadline = std::chrono::steady_clock::now() + pipe_->request_timeout;
        auto slot = asio::get_associated_cancellation_slot(handler);
        detail::completion done(std::move(handler), transport_.get_executor());
        using result_type = kv_pairs<Key, Value>;
        // Completes with the error (and the result, for a `kv_pairs` pull): at once, or
        // posted when still inside the initiating call.
        auto complete = [](auto&& d, std::error_code ec, result_type r, bool posted = false) {
            if constexpr (Into) {
                (void)r;
                posted ? std::move(d).post(ec) : std::move(d).dispatch(ec);
            } else {
                posted ? std::move(d).post(ec, std::move(r))
                       : std::move(d).dispatch(ec, std::move(r));
            }
        };
        std::vector<slice> slices;
        if (auto ec =
                p.error ? p.error : (p.count == 0 ? std::error_code{} : split(p, false, slices))) {
            complete(std::move(done), ec, result_type{}, true);
            return;
        }
        if (slices.empty()) {
            complete(std::move(done), std::error_code{}, result_type({}, {}, opts_.width), true);
            return;
        }
        struct pull_state : detail::fan_in_with<decltype(done)> {
            using detail::fan_in_with<decltype(done)>::fan_in_with;
            pooled_buffer gathered; // several slices: their rows copied in the caller's order
            shared_bytes single;    // one slice: the reply's own buffer
            std::vector<clock_entry> clocks; // the slices' clocks (for a kv_pairs result)
        };
        auto join = std::make_shared<pull_state>(std::move(done), slices.size());
        if constexpr (Into) {
            detail::abort_on_cancel(slot, join);
        } else {
            detail::abort_on_cancel(slot, join, result_type{});
        }
        const std::size_t row = opts_.width * sizeof(Value);
        if (!Into && slices.size() > 1) {
            join->gathered = transport_.pool()->acquire(p.count * row);
        }
        bool one = !Into && slices.size() == 1; // not const: captured in both forms
        auto* target = Into ? reinterpret_cast<std::byte*>(into) : nullptr;
        auto [required, own] = gate_->read_gate();
        std::vector<detail::outgoing> requests;
        for (auto& s : slices) {
            auto request = make_request(wire::message_kind::pull, s);
            request.header.clock = required;
            requests.push_back(
                {s.link, s.cache, std::move(request),
                 [join, runs = std::move(s.runs), count = s.count, row, one, keys = p.keys, target,
                  width = opts_.width, complete, report = failure_report(s), clk = clock_,
                  worker = opts_.worker](std::error_code ec, wire::message&& m) {
                     report(ec);
                     if (!ec) {
                         clk->adopt_start(worker, m.header.clocks); // a worker that joined late
                     }
                     if (!ec && (m.header.kind != wire::message_kind::pull_reply ||
                                 m.header.key_count != count || m.header.width != width ||
                                 m.header.value_type != wire::scalar_type_of<Value> ||
                                 m.values().size() != count * row)) {
                         ec = errc::value_count_mismatch;
                     }
                     if (!ec && one) {
                         join->single = m.values();
                     } else if (!ec) {
                         auto copy = [&](std::byte* to) {
                             std::size_t at = 0;
                             for (const auto& ru : runs) {
                                 std::memcpy(to + ru.first * row, m.values().data() + at * row,
                                             ru.count * row);
                                 at += ru.count;
                             }
                         };
                         if constexpr (Into) {
                             // The caller's memory is only ours while the pull is pending.
                             join->if_live([&] { copy(target); });
                         } else {
                             (void)target;
                             copy(join->gathered.data());
                         }
                     }
                     if (!Into && !ec) {
                         join->if_live([&] {
                             join->clocks.insert(join->clocks.end(), m.header.clocks.begin(),
                                                 m.header.clocks.end());
                         });
                     }
                     if (join->arrive(ec)) {
                         auto d = join->take();
                         if (!d) {
                             return; // cancelled
                         }
                         if (const auto error = join->error(); error || Into) {
                             complete(std::move(*d), error, result_type{});
                             return;
                         }
                         auto values = one ? join->single : join->gathered.share();
                         result_type out(keys, std::move(values), width);
                         out.set_clocks(std::move(join->clocks));
                         complete(std::move(*d), std::error_code{}, std::move(out));
                     }
                 },
                 s.server});
        }
        gate_->send_when_open(
            std::move(own), std::move(requests),
            [join, complete](std::error_code ec) {
                if (auto d = join->take()) {
                    complete(std::move(*d), ec, result_type{});
                }
            },
            deadline);
    }

    template <typename Handler>
    void start_save(Handler handler, std::string dir) {
        detail::completion done(std::move(handler), transport_.get_executor());
        detail::save_target target{dir,
                                   gate_->read_gate().first,
                                   opts_.table_id,
                                   wire::scalar_type_of<Key>,
                                   wire::scalar_type_of<Value>,
                                   opts_.width,
                                   opts_.node_id,
                                   log_};
        auto finish = [done = std::move(done), target = std::move(target)](
                          std::error_code ec, std::vector<detail::raw_result> answers) mutable {
            std::move(done).dispatch(ec ? ec : detail::finish_save(target, answers));
        };
        call<detail::raw_result>(detail::checkpoint_call, key_range<Key>{0, key_space_end<Key>},
                                 dir, std::move(finish));
    }

    /// A remote function call checked and encoded before the call returns.
    struct prepared_call {
        std::error_code error;
        key_range<Key> range;
        shared_bytes body;
    };

    /// The slots of the servers that own keys of `r` (all of them for a wide range).
    static std::vector<std::size_t> owners_of(const placement& where, key_range<Key> r) {
        return detail::owners_of(where, r.begin, r.end);
    }

    template <typename Result, typename Handler>
    void start_call(Handler handler, prepared_call c) {
        const auto deadline = std::chrono::steady_clock::now() + pipe_->request_timeout;
        auto slot = asio::get_associated_cancellation_slot(handler);
        detail::completion done(std::move(handler), transport_.get_executor());
        using results = std::vector<Result>;
        if (c.error || c.range.empty()) {
            std::move(done).post(c.error, results{});
            return;
        }
        const auto where = current_placement();
        const auto slots = owners_of(*where, c.range);
        struct call_state : detail::fan_in_with<decltype(done)> {
            using detail::fan_in_with<decltype(done)>::fan_in_with;
            results out; // each written by its server's reply, before it arrives
        };
        auto join = std::make_shared<call_state>(std::move(done), slots.size());
        join->out.resize(slots.size());
        detail::abort_on_cancel(slot, join, results{});
        auto [required, own] = gate_->read_gate();
        std::vector<detail::outgoing> requests;
        for (std::size_t i = 0; i < slots.size(); ++i) {
            wire::message m = blank_request(wire::message_kind::call);
            auto& h = m.header;
            h.range_begin = c.range.begin;
            h.range_end = c.range.end;
            h.clock = required;
            // A server answers under exactly this view (it waits for a newer one, refuses
            // an older one), so that the results cover each key once.
            h.view = where->view->version;
            m.set_segment(wire::values_segment, c.body);
            slice s;
            s.server = where->servers[slots[i]];
            s.view = where->view;
            auto cb = [join, i, report = failure_report(s), log = log_,
                       self = opts_.node_id](std::error_code ec, wire::message&& r) {
                report(ec);
                if (!ec && r.header.kind != wire::message_kind::call_reply) {
                    ec = errc::bad_message_kind;
                }
                if (ec && r.header.kind == wire::message_kind::call_reply) {
                    if (log && !r.values().empty()) {
                        const auto text = r.values().span();
                        log(log_level::error,
                            "petrel worker " + std::to_string(self) + ": remote function: " +
                                std::string(reinterpret_cast<const char*>(text.data()),
                                            std::min<std::size_t>(text.size(), 1024)));
                    }
                }
                if (!ec) {
                    ec = detail::decode_result(r.values().span(), join->out[i]);
                }
                if (join->arrive(ec)) {
                    if (auto d = join->take()) {
                        if (const auto error = join->error()) {
                            std::move(*d).dispatch(error, results{});
                        } else {
                            std::move(*d).dispatch(std::error_code{}, std::move(join->out));
                        }
                    }
                }
            };
            requests.push_back({where->links[slots[i]], nullptr, std::move(m), std::move(cb)});
        }
        gate_->send_when_open(
            std::move(own), std::move(requests),
            [join](std::error_code ec) {
                if (auto d = join->take()) {
                    std::move(*d).dispatch(ec, results{});
                }
            },
            deadline);
    }

    any_transport transport_;
    options_type opts_;
    logger log_;
    /// The job's declaration of this table, when the store was made from a worker and the
    /// table is declared: its dense keys, and whether the width came from it.
    std::optional<key_range<std::uint64_t>> dense_;
    bool declared_width_ = false;
    std::shared_ptr<member> member_;
    std::size_t subscription_ = 0;
    bool owns_transport_ = true;
    bool read_only_ = false; // a reader's store: pulls only
    /// Guards filters_. A leaf lock: nothing else is locked under it.
    mutable std::mutex mutex_;
    std::vector<std::shared_ptr<wire::push_filter<Key, Value>>> filters_;
    std::shared_ptr<detail::send_pipeline> pipe_ = make_pipeline();
    std::atomic<std::uint64_t> next_update_{first_update_id()};
    std::shared_ptr<detail::worker_clock> clock_ = std::make_shared<detail::worker_clock>();
    // Made once the options are final (make_parts).
    std::shared_ptr<detail::resender> resender_;
    std::shared_ptr<detail::server_links> links_;
    std::shared_ptr<detail::worker_gate> gate_;

    std::shared_ptr<detail::send_pipeline> make_pipeline() {
        auto p = std::make_shared<detail::send_pipeline>();
        p->compression = opts_.compression;
        p->pool = transport_.pool();
        p->request_timeout = opts_.request_timeout;
        return p;
    }

    void make_parts() {
        detail::resender_options o;
        o.self = opts_.node_id;
        o.policy = detail::policy_traits_of<Consistency>;
        o.read_only = read_only_;
        o.tick = blank_request(wire::message_kind::clock);
        o.tick.header.range_begin = 0;
        o.tick.header.range_end = key_space_end<std::uint64_t>;
        o.membership = member_;
        o.log = log_;
        detail::worker_gate_options g{o.policy, read_only_, opts_.worker, o.tick,
                                      opts_.request_timeout};
        resender_ = std::make_shared<detail::resender>(transport_.get_executor(), pipe_, clock_,
                                                       std::move(o));
        gate_ = std::make_shared<detail::worker_gate>(transport_.get_executor(), clock_, resender_,
                                                      pipe_, std::move(g));
        links_ = std::make_shared<detail::server_links>(
            transport_,
            detail::server_links_options{opts_.node_id, opts_.request_timeout, opts_.key_caching,
                                         opts_.key_cache_bytes},
            log_, resender_);
    }

    /// A random start for this store's update ids, so that stores never share one.
    static std::uint64_t first_update_id() {
        std::random_device rd;
        const std::uint64_t hi = rd();
        const std::uint64_t lo = rd();
        return ((hi << 32) | lo) | 1; // never 0 (no id)
    }
};

} // namespace petrel
