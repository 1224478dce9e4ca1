// Petrel: range vector clocks.
#pragma once

#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace petrel {

/// A vector clock kept per key range rather than per key.
///
/// Every key of a fixed domain has one logical clock per worker: the iteration up to which
/// that worker's updates (or reads) of the key are known. Parameters are pushed and pulled
/// in ranges, so neighbouring keys almost always carry the same clocks; the clock therefore
/// stores a sorted list of disjoint, contiguous entries that together cover the domain
/// exactly, each entry a key range with one clock vector. Memory is O(m·k) for m entries and
/// k workers, independent of the number of keys.
///
/// `set` and `advance` split entries at the bounds of the range they touch and then merge the
/// touched entries with their neighbours whenever the clock vectors are equal, so a clock that
/// is minimal (no two adjacent entries with equal clock vectors) stays minimal. A fresh clock
/// has a single entry with every clock at 0 (no entry when the domain is empty).
///
/// Keys outside the domain and worker indices not below `workers()` are rejected with
/// `std::out_of_range` by the functions that take a single key or a worker index. Functions
/// taking a key range clamp it to the domain instead.
///
/// @par Example
/// @code
/// petrel::vector_clock<std::uint64_t> vc{3, {0, 1000}};   // 3 workers over [0, 1000)
/// vc.advance({100, 200}, 1);                                // worker 1 finished one round
/// vc.range_count();                                         // 3: [0,100) [100,200) [200,1000)
/// vc.get(150, 1);                                           // 1
/// vc.min_clock({0, 1000});                                  // 0: workers 0 and 2 are behind
/// vc.set({0, 1000}, 1, 1);                                  // entries merge back: 1 range
/// @endcode
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe, except for concurrent calls of const
/// member functions.
template <key Key>
class vector_clock {
public:
    using key_type = Key;
    using clock_type = std::uint64_t;
    using range_type = key_range<Key>;

    /// One entry: the keys of `range` all have the clock vector `clocks` (one per worker).
    struct entry {
        range_type range;
        std::vector<clock_type> clocks;

        friend bool operator==(const entry&, const entry&) = default;
    };

    using const_iterator = typename std::vector<entry>::const_iterator;

    /// The clock of `workers` workers over `domain`, every clock at 0.
    explicit vector_clock(std::size_t workers, range_type domain = range_type::all())
        : workers_{workers}, domain_{domain.empty() ? range_type{} : domain} {
        if (!domain_.empty()) {
            entries_.push_back(entry{domain_, std::vector<clock_type>(workers_, 0)});
        }
    }

    /// The number of workers (the size of every clock vector).
    [[nodiscard]] std::size_t workers() const noexcept { return workers_; }

    /// The keys this clock covers; `{0, 0}` when it was constructed with an empty domain.
    [[nodiscard]] range_type domain() const noexcept { return domain_; }

    /// The number of entries (key ranges with their own clock vector).
    [[nodiscard]] std::size_t range_count() const noexcept { return entries_.size(); }

    /// The entries, sorted by key, disjoint and covering the domain exactly.
    ///
    /// The span is invalidated by any non-const member function.
    [[nodiscard]] std::span<const entry> entries() const noexcept { return entries_; }

    [[nodiscard]] const_iterator begin() const noexcept { return entries_.begin(); }
    [[nodiscard]] const_iterator end() const noexcept { return entries_.end(); }

    /// Sets `worker`'s clock to `t` on the keys of `r` within the domain.
    ///
    /// Leaves the other workers' clocks unchanged. An `r` that misses the domain changes
    /// nothing.
    ///
    /// @throws std::out_of_range if `worker >= workers()`.
    void set(range_type r, std::size_t worker, clock_type t) {
        update(r, worker, [t](clock_type& c) { c = t; });
    }

    /// Adds 1 to `worker`'s clock on the keys of `r` within the domain.
    ///
    /// Clocks are unsigned and wrap at `std::numeric_limits<clock_type>::max()`, which no
    /// iteration count reaches in practice.
    ///
    /// @throws std::out_of_range if `worker >= workers()`.
    void advance(range_type r, std::size_t worker) {
        update(r, worker, [](clock_type& c) { ++c; });
    }

    /// `worker`'s clock at key `k`.
    ///
    /// @throws std::out_of_range if `worker >= workers()` or `k` is outside the domain.
    [[nodiscard]] clock_type get(Key k, std::size_t worker) const {
        check_worker(worker);
        return entries_[find(k)].clocks[worker];
    }

    /// The clock vector at key `k`, one clock per worker.
    ///
    /// The span is invalidated by any non-const member function.
    ///
    /// @throws std::out_of_range if `k` is outside the domain.
    [[nodiscard]] std::span<const clock_type> clocks(Key k) const {
        return entries_[find(k)].clocks;
    }

    /// The smallest clock of any worker at any key of `r` within the domain.
    ///
    /// This is the iteration every worker has completed on all of `r`. When `r` misses the
    /// domain, or there are no workers, there is no clock to take the minimum of and the
    /// result is `std::numeric_limits<clock_type>::max()` (the identity of `min`).
    [[nodiscard]] clock_type min_clock(range_type r) const noexcept {
        clock_type m = std::numeric_limits<clock_type>::max();
        for_each_overlapping(r, [&m](const entry& e) {
            for (const clock_type c : e.clocks) {
                m = std::min(m, c);
            }
        });
        return m;
    }

    /// The smallest clock of `worker` at any key of `r` within the domain.
    ///
    /// When `r` misses the domain the result is `std::numeric_limits<clock_type>::max()`.
    ///
    /// @throws std::out_of_range if `worker >= workers()`.
    [[nodiscard]] clock_type min_clock(range_type r, std::size_t worker) const {
        check_worker(worker);
        clock_type m = std::numeric_limits<clock_type>::max();
        for_each_overlapping(r,
                             [&m, worker](const entry& e) { m = std::min(m, e.clocks[worker]); });
        return m;
    }

