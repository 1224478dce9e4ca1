// Petrel: the parts of one request run on several threads of an executor at once.
#pragma once

// Standard headers before Asio's: Asio configures itself from the standard library's
// macros (see <petrel/client/detail/fan_in.hpp>).
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

namespace petrel::detail {

/// Calls `f(i)` once for every `i` in [0, n) and returns when every call has returned.
/// The calling thread takes part, and up to `helpers` calls posted to `executor` take
/// the parts no one has taken yet: a part is claimed by whoever comes first, so the caller
/// waits only for parts already running on another thread, never for a helper that has not
/// started. It returns even when every other thread of the executor is busy (the caller
/// then runs every part), and a helper that starts late finds nothing left and returns at
/// once without touching `f`. `f` must not throw.
///
/// Whatever the caller holds (a shared lock, say) covers the parts the helpers run: they
/// all end before this returns.
inline void run_parts(const asio::any_io_executor& executor, std::size_t n, std::size_t helpers,
                      const std::function<void(std::size_t)>& f) {
    if (n <= 1 || helpers == 0 || !executor) {
        for (std::size_t i = 0; i < n; ++i) {
            f(i);
        }
        return;
    }
    struct shared {
        const std::function<void(std::size_t)>* f; // valid while a part is unclaimed or running
        std::size_t n;
        std::atomic<std::size_t> next{0};
        std::mutex mutex;
        std::condition_variable all_done;
        std::size_t done = 0; // under `mutex`
    };
    auto s = std::make_shared<shared>();
    s->f = &f;
    s->n = n;
    auto work = [](shared& st) {
        std::size_t ran = 0;
        for (std::size_t i = st.next.fetch_add(1); i < st.n; i = st.next.fetch_add(1)) {
            (*st.f)(i);
            ++ran;
        }
        if (ran == 0) {
            return;
        }
        std::lock_guard lock(st.mutex);
        st.done += ran;
        if (st.done == st.n) {
            st.all_done.notify_all();
        }
    };
    const std::size_t posted = helpers < n - 1 ? helpers : n - 1;
    for (std::size_t h = 0; h < posted; ++h) {
        try {
            asio::post(executor, [s, work] { work(*s); });
        } catch (...) {
            break; // no memory to post: the caller runs the parts left
        }
    }
    work(*s);
    std::unique_lock lock(s->mutex);
    s->all_done.wait(lock, [&] { return s->done == s->n; });
}

} // namespace petrel::detail
