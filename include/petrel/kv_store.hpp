// Petrel: the worker-side handle to a table of parameters.
#pragma once

#include <petrel/client/detail/call_op.hpp>
#include <petrel/client/detail/checkpoint_save.hpp>
#include <petrel/client/detail/pull_op.hpp>
#include <petrel/client/detail/push_op.hpp>
#include <petrel/client/detail/store_core.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/client/kv_store_options.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/fwd.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/filter.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/remote_call.hpp>
#include <petrel/wire/traffic.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include <xtensor/xadapt.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xutils.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel {

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
/// `errc::node_failed` (and the worker's log names the server); once every server has left
/// (the job finished, while a reader is still attached), with `errc::job_finished`.
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
        : opts_(std::move(opts)), core_(std::move(transport), settings_of(opts_)) {
        sync_options();
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
        : opts_(std::move(opts)), core_(worker, settings_of(opts_)) {
        sync_options();
    }

    kv_store(const kv_store&) = delete;
    kv_store& operator=(const kv_store&) = delete;

    /// Completes every operation still waiting with `errc::shut_down`.
    ~kv_store() { close(); }

    [[nodiscard]] executor_type get_executor() const { return core_.executor(); }
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
        prepared p = core_.prepare_range(wide(range), false);
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
        prepared p = core_.prepare_range(wide(range), false);
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
        return initiate_pull(core_.prepare_range(wide(range), true),
                             std::forward<CompletionToken>(token));
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
        return initiate_pull_into(core_.prepare_range(wide(range), false), out,
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
            auto batch = wire::drain_filters(current_filters(), width());
            p = from_batch(batch);
        } catch (const std::bad_alloc&) {
            p.error = errc::out_of_memory;
        }
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// What this store sent and received so far, stage by stage (filters, key caching,
    /// compression); see `wire::traffic_stats`.
    [[nodiscard]] wire::traffic_stats traffic() const noexcept {
        return core_.pipe()->counters.load();
    }

    /// This worker's clock on the table: the iterations it has completed (`clock()`
    /// calls, counted over every store of this worker and table).
    [[nodiscard]] clock_type current_clock() const { return core_.gate().current(); }

    /// Ends this worker's iteration: advances its clock and tells every server once the
    /// iteration's pushes have completed. Returns at once; the task completes when every
    /// server has recorded the clock, or with `errc::timed_out` when that has not happened
    /// within the request timeout (the tick still goes once the pushes before it have
    /// settled). Under `sequential` and `bounded_delay`, the reads of the other workers
    /// wait for these ticks.
    task<void> clock() { return core_.gate().clock(); }

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
        return core_.gate().finish().async_wait(std::forward<CompletionToken>(token));
    }

    /// Runs the remote function `name` on every server that owns keys of `range`, over
    /// the rows it stores there, once the range's clocks satisfy the consistency model
    /// (as a pull at the current clock). Every process must have registered the function
    /// in the `function_registry` of its servers. Completion signature:
    /// `void(std::error_code, std::vector<Result>)`, one result per server involved.
    template <typename Result, typename Args, typename CompletionToken>
    auto call(std::string_view name, key_range<Key> range, const Args& args,
              CompletionToken&& token) {
        detail::prepared_call c;
        c.range = wide(range);
        try {
            c.body = shared_bytes::copy_of(detail::encode_call(name, args));
        } catch (const std::exception&) {
            c.error = errc::invalid_argument;
        }
        return asio::async_initiate<CompletionToken, void(std::error_code, std::vector<Result>)>(
            detail::initiate_call<Result>{&core_}, token, std::move(c));
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
    /// shared file system). Under a launcher `dir` is relative to the checkpoint root
    /// (`--checkpoint-root`, the working directory by default) and may not climb out of
    /// it. Completion signature: `void(std::error_code)`; `errc::checkpoint_failed` when
    /// a file could not be written (the log says why), `errc::invalid_argument` for a
    /// directory that is absolute or holds ".." under a root.
    ///
    /// @par Example
    /// @code
    /// if (worker.rank() == 0 && kv.current_clock() % 100 == 0) {
    ///     kv.save("ckpt/" + std::to_string(kv.current_clock()), asio::use_future).get();
    /// }
    /// @endcode
    template <typename CompletionToken>
    auto save(std::string dir, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            detail::initiate_save{&core_}, token, std::move(dir));
    }

    /// Completes every waiting operation with `errc::shut_down` and closes the
    /// connections; later operations fail the same way. Idempotent.
    void close() { core_.close(); }

    /// The view that places this store's keys.
    [[nodiscard]] std::shared_ptr<const membership_view> view() const { return core_.view(); }

