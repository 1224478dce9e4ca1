// Petrel: one completion for the parts of an operation that arrive separately.
#pragma once

// The standard headers come first: Asio configures itself (aligned allocation among
// others) from the standard library's macros, so a translation unit that starts with this
// header must have them defined, as every other one does, or its inline Asio functions
// differ from theirs.
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>

namespace petrel::detail {

/// Counts the arrivals of the parts of one operation (the slices of a push, a pull or a
/// call, the pieces of a request sent again) and decides who completes it.
///
/// It is made for `expected` arrivals. Each part calls `arrive` once with its outcome,
/// and the first error in time is kept. The completion is handed out exactly once:
/// `claim` returns true for one caller only, who then completes the operation outside
/// the fan-in's lock. That caller is the last arrival, or one that fails the operation
/// before its parts were sent, or `cancel`, whichever claims first. Arrivals do not
/// complete anything by themselves: a part that fails early is only recorded, and the
/// operation completes when the last part has arrived.
///
/// Once the completion was handed out the fan-in is no longer live. Parts that arrive
/// later are still counted, so that the last one is known (a push's clock dependency
/// settles only then, even after a cancel), but they must not touch the caller's
/// memory: `if_live` runs code under the fan-in's lock only while it is live, so a copy
/// into the caller's buffer made through it never overlaps the completion.
///
/// @par Thread Safety
/// Safe; parts may arrive concurrently on any threads. The lock is a leaf lock: `if_live`
/// must not take another lock or run a completion.
class fan_in {
public:
    /// A fan-in waiting for `expected` arrivals. Throws `std::invalid_argument` when
    /// `expected` is 0 (there would be no last arrival to complete the operation).
    explicit fan_in(std::size_t expected) : remaining_(expected) {
        if (expected == 0) {
            throw std::invalid_argument("petrel: a fan-in needs at least one arrival");
        }
    }

    fan_in(const fan_in&) = delete;
    fan_in& operator=(const fan_in&) = delete;

    /// Records one part's outcome (kept when it is the first error); returns true for the
    /// last expected part, once. An arrival beyond `expected` is a caller's bug: it is
    /// ignored and returns false.
    bool arrive(std::error_code ec) {
        std::lock_guard lock(mutex_);
        if (remaining_ == 0) {
            return false;
        }
        if (ec && !error_) {
            error_ = ec;
        }
        return --remaining_ == 0;
    }

    /// Hands out the completion: true for exactly one caller over the fan-in's life
    /// (`cancel` included), who must then complete the operation.
    [[nodiscard]] bool claim() {
        std::lock_guard lock(mutex_);
        return !std::exchange(claimed_, true);
    }

    /// Claims the completion for a cancellation: true when it was still live, and the
    /// caller must then complete the operation with `asio::error::operation_aborted`.
    /// After the completion was handed out this does nothing and returns false.
    [[nodiscard]] bool cancel() {
        std::lock_guard lock(mutex_);
        if (claimed_) {
            return false;
        }
        claimed_ = true;
        cancelled_ = true;
        return true;
    }

    /// Runs `f` under the fan-in's lock if the completion was not handed out yet; returns
    /// whether it ran. Writes to the caller's memory go through here.
    template <typename F>
    bool if_live(F&& f) {
        std::lock_guard lock(mutex_);
        if (claimed_) {
            return false;
        }
        std::forward<F>(f)();
        return true;
    }

    /// Whether the completion was not handed out yet (a hint only: use `if_live` to act
    /// on it).
    [[nodiscard]] bool live() const {
        std::lock_guard lock(mutex_);
        return !claimed_;
    }

    /// Whether `cancel` claimed the completion.
    [[nodiscard]] bool cancelled() const {
        std::lock_guard lock(mutex_);
        return cancelled_;
    }

    /// The first error that arrived (none when every part so far succeeded).
    [[nodiscard]] std::error_code error() const {
        std::lock_guard lock(mutex_);
        return error_;
    }

    /// The arrivals still expected.
    [[nodiscard]] std::size_t remaining() const {
        std::lock_guard lock(mutex_);
        return remaining_;
    }

private:
    mutable std::mutex mutex_; // leaf lock: guards the members below
    std::size_t remaining_;
    std::error_code error_;
    bool claimed_ = false;
    bool cancelled_ = false;
};

/// A `fan_in` that holds the completion it hands out: a `detail::completion`, or anything
/// else called as `std::move(c).dispatch(args...)`.
template <typename Completion>
class fan_in_with : public fan_in {
public:
    fan_in_with(Completion c, std::size_t expected) : fan_in(expected), done_(std::move(c)) {}

    /// The completion, for the one caller that completes the operation (see
    /// `fan_in::claim`); empty for every other caller and after a cancel.
    [[nodiscard]] std::optional<Completion> take() {
        if (!claim()) {
            return std::nullopt;
        }
        std::optional<Completion> out(std::move(*done_)); // only the claimer touches done_
        done_.reset();
        return out;
    }

    /// Cancels: dispatches the completion with `asio::error::operation_aborted` and
    /// `empty...` unless it was already handed out.
    template <typename... Empty>
    void abort(Empty&&... empty) {
        if (!cancel()) {
            return;
        }
        auto d = std::move(*done_);
        done_.reset();
        std::move(d).dispatch(make_error_code(asio::error::operation_aborted),
                              std::forward<Empty>(empty)...);
    }

private:
    std::optional<Completion> done_;
};

/// Makes an emitted cancellation of `slot` abort `state` (a `fan_in_with`): the operation
/// completes with `asio::error::operation_aborted` and `empty...` as its other arguments.
/// The requests already sent are not recalled (a cancelled push may still be applied).
/// The slot holds `state` weakly. Does nothing when `slot` is not connected.
template <typename Slot, typename State, typename... Empty>
void abort_on_cancel(Slot slot, const std::shared_ptr<State>& state, Empty... empty) {
    if (!slot.is_connected()) {
        return;
    }
    std::weak_ptr<State> weak = state;
    slot.assign([weak, empty...](asio::cancellation_type) {
        if (auto st = weak.lock()) {
            st->abort(empty...);
        }
    });
}

} // namespace petrel::detail
