// Petrel: asynchronous tasks with dependencies (`task`, `when_all`, `after`, `use_task`).
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/completion.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/system_executor.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel {

template <typename T = void>
class task;

template <typename T = void>
class task_completer;

namespace detail {

/// What a `task<void>` stores as its value: nothing.
struct no_value {};

template <typename T>
using task_value_t = std::conditional_t<std::is_void_v<T>, no_value, T>;

/// The completion signature of waiting on a `task<T>`.
template <typename T>
struct task_signature {
    using type = void(std::error_code, T);
};

template <>
struct task_signature<void> {
    using type = void(std::error_code);
};

/// The shared state of a task: its result once complete, and the continuations that wait
/// for it. Continuations run once, on the completing thread, outside the lock.
template <typename T>
class task_state {
public:
    using value_type = task_value_t<T>;
    using continuation = std::function<void(const std::error_code&, const value_type&)>;

    task_state() = default;
    explicit task_state(asio::any_io_executor ex) : executor_(std::move(ex)) {}

    task_state(const task_state&) = delete;
    task_state& operator=(const task_state&) = delete;

    /// The executor given to `make_task`, if any (never changes).
    const std::optional<asio::any_io_executor>& executor() const noexcept { return executor_; }

    bool ready() const {
        std::lock_guard lock(mutex_);
        return done_;
    }

    std::error_code error() const {
        std::lock_guard lock(mutex_);
        return done_ ? ec_ : std::error_code{};
    }

    /// The result: only once `ready()` returned true (it never changes from then on).
    const std::error_code& result_error() const noexcept { return ec_; }
    const value_type& result_value() const noexcept { return value_; }

    /// A fresh continuation id (never 0).
    std::uint64_t new_id() noexcept { return next_id_.fetch_add(1, std::memory_order_relaxed); }

    /// Stores `c` under `id` and returns true; returns false without touching `c` when the
    /// task is already complete.
    bool add(std::uint64_t id, continuation& c) {
        std::lock_guard lock(mutex_);
        if (done_) {
            return false;
        }
        continuations_.emplace(id, std::move(c));
        return true;
    }

    /// Stores `c`, or runs it inline at once when the task is already complete.
    void add_or_run(continuation c) {
        if (!add(new_id(), c)) {
            run(c);
        }
    }

    /// Drops the continuation `id` if it has not run yet.
    void remove(std::uint64_t id) {
        continuation dropped; // destroyed outside the lock
        std::lock_guard lock(mutex_);
        if (auto it = continuations_.find(id); it != continuations_.end()) {
            dropped = std::move(it->second);
            continuations_.erase(it);
        }
    }

    /// Sets the result (the value only on success) and runs the continuations in the order
    /// they were added; returns false, doing nothing, when already complete.
    bool complete(const std::error_code& ec, value_type&& value) {
        std::map<std::uint64_t, continuation> waiting;
        {
            std::lock_guard lock(mutex_);
            if (done_) {
                return false;
            }
            if (!ec) {
                value_ = std::move(value);
            }
            ec_ = ec;
            done_ = true;
            waiting.swap(continuations_);
        }
        for (auto& entry : waiting) {
            run(entry.second);
        }
        return true;
    }

    /// Completers alive; the last one to go completes the task with `errc::shut_down`.
    void retain() noexcept { completers_.fetch_add(1, std::memory_order_relaxed); }
    void release() {
        if (completers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            complete(make_error_code(errc::shut_down), value_type{});
        }
    }

private:
    /// Runs a continuation with the (immutable) result; a continuation must not throw, and
    /// an exception is dropped so that the others still run.
    void run(continuation& c) const noexcept {
        try {
            c(ec_, value_);
        } catch (...) {
        }
    }

    const std::optional<asio::any_io_executor> executor_{};
    mutable std::mutex mutex_;
    bool done_ = false;
    std::error_code ec_;
    value_type value_{};
    std::map<std::uint64_t, continuation> continuations_;
    std::atomic<std::uint64_t> next_id_{1};
    std::atomic<std::size_t> completers_{0};
};

/// Builds tasks and completers from states, and reads a task's state.
struct task_access {
    template <typename T>
    static const std::shared_ptr<task_state<T>>& state(const task<T>& t) noexcept {
        return t.state_;
    }

    template <typename T>
    static task<T> make_task(std::shared_ptr<task_state<T>> s) noexcept {
        return task<T>(std::move(s));
    }

    template <typename T>
    static task_completer<T> make_completer(std::shared_ptr<task_state<T>> s) noexcept {
        return task_completer<T>(std::move(s));
    }
};

/// Hands a result to a waiter's completion: on its executor, never inline when `post`.
template <typename T, typename Completion>
void deliver(Completion&& c, bool post, const std::error_code& ec, const task_value_t<T>& v) {
    if constexpr (std::is_void_v<T>) {
        if (post) {
            std::move(c).post(ec);
        } else {
            std::move(c).dispatch(ec);
        }
    } else if (post) {
        std::move(c).post(ec, v); // each waiter gets its own copy of the value
    } else {
        std::move(c).dispatch(ec, v);
    }
}

/// One `async_wait`: completed once, by the task or by cancellation, whichever comes first.
template <typename T, typename Handler>
class task_wait_op {
public:
    using completion_type = completion<Handler, asio::any_io_executor>;

    task_wait_op(Handler handler, const asio::any_io_executor& fallback)
        : completion_(std::in_place, std::move(handler), fallback) {}

    /// Completes the wait unless it already was; returns whether this call did.
    bool finish(bool post, const std::error_code& ec, const task_value_t<T>& v) {
        if (fired_.exchange(true, std::memory_order_acq_rel)) {
            return false;
        }
        completion_type c = std::move(*completion_);
        completion_.reset();
        try {
            deliver<T>(std::move(c), post, ec, v);
        } catch (...) {
            // Out of memory for the handler's queue entry: nothing more can be done.
        }
        return true;
    }

private:
    std::atomic<bool> fired_{false};
    std::optional<completion_type> completion_;
};

/// Installed in a waiter's cancellation slot. Holds only weak references: a late emit, or
/// one after the wait completed, does nothing, and no cycle through the handler forms.
template <typename T, typename Handler>
struct task_wait_canceller {
    std::weak_ptr<task_wait_op<T, Handler>> op;
    std::weak_ptr<task_state<T>> state;
    std::uint64_t id = 0;

    void operator()(asio::cancellation_type type) const {
        if (type == asio::cancellation_type::none) {
            return;
        }
        auto o = op.lock();
        if (!o || !o->finish(true, asio::error::operation_aborted, task_value_t<T>{})) {
            return;
        }
        if (auto s = state.lock()) {
            s->remove(id); // the task no longer needs to call this waiter
        }
    }
};

template <typename T, typename Handler>
void start_task_wait(Handler handler, const std::shared_ptr<task_state<T>>& s) {
    using value_type = task_value_t<T>;
    const asio::any_io_executor system{asio::system_executor()};
    if (!s) {
        completion<Handler, asio::any_io_executor> c(std::move(handler), system);
        deliver<T>(std::move(c), true, make_error_code(errc::invalid_argument), value_type{});
        return;
    }
    const asio::any_io_executor& fallback = s->executor() ? *s->executor() : system;
    if (s->ready()) {
        completion<Handler, asio::any_io_executor> c(std::move(handler), fallback);
        deliver<T>(std::move(c), true, s->result_error(), s->result_value());
        return;
    }
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto op = std::make_shared<task_wait_op<T, Handler>>(std::move(handler), fallback);
    const std::uint64_t id = s->new_id();
    // The slot is set up before the wait becomes visible to a completing thread, which
    // never touches the slot (that would race with the emitter).
    if (slot.is_connected()) {
        slot.assign(task_wait_canceller<T, Handler>{op, s, id});
    }
    typename task_state<T>::continuation c = [op](const std::error_code& ec, const value_type& v) {
        op->finish(false, ec, v);
    };
    if (!s->add(id, c)) {
        op->finish(true, s->result_error(), s->result_value()); // completed meanwhile
    }
}

/// The initiation of `task<T>::async_wait`.
template <typename T>
struct initiate_task_wait {
    template <typename Handler>
    void operator()(Handler&& handler, std::shared_ptr<task_state<T>> s) const {
        start_task_wait<T>(std::decay_t<Handler>(std::forward<Handler>(handler)), s);
    }
};

} // namespace detail

/// The handle to an asynchronous operation that completes once, with a `std::error_code`
/// and, unless `T` is void, a value of type `T`.
///
/// A task is a copyable handle to shared state: copies refer to the same operation. It is
/// completed through its `task_completer` (see `make_task`), or made by any Asio operation
/// called with the completion token `petrel::use_task`. Tasks combine with `when_all`
/// (every one completed) and `after` (start work once dependencies succeeded), the task
/// model of a parameter server: a push or pull returns at once and later work names the
/// operations it depends on.
///
/// `async_wait` takes any Asio completion token: a callback, `asio::use_future`,
/// `asio::use_awaitable`... Any number of waiters may wait, before or after completion;
/// each gets the error and its own copy of the value (a default-constructed `T` on error).
/// A waiter's handler runs on its associated executor, else on the executor given to
/// `make_task`, else on `asio::system_executor`; it never runs inside `async_wait`. A wait
/// whose handler has a connected cancellation slot completes with
/// `asio::error::operation_aborted` when cancellation (of any type) is emitted before the
/// task completed; the task and its other waiters are not affected.
///
/// `T` must be default-constructible and copyable (e.g. `kv_pairs<Key, Value>`).
///
/// @par Example
/// @code
/// auto [t, done] = petrel::make_task<int>(io.get_executor());
/// t.async_wait([](std::error_code ec, int v) { std::cout << ec.message() << v << '\n'; });
/// done.complete({}, 42);                               // the callback runs on io
/// int v = co_await t.async_wait(asio::use_awaitable);  // 42, or throws on error
/// petrel::task<> p = kv.push(keys, grad, petrel::use_task);
/// auto w = petrel::after(p, [&] { return kv.pull(keys, petrel::use_task); });
/// @endcode
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: const member functions are safe; a task may be
/// completed on one thread while others wait on it or copy it.
template <typename T>
class task {
    static_assert(!std::is_reference_v<T>, "petrel::task: T must not be a reference");
    static_assert(std::is_void_v<T> ||
                      (std::is_default_constructible_v<T> && std::is_copy_constructible_v<T>),
                  "petrel::task: T must be default-constructible and copyable");

public:
    using value_type = T;
    /// The completion signature of `async_wait`.
    using signature = typename detail::task_signature<T>::type;

    /// An invalid task: waiting on it completes with `errc::invalid_argument`.
    task() noexcept = default;

    /// Whether this handle refers to an operation.
    bool valid() const noexcept { return state_ != nullptr; }

    /// Whether the operation has completed (false for an invalid task).
    bool ready() const { return state_ && state_->ready(); }

    /// The operation's error once `ready()`; an empty error code before (or when invalid).
    std::error_code error() const { return state_ ? state_->error() : std::error_code{}; }

    /// Waits for completion: `void(std::error_code)` for `task<void>`, otherwise
    /// `void(std::error_code, T)`. Completes with `errc::invalid_argument` when invalid,
    /// with `asio::error::operation_aborted` when the handler's cancellation slot is
    /// emitted first.
    template <typename CompletionToken>
    auto async_wait(CompletionToken&& token) const {
        return asio::async_initiate<CompletionToken, signature>(detail::initiate_task_wait<T>{},
                                                                token, state_);
    }

    /// Runs `f(error)` once the operation completes: inline on the completing thread, or
    /// inline at once when already complete (with `errc::invalid_argument` when invalid).
    /// A building block for combinators: `f` must not block and must not throw (an
    /// exception is dropped). Prefer `async_wait` elsewhere.
    void on_complete(std::function<void(std::error_code)> f) const {
        if (!f) {
            return;
        }
        if (!state_) {
            f(make_error_code(errc::invalid_argument));
            return;
        }
        state_->add_or_run([f = std::move(f)](const std::error_code& ec,
                                              const detail::task_value_t<T>&) { f(ec); });
    }

private:
    friend struct detail::task_access;

    explicit task(std::shared_ptr<detail::task_state<T>> s) noexcept : state_(std::move(s)) {}

    std::shared_ptr<detail::task_state<T>> state_;
};

/// Completes a `task<T>`: the first `complete` call sets the result, later ones are ignored.
///
/// Copies complete the same task. When the last copy is destroyed before any completed
/// it, the task completes with `errc::shut_down` (as when an io_context is destroyed with
/// the operation of a `use_task` call still pending), so waiters are never left hanging.
/// Continuations and `dispatch`ed waiters run inside `complete` (or that destructor).
///
/// @par Example
/// @code
/// auto [t, done] = petrel::make_task<std::vector<double>>();
/// std::thread([done] { done.complete({}, std::vector<double>{1.0, 2.0}); }).detach();
/// auto values = t.async_wait(asio::use_future).get();
/// @endcode
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: `complete` may be called concurrently.
template <typename T>
class task_completer {
public:
    /// A completer of no task: `complete` does nothing.
    task_completer() noexcept = default;

    task_completer(const task_completer& other) noexcept : state_(other.state_) {
        if (state_) {
            state_->retain();
        }
    }

    task_completer(task_completer&& other) noexcept : state_(std::move(other.state_)) {}

    task_completer& operator=(task_completer other) noexcept {
        std::swap(state_, other.state_);
        return *this;
    }

    ~task_completer() {
        if (state_) {
            state_->release();
        }
    }

    /// Whether this completer refers to a task.
    bool valid() const noexcept { return state_ != nullptr; }

    /// Completes a `task<void>`; returns whether this call did (false once complete).
    template <typename U = T>
    requires std::is_void_v<U>
    bool complete(std::error_code ec = {}) const {
        auto s = state_; // a continuation may reassign this completer
        return s && s->complete(ec, detail::no_value{});
    }

    /// Completes a `task<T>` with `value` (dropped on error: waiters then get `T{}`);
    /// returns whether this call did (false once complete).
    template <typename U = T>
    requires std::negation_v<std::is_void<U>>
    bool complete(std::error_code ec, std::type_identity_t<U> value) const {
        auto s = state_;
        return s && s->complete(ec, std::move(value));
    }

private:
    friend struct detail::task_access;

    explicit task_completer(std::shared_ptr<detail::task_state<T>> s) noexcept
        : state_(std::move(s)) {
        if (state_) {
            state_->retain();
        }
    }

    std::shared_ptr<detail::task_state<T>> state_;
};

/// A new task and its completer; waiters without an executor of their own run on
/// `asio::system_executor`.
///
/// @par Example
/// @code
/// auto [t, done] = petrel::make_task();
/// done.complete();
/// @endcode
///
/// @par Thread Safety
/// Safe.
template <typename T = void>
[[nodiscard]] std::pair<task<T>, task_completer<T>> make_task() {
    auto s = std::make_shared<detail::task_state<T>>();
    return {detail::task_access::make_task(s), detail::task_access::make_completer(s)};
}

/// A new task and its completer; waiters without an executor of their own run on `ex`.
///
/// @par Example
/// @code
/// auto [t, done] = petrel::make_task<int>(io.get_executor());
/// @endcode
///
/// @par Thread Safety
/// Safe.
template <typename T = void, typename Executor = asio::any_io_executor>
requires std::is_constructible_v<asio::any_io_executor, const Executor&>
[[nodiscard]] std::pair<task<T>, task_completer<T>> make_task(const Executor& ex) {
    auto s = std::make_shared<detail::task_state<T>>(asio::any_io_executor(ex));
    return {detail::task_access::make_task(s), detail::task_access::make_completer(s)};
}

namespace detail {

/// Completes `c` with the error `ec` (and a default value).
template <typename U>
void fail(const task_completer<U>& c, const std::error_code& ec) {
    if constexpr (std::is_void_v<U>) {
        c.complete(ec);
    } else {
        c.complete(ec, U{});
    }
}

/// A task that is already complete with `ec`.
inline task<void> completed_task(const std::error_code& ec = {}) {
    auto [t, c] = make_task<void>();
    c.complete(ec);
    return t;
}

/// Counts the tasks of a `when_all` down, keeping the error of the first failed one in
/// argument order.
class when_all_state {
public:
    when_all_state(std::size_t count, task_completer<void> c)
        : remaining_(count), completer_(std::move(c)) {}

    void done(std::size_t index, const std::error_code& ec) {
        std::error_code result;
        {
            std::lock_guard lock(mutex_);
            if (ec && index < first_failed_) {
                first_failed_ = index;
                error_ = ec;
            }
            if (--remaining_ != 0) {
                return;
            }
            result = error_;
        }
        completer_.complete(result);
    }

private:
    std::mutex mutex_;
    std::size_t remaining_;
    std::size_t first_failed_ = std::numeric_limits<std::size_t>::max();
    std::error_code error_;
    task_completer<void> completer_;
};

/// The value type of the task that `after` returns for a function returning `R`.
template <typename R>
struct after_value {
    static_assert(std::is_void_v<R>, "petrel::after: f must return void or a petrel::task");
    using type = void;
};

template <typename U>
struct after_value<task<U>> {
    using type = U;
};

template <typename F>
using after_value_t = typename after_value<std::decay_t<std::invoke_result_t<F>>>::type;

/// Completes `c` as `inner` completes, with its error and value.
template <typename U>
void forward_task(const task<U>& inner, const task_completer<U>& c) {
    const auto& s = task_access::state(inner);
    if (!s) {
        fail(c, make_error_code(errc::invalid_argument));
        return;
    }
    s->add_or_run([c](const std::error_code& ec, const task_value_t<U>& v) {
        if constexpr (std::is_void_v<U>) {
            c.complete(ec);
        } else {
            c.complete(ec, v);
        }
    });
}

/// Calls `f` once its dependencies succeeded and completes `c` as its work completes.
template <typename U, typename F>
void run_after(F& f, const task_completer<U>& c) noexcept {
    using result = std::invoke_result_t<F>;
    try {
        if constexpr (std::is_void_v<result>) {
            std::invoke(std::move(f));
            c.complete();
        } else {
            forward_task<U>(std::invoke(std::move(f)), c);
        }
    } catch (...) {
        fail(c, make_error_code(errc::handler_failed));
    }
}

} // namespace detail

/// A task that completes once every argument has completed: with the error of the first
/// failed argument in argument order (not the first to fail in time), or with success.
/// The arguments may be tasks of any value type; only their errors count. An invalid
/// argument counts as failed with `errc::invalid_argument`. With no arguments the result
/// is already complete.
///
/// @par Example
/// @code
/// auto all = petrel::when_all(kv.push(k1, g1, petrel::use_task),
///                             kv.pull(k2, petrel::use_task));
/// all.async_wait(asio::use_future).get();
/// @endcode
///
/// @par Thread Safety
/// Safe; the arguments may complete concurrently on any threads.
template <typename... Ts>
[[nodiscard]] task<void> when_all(const task<Ts>&... tasks) {
    if constexpr (sizeof...(Ts) == 0) {
        return detail::completed_task();
    } else {
        auto [t, c] = make_task<void>();
        auto s = std::make_shared<detail::when_all_state>(sizeof...(Ts), std::move(c));
        std::size_t index = 0;
        (tasks.on_complete([s, i = index++](std::error_code ec) { s->done(i, ec); }), ...);
        return t;
    }
}

/// `when_all` over a vector: the first failed task in vector order decides the error; an
/// empty vector gives a task that is already complete with success.
///
/// @par Example
/// @code
/// std::vector<petrel::task<>> pushes;
/// for (auto& [keys, grad] : shards) pushes.push_back(kv.push(keys, grad, petrel::use_task));
/// petrel::when_all(pushes).async_wait(asio::use_future).get();
/// @endcode
///
/// @par Thread Safety
/// Safe; the tasks may complete concurrently on any threads.
template <typename T>
[[nodiscard]] task<void> when_all(const std::vector<task<T>>& tasks) {
    if (tasks.empty()) {
        return detail::completed_task();
    }
    auto [t, c] = make_task<void>();
    auto s = std::make_shared<detail::when_all_state>(tasks.size(), std::move(c));
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        tasks[i].on_complete([s, i](std::error_code ec) { s->done(i, ec); });
    }
    return t;
}

