// Petrel: the client's sending path (see <petrel/client/detail/send_pipeline.hpp>).
#ifndef PETREL_CLIENT_IMPL_SEND_PIPELINE_IPP
#define PETREL_CLIENT_IMPL_SEND_PIPELINE_IPP

#include <petrel/client/detail/send_pipeline.hpp>
#include <petrel/wire/compression.hpp>
#include <petrel/wire/frame.hpp>
#include <petrel/wire/key_cache.hpp>

#include <algorithm>
#include <optional>
#include <utility>

namespace petrel::detail {

PETREL_DECL void send_pipeline::encode(wire::message& m) {
    auto& c = counters;
    const bool keyed =
        m.header.kind == wire::message_kind::push || m.header.kind == wire::message_kind::pull;
    if (keyed && compression.mode != wire::compression_mode::off) {
        if (m.header.kind == wire::message_kind::pull) {
            m.header.flags |= wire::flag_compress_reply;
        }
        wire::stage_bytes stage;
        wire::compress(m, compression, *pool, &stage);
        c.compression.add(stage);
    } else if (keyed) {
        const std::uint64_t n = m.keys().size() + m.values().size();
        c.compression.add({n, n});
    }
    c.requests.fetch_add(1, std::memory_order_relaxed);
    c.sent_bytes.fetch_add(wire::frame_bytes(m.header), std::memory_order_relaxed);
}

PETREL_DECL void send_pipeline::observe(const wire::message& r) noexcept {
    auto& c = counters;
    c.replies.fetch_add(1, std::memory_order_relaxed);
    c.received_bytes.fetch_add(r.received_head_bytes + r.received_bytes, std::memory_order_relaxed);
    if (r.header.kind == wire::message_kind::pull_reply && r.header.status == 0) {
        c.reply_compression.add({r.values().size(), r.received_values_bytes});
    }
}

PETREL_DECL std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(1));
}

PETREL_DECL void send_request(const std::shared_ptr<send_pipeline>& pipe,
                              const std::shared_ptr<request_link>& link,
                              const std::shared_ptr<wire::key_cache_sender>& cache, wire::message m,
                              reply_callback on_reply,
                              std::chrono::steady_clock::time_point deadline) {
    auto& c = pipe->counters;
    const bool keyed =
        m.header.kind == wire::message_kind::push || m.header.kind == wire::message_kind::pull;
    std::optional<wire::message> again;
    if (keyed) {
        const std::uint64_t key_bytes = m.keys().size();
        if (cache && (m.header.flags & wire::flag_key_runs) == 0 &&
            key_bytes >= send_pipeline::min_cached_key_bytes) {
            const auto d = cache->lookup(m.keys(), m.header.key_type);
            m.header.key_list_id = d.id;
            m.header.key_list_digest = d.digest;
            if (d.known) {
                again = m;
                again->header.encoding |= wire::encoding_keys_store;
                m.set_segment(wire::keys_segment, shared_bytes{});
                m.header.encoding |= wire::encoding_keys_cached;
                c.key_cache_hits.fetch_add(1, std::memory_order_relaxed);
            } else {
                m.header.encoding |= wire::encoding_keys_store;
            }
        }
        c.key_cache.add({key_bytes, m.keys().size()});
    }
    pipe->encode(m);
    if (!again) {
        link->request(std::move(m), std::move(on_reply), time_left(deadline), pipe);
        return;
    }
    auto retry = [pipe, link, again = std::move(*again), deadline,
                  done = std::move(on_reply)](std::error_code ec, wire::message&& r) mutable {
        if (ec != errc::key_cache_miss) {
            done(ec, std::move(r));
            return;
        }
        auto& c = pipe->counters;
        c.key_cache_misses.fetch_add(1, std::memory_order_relaxed);
        c.key_cache.add({0, again.keys().size()});
        pipe->encode(again);
        link->request(std::move(again), std::move(done), time_left(deadline), pipe);
    };
    link->request(std::move(m), std::move(retry), time_left(deadline), pipe);
}

} // namespace petrel::detail

#endif
