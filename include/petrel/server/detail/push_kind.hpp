// Petrel: what a push to a server is, read from and written to its flags in one place.
#pragma once

#include <petrel/wire/header.hpp>

#include <cstdint>
#include <string_view>

namespace petrel::detail {

/// What a push to a server is: a worker's push (`message_kind::push`) or a server's
/// update (`replica_update`, `row_transfer`, `hand_over`), told apart further by a flag
/// and the key count. `push_kind_of` reads a header and `kind_of`/`flags_of` write one;
/// the server tells pushes apart nowhere else.
enum class push_kind : std::uint8_t {
    /// A worker's push, applied as it arrives (`eventual`, `bounded_delay`).
    worker,
    /// A worker's push held for its clock (`sequential`).
    worker_ordered,
    /// An update that the server before this one on a chain applied (a worker's push),
    /// or that a primary sends a joining server for the keys that move to it.
    replica_update,
    /// The rows a completed clock changed, whole (values and optimizer state), down a
    /// chain or to a joining server; `clock` is that clock.
    clock_rows,
    /// Rows of a full copy, whole, to a new replica or a joining server; every clock
    /// below `clock` is in them.
    copy_rows,
    /// The end of a full copy (no keys).
    copy_end,
    /// The end of a joining server's copy that hands the partitions over to it (no keys).
    hand_over,
};

/// What push header `h` (of a kind `wire::is_push` accepts) is.
[[nodiscard]] constexpr push_kind push_kind_of(const wire::message_header& h) noexcept {
    switch (h.kind) {
    case wire::message_kind::replica_update:
        return push_kind::replica_update;
    case wire::message_kind::row_transfer:
        if ((h.flags & wire::flag_ordered) != 0) {
            return push_kind::clock_rows;
        }
        return h.key_count != 0 ? push_kind::copy_rows : push_kind::copy_end;
    case wire::message_kind::hand_over:
        return push_kind::hand_over;
    default:
        return (h.flags & wire::flag_ordered) != 0 ? push_kind::worker_ordered : push_kind::worker;
    }
}

/// Whether request `h` (of any kind) comes from a server of the job: it must carry the
/// job's server secret, and is judged by the view it was sent under.
[[nodiscard]] constexpr bool from_server(const wire::message_header& h) noexcept {
    return wire::is_server_update(h.kind);
}

/// Whether `k` comes from a server (and must carry the job's server secret).
[[nodiscard]] constexpr bool from_server(push_kind k) noexcept {
    return k != push_kind::worker && k != push_kind::worker_ordered;
}

/// The message kind a push of kind `k` travels as.
[[nodiscard]] constexpr wire::message_kind kind_of(push_kind k) noexcept {
    switch (k) {
    case push_kind::worker:
    case push_kind::worker_ordered:
        break;
    case push_kind::replica_update:
        return wire::message_kind::replica_update;
    case push_kind::clock_rows:
    case push_kind::copy_rows:
    case push_kind::copy_end:
        return wire::message_kind::row_transfer;
    case push_kind::hand_over:
        return wire::message_kind::hand_over;
    }
    return wire::message_kind::push;
}

/// The flags a push of kind `k` travels with, keeping how the keys are written
/// (`flag_key_runs`) from `flags`.
[[nodiscard]] constexpr std::uint8_t flags_of(push_kind k, std::uint8_t flags) noexcept {
    auto f = static_cast<std::uint8_t>(flags & wire::flag_key_runs);
    if (k == push_kind::worker_ordered || k == push_kind::clock_rows) {
        f |= wire::flag_ordered;
    }
    return f;
}

/// Whether `k` carries whole rows (values and state) that replace the stored ones, or
/// ends a copy of them.
[[nodiscard]] constexpr bool is_transfer(push_kind k) noexcept {
    return k == push_kind::clock_rows || k == push_kind::copy_rows || k == push_kind::copy_end ||
           k == push_kind::hand_over;
}

/// The kind a server forwards down a chain for a push of kind `k` it applied: a worker's
/// push goes on as a replica update; the others as they came.
[[nodiscard]] constexpr push_kind forwarded(push_kind k) noexcept {
    return k == push_kind::worker || k == push_kind::worker_ordered ? push_kind::replica_update : k;
}

/// What a push of kind `k` is, in words, for log lines ("a replica update").
[[nodiscard]] constexpr std::string_view name_of(push_kind k) noexcept {
    switch (k) {
    case push_kind::worker:
        return "a worker's push";
    case push_kind::worker_ordered:
        return "an ordered worker's push";
    case push_kind::replica_update:
        return "a replica update";
    case push_kind::clock_rows:
        return "the rows of a clock";
    case push_kind::copy_rows:
        return "rows of a copy";
    case push_kind::copy_end:
        return "the end of a copy";
    case push_kind::hand_over:
        return "the hand-over";
    }
    return "a push";
}

} // namespace petrel::detail
