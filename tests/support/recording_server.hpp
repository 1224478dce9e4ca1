// Test support: a server that records what it receives, then answers or drops it.
#pragma once

#include "support/cluster.hpp"

#include <petrel/core/error.hpp>
#include <petrel/transport/tcp_transport.hpp>
#include <petrel/wire/message.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace petrel::test {

/// What a recording server saw of one request, after its connection decoded it.
struct seen_request {
    wire::message_kind kind{};
    std::uint8_t flags = 0;
    std::uint8_t encoding = 0;
    std::uint32_t receiver = 0;
    std::uint64_t update_id = 0;
    std::uint64_t clock = 0;
    std::uint64_t view = 0;
    std::size_t key_bytes = 0;
};

/// A server on loopback that records each request, then closes the connection (while
/// `dropping`) or answers: `errc::key_cache_miss` for a key list reference its connection
/// could not resolve (it keeps `key_cache_bytes` of lists), zero rows for a pull, an empty
/// reply of the matching kind otherwise; `reshape`, when set, changes each reply before
/// it is sent.
class recording_server {
public:
    /// Changes the reply to a request before it is sent.
    using reply_shaper = std::function<void(const wire::message& request, wire::message& reply)>;

    explicit recording_server(io_threads& io, bool dropping = false,
                              std::size_t key_cache_bytes = std::size_t{1} << 20,
                              reply_shaper reshape = {})
        : transport_(io.executor(), options(key_cache_bytes)), dropping_(dropping),
          reshape_(std::move(reshape)) {
        connection_handlers h;
        h.on_message = [this](const connection_ptr& c, wire::message&& m) {
            const auto& q = m.header;
            {
                std::lock_guard lock(mutex_);
                seen_.push_back({q.kind, q.flags, q.encoding, q.receiver, q.update_id, q.clock,
                                 q.view, m.keys().size()});
            }
            if (dropping_.load()) {
                c->close();
                return;
            }
            auto r = reply_to(m);
            if (reshape_) {
                reshape_(m, r);
            }
            c->send(std::move(r));
        };
        h.on_close = [](const connection_ptr&, std::error_code) {};
        address_ = transport_.listen("127.0.0.1:0", std::move(h));
    }

    [[nodiscard]] const std::string& address() const { return address_; }
    /// From now on, answers instead of dropping.
    void answer() { dropping_ = false; }
    [[nodiscard]] std::vector<seen_request> requests() const {
        std::lock_guard lock(mutex_);
        return seen_;
    }

private:
    static transport_options options(std::size_t key_cache_bytes) {
        transport_options o;
        o.limits.max_key_cache_bytes = key_cache_bytes;
        return o;
    }

    static wire::message reply_to(const wire::message& m) {
        using wire::message_kind;
        const auto& q = m.header;
        const auto kind = q.kind == message_kind::pull   ? message_kind::pull_reply
                          : q.kind == message_kind::push ? message_kind::push_reply
                                                         : message_kind::clock_reply;
        auto r = wire::make_reply(q, kind);
        if ((q.encoding & wire::encoding_keys_cached) != 0) {
            r.header.status = static_cast<std::uint32_t>(errc::key_cache_miss);
        } else if (kind == message_kind::pull_reply) {
            const std::vector<std::byte> rows(q.key_count * q.width * wire::size_of(q.value_type));
            r.set_segment(wire::values_segment, shared_bytes::copy_of(rows));
        }
        return r;
    }

    tcp_transport transport_;
    std::atomic<bool> dropping_;
    reply_shaper reshape_;
    std::string address_;
    mutable std::mutex mutex_;
    std::vector<seen_request> seen_;
};

} // namespace petrel::test