    /// Splits the entry that contains `at` into `[begin, at)` and `[at, end)`, both with the
    /// entry's clock vector.
    ///
    /// A no-op when `at` already starts an entry or lies outside the domain. The result is
    /// not minimal until `merge()` runs; `set` and `advance` only merge the entries they
    /// touch and their neighbours.
    void split(Key at) {
        if (domain_.contains(at)) {
            split_at(at);
        }
    }

    /// Merges every run of adjacent entries with equal clock vectors into one entry.
    void merge() { coalesce(0, entries_.size()); }

    /// Adds a worker whose clock is `start` on every key, and returns its index (the old
    /// `workers()`).
    std::size_t add_worker(clock_type start = 0) {
        for (entry& e : entries_) {
            e.clocks.push_back(start);
        }
        return workers_++;
    }

    /// Removes `worker`'s clocks; the workers after it move down by one index.
    ///
    /// Entries that differed only in the removed worker's clock are merged.
    ///
    /// @throws std::out_of_range if `worker >= workers()`.
    void remove_worker(std::size_t worker) {
        check_worker(worker);
        const auto at = static_cast<std::ptrdiff_t>(worker);
        for (entry& e : entries_) {
            e.clocks.erase(e.clocks.begin() + at);
        }
        --workers_;
        merge();
    }

    /// True when both clocks have the same workers and domain and agree at every key and
    /// worker; how the keys are divided into entries does not matter.
    friend bool operator==(const vector_clock& a, const vector_clock& b) {
        if (a.workers_ != b.workers_ || a.domain_ != b.domain_) {
            return false;
        }
        // Both entry lists cover the same domain; walk them side by side, comparing the
        // clock vectors of every pair of overlapping entries.
        std::size_t i = 0;
        std::size_t j = 0;
        while (i < a.entries_.size() && j < b.entries_.size()) {
            const entry& x = a.entries_[i];
            const entry& y = b.entries_[j];
            if (x.clocks != y.clocks) {
                return false;
            }
            if (x.range.end <= y.range.end) {
                ++i;
            }
            if (y.range.end <= x.range.end) {
                ++j;
            }
        }
        return true;
    }

private:
    void check_worker(std::size_t worker) const {
        if (worker >= workers_) {
            throw std::out_of_range{"petrel::vector_clock: worker index " + std::to_string(worker) +
                                    " out of range (" + std::to_string(workers_) + " workers)"};
        }
    }

    // The index of the entry containing `k`.
    [[nodiscard]] std::size_t find(Key k) const {
        if (!domain_.contains(k)) {
            throw std::out_of_range{
                "petrel::vector_clock: key " + std::to_string(static_cast<std::uint64_t>(k)) +
                " outside the clock's domain [" +
                std::to_string(static_cast<std::uint64_t>(domain_.begin)) + ", " +
                std::to_string(static_cast<std::uint64_t>(domain_.end)) + ")"};
        }
        return index_of(k);
    }

    // The index of the entry containing `k`; `k` must be in the domain.
    [[nodiscard]] std::size_t index_of(Key k) const noexcept {
        const auto it = std::upper_bound(entries_.begin(), entries_.end(), k,
                                         [](Key x, const entry& e) { return x < e.range.begin; });
        return static_cast<std::size_t>(it - entries_.begin()) - 1;
    }

    // Makes `at` the start of an entry and returns that entry's index (`entries_.size()` when
    // `at` is the end of the domain). `at` must lie in `[domain_.begin, domain_.end]`.
    std::size_t split_at(Key at) {
        if (at == domain_.end) {
            return entries_.size();
        }
        const std::size_t i = index_of(at);
        if (entries_[i].range.begin == at) {
            return i;
        }
        entry upper{range_type{at, entries_[i].range.end}, entries_[i].clocks};
        entries_[i].range.end = at;
        entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(upper));
        return i + 1;
    }

    // Merges runs of equal clock vectors among the entries with indices in [first, last).
    void coalesce(std::size_t first, std::size_t last) {
        if (last - first < 2) {
            return;
        }
        std::size_t out = first;
        for (std::size_t in = first + 1; in < last; ++in) {
            if (entries_[in].clocks == entries_[out].clocks) {
                entries_[out].range.end = entries_[in].range.end;
            } else if (++out != in) {
                entries_[out] = std::move(entries_[in]);
            }
        }
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(out) + 1,
                       entries_.begin() + static_cast<std::ptrdiff_t>(last));
    }

    template <typename Update>
    void update(range_type r, std::size_t worker, Update f) {
        check_worker(worker);
        r = r.intersect(domain_);
        if (r.empty()) {
            return;
        }
        const std::size_t first = split_at(r.begin);
        const std::size_t last = split_at(r.end);
        for (std::size_t i = first; i < last; ++i) {
            f(entries_[i].clocks[worker]);
        }
        // Only the updated entries and their two neighbours can have become equal.
        coalesce(first == 0 ? 0 : first - 1, std::min(last + 1, entries_.size()));
    }

    template <typename Visit>
    void for_each_overlapping(range_type r, Visit visit) const {
        r = r.intersect(domain_);
        if (r.empty()) {
            return;
        }
        for (std::size_t i = index_of(r.begin); i < entries_.size(); ++i) {
            if (entries_[i].range.begin >= r.end) {
                break;
            }
            visit(entries_[i]);
        }
    }

    std::size_t workers_;
    range_type domain_;
    std::vector<entry> entries_;
};

} // namespace petrel
