// Petrel: at most one log line a period for one kind of event a peer can cause.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace petrel::detail {

/// Decides which of a stream of warnings a peer can cause (refused connections, refused
/// requests) reach the log: the first, then at most one a `period`, each saying how many
/// were left out since the line before. So that a peer that repeats itself cannot fill
/// the log, yet no kind of event goes unseen. A value: the caller supplies the time and
/// guards it as it guards its other state.
class log_throttle {
public:
    using clock = std::chrono::steady_clock;

    explicit log_throttle(clock::duration period = std::chrono::seconds(1)) noexcept
        : period_(period) {}

    /// The line to log for `text` at `now`, or an empty string when a line was logged
    /// less than a period ago (the event is counted for the next line).
    [[nodiscard]] std::string line(std::string text, clock::time_point now) {
        if (logged_ && now - last_ < period_) {
            ++left_out_;
            return {};
        }
        if (left_out_ > 0) {
            text += " (and " + std::to_string(left_out_) + " more since the last line)";
        }
        logged_ = true;
        last_ = now;
        left_out_ = 0;
        return text;
    }

    /// Events counted since the last line, not logged yet.
    [[nodiscard]] std::size_t left_out() const noexcept { return left_out_; }

private:
    clock::duration period_;
    clock::time_point last_{};
    bool logged_ = false;
    std::size_t left_out_ = 0;
};

} // namespace petrel::detail
