// Petrel: the locks that let several threads use one table's rows at once.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace petrel::detail {

/// The locks of a table's rows for threads that use them at once: `rows()` (shared to use
/// rows, exclusive to create them), and 256 stripes, each guarding the rows of its keys.
/// Lock order: `rows()`, then one stripe at a time.
class stripe_locks {
public:
    static constexpr std::size_t stripes = 256;

    [[nodiscard]] std::shared_mutex& rows() const noexcept { return rows_; }

    /// Calls `f(i)` for every `i` in [0, n), each run of equal `stripe(i)` under that
    /// stripe's lock; `stripe` is non-decreasing in `i` and below `stripes`, so a stripe is
    /// locked once. Each walk starts at another stripe and wraps around, and skips a
    /// stripe another thread holds until the end, so that threads do not queue behind
    /// each other stripe by stripe.
    template <typename Stripe, typename F>
    void walk(std::size_t n, Stripe&& stripe, F&& f) const {
        const std::size_t first = turn_.fetch_add(1, std::memory_order_relaxed) * 101 % stripes;
        std::size_t split = 0; // the first i whose stripe is `first` or later
        for (std::size_t hi = n; split < hi;) {
            const std::size_t mid = split + (hi - split) / 2;
            if (stripe(mid) < first) {
                split = mid + 1;
            } else {
                hi = mid;
            }
        }
        // Left uninitialized (a std::pair would zero all of it on every call, even for one
        // key): only the first `deferred` entries are written and read.
        struct run_of_rows {
            std::size_t first;
            std::size_t second;
        };
        run_of_rows later[stripes + 1];
        constexpr std::size_t later_size = stripes + 1;
        std::size_t deferred = 0;
        auto run = [&](std::size_t from, std::size_t to) {
            while (from != to) {
                const std::size_t s = stripe(from);
                std::size_t end = from;
                while (end != to && stripe(end) == s) {
                    ++end;
                }
                std::unique_lock lock(stripe_[s].mutex, std::try_to_lock);
                if (!lock.owns_lock() && deferred < later_size) {
                    later[deferred++] = {from, end};
                    from = end;
                    continue;
                }
                if (!lock.owns_lock()) {
                    lock.lock();
                }
                for (; from != end; ++from) {
                    f(from);
                }
            }
        };
        run(split, n);
        run(0, split);
        for (std::size_t d = 0; d < deferred; ++d) {
            std::lock_guard lock(stripe_[stripe(later[d].first)].mutex);
            for (std::size_t i = later[d].first; i != later[d].second; ++i) {
                f(i);
            }
        }
    }

private:
    struct alignas(64) padded_mutex { // one cache line each: no false sharing
        std::mutex mutex;
    };
    mutable std::shared_mutex rows_;
    mutable std::array<padded_mutex, stripes> stripe_;
    alignas(64) mutable std::atomic<std::size_t> turn_{0};
};

} // namespace petrel::detail
