// Test support: a store's shared state over recording servers, without a job, and a way to
// run its operations and wait for them.
#pragma once

#include "support/cluster.hpp"
#include "support/recording_server.hpp"

#include <petrel/client/detail/store_core.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/transport/tcp_transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/async_result.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace petrel::test {

/// Answers a pull with rows whose every value is its key (u64 keys, f32 values), so that
/// a test sees where each row went.
inline void rows_of_keys(const wire::message& request, wire::message& reply) {
    if (request.header.kind != wire::message_kind::pull) {
        return;
    }
    const auto keys = request.keys().as<std::uint64_t>();
    const std::size_t n = request.header.key_count;
    const std::size_t w = request.header.width;
    std::vector<float> rows(n * w);
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < w; ++j) {
            rows[i * w + j] = static_cast<float>(keys[i]);
        }
    }
    reply.set_segment(wire::values_segment, shared_bytes::copy_of(std::as_bytes(std::span(rows))));
}

/// A store core of u64 keys and f32 values over two recording servers, without a job.
struct core_over_two {
    io_threads io{2};
    recording_server a;
    recording_server b;
    detail::store_core core;

    /// Servers that answer (`reshape` changes their replies), or close every connection
    /// when `dropping`; the store logs to `log`.
    explicit core_over_two(detail::policy_traits policy = detail::policy_traits_of<sequential>,
                           std::size_t width = 2, recording_server::reply_shaper reshape = {},
                           bool dropping = false, logger log = {})
        : a(io, dropping, std::size_t{1} << 20, reshape),
          b(io, dropping, std::size_t{1} << 20, reshape),
          core(tcp_transport(io.executor(), transport_options{.log = std::move(log)}),
               settings(policy, width)) {}

    detail::store_settings settings(detail::policy_traits policy, std::size_t width) const {
        detail::store_settings s;
        s.id.node = 7;
        s.id.table = 3;
        s.id.worker = 0;
        s.id.key_type = wire::scalar_type::u64;
        s.id.value_type = wire::scalar_type::f32;
        s.id.width = width;
        s.servers = {a.address(), b.address()};
        s.request_timeout = std::chrono::seconds(10);
        s.policy = policy;
        return s;
    }

    /// A keyed request of `keys`, copied into the store's pool, with `values` (none for a
    /// pull).
    detail::prepared_request request(const std::vector<std::uint64_t>& keys,
                                     const std::vector<float>& values = {}) const {
        detail::prepared_request p;
        p.count = keys.size();
        if (!keys.empty()) {
            p.keys = core.copy(std::as_bytes(std::span(keys)));
        }
        if (!values.empty()) {
            p.values = core.copy(std::as_bytes(std::span(values)));
        }
        return p;
    }

    /// Every request both servers saw.
    std::vector<seen_request> seen() const {
        auto out = a.requests();
        const auto more = b.requests();
        out.insert(out.end(), more.begin(), more.end());
        return out;
    }
};

/// Runs initiation `init` with `args...` and a callback, and waits (at most 10 s) for its
/// completion's arguments, of signature `void(std::error_code, R...)`.
template <typename... R, typename Init, typename... Args>
std::tuple<std::error_code, R...> run_op(Init init, Args&&... args) {
    auto done = std::make_shared<std::promise<std::tuple<std::error_code, R...>>>();
    auto f = done->get_future();
    auto handler = [done](std::error_code ec, R... r) { done->set_value({ec, std::move(r)...}); };
    asio::async_initiate<decltype(handler), void(std::error_code, R...)>(
        init, handler, std::forward<Args>(args)...);
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    return f.get();
}

} // namespace petrel::test
