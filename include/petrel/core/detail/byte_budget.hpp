// Petrel: a number of bytes shared by the connections of one node.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace petrel::detail {

/// Bytes that several connections draw on at once, such as the payloads being received
/// over all the connections of a node. A connection takes its share before it allocates
/// and gives it back once the bytes are handed over; one that cannot have its share now
/// leaves a wake-up, called (once, on whatever thread gives bytes back) when bytes were
/// given back, so that it tries again. Shares are taken whole: no share waits holding
/// part of what it needs, so waiting never deadlocks while the holders make progress.
///
/// @par Thread Safety
/// Safe to use from any thread.
class byte_budget {
public:
    explicit byte_budget(std::uint64_t limit) noexcept : limit_(limit) {}

    byte_budget(const byte_budget&) = delete;
    byte_budget& operator=(const byte_budget&) = delete;

    [[nodiscard]] std::uint64_t limit() const noexcept { return limit_; }

    /// Bytes held now.
    [[nodiscard]] std::uint64_t used() const {
        std::lock_guard lock(mutex_);
        return used_;
    }

    /// Takes `n` bytes when they fit (true); otherwise takes nothing (false).
    [[nodiscard]] bool try_take(std::uint64_t n) {
        std::lock_guard lock(mutex_);
        if (n <= limit_ - used_) {
            used_ += n;
            return true;
        }
        return false;
    }

    /// Takes `n` bytes when they fit (true). Otherwise keeps `wake` for the next time
    /// bytes are given back (false). `n` above the limit never fits: check it first.
    [[nodiscard]] bool take_or_wait(std::uint64_t n, std::function<void()> wake) {
        std::lock_guard lock(mutex_);
        if (n <= limit_ - used_) {
            used_ += n;
            return true;
        }
        waiting_.push_back(std::move(wake));
        return false;
    }

    /// Gives back `n` bytes taken before, and wakes everyone that waited (outside the
    /// lock): each tries again, and those that still do not fit wait again.
    void give_back(std::uint64_t n) {
        std::vector<std::function<void()>> wake;
        {
            std::lock_guard lock(mutex_);
            used_ -= n < used_ ? n : used_;
            wake.swap(waiting_);
        }
        for (auto& w : wake) {
            try {
                if (w) {
                    w();
                }
            } catch (...) {
                // Out of memory while waking: that one tries again at the next give-back.
            }
        }
    }

private:
    const std::uint64_t limit_;
    mutable std::mutex mutex_;
    std::uint64_t used_ = 0;
    std::vector<std::function<void()>> waiting_;
};

/// Bytes taken from a `byte_budget`, given back when it goes (or on `reset`).
class budget_share {
public:
    budget_share() = default;
    budget_share(std::shared_ptr<byte_budget> budget, std::uint64_t n) noexcept
        : budget_(std::move(budget)), n_(n) {}
    budget_share(budget_share&& o) noexcept
        : budget_(std::move(o.budget_)), n_(std::exchange(o.n_, 0)) {}
    budget_share& operator=(budget_share&& o) noexcept {
        if (this != &o) {
            reset();
            budget_ = std::move(o.budget_);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    budget_share(const budget_share&) = delete;
    budget_share& operator=(const budget_share&) = delete;
    ~budget_share() { reset(); }

    /// Gives the bytes back now.
    void reset() noexcept {
        if (budget_ && n_ > 0) {
            budget_->give_back(n_);
        }
        budget_.reset();
        n_ = 0;
    }

    [[nodiscard]] std::uint64_t bytes() const noexcept { return n_; }

private:
    std::shared_ptr<byte_budget> budget_;
    std::uint64_t n_ = 0;
};

/// The bytes of replies queued on several connections together, such as the accepted
/// connections of a node (`transport_options::max_queued_reply_bytes`). Replies are not
/// refused: a connection that holds more than its share while the total is over the
/// limit stops reading its peer's requests until its queue drains (see `tcp_connection`),
/// and its peer must take some of them in time. A connection's share is the limit
/// divided by the connections holding queued bytes, so one peer that does not read holds
/// back itself, not the others.
///
/// @par Thread Safety
/// Safe to use from any thread.
class reply_budget {
public:
    explicit reply_budget(std::uint64_t limit) noexcept : limit_(limit) {}

    reply_budget(const reply_budget&) = delete;
    reply_budget& operator=(const reply_budget&) = delete;

    [[nodiscard]] std::uint64_t limit() const noexcept { return limit_; }
    /// Bytes queued now, over all connections.
    [[nodiscard]] std::uint64_t used() const noexcept {
        return bytes_.load(std::memory_order_relaxed);
    }
    /// Connections holding queued bytes now.
    [[nodiscard]] std::uint64_t holders() const noexcept {
        return holders_.load(std::memory_order_relaxed);
    }

    /// A connection's queue went from `before` to `after` bytes.
    void change(std::uint64_t before, std::uint64_t after) noexcept {
        if (after > before) {
            bytes_.fetch_add(after - before, std::memory_order_relaxed);
        } else if (before > after) {
            bytes_.fetch_sub(before - after, std::memory_order_relaxed);
        }
        if (before == 0 && after > 0) {
            holders_.fetch_add(1, std::memory_order_relaxed);
        } else if (before > 0 && after == 0) {
            holders_.fetch_sub(1, std::memory_order_relaxed);
        }
    }

    /// Whether a connection holding `mine` queued bytes holds more than its share while
    /// the total is over the limit.
    [[nodiscard]] bool over_share(std::uint64_t mine) const noexcept {
        if (mine == 0 || used() <= limit_) {
            return false;
        }
        return mine > limit_ / std::max<std::uint64_t>(holders(), 1);
    }

private:
    std::uint64_t limit_;
    std::atomic<std::uint64_t> bytes_{0};
    std::atomic<std::uint64_t> holders_{0};
};

} // namespace petrel::detail
