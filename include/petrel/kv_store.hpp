// Petrel: the worker-side handle to a table of parameters.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include <xtensor/xadapt.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xutils.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel {

/// A server and the keys it owns.
template <key Key>
struct server_route {
    key_range<Key> range;
    std::string address;
};

template <key Key>
struct kv_store_options {
    /// The servers and their key ranges (disjoint). Keys outside every range are an error.
    std::vector<server_route<Key>> servers;
    /// Which table of the servers this handle reads and writes.
    std::uint32_t table_id = 0;
    /// Values per key: 1 for scalars, the row length for embeddings.
    std::size_t width = 1;
    /// This node's id, written as the sender of its requests.
    std::uint32_t node_id = 0;
    /// Every push and pull completes by then, with `errc::timed_out` if no reply came.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
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
/// reads them back. Keys must be sorted and unique. The keys are split by owning server,
/// the slices travel in parallel, and a pull's slices are put back in key order. Values
/// are xtensor expressions of shape `[n]` (scalars) or `[n, width]` (rows); a pull yields
/// a `kv_pairs` whose values adapt the received bytes without copying.
///
/// Every operation takes an Asio completion token, so the same call serves coroutines
/// (`asio::use_awaitable`), plain loops (`asio::use_future`) and callbacks. Keys and values
/// are copied before the call returns, so the caller's buffers may be reused at once.
/// Every operation completes, at the latest after `request_timeout`.
///
/// @par Example
/// @code
/// petrel::kv_store<std::uint64_t, float> kv(petrel::tcp_transport(io.get_executor()),
///                                           {.servers = {{{0, 1000}, address}}});
/// std::vector<std::uint64_t> keys{1, 3, 7};
/// xt::xtensor<float, 1> grad = {0.5f, 1.0f, -2.0f};
/// kv.push(keys, grad, asio::use_future).get();
/// auto weights = kv.pull(keys, asio::use_future).get();   // kv_pairs<uint64_t, float>
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread, concurrently.
template <key Key, typename Value>
class kv_store {
    static_assert(wire::wire_key<Key>, "petrel::kv_store: Key must be std::uint32_t or "
                                       "std::uint64_t");
    static_assert(wire::wire_value<Value>, "petrel::kv_store: Value must be float or double");

public:
    using key_type = Key;
    using value_type = Value;
    using executor_type = asio::any_io_executor;
    using options_type = kv_store_options<Key>;

    /// @throws std::invalid_argument when the options are inconsistent (no servers,
    /// overlapping or empty ranges, width 0).
    kv_store(any_transport transport, options_type opts)
        : transport_(std::move(transport)), opts_(std::move(opts)) {
        if (opts_.servers.empty()) {
            throw std::invalid_argument("petrel::kv_store: no servers given");
        }
        if (opts_.width == 0 || opts_.width > std::numeric_limits<std::uint32_t>::max()) {
            throw std::invalid_argument("petrel::kv_store: width must be at least 1");
        }
        std::sort(opts_.servers.begin(), opts_.servers.end(),
                  [](const auto& a, const auto& b) { return a.range.begin < b.range.begin; });
        for (std::size_t i = 0; i < opts_.servers.size(); ++i) {
            if (opts_.servers[i].range.empty()) {
                throw std::invalid_argument("petrel::kv_store: empty key range for server " +
                                            opts_.servers[i].address);
            }
            if (i > 0 && opts_.servers[i - 1].range.end > opts_.servers[i].range.begin) {
                throw std::invalid_argument("petrel::kv_store: key ranges of servers " +
                                            opts_.servers[i - 1].address + " and " +
                                            opts_.servers[i].address + " overlap");
            }
            links_.push_back(std::make_shared<detail::request_link>(
                transport_, opts_.servers[i].address, opts_.request_timeout));
        }
    }

    kv_store(const kv_store&) = delete;
    kv_store& operator=(const kv_store&) = delete;

    /// Completes every operation still waiting with `errc::shut_down`.
    ~kv_store() { close(); }

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
        return initiate_push(std::move(p), std::forward<CompletionToken>(token));
    }

