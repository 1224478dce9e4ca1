// Petrel: the distinct threads that have run a server's requests, up to a cap.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>

namespace petrel::detail {

/// Counts the distinct threads that call `note`, up to `Capacity`: the threads that run an
/// executor, as far as they have shown themselves. Once a thread is counted, `note` costs
/// it a load per thread counted before it.
///
/// @par Thread Safety
/// `note` and `count` may be called from any thread at once.
template <std::size_t Capacity>
class thread_census {
public:
    /// Counts the calling thread, unless it is counted or `Capacity` threads are.
    void note() noexcept {
        const auto me = std::this_thread::get_id();
        if (counted(me, count_.load(std::memory_order_acquire))) {
            return;
        }
        const std::lock_guard lock(mutex_);
        const auto n = count_.load(std::memory_order_relaxed);
        if (!counted(me, n)) {
            seen_[n].store(me, std::memory_order_relaxed);
            count_.store(n + 1, std::memory_order_release);
        }
    }

    /// The threads counted so far.
    [[nodiscard]] std::size_t count() const noexcept {
        return count_.load(std::memory_order_acquire);
    }

private:
    /// Whether `me` is among the first `n` threads counted, or no place is left.
    bool counted(std::thread::id me, std::size_t n) const noexcept {
        for (std::size_t i = 0; i < n; ++i) {
            if (seen_[i].load(std::memory_order_relaxed) == me) {
                return true;
            }
        }
        return n == Capacity;
    }

    std::array<std::atomic<std::thread::id>, Capacity> seen_{};
    std::atomic<std::size_t> count_{0};
    std::mutex mutex_;
};

} // namespace petrel::detail
