// Petrel: callbacks told, on an executor, when a value changes.
#pragma once

// Standard headers before Asio's: Asio configures itself from the standard library's
// macros (see <petrel/client/detail/fan_in.hpp>).
#include <cstddef>
#include <functional>
#include <map>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

namespace petrel::detail {

/// Callbacks that are told when a value of type `Status` changes: `note` compares the value
/// with the one it last recorded and, when they differ, posts a call of every callback on
/// an executor, so that they run after the caller's locks are released. A call says only
/// "look again": callbacks read the values anew. Its owner guards it with its lock.
template <typename Status>
class change_watch {
public:
    /// Adds a callback; returns a handle for `remove`.
    std::size_t add(std::function<void()> cb) {
        callbacks_.emplace(++next_, std::move(cb));
        return next_;
    }

    /// Removes a callback (a call already posted may still come).
    void remove(std::size_t handle) { callbacks_.erase(handle); }

    /// Records `now`; when it differs from the value recorded last, posts a call of every
    /// callback on `ex` and returns true.
    bool note(const Status& now, const asio::any_io_executor& ex) {
        if (now == told_) {
            return false;
        }
        told_ = now;
        for (const auto& [handle, cb] : callbacks_) {
            asio::post(ex, cb);
        }
        return true;
    }

private:
    Status told_{};
    std::map<std::size_t, std::function<void()>> callbacks_;
    std::size_t next_ = 0;
};

} // namespace petrel::detail
