// Petrel: a worker's clock on one table, as its stores keep it.
#pragma once

#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/core/clock_entry.hpp>

#include <cstdint>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace petrel::detail {

/// A worker's clock on one table, shared by the worker's stores of that table so that a
/// store made again (for example once per epoch) continues where the last one stopped.
///
/// The consistency gate on the worker is written with task dependencies:
/// - tick n (telling the servers that n clocks are complete) starts after every push of
///   clock n − 1 has completed and after tick n − 1, so servers never learn of a clock
///   before its pushes;
/// - a read at clock t under a waiting policy starts after the worker's own tick
///   `required_clock(t)`, so a read never waits on the servers for its own worker, and a
///   failed tick fails the reads that depend on it instead of leaving them waiting.
struct worker_clock {
    std::mutex mutex;
    /// The worker's current clock: the number of completed iterations.
    clock_type current = 0;
    /// Settles when each push of the current clock has completed (successfully or not).
    std::vector<task<void>> pushes;
    /// Tick n for the clocks reads may still depend on.
    std::map<clock_type, task<void>> ticks;
    /// The newest tick, which the next one follows.
    task<void> last_tick;
    /// The newest tick sent to the servers: what a server that joins later is told first.
    clock_type sent = 0;

    /// A worker that joined a running job starts at the job's clock: servers admit it at
    /// the clock every live worker has completed, and the first reply that reports its
    /// clock (`clocks`, from a push or pull reply) sets `current` there, as long as this
    /// worker has not ticked yet. Its own ticks drive its clock from then on.
    void adopt_start(std::uint32_t worker, const std::vector<clock_entry>& clocks) {
        if (started.load(std::memory_order_acquire)) {
            return; // the usual case, without a lock
        }
        const auto start = reported_start(worker, clocks);
        if (start == 0) {
            return;
        }
        std::lock_guard lock(mutex);
        if (current == 0 && !last_tick.valid()) {
            current = start;
        }
        started.store(true, std::memory_order_release);
    }

    /// The job's clock this worker adopted when its first call was `clock()` (0 when it
    /// adopted none that way): its ticks count from there (see `adopt_first_tick`).
    /// Starts the clock at `start` (a restored job's clock) unless it has moved already.
    void start_at(clock_type start) {
        std::lock_guard lock(mutex);
        if (current == 0 && !last_tick.valid()) {
            current = start;
        }
        started.store(true, std::memory_order_release);
    }

    clock_type base = 0;

    /// For a worker whose first call is `clock()`: before its first tick goes out it asks
    /// the servers its clock (a tick of 0, which changes nothing), and the first reply
    /// that reports one (a worker that joined late, admitted at the clock every live
    /// worker had completed) moves its clock, and the ticks it counted before, on by that
    /// much. A tick's clock is translated when it is sent (`base`), so ticks counted
    /// before the answer carry the job's clock too.
    void adopt_first_tick(std::uint32_t worker, const std::vector<clock_entry>& clocks) {
        const auto start = reported_start(worker, clocks);
        if (start == 0) {
            return;
        }
        std::lock_guard lock(mutex);
        if (base != 0) {
            return; // another server answered first
        }
        base = start;
        current += start;
        std::map<clock_type, task<void>> moved;
        for (auto& [n, t] : ticks) {
            moved.emplace(n + start, std::move(t));
        }
        ticks = std::move(moved);
    }

    /// Set once this worker's clock is its own: after its first tick, or once it adopted
    /// the job's clock.
    std::atomic<bool> started{false};

    /// The clock `clocks` (a server's reply) report for `worker` on every key they cover,
    /// or 0 when they name none (or it left).
    static clock_type reported_start(std::uint32_t worker, const std::vector<clock_entry>& clocks) {
        clock_type start = departed_clock;
        for (const auto& e : clocks) {
            if (e.worker == worker) {
                start = std::min(start, e.clock);
            }
        }
        return start == departed_clock ? 0 : start;
    }
};

} // namespace petrel::detail
