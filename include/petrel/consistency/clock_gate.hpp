// Petrel: a server's consistency gate for one table.
#pragma once

#include <petrel/consistency/policy.hpp>
#include <petrel/core/clock_entry.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/vector_clock.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace petrel {

/// What a server knows about the progress of a table's workers, and the requests that
/// wait for it.
///
/// The gate keeps a range vector clock over the key space: for every key range, the
/// number of clocks each worker has completed there (ranges split only where clocks
/// differ). Workers raise their clocks with `tick`; a worker that leaves takes no
/// further part (`depart`: its clock becomes `departed_clock`, so it holds nobody back).
///
/// Two kinds of requests wait here, each carried as an opaque `Request`:
/// - *held pushes* (`sequential`): a push made at clock t on range r waits until every
///   live worker has completed clock t on r; then the held pushes are released in the
///   order (clock, worker, arrival), which makes the sum on every key independent of
///   arrival order;
/// - *parked reads* (pulls and function calls): a read that requires clock c on range r
///   waits until every live worker has completed c clocks on r and no held push of an
///   earlier clock overlaps r.
///
/// `release()` hands back what may proceed after a change, pushes first: the caller
/// applies those before it answers the reads.
///
/// @par Example
/// @code
/// petrel::clock_gate<int> gate(2);                     // workers 0 and 1
/// gate.hold(1, 0, {0, 10}, 11);                         // worker 1's push at clock 0
/// gate.hold(0, 0, {0, 10}, 10);                         // worker 0's push at clock 0
/// gate.park({0, 10}, 1, 99);                            // a read that needs clock 1
/// gate.tick(0, petrel::clock_gate<int>::all(), 1);
/// gate.tick(1, petrel::clock_gate<int>::all(), 1);
/// auto r = gate.release();                              // pushes {10, 11}, reads {99}
/// @endcode
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe.
template <typename Request>
class clock_gate {
public:
    using range_type = key_range<std::uint64_t>;

    /// The whole key space.
    [[nodiscard]] static constexpr range_type all() noexcept { return range_type::all(); }

    /// What may proceed after a change, in the order to process it.
    struct released {
        std::vector<Request> pushes; ///< apply these first, in this order
        std::vector<Request> reads;  ///< then answer these
    };

    /// A gate for `workers` workers, each at clock 0 on every key.
    explicit clock_gate(std::size_t workers) : clock_(workers, all()), departed_(workers, false) {}

    [[nodiscard]] std::size_t workers() const noexcept { return clock_.workers(); }
    [[nodiscard]] const vector_clock<std::uint64_t>& clock() const noexcept { return clock_; }
    [[nodiscard]] bool departed(std::uint32_t worker) const {
        return worker < departed_.size() && departed_[worker];
    }
    [[nodiscard]] std::size_t held() const noexcept { return held_.size(); }
    [[nodiscard]] std::size_t parked() const noexcept { return parked_.size(); }

    /// Records that `worker` has completed `completed` clocks on `r`. Clocks only move
    /// forward: an older tick changes nothing. A departed worker stays departed.
    /// @throws std::out_of_range if `worker >= workers()`.
    void tick(std::uint32_t worker, range_type r, clock_type completed) {
        check(worker);
        if (departed_[worker]) {
            return;
        }
        raise(worker, r, completed);
    }

    /// `worker` takes no further part: its clock becomes `departed_clock` on every key.
    /// @throws std::out_of_range if `worker >= workers()`.
    void depart(std::uint32_t worker) {
        check(worker);
        departed_[worker] = true;
        clock_.set(all(), worker, departed_clock);
    }

    /// A worker joins: it takes the next index (the old `workers()`) and starts at the
    /// clock every live worker has completed on the whole key space (0 when no worker is
    /// live), so that it holds back no clock that is already complete, and the pushes of
    /// the current clock wait for it too. With `departed` it joins as departed (an index
    /// that left before this gate learned of it). Returns its index.
    std::uint32_t add_worker(bool departed = false) {
        clock_type start = completed(all());
        if (start == departed_clock) {
            start = 0;
        }
        const auto w =
            static_cast<std::uint32_t>(clock_.add_worker(departed ? departed_clock : start));
        departed_.push_back(departed);
        return w;
    }

    /// The clocks every live worker has completed on all of `r` (`departed_clock` when
    /// no worker is live).
    [[nodiscard]] clock_type completed(range_type r) const noexcept { return clock_.min_clock(r); }

    /// Holds back a push made by `worker` at clock `t` on keys within `r`.
    void hold(std::uint32_t worker, clock_type t, range_type r, Request request) {
        held_.emplace(std::make_tuple(t, worker, next_++), held_push{r, std::move(request)});
    }

