// Petrel: delivering a completion to a handler on its own executor.
#pragma once

// Standard headers before Asio's: Asio configures itself from the standard library's
// macros (see <petrel/client/detail/fan_in.hpp>).
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>

namespace petrel::detail {

/// A completion handler together with outstanding work on its associated executor, so
/// that the executor stays alive until the handler ran there.
template <typename Handler, typename DefaultExecutor>
class completion {
public:
    using executor_type = asio::associated_executor_t<Handler, DefaultExecutor>;

    completion(Handler handler, const DefaultExecutor& fallback)
        : work_(asio::get_associated_executor(handler, fallback)), handler_(std::move(handler)) {}

    /// Runs the handler with `args` on its executor: inline when already there.
    template <typename... Args>
    void dispatch(Args&&... args) && {
        auto ex = work_.get_executor();
        asio::dispatch(ex, std::move(*this).bind(std::forward<Args>(args)...));
    }

    /// Runs the handler with `args` on its executor, never inline (for completions that
    /// happen inside the initiating call).
    template <typename... Args>
    void post(Args&&... args) && {
        auto ex = work_.get_executor();
        asio::post(ex, std::move(*this).bind(std::forward<Args>(args)...));
    }

private:
    /// The handler, its arguments and the work guard as one nullary function.
    template <typename... Args>
    auto bind(Args&&... args) && {
        return [h = std::move(handler_), work = std::move(work_),
                a = std::make_tuple(std::forward<Args>(args)...)]() mutable {
            std::apply(std::move(h), std::move(a));
        };
    }

    asio::executor_work_guard<executor_type> work_;
    Handler handler_;
};

template <typename Handler, typename DefaultExecutor>
completion(Handler, const DefaultExecutor&) -> completion<Handler, DefaultExecutor>;

/// A completion handler as a copyable function that dispatches it on its executor; the
/// first call wins, later calls do nothing (for handlers kept in containers).
template <typename... Args, typename Handler, typename DefaultExecutor>
[[nodiscard]] std::function<void(Args...)> once_function(Handler handler,
                                                         const DefaultExecutor& fallback) {
    using completion_type = completion<Handler, DefaultExecutor>;
    struct holder {
        std::mutex mutex;
        std::optional<completion_type> c;
    };
    auto h = std::make_shared<holder>();
    h->c.emplace(std::move(handler), fallback);
    return [h](Args... args) {
        std::optional<completion_type> c;
        {
            std::lock_guard lock(h->mutex);
            if (h->c) {
                c.emplace(std::move(*h->c));
                h->c.reset();
            }
        }
        if (c) {
            std::move(*c).dispatch(std::move(args)...);
        }
    };
}

} // namespace petrel::detail
