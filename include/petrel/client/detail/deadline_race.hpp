// Petrel: a wait that a deadline ends unless something else ends it first.
#pragma once

// Standard headers before Asio's: Asio configures itself from the standard library's
// macros (see <petrel/client/detail/fan_in.hpp>).
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

namespace petrel::detail {

/// Ends a wait at a deadline unless something else ends it first: `decide()` is true for
/// exactly one caller, the timer's handler or the other party.
///
/// @par Thread Safety
/// Safe; the lock guards the timer and is a leaf lock.
struct deadline_race {
    explicit deadline_race(const asio::any_io_executor& ex) : timer(ex) {}

    /// Calls `expired()` at `deadline` unless `decide()` was called before.
    template <typename Expired>
    static void arm(const std::shared_ptr<deadline_race>& race,
                    std::chrono::steady_clock::time_point deadline, Expired expired) {
        std::lock_guard lock(race->mutex);
        race->timer.expires_at(deadline);
        race->timer.async_wait([weak = std::weak_ptr<deadline_race>(race),
                                expired = std::move(expired)](std::error_code) mutable {
            if (auto r = weak.lock(); r && r->decide()) {
                expired();
            }
        });
    }

    /// Whether the caller came first (the other party then does nothing).
    bool decide() noexcept { return !decided.exchange(true, std::memory_order_acq_rel); }

    /// Stops the timer (after the other party won).
    void cancel() {
        std::lock_guard lock(mutex);
        timer.cancel();
    }

    std::mutex mutex; // guards the timer
    asio::steady_timer timer;
    std::atomic<bool> decided{false};
};

} // namespace petrel::detail