/// Starts `f` once `dep` has completed successfully, and returns at once a task that
/// completes as the work of `f` completes.
///
/// `f` is a nullary callable returning a `task<U>` (e.g. an operation called with
/// `petrel::use_task`) or void; the result is a `task<U>` (`task<void>` for void, which
/// completes as soon as `f` returns). If `dep` fails, `f` is not called and the result
/// fails with the same error. If `f` throws, the result completes with
/// `errc::handler_failed`; if it returns an invalid task, with `errc::invalid_argument`.
///
/// `f` runs on the thread that completed `dep`, or inline inside `after` when `dep` is
/// already complete: it must not block (post heavy work to an executor).
///
/// @par Example
/// @code
/// auto pushed = kv.push(keys, grad, petrel::use_task);
/// petrel::task<petrel::kv_pairs<std::uint64_t, float>> w =
///     petrel::after(pushed, [&] { return kv.pull(keys, petrel::use_task); });
/// @endcode
///
/// @par Thread Safety
/// Safe; `dep` may complete concurrently on any thread.
template <typename T, typename F>
[[nodiscard]] task<detail::after_value_t<std::decay_t<F>>> after(const task<T>& dep, F&& f) {
    using U = detail::after_value_t<std::decay_t<F>>;
    auto [t, c] = make_task<U>();
    auto fn = std::make_shared<std::decay_t<F>>(std::forward<F>(f));
    dep.on_complete([c = std::move(c), fn](std::error_code ec) {
        if (ec) {
            detail::fail(c, ec);
        } else {
            detail::run_after<U>(*fn, c);
        }
    });
    return t;
}