    /// Whether a read of `r` that requires `required` clocks may be answered now.
    [[nodiscard]] bool readable(range_type r, clock_type required) const {
        if (required == 0) {
            return true;
        }
        if (completed(r) < required) {
            return false;
        }
        for (const auto& [key, h] : held_) {
            if (std::get<0>(key) >= required) {
                break; // held pushes are sorted by clock
            }
            if (!h.range.intersect(r).empty()) {
                return false;
            }
        }
        return true;
    }

    /// Parks a read of `r` until `readable(r, required)`.
    void park(range_type r, clock_type required, Request request) {
        parked_.push_back(parked_read{r, required, std::move(request)});
    }

    /// Takes the held pushes that may be applied and then the parked reads that may be
    /// answered, in order.
    ///
    /// A held push of clock t on r is released once every live worker has completed t
    /// clocks on r and no earlier held push (by clock, then worker, then arrival) that
    /// overlaps r is still held.
    released release() {
        released out;
        std::vector<range_type> blocked;
        for (auto it = held_.begin(); it != held_.end();) {
            const clock_type t = std::get<0>(it->first);
            const range_type r = it->second.range;
            const bool ready = completed(r) > t;
            const bool behind = std::any_of(blocked.begin(), blocked.end(),
                                            [&](range_type b) { return !b.intersect(r).empty(); });
            if (ready && !behind) {
                out.pushes.push_back(std::move(it->second.request));
                it = held_.erase(it);
            } else {
                blocked.push_back(r);
                ++it;
            }
        }
        for (auto it = parked_.begin(); it != parked_.end();) {
            if (readable(it->range, it->required)) {
                out.reads.push_back(std::move(it->request));
                it = parked_.erase(it);
            } else {
                ++it;
            }
        }
        return out;
    }

    /// Removes every held push and parked read for which `drop(request)` is true (for
    /// example those of a closed connection) and returns them.
    template <typename Predicate>
    std::vector<Request> remove_if(Predicate drop) {
        std::vector<Request> out;
        for (auto it = held_.begin(); it != held_.end();) {
            if (drop(it->second.request)) {
                out.push_back(std::move(it->second.request));
                it = held_.erase(it);
            } else {
                ++it;
            }
        }
        for (auto it = parked_.begin(); it != parked_.end();) {
            if (drop(it->request)) {
                out.push_back(std::move(it->request));
                it = parked_.erase(it);
            } else {
                ++it;
            }
        }
        return out;
    }

    /// The clocks of `r`: one entry per worker and key range of the clock that overlaps
    /// `r`, clipped to `r`. When that would be more than `max_entries`, one entry per
    /// worker covering all of `r` with its smallest clock there.
    [[nodiscard]] std::vector<clock_entry> entries(range_type r, std::size_t max_entries) const {
        std::vector<clock_entry> out;
        r = r.intersect(all());
        if (r.empty() || workers() == 0) {
            return out;
        }
        std::size_t ranges = 0;
        for (const auto& e : clock_.entries()) {
            ranges += e.range.intersect(r).empty() ? 0 : 1;
        }
        if (ranges * workers() > max_entries) {
            if (workers() > max_entries) {
                return out; // too many workers to report: no clocks rather than wrong ones
            }
            for (std::uint32_t w = 0; w < workers(); ++w) {
                out.push_back({r.begin, r.end, w, clock_.min_clock(r, w)});
            }
            return out;
        }
        for (const auto& e : clock_.entries()) {
            const auto x = e.range.intersect(r);
            if (x.empty()) {
                continue;
            }
            for (std::uint32_t w = 0; w < workers(); ++w) {
                out.push_back({x.begin, x.end, w, e.clocks[w]});
            }
        }
        return out;
    }

private:
    struct held_push {
        range_type range;
        Request request;
    };
    struct parked_read {
        range_type range;
        clock_type required;
        Request request;
    };

    void check(std::uint32_t worker) const {
        if (worker >= workers()) {
            throw std::out_of_range("petrel::clock_gate: worker " + std::to_string(worker) +
                                    " of " + std::to_string(workers()));
        }
    }

    // Sets the worker's clock to at least `t` on every part of `r`.
    void raise(std::uint32_t worker, range_type r, clock_type t) {
        r = r.intersect(all());
        if (r.empty()) {
            return;
        }
        if (clock_.min_clock(r, worker) >= t) {
            return;
        }
        // Raise entry by entry, so that parts already ahead keep their clock.
        std::vector<range_type> behind;
        for (const auto& e : clock_.entries()) {
            const auto x = e.range.intersect(r);
            if (!x.empty() && e.clocks[worker] < t) {
                behind.push_back(x);
            }
        }
        for (const auto& x : behind) {
            clock_.set(x, worker, t);
        }
    }

    vector_clock<std::uint64_t> clock_;
    std::vector<bool> departed_;
    std::map<std::tuple<clock_type, std::uint32_t, std::uint64_t>, held_push> held_;
    std::list<parked_read> parked_;
    std::uint64_t next_ = 0;
};

} // namespace petrel
