// Petrel: one table of a server, with its clocks and what replication keeps of it.
#pragma once

#include <petrel/consistency/clock_gate.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

namespace petrel::detail {

/// A request waiting in a table's gate, with the connection to answer on (none for a
/// held push: it was acknowledged when held).
struct waiting_request {
    connection_ptr conn;
    wire::message request;
};

/// One table of a server: its storage (created when first named if declared, else by the
/// first push), its clocks, and the bookkeeping of its replication: which clocks are
/// durable (applied on every copy), and after a takeover, which workers' resync ticks are
/// still awaited. The server guards it with its lock.
struct table_slot {
    using clock = std::chrono::steady_clock;

    explicit table_slot(std::size_t workers) : gate(workers) {}

    std::unique_ptr<table_base> table;
    clock_gate<waiting_request> gate;
    std::uint64_t held_bytes = 0; // of the pushes held for their clock (`note_held`)
    bool mean = false;            // aggregation::mean for the pushes of a clock
    std::uint32_t replicas = 7;   // the table's replicas at most (table_spec::replicas)
    // No push of a clock >= this has been applied to the table (a checkpoint's
    // `clock_limit`); from a restored checkpoint, its limit.
    std::uint64_t applied_limit = 0;
    // As a replica: per primary, the newest clock whose combined update arrived, + 1.
    std::map<std::uint32_t, std::uint64_t> replicated;
    // As a primary: the clocks whose rows went down the chain (or to a learner), not
    // yet acknowledged; a clock appears once per server it went to.
    std::deque<std::uint64_t> unacked;
    // The durable clock when this server's keys last changed (`placed_at`): replies to
    // requests sent under an older view say at most this, so that a worker that has
    // not seen the change keeps the pushes of keys that moved away (it resends them).
    std::uint64_t durable_cap = ~std::uint64_t{0};
    // After this server took keys over (view `resync_view`): the workers whose tick
    // sent under that view or later has not come yet. Each sends it after the pushes
    // it resends here, so until all have, a clock read here could miss some of them:
    // ordered reads wait in `resync_held`.
    std::uint64_t resync_view = 0;
    clock::time_point resync_since{};
    std::set<std::uint32_t> resync_pending;
    std::vector<waiting_request> resync_held;

    /// The clock below which every push is applied here and on every server the rows of
    /// its clock went to: the clocks complete here, up to the oldest clock not yet
    /// acknowledged by one of those servers (clocks resent late leave `unacked` out of
    /// order).
    [[nodiscard]] std::uint64_t durable() const {
        const auto done = gate.completed(clock_gate<waiting_request>::all());
        return unacked.empty() ? done
                               : std::min(done, *std::min_element(unacked.begin(), unacked.end()));
    }

    /// One server acknowledged the rows of `clock` (one of its places in `unacked`).
    void acknowledged(std::uint64_t clock) {
        if (auto at = std::find(unacked.begin(), unacked.end(), clock); at != unacked.end()) {
            unacked.erase(at);
        }
    }

    /// This server took keys over under view `since`, at `now`: ordered reads wait for a
    /// resync tick sent under `since` or later from each of the `workers` not departed.
    void await_resync(std::uint64_t since, std::uint32_t workers, clock::time_point now) {
        resync_view = since;
        resync_since = now;
        resync_pending.clear();
        for (std::uint32_t w = 0; w < workers; ++w) {
            if (!gate.departed(w)) {
                resync_pending.insert(w);
            }
        }
    }

    /// Worker `worker` sent its resync tick under view `view` (it resent what it had).
    void resynced(std::uint32_t worker, std::uint64_t view) {
        if (view >= resync_view) {
            resync_pending.erase(worker);
        }
    }

    /// Worker `worker` leaves the table's clock: nobody waits for it, nor for its resync.
    void depart(std::uint32_t worker) {
        gate.depart(worker);
        resync_pending.erase(worker);
    }

    /// Whether a pull of clock `required` waits for resync ticks (it is held in
    /// `resync_held`): an ordered read while some are awaited.
    [[nodiscard]] bool resync_holds(std::uint64_t required) const noexcept {
        return required != 0 && !resync_pending.empty();
    }

    /// The reads of connection `c` parked in the gate (for the quota of one connection,
    /// `server_options::max_parked_per_connection`).
    [[nodiscard]] std::size_t parked_of(const connection* c) const {
        const auto it = parked_by.find(c);
        return it == parked_by.end() ? 0 : it->second;
    }
    /// A read of `c` is parked in the gate, or leaves it.
    void note_parked(const connection* c) { ++parked_by[c]; }
    void note_unparked(const connection* c) {
        if (const auto it = parked_by.find(c); it != parked_by.end() && --it->second == 0) {
            parked_by.erase(it);
        }
    }

    /// Parked reads by connection (every read in the gate is counted here).
    std::unordered_map<const connection*, std::size_t> parked_by;

    /// The bytes of worker `w`'s pushes held for their clock (for the share of one
    /// worker, `server_options::max_held_bytes_per_worker`).
    [[nodiscard]] std::uint64_t held_of(std::uint32_t w) const {
        const auto it = held_by.find(w);
        return it == held_by.end() ? 0 : it->second;
    }
    /// `bytes` of worker `w`'s pushes are held for their clock, or leave the gate.
    void note_held(std::uint32_t w, std::uint64_t bytes) {
        held_bytes += bytes;
        held_by[w] += bytes;
    }
    void note_released(std::uint32_t w, std::uint64_t bytes) {
        held_bytes -= std::min(held_bytes, bytes);
        if (const auto it = held_by.find(w); it != held_by.end()) {
            it->second -= std::min(it->second, bytes);
            if (it->second == 0) {
                held_by.erase(it);
            }
        }
    }

    /// Held bytes by worker (every held push is counted here and in `held_bytes`).
    std::map<std::uint32_t, std::uint64_t> held_by;
};

} // namespace petrel::detail