    /// Reads the rows of `keys` (sorted, unique); rows never pushed read as zeros.
    /// Completion signature: `void(std::error_code, kv_pairs<Key, Value>)`.
    template <typename Keys, typename CompletionToken>
    requires detail::contiguous_keys<Key, Keys>
    auto pull(const Keys& keys, CompletionToken&& token) {
        prepared p = prepare(std::span<const Key>(keys.data(), keys.size()));
        return asio::async_initiate<CompletionToken, void(std::error_code, kv_pairs<Key, Value>)>(
            [this](auto handler, prepared p) {
                this->start_pull(std::move(handler), std::move(p));
            },
            token, std::move(p));
    }

    /// Completes every waiting operation with `errc::shut_down` and closes the
    /// connections; later operations fail the same way. Idempotent.
    void close() {
        for (auto& l : links_) {
            l->close();
        }
        transport_.close();
    }

private:
    /// A request checked and copied into pooled buffers before the call returns.
    struct prepared {
        std::error_code error;
        shared_bytes keys;
        shared_bytes values;
        std::size_t count = 0;
    };

    /// A piece of a request for one server: keys [first, first + count).
    struct slice {
        std::size_t link = 0;
        std::size_t first = 0;
        std::size_t count = 0;
    };

    template <typename CompletionToken>
    auto initiate_push(prepared p, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler, prepared p) {
                this->start_push(std::move(handler), std::move(p));
            },
            token, std::move(p));
    }

    prepared prepare(std::span<const Key> keys) {
        prepared p;
        p.count = keys.size();
        if (std::adjacent_find(keys.begin(), keys.end(), std::greater_equal<Key>{}) != keys.end()) {
            p.error = errc::keys_not_sorted;
            return p;
        }
        if (p.count == 0) {
            return p;
        }
        pooled_buffer buf = transport_.pool()->acquire(keys.size_bytes());
        std::memcpy(buf.data(), keys.data(), keys.size_bytes());
        p.keys = buf.share();
        return p;
    }

    template <typename E>
    std::error_code copy_values(const E& e, prepared& p) {
        const std::size_t w = opts_.width;
        const auto& shape = e.shape();
        const bool ok = (e.dimension() == 1 && shape[0] == p.count * w) ||
                        (e.dimension() == 2 && shape[0] == p.count && shape[1] == w);
        if (!ok) {
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
            return errc::value_count_mismatch;
        }
        const Value* data = c->data();
        p.values = shared_bytes(std::shared_ptr<const void>(std::move(c), data),
                                std::as_bytes(std::span(data, p.count * w)));
        return {};
    }

    /// Splits the sorted keys by owning server. Fails with `errc::no_server_for_key` when
    /// a key has no owner, and with `errc::frame_too_large` when a slice's push or pull
    /// reply would exceed the frame limit the peers enforce (our own limit).
    std::error_code split(const prepared& p, std::vector<slice>& slices) const {
        const auto keys = p.keys.template as<Key>();
        const std::uint64_t max_frame = transport_.options().limits.max_frame_bytes;
        std::size_t covered = 0;
        for (std::size_t i = 0; i < opts_.servers.size(); ++i) {
            const auto& r = opts_.servers[i].range;
            const auto lo = std::lower_bound(keys.begin(), keys.end(), r.begin) - keys.begin();
            const auto hi = std::lower_bound(keys.begin(), keys.end(), r.end) - keys.begin();
            if (hi <= lo) {
                continue;
            }
            const auto count = static_cast<std::size_t>(hi - lo);
            if (wire::padded(count * sizeof(Key)) +
                    wire::padded(count * opts_.width * sizeof(Value)) >
                max_frame) {
                return errc::frame_too_large;
            }
            slices.push_back({i, static_cast<std::size_t>(lo), count});
            covered += count;
        }
        return covered == keys.size() ? std::error_code{}
                                      : make_error_code(errc::no_server_for_key);
    }

    wire::message make_request(wire::message_kind kind, const prepared& p, const slice& s) const {
        wire::message m;
        auto& h = m.header;
        h.kind = kind;
        h.sender = opts_.node_id;
        h.table_id = opts_.table_id;
        h.key_type = wire::scalar_type_of<Key>;
        h.value_type = wire::scalar_type_of<Value>;
        h.width = static_cast<std::uint32_t>(opts_.width);
        h.range_begin = opts_.servers[s.link].range.begin;
        h.range_end = opts_.servers[s.link].range.end;
        h.key_count = s.count;
        m.set_segment(wire::keys_segment,
                      p.keys.subspan(s.first * sizeof(Key), s.count * sizeof(Key)));
        if (kind == wire::message_kind::push) {
            const std::size_t row = opts_.width * sizeof(Value);
            m.set_segment(wire::values_segment, p.values.subspan(s.first * row, s.count * row));
        }
        return m;
    }

    /// The completion shared by the slices of one operation: the first error wins, and
    /// the handler runs once, when the last slice is done.
    template <typename Completion>
    struct join_state {
        explicit join_state(Completion c, std::size_t n) : done(std::move(c)), remaining(n) {}
        std::mutex mutex;
        std::optional<Completion> done;
        std::size_t remaining;
        std::error_code error;

        /// Records one slice's outcome; returns true for the last one.
        bool arrive(std::error_code ec) {
            std::lock_guard lock(mutex);
            if (ec && !error) {
                error = ec;
            }
            return --remaining == 0;
        }
    };

    template <typename Handler>
    void start_push(Handler handler, prepared p) {
        detail::completion done(std::move(handler), transport_.get_executor());
        std::vector<slice> slices;
        if (auto ec = p.error ? p.error : split(p, slices)) {
            std::move(done).post(ec);
            return;
        }
        if (slices.empty()) {
            std::move(done).post(std::error_code{});
            return;
        }
        auto join = std::make_shared<join_state<decltype(done)>>(std::move(done), slices.size());
        for (const auto& s : slices) {
            links_[s.link]->request(make_request(wire::message_kind::push, p, s),
                                    [join](std::error_code ec, wire::message&&) {
                                        if (join->arrive(ec)) {
                                            std::move(*join->done).dispatch(join->error);
                                        }
                                    });
        }
    }

    template <typename Handler>
    void start_pull(Handler handler, prepared p) {
        detail::completion done(std::move(handler), transport_.get_executor());
        using result_type = kv_pairs<Key, Value>;
        std::vector<slice> slices;
        if (auto ec = p.error ? p.error : split(p, slices)) {
            std::move(done).post(ec, result_type{});
            return;
        }
        if (slices.empty()) {
            std::move(done).post(std::error_code{}, result_type({}, {}, opts_.width));
            return;
        }
        struct pull_state : join_state<decltype(done)> {
            using join_state<decltype(done)>::join_state;
            pooled_buffer gathered; // several slices: their rows copied in key order
            shared_bytes single;    // one slice: the reply's own buffer
        };
        auto join = std::make_shared<pull_state>(std::move(done), slices.size());
        const std::size_t row = opts_.width * sizeof(Value);
        if (slices.size() > 1) {
            join->gathered = transport_.pool()->acquire(p.count * row);
        }
        const bool one = slices.size() == 1;
        for (const auto& s : slices) {
            links_[s.link]->request(
                make_request(wire::message_kind::pull, p, s),
                [join, s, row, one, keys = p.keys, width = opts_.width](std::error_code ec,
                                                                        wire::message&& m) {
                    if (!ec && (m.header.key_count != s.count || m.header.width != width ||
                                m.header.value_type != wire::scalar_type_of<Value> ||
                                m.values().size() != s.count * row)) {
                        ec = errc::value_count_mismatch;
                    }
                    if (!ec) {
                        if (one) {
                            join->single = m.values();
                        } else {
                            std::memcpy(join->gathered.data() + s.first * row, m.values().data(),
                                        s.count * row);
                        }
                    }
                    if (join->arrive(ec)) {
                        if (join->error) {
                            std::move(*join->done).dispatch(join->error, result_type{});
                            return;
                        }
                        auto values = one ? join->single : join->gathered.share();
                        std::move(*join->done)
                            .dispatch(std::error_code{},
                                      result_type(keys, std::move(values), width));
                    }
                });
        }
    }

    any_transport transport_;
    options_type opts_;
    std::vector<std::shared_ptr<detail::request_link>> links_;
};

} // namespace petrel