/// `after(when_all(deps), f)`: starts `f` once every task of `deps` succeeded; the first
/// failed one in vector order gives the error otherwise. `f` runs on the thread that
/// completed the last of them, or inline when all are already complete.
///
/// @par Example
/// @code
/// std::vector<petrel::task<>> pushes = push_all(kv, shards);
/// auto w = petrel::after(pushes, [&] { return kv.pull(keys, petrel::use_task); });
/// @endcode
///
/// @par Thread Safety
/// Safe; the tasks may complete concurrently on any threads.
template <typename T, typename F>
[[nodiscard]] task<detail::after_value_t<std::decay_t<F>>> after(const std::vector<task<T>>& deps,
                                                                 F&& f) {
    return after(when_all(deps), std::forward<F>(f));
}

/// The type of the completion token `use_task`.
struct use_task_t {
    constexpr use_task_t() noexcept = default;
};

/// A completion token that makes an Asio operation return a task: an operation with the
/// signature `void(std::error_code)` returns a `task<void>`, one with
/// `void(std::error_code, T)` a `task<T>`. The task is returned at once; the operation's
/// completion (on the operation's own executor) completes it. If the operation is
/// destroyed without completing (its io_context was destroyed first), the task completes
/// with `errc::shut_down`.
///
/// @par Example
/// @code
/// asio::steady_timer timer(io, std::chrono::milliseconds(10));
/// petrel::task<> t = timer.async_wait(petrel::use_task);
/// petrel::task<petrel::kv_pairs<std::uint64_t, float>> w = kv.pull(keys, petrel::use_task);
/// @endcode
///
/// @par Thread Safety
/// Safe.
inline constexpr use_task_t use_task{};

