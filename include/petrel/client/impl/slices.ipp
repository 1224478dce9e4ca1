// Petrel: a request cut into slices (see <petrel/client/detail/slices.hpp>).
#ifndef PETREL_CLIENT_IMPL_SLICES_IPP
#define PETREL_CLIENT_IMPL_SLICES_IPP

#include <petrel/client/detail/slices.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/frame.hpp>

#include <cstring>
#include <string>

namespace petrel::detail {

namespace slices_cut {

/// The slice of `in` for slot `s` of `where`: its runs of keys (`n` keys in all) and,
/// when `with_values`, their rows. One run of a key list views the request's buffers;
/// several, or a range's runs, are gathered into buffers from `pool`.
inline slice of_slot(const route_table& where, const slice_source& in, bool with_values,
                     buffer_pool& pool, std::size_t s, std::vector<key_run>&& runs, std::size_t n) {
    const std::size_t ks = wire::size_of(in.key_type);
    const std::size_t row = in.row_bytes;
    slice sl;
    sl.link = where.links[s];
    sl.cache = where.caches[s];
    sl.server = where.servers[s];
    sl.view = where.view;
    sl.count = n;
    if (in.range) {
        // The keys as pairs [begin, end) of runs; the values as for a key list.
        sl.key_runs = true;
        pooled_buffer kb = pool.acquire(2 * runs.size() * ks);
        std::byte* k = kb.data();
        for (const auto& ru : runs) {
            const std::uint64_t b = in.range->begin + ru.first;
            const std::uint64_t e = b + ru.count;
            std::memcpy(k, &b, ks); // little-endian
            std::memcpy(k + ks, &e, ks);
            k += 2 * ks;
        }
        sl.keys = kb.share();
        if (with_values && runs.size() == 1) {
            sl.values = in.values.subspan(runs[0].first * row, n * row);
        } else if (with_values) {
            pooled_buffer vb = pool.acquire(n * row);
            std::size_t at = 0;
            for (const auto& ru : runs) {
                std::memcpy(vb.data() + at * row, in.values.data() + ru.first * row,
                            ru.count * row);
                at += ru.count;
            }
            sl.values = vb.share();
        }
    } else if (runs.size() == 1) {
        const auto first = runs[0].first;
        sl.keys = in.keys.subspan(first * ks, n * ks);
        if (with_values) {
            sl.values = in.values.subspan(first * row, n * row);
        }
    } else {
        pooled_buffer kb = pool.acquire(n * ks);
        pooled_buffer vb;
        if (with_values) {
            vb = pool.acquire(n * row);
        }
        std::size_t at = 0;
        for (const auto& ru : runs) {
            std::memcpy(kb.data() + at * ks, in.keys.data() + ru.first * ks, ru.count * ks);
            if (with_values) {
                std::memcpy(vb.data() + at * row, in.values.data() + ru.first * row,
                            ru.count * row);
            }
            at += ru.count;
        }
        sl.keys = kb.share();
        if (with_values) {
            sl.values = vb.share();
        }
    }
    sl.runs = std::move(runs);
    return sl;
}

/// Whether a slice of `n` keys (with their rows) is over the frame limit.
inline bool too_large(const slice_source& in, std::size_t n, std::uint64_t max_frame) {
    return wire::padded(n * wire::size_of(in.key_type)) + wire::padded(n * in.row_bytes) >
           max_frame;
}

} // namespace slices_cut

PETREL_DECL std::error_code cut_slices(const route_table& where, const slice_source& in,
                                       bool with_values, buffer_pool& pool, std::uint64_t max_frame,
                                       std::vector<slice>& out) {
    const auto keys = in.range ? key_source::range(in.range->begin, in.range->end)
                               : key_source::list(in.keys.span(), in.key_type);
    if (const auto s = sole_slot(where, keys)) {
        // Every key in one slot (a single server, or a few keys): one run, no walk.
        const std::size_t n = in.range ? static_cast<std::size_t>(in.range->end - in.range->begin)
                                       : in.keys.size() / wire::size_of(in.key_type);
        if (slices_cut::too_large(in, n, max_frame)) {
            return errc::frame_too_large;
        }
        out.push_back(
            slices_cut::of_slot(where, in, with_values, pool, *s, std::vector<key_run>{{0, n}}, n));
        return {};
    }
    auto routed = route(where, keys);
    for (std::size_t s = 0; s < routed.runs.size(); ++s) {
        if (routed.runs[s].empty()) {
            continue;
        }
        const std::size_t n = routed.counts[s];
        if (slices_cut::too_large(in, n, max_frame)) {
            return errc::frame_too_large;
        }
        out.push_back(
            slices_cut::of_slot(where, in, with_values, pool, s, std::move(routed.runs[s]), n));
    }
    return {};
}

PETREL_DECL wire::message make_request(wire::message blank, const slice& s) {
    wire::message m = std::move(blank);
    auto& h = m.header;
    const std::size_t ks = wire::size_of(h.key_type);
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    std::memcpy(&first, s.keys.data(), ks);
    std::memcpy(&last, s.keys.data() + s.keys.size() - ks, ks);
    h.range_begin = first;
    // Keys < key_space_end; a run's end is at most key_space_end.
    h.range_end = last + (s.key_runs ? 0 : 1);
    h.key_count = s.count;
    h.view = s.view ? s.view->version : 0; // a server not placed so in its view refuses
    if (s.key_runs) {
        h.flags |= wire::flag_key_runs;
    }
    m.set_segment(wire::keys_segment, s.keys);
    if (h.kind == wire::message_kind::push) {
        m.set_segment(wire::values_segment, s.values);
    }
    return m;
}

PETREL_DECL failure_report failure_report::of(const slice& s, logger log, node_id self) {
    return {std::move(log), self, s.server, s.view, s.link};
}

PETREL_DECL void failure_report::operator()(std::error_code ec) const {
    const bool lost = ec == errc::connection_closed || ec == errc::timed_out ||
                      (ec && ec.category() != error_category());
    // node_failed from a link that gave up connecting (not from the view).
    const auto l = ec == errc::node_failed ? link.lock() : nullptr;
    const bool unreachable = l && !l->closed() && l->first_unreachable_report();
    if ((!lost && !unreachable) || !log) {
        return;
    }
    const auto* n = view ? view->find(server) : nullptr;
    log(log_level::error,
        "petrel worker " + std::to_string(self) + ": a request to " +
            (n ? n->describe() : "server " + std::to_string(server)) + " failed: " +
            (unreachable ? "its address refuses connections or does not answer" : ec.message()));
}

} // namespace petrel::detail

#endif
