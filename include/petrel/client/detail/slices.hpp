// Petrel: a request cut into one slice per server, and the messages and failure reports
// made from slices.
#pragma once

#include <petrel/client/detail/router.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/log.hpp>
#include <petrel/wire/message.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>
#include <vector>

namespace petrel::wire {
class key_cache_sender;
} // namespace petrel::wire

namespace petrel::detail {

class request_link;

/// The piece of a request for one server: its runs of keys, and the keys (and for a push
/// the values) gathered in that order.
struct slice {
    std::shared_ptr<request_link> link;
    std::shared_ptr<wire::key_cache_sender> cache; // null without key caching
    node_id server = no_node;
    std::shared_ptr<const membership_view> view; // names the server in failure reports
    std::vector<key_run> runs;
    std::size_t count = 0;
    shared_bytes keys; // the keys, or (key_runs) pairs [begin, end) of key runs
    shared_bytes values;
    bool key_runs = false;
};

/// A checked request's keys and rows, as the router cuts them.
struct slice_source {
    shared_bytes keys;   // sorted, unique keys of `key_type`; none for a range
    shared_bytes values; // `row_bytes` per key; none for a pull
    std::optional<key_range<std::uint64_t>> range; // every key of it, sent as runs
    std::size_t count = 0;
    wire::scalar_type key_type = wire::scalar_type::u64;
    std::size_t row_bytes = 0;
};

/// Cuts `in` by the server that holds its keys under `where`, in runs of consecutive keys
/// with the same server. A server with one run gets views of the request's own buffers;
/// one with several gets its runs gathered into buffers from `pool`. Fails with
/// `errc::frame_too_large` when a slice's push or pull reply would exceed `max_frame` (the
/// limit the peers enforce), before anything is sent.
[[nodiscard]] PETREL_DECL std::error_code cut_slices(const route_table& where,
                                                     const slice_source& in, bool with_values,
                                                     buffer_pool& pool, std::uint64_t max_frame,
                                                     std::vector<slice>& out);

/// The request of slice `s`: `blank` (a client's request of the right kind, without range
/// or payload) with the slice's range, keys and, for a push, values.
[[nodiscard]] PETREL_DECL wire::message make_request(wire::message blank, const slice& s);

/// Logs a slice's lost connection, timeout, or unreachable server (its link gave up
/// connecting), naming its server: the error code says nothing about which it was.
/// Refusals name themselves, and a server the view declared failed was logged with the
/// view.
struct failure_report {
    logger log;
    node_id self = no_node;
    node_id server = no_node;
    std::shared_ptr<const membership_view> view;
    std::weak_ptr<request_link> link;

    [[nodiscard]] PETREL_DECL static failure_report of(const slice& s, logger log, node_id self);
    PETREL_DECL void operator()(std::error_code ec) const;
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/slices.ipp>
#endif