namespace detail {

/// The completion handler behind `use_task`: completes the task with the operation's
/// arguments.
template <typename T>
class task_handler {
public:
    explicit task_handler(task_completer<T> c) noexcept : completer_(std::move(c)) {}

    template <typename... Args>
    void operator()(std::error_code ec, Args&&... args) {
        completer_.complete(ec, std::forward<Args>(args)...);
    }

private:
    task_completer<T> completer_;
};

template <typename T, typename Initiation, typename... Args>
task<T> initiate_as_task(Initiation&& initiation, Args&&... args) {
    auto [t, c] = make_task<T>();
    std::move(initiation)(task_handler<T>(std::move(c)), std::forward<Args>(args)...);
    return t;
}

} // namespace detail

} // namespace petrel

namespace asio {

/// `petrel::use_task` for operations that complete with an error code only.
template <>
class async_result<petrel::use_task_t, void(std::error_code)> {
public:
    using return_type = petrel::task<void>;

    template <typename Initiation, typename... Args>
    static return_type initiate(Initiation&& initiation, petrel::use_task_t, Args&&... args) {
        return petrel::detail::initiate_as_task<void>(std::forward<Initiation>(initiation),
                                                      std::forward<Args>(args)...);
    }
};

/// `petrel::use_task` for operations that complete with an error code and a value.
template <typename T>
class async_result<petrel::use_task_t, void(std::error_code, T)> {
public:
    using return_type = petrel::task<std::decay_t<T>>;

    template <typename Initiation, typename... Args>
    static return_type initiate(Initiation&& initiation, petrel::use_task_t, Args&&... args) {
        return petrel::detail::initiate_as_task<std::decay_t<T>>(
            std::forward<Initiation>(initiation), std::forward<Args>(args)...);
    }
};

} // namespace asio
