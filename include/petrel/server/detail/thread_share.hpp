// Petrel: the threads that the large requests a server applies at once share.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

namespace petrel::detail {

/// The threads that requests applied at the same time share when they cut themselves into
/// parts: a request takes the threads that no other request being applied holds, its own
/// thread always. Two large pushes applied side by side on two threads then run whole, each
/// on its thread, instead of cutting themselves into parts that the same two threads would
/// have to take turns at.
///
/// @par Thread Safety
/// `take` may be called from any thread at once; a `lease` belongs to the thread that took it.
class thread_share {
public:
    /// The threads one request may use, held until it is destroyed.
    class lease {
    public:
        lease(lease&& other) noexcept
            : owner_(std::exchange(other.owner_, nullptr)), threads_(other.threads_) {}
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        lease& operator=(lease&&) = delete;
        ~lease() {
            if (owner_) {
                owner_->busy_.fetch_sub(1, std::memory_order_relaxed);
            }
        }

        /// At least 1: the request's own thread, and those no other request holds.
        [[nodiscard]] std::size_t threads() const noexcept { return threads_; }

    private:
        friend class thread_share;
        lease(thread_share* owner, std::size_t threads) noexcept
            : owner_(owner), threads_(threads) {}

        thread_share* owner_;
        std::size_t threads_;
    };

    /// A request about to be applied, which could use up to `threads` threads (its own
    /// included): the part of them that the requests being applied now leave it.
    [[nodiscard]] lease take(std::size_t threads) noexcept {
        const std::size_t others = busy_.fetch_add(1, std::memory_order_relaxed);
        return lease(this, others < threads ? threads - others : 1);
    }

    /// The requests holding a lease now.
    [[nodiscard]] std::size_t busy() const noexcept {
        return busy_.load(std::memory_order_relaxed);
    }

private:
    std::atomic<std::size_t> busy_{0};
};

} // namespace petrel::detail