private:
    using prepared = detail::prepared_request;

    static detail::store_settings settings_of(const options_type& o) {
        return {{o.node_id, o.table_id, o.worker, wire::scalar_type_of<Key>,
                 wire::scalar_type_of<Value>, o.width},
                o.servers,
                o.ring,
                o.request_timeout,
                o.key_caching,
                o.key_cache_bytes,
                o.compression,
                detail::policy_traits_of<Consistency>,
                {}};
    }

    /// The options as the store made them final (a job's worker sets these).
    void sync_options() {
        const auto& s = core_.settings();
        opts_.width = s.id.width;
        opts_.node_id = s.id.node;
        opts_.worker = s.id.worker;
        opts_.request_timeout = s.request_timeout;
    }

    [[nodiscard]] std::size_t width() const noexcept { return core_.id().width; }

    static key_range<std::uint64_t> wide(key_range<Key> r) noexcept { return {r.begin, r.end}; }

    /// Runs the store's filters on a push (before it is split), and counts its payload
    /// before and after them.
    void filter(prepared& p) {
        if (p.error) {
            return;
        }
        const std::uint64_t before = p.keys.size() + p.values.size();
        auto filters = current_filters();
        if (filters.empty() || p.count == 0) {
            core_.pipe()->counters.filter.add({before, before});
            return;
        }
        try {
            wire::filter_batch<Key, Value> batch;
            batch.width = width();
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
            core_.pipe()->counters.filter.add({counted_before, batch.bytes()});
        } catch (const std::bad_alloc&) {
            p.error = errc::out_of_memory;
        }
    }

    /// A keyed push of the rows of `batch`, checked as a caller's push would be.
    prepared from_batch(const wire::filter_batch<Key, Value>& batch) {
        if (batch.values.size() != batch.keys.size() * width()) {
            prepared p;
            p.error = errc::value_count_mismatch; // a filter broke the rows' shape
            return p;
        }
        prepared p = prepare(std::span<const Key>(batch.keys.data(), batch.keys.size()));
        if (!p.error && p.count > 0) {
            p.values = core_.copy(std::as_bytes(std::span(batch.values)));
        }
        return p;
    }

    std::vector<std::shared_ptr<wire::push_filter<Key, Value>>> current_filters() const {
        std::lock_guard lock(mutex_);
        return filters_;
    }

    template <typename CompletionToken>
    auto initiate_pull(prepared p, CompletionToken&& token) {
        core_.check(p, "pull");
        return asio::async_initiate<CompletionToken, void(std::error_code, kv_pairs<Key, Value>)>(
            detail::initiate_pull<Key, Value, false>{&core_}, token, std::move(p));
    }

    template <typename CompletionToken>
    auto initiate_pull_into(prepared p, std::span<Value> out, CompletionToken&& token) {
        if (!p.error && out.size() != p.count * width()) {
            p.error = errc::value_count_mismatch;
            p.why = "a pull of " + std::to_string(p.count) + " keys of width " +
                    std::to_string(width()) + " into " + std::to_string(out.size()) +
                    " values; expected " + std::to_string(p.count * width());
        }
        core_.check(p, "pull");
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            detail::initiate_pull<Key, Value, true>{&core_}, token, std::move(p), out.data());
    }

    template <typename CompletionToken>
    auto initiate_push(prepared p, CompletionToken&& token) {
        core_.check(p, "push");
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            detail::initiate_push{&core_}, token, std::move(p));
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
        if (!p.error && p.count > 0) {
            p.keys = core_.copy(std::as_bytes(keys));
        }
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

    template <typename E>
    std::error_code copy_values(const E& e, prepared& p) {
        const std::size_t w = width();
        const auto& shape = e.shape();
        const bool ok = (e.dimension() == 1 && shape[0] == p.count * w) ||
                        (e.dimension() == 2 && shape[0] == p.count && shape[1] == w);
        if (!ok) {
            const std::vector<std::size_t> dims(shape.begin(), shape.end());
            p.why = core_.shape_error(dims, p.count);
            return errc::value_count_mismatch;
        }
        const std::size_t n = p.count * w;
        if (n == 0) {
            return {};
        }
        pooled_buffer buf = core_.pool().acquire(n * sizeof(Value));
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
        const std::size_t w = width();
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
            p.why = core_.shape_error(dims, p.count);
            return errc::value_count_mismatch;
        }
        const Value* data = c->data();
        p.values = shared_bytes(std::shared_ptr<const void>(std::move(c), data),
                                std::as_bytes(std::span(data, p.count * w)));
        return {};
    }

    options_type opts_;
    detail::store_core core_; // after opts_: made from them
    /// Guards filters_. A leaf lock: nothing else is locked under it (before the parts'
    /// locks in the lock order: see `detail::store_core`).
    mutable std::mutex mutex_;
    std::vector<std::shared_ptr<wire::push_filter<Key, Value>>> filters_;
};

} // namespace petrel
