#include <petrel/consistency/task.hpp>

#include <catch2/catch.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;

namespace {

/// Long enough for anything that is going to happen; only guards against a hang.
constexpr auto hang_guard = 30s;

/// An io_context run by `n` threads until the object goes out of scope.
class draining_io {
public:
    explicit draining_io(std::size_t n = 1) : work_(asio::make_work_guard(io_)) {
        for (std::size_t i = 0; i < n; ++i) {
            threads_.emplace_back([this] { io_.run(); });
        }
    }

    draining_io(const draining_io&) = delete;
    draining_io& operator=(const draining_io&) = delete;

    ~draining_io() {
        work_.reset();
        for (auto& t : threads_) {
            t.join();
        }
    }

    asio::io_context& io() { return io_; }
    asio::io_context::executor_type executor() { return io_.get_executor(); }

private:
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
};

/// Waits for `f` (bounded by `hang_guard`) and returns its value.
template <typename T>
T get(std::future<T>& f) {
    REQUIRE(f.wait_for(hang_guard) == std::future_status::ready);
    return f.get();
}

/// The error code a task's wait completes with, waited for through a future.
template <typename T>
std::error_code wait_error(const petrel::task<T>& t) {
    std::promise<std::error_code> p;
    auto f = p.get_future();
    if constexpr (std::is_void_v<T>) {
        t.async_wait([&p](std::error_code ec) { p.set_value(ec); });
    } else {
        t.async_wait([&p](std::error_code ec, const T&) { p.set_value(ec); });
    }
    return get(f);
}

/// A hand-written asynchronous operation: completes with `value` on `ex`.
template <typename Token>
auto async_answer(asio::io_context::executor_type ex, int value, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, int)>(
        [ex](auto handler, int v) {
            asio::post(ex, [h = std::move(handler), v]() mutable { h(std::error_code{}, v); });
        },
        token, value);
}

/// A hand-written operation that fails with `ec`.
template <typename Token>
auto async_failure(asio::io_context::executor_type ex, std::error_code ec, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, int)>(
        [ex](auto handler, std::error_code e) {
            asio::post(ex, [h = std::move(handler), e]() mutable { h(e, 0); });
        },
        token, ec);
}

/// A hand-written operation whose handler is dropped without being called.
template <typename Token>
auto async_dropped(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>([](auto) {}, token);
}

} // namespace

TEST_CASE("a default-constructed task is invalid", "[consistency][task]") {
    petrel::task<> t;
    CHECK_FALSE(t.valid());
    CHECK_FALSE(t.ready());
    CHECK_FALSE(t.error());
    CHECK(wait_error(t) == errc::invalid_argument);
    CHECK(wait_error(petrel::task<int>{}) == errc::invalid_argument);

    std::error_code seen;
    t.on_complete([&](std::error_code ec) { seen = ec; });
    CHECK(seen == errc::invalid_argument);

    petrel::task_completer<> c;
    CHECK_FALSE(c.valid());
    CHECK_FALSE(c.complete());
}

TEST_CASE("make_task, complete and wait with use_future", "[consistency][task]") {
    auto [t, c] = petrel::make_task();
    CHECK(t.valid());
    CHECK(c.valid());
    CHECK_FALSE(t.ready());
    CHECK_FALSE(t.error());

    auto before = t.async_wait(asio::use_future);
    CHECK(before.wait_for(0s) == std::future_status::timeout);
    CHECK(c.complete());
    CHECK(t.ready());
    CHECK_FALSE(t.error());
    get(before);
    auto after = t.async_wait(asio::use_future);
    get(after);

    auto [failing, fc] = petrel::make_task();
    fc.complete(errc::timed_out);
    CHECK(failing.error() == errc::timed_out);
    auto f = failing.async_wait(asio::use_future);
    CHECK_THROWS_AS(get(f), std::system_error);
}

TEST_CASE("a callback runs on the executor it is bound to", "[consistency][task]") {
    draining_io io;
    auto [t, c] = petrel::make_task<int>();
    std::promise<std::pair<bool, int>> p;
    auto f = p.get_future();
    auto ex = io.executor();
    t.async_wait(asio::bind_executor(ex, [&p, ex](std::error_code ec, int v) {
        p.set_value({ex.running_in_this_thread() && !ec, v});
    }));
    std::thread([c = c] { c.complete({}, 7); }).join();
    auto [on_io, value] = get(f);
    CHECK(on_io);
    CHECK(value == 7);
}

TEST_CASE("waiters without an executor run on the task's executor", "[consistency][task]") {
    draining_io io;
    auto ex = io.executor();
    auto [t, c] = petrel::make_task<int>(ex);
    std::promise<bool> before_p;
    std::promise<bool> after_p;
    auto before = before_p.get_future();
    auto after = after_p.get_future();
    t.async_wait(
        [&before_p, ex](std::error_code, int) { before_p.set_value(ex.running_in_this_thread()); });
    c.complete({}, 1);
    t.async_wait(
        [&after_p, ex](std::error_code, int) { after_p.set_value(ex.running_in_this_thread()); });
    CHECK(get(before));
    CHECK(get(after));
}

TEST_CASE("a waiter added after completion never runs inside async_wait", "[consistency][task]") {
    asio::io_context io;
    auto [t, c] = petrel::make_task();
    c.complete();
    bool called = false;
    bool called_inside = true;
    // On the handler's own executor, where a dispatch would run it inline.
    asio::post(io, [&, t = t] {
        t.async_wait(asio::bind_executor(io, [&](std::error_code) { called = true; }));
        called_inside = called;
    });
    io.run();
    CHECK(called);
    CHECK_FALSE(called_inside);
}

TEST_CASE("co_await a task on an io_context", "[consistency][task]") {
    asio::io_context io;
    auto [t, c] = petrel::make_task<int>();
    auto [failing, fc] = petrel::make_task();
    std::optional<int> value;
    bool threw = false;
    asio::co_spawn(
        io,
        [&, t = t, failing = failing]() -> asio::awaitable<void> {
            value = co_await t.async_wait(asio::use_awaitable);
            try {
                co_await failing.async_wait(asio::use_awaitable);
            } catch (const std::system_error& e) {
                threw = e.code() == errc::node_failed;
            }
        },
        asio::detached);
    std::thread completer([c = c, fc = fc] {
        c.complete({}, 42);
        fc.complete(errc::node_failed);
    });
    io.run();
    completer.join();
    REQUIRE(value);
    CHECK(*value == 42);
    CHECK(threw);
}

TEST_CASE("waiters before and after completion all get the result", "[consistency][task]") {
    auto [t, c] = petrel::make_task<int>();
    std::vector<std::future<int>> before;
    for (int i = 0; i < 5; ++i) {
        before.push_back(t.async_wait(asio::use_future));
    }
    c.complete({}, 11);
    for (auto& f : before) {
        CHECK(get(f) == 11);
    }
    for (int i = 0; i < 5; ++i) {
        auto f = t.async_wait(asio::use_future);
        CHECK(get(f) == 11);
    }
}

TEST_CASE("only the first complete has an effect", "[consistency][task]") {
    auto [t, c] = petrel::make_task<int>();
    auto copy = c;
    CHECK(c.complete({}, 1));
    CHECK_FALSE(c.complete({}, 2));
    CHECK_FALSE(copy.complete(errc::timed_out, 3));
    CHECK_FALSE(t.error());
    auto f = t.async_wait(asio::use_future);
    CHECK(get(f) == 1);

    auto [v, vc] = petrel::make_task();
    CHECK(vc.complete(errc::shut_down));
    CHECK_FALSE(vc.complete());
    CHECK(v.error() == errc::shut_down);
}

TEST_CASE("values are copied to every waiter; errors give a default value", "[consistency][task]") {
    auto [t, c] = petrel::make_task<std::vector<int>>();
    auto f1 = t.async_wait(asio::use_future);
    std::promise<std::vector<int>> p;
    auto f2 = p.get_future();
    t.async_wait([&p](std::error_code, std::vector<int> v) {
        v.push_back(99); // a copy of its own
        p.set_value(std::move(v));
    });
    c.complete({}, {1, 2, 3});
    CHECK(get(f1) == std::vector<int>{1, 2, 3});
    CHECK(get(f2) == std::vector<int>{1, 2, 3, 99});
    auto f3 = t.async_wait(asio::use_future);
    CHECK(get(f3) == std::vector<int>{1, 2, 3});

    auto [e, ec] = petrel::make_task<std::vector<int>>();
    ec.complete(errc::timed_out, {4, 5});
    std::promise<std::pair<std::error_code, std::vector<int>>> pe;
    auto fe = pe.get_future();
    e.async_wait([&pe](std::error_code err, std::vector<int> v) { pe.set_value({err, v}); });
    auto [err, value] = get(fe);
    CHECK(err == errc::timed_out);
    CHECK(value.empty());
}

TEST_CASE("a task whose completers are all gone completes with shut_down", "[consistency][task]") {
    petrel::task<int> t;
    std::future<int> f;
    {
        auto [task, c] = petrel::make_task<int>();
        t = task;
        f = t.async_wait(asio::use_future);
        auto copy = c;
    }
    CHECK(t.error() == errc::shut_down);
    CHECK_THROWS_AS(get(f), std::system_error);

    // The handler of a use_task operation is destroyed without being called.
    auto dropped = async_dropped(petrel::use_task);
    CHECK(dropped.error() == errc::shut_down);
}

TEST_CASE("use_task with a steady_timer", "[consistency][task]") {
    draining_io io;
    asio::steady_timer timer(io.io(), 1ms);
    petrel::task<> t = timer.async_wait(petrel::use_task);
    CHECK(t.valid());
    CHECK(wait_error(t) == std::error_code{});
    CHECK(t.ready());

    asio::steady_timer later(io.io(), 1h);
    petrel::task<> cancelled = later.async_wait(petrel::use_task);
    asio::post(io.executor(), [&] { later.cancel(); });
    CHECK(wait_error(cancelled) == asio::error::operation_aborted);
}

TEST_CASE("use_task with a custom async operation", "[consistency][task]") {
    draining_io io;
    petrel::task<int> t = async_answer(io.executor(), 5, petrel::use_task);
    auto f = t.async_wait(asio::use_future);
    CHECK(get(f) == 5);

    petrel::task<int> failed = async_failure(io.executor(), errc::timed_out, petrel::use_task);
    CHECK(wait_error(failed) == errc::timed_out);

    // A task's own wait with use_task is a task too.
    auto [src, c] = petrel::make_task<int>();
    petrel::task<int> copy = src.async_wait(petrel::use_task);
    c.complete({}, 8);
    auto g = copy.async_wait(asio::use_future);
    CHECK(get(g) == 8);
}

TEST_CASE("when_all succeeds once every task succeeded", "[consistency][task]") {
    auto [a, ac] = petrel::make_task();
    auto [b, bc] = petrel::make_task<int>();
    auto [d, dc] = petrel::make_task<std::vector<int>>();
    petrel::task<> all = petrel::when_all(a, b, d);
    ac.complete();
    bc.complete({}, 1);
    CHECK_FALSE(all.ready());
    std::thread([dc = dc] { dc.complete({}, {1}); }).join();
    CHECK(wait_error(all) == std::error_code{});

    std::vector<petrel::task<>> tasks;
    std::vector<petrel::task_completer<>> completers;
    for (int i = 0; i < 4; ++i) {
        auto [t, c] = petrel::make_task();
        tasks.push_back(t);
        completers.push_back(c);
    }
    auto all_vec = petrel::when_all(tasks);
    for (auto& c : completers) {
        CHECK_FALSE(all_vec.ready());
        c.complete();
    }
    CHECK(all_vec.ready());
    CHECK_FALSE(all_vec.error());
}

TEST_CASE("when_all waits for every task and reports the first failed in argument order",
          "[consistency][task]") {
    auto [a, ac] = petrel::make_task();
    auto [b, bc] = petrel::make_task<int>();
    auto [d, dc] = petrel::make_task();
    auto all = petrel::when_all(a, b, d);
    dc.complete(errc::node_failed); // fails first in time, last in argument order
    bc.complete(errc::timed_out, 0);
    CHECK_FALSE(all.ready());
    ac.complete();
    CHECK(wait_error(all) == errc::timed_out);

    std::vector<petrel::task<>> tasks{petrel::task<>{}, a};
    CHECK(petrel::when_all(tasks).error() == errc::invalid_argument);
}

TEST_CASE("when_all of nothing is complete at once", "[consistency][task]") {
    auto none = petrel::when_all(std::vector<petrel::task<>>{});
    CHECK(none.valid());
    CHECK(none.ready());
    CHECK_FALSE(none.error());
    auto empty = petrel::when_all();
    CHECK(empty.ready());
    CHECK_FALSE(empty.error());
}

TEST_CASE("after does not call f when a dependency failed", "[consistency][task]") {
    auto [a, ac] = petrel::make_task();
    auto [b, bc] = petrel::make_task<int>();
    std::atomic<int> calls{0};
    auto r = petrel::after(std::vector<petrel::task<>>{a, petrel::when_all(b)}, [&] { ++calls; });
    ac.complete();
    bc.complete(errc::node_failed, 0);
    CHECK(wait_error(r) == errc::node_failed);
    CHECK(calls == 0);

    auto [c, cc] = petrel::make_task<int>();
    auto value = petrel::after(c, [&] {
        ++calls;
        return petrel::make_task<int>().first;
    });
    cc.complete(errc::timed_out, 0);
    CHECK(wait_error(value) == errc::timed_out);
    CHECK(calls == 0);
}

TEST_CASE("after calls f once, after its dependencies completed on another thread",
          "[consistency][task]") {
    draining_io io;
    auto [a, ac] = petrel::make_task();
    auto [b, bc] = petrel::make_task<int>();
    std::atomic<int> calls{0};
    std::atomic<bool> on_io{false};
    auto ex = io.executor();
    auto r = petrel::after(petrel::when_all(a, b), [&] {
        ++calls;
        on_io = ex.running_in_this_thread();
    });
    ac.complete();
    CHECK(calls == 0);
    asio::post(ex, [bc = bc] { bc.complete({}, 3); });
    CHECK(wait_error(r) == std::error_code{});
    CHECK(calls == 1);
    CHECK(on_io);

    // Dependencies already complete: f runs inline.
    auto inline_call = petrel::after(a, [&] { ++calls; });
    CHECK(calls == 2);
    CHECK(inline_call.ready());
}

TEST_CASE("after with f returning a task<int>", "[consistency][task]") {
    draining_io io;
    auto [dep, dc] = petrel::make_task<std::vector<int>>();
    petrel::task<int> r =
        petrel::after(dep, [&] { return async_answer(io.executor(), 9, petrel::use_task); });
    CHECK_FALSE(r.ready());
    dc.complete({}, {});
    auto f = r.async_wait(asio::use_future);
    CHECK(get(f) == 9);

    auto failed = petrel::after(
        dep, [&] { return async_failure(io.executor(), errc::timed_out, petrel::use_task); });
    CHECK(wait_error(failed) == errc::timed_out);

    auto invalid = petrel::after(dep, [] { return petrel::task<int>{}; });
    CHECK(invalid.error() == errc::invalid_argument);

    // A chain: each step starts the next one.
    asio::steady_timer timer(io.io(), 1ms);
    auto chain = petrel::after(timer.async_wait(petrel::use_task), [&] {
        return petrel::after(async_answer(io.executor(), 1, petrel::use_task),
                             [&] { return async_answer(io.executor(), 2, petrel::use_task); });
    });
    auto g = chain.async_wait(asio::use_future);
    CHECK(get(g) == 2);
}

TEST_CASE("after with f returning void", "[consistency][task]") {
    auto [dep, dc] = petrel::make_task<int>();
    int calls = 0;
    petrel::task<> r = petrel::after(dep, [&calls] { ++calls; });
    CHECK_FALSE(r.ready());
    dc.complete({}, 1);
    CHECK(calls == 1);
    CHECK(r.ready());
    CHECK_FALSE(r.error());
}

TEST_CASE("after with f throwing completes with handler_failed", "[consistency][task]") {
    auto [dep, dc] = petrel::make_task();
    auto r = petrel::after(dep, []() { throw std::runtime_error("no"); });
    auto r2 = petrel::after(dep, []() -> petrel::task<int> { throw std::runtime_error("no"); });
    CHECK_NOTHROW(dc.complete());
    CHECK(r.error() == errc::handler_failed);
    CHECK(r2.error() == errc::handler_failed);
    petrel::task<> r3;
    CHECK_NOTHROW(r3 = petrel::after(dep, []() { throw std::runtime_error("inline"); }));
    CHECK(r3.error() == errc::handler_failed);
}

TEST_CASE("cancelling a wait completes it with operation_aborted only", "[consistency][task]") {
    auto [t, c] = petrel::make_task<int>();
    asio::cancellation_signal sig;
    std::promise<std::error_code> p;
    auto f = p.get_future();
    std::atomic<int> calls{0};
    t.async_wait(asio::bind_cancellation_slot(sig.slot(), [&](std::error_code ec, int) {
        ++calls;
        p.set_value(ec);
    }));
    auto other = t.async_wait(asio::use_future);
    sig.emit(asio::cancellation_type::terminal);
    CHECK(get(f) == asio::error::operation_aborted);
    CHECK_FALSE(t.ready());

    CHECK(c.complete({}, 5));
    CHECK(get(other) == 5);
    sig.emit(asio::cancellation_type::partial);
    CHECK(calls == 1);
}

TEST_CASE("cancellation after completion is harmless", "[consistency][task]") {
    auto [t, c] = petrel::make_task();
    auto sig = std::make_unique<asio::cancellation_signal>();
    std::promise<std::error_code> p;
    auto f = p.get_future();
    std::atomic<int> calls{0};
    t.async_wait(asio::bind_cancellation_slot(sig->slot(), [&](std::error_code ec) {
        ++calls;
        p.set_value(ec);
    }));
    c.complete();
    CHECK(get(f) == std::error_code{});
    sig->emit(asio::cancellation_type::all);
    sig.reset(); // destroys the handler left in the slot
    CHECK(calls == 1);

    // Cancelled after the task itself is gone.
    asio::cancellation_signal late;
    std::promise<std::error_code> lp;
    auto lf = lp.get_future();
    {
        auto [gone, gc] = petrel::make_task();
        gone.async_wait(asio::bind_cancellation_slot(
            late.slot(), [&lp](std::error_code ec) { lp.set_value(ec); }));
    }
    CHECK(get(lf) == errc::shut_down);
    late.emit(asio::cancellation_type::terminal);
}

TEST_CASE("cancel a co_await of a task with a cancellation signal", "[consistency][task]") {
    asio::io_context io;
    auto [t, c] = petrel::make_task<int>();
    asio::cancellation_signal sig;
    std::optional<std::error_code> error;
    asio::co_spawn(
        io,
        [&, t = t]() -> asio::awaitable<void> {
            try {
                co_await t.async_wait(asio::use_awaitable);
                error = std::error_code{};
            } catch (const std::system_error& e) {
                error = e.code();
            }
        },
        asio::bind_cancellation_slot(sig.slot(), asio::detached));
    io.poll();
    sig.emit(asio::cancellation_type::terminal);
    io.run();
    REQUIRE(error);
    CHECK(*error == asio::error::operation_aborted);
    CHECK_FALSE(t.ready());
}

TEST_CASE("many tasks completed and waited for on many threads", "[consistency][task]") {
    constexpr int tasks = 1000;
    draining_io io(4);
    auto ex = io.executor();

    std::vector<petrel::task<int>> ts;
    std::vector<petrel::task_completer<int>> cs;
    for (int i = 0; i < tasks; ++i) {
        auto [t, c] = petrel::make_task<int>();
        ts.push_back(t);
        cs.push_back(c);
    }

    std::atomic<int> sum{0};
    std::atomic<int> waited{0};
    std::atomic<int> aborted{0};
    std::vector<std::unique_ptr<asio::cancellation_signal>> signals;
    std::promise<void> all_waited;
    const int expected_waits = 3 * tasks;
    auto count = [&] {
        if (++waited == expected_waits) {
            all_waited.set_value();
        }
    };

    std::vector<petrel::task<int>> doubled;
    for (int i = 0; i < tasks; ++i) {
        doubled.push_back(petrel::after(ts[static_cast<std::size_t>(i)], [&, i] {
            return async_answer(ex, 2 * i, petrel::use_task);
        }));
    }

    // Completers on the io threads, waiters on this thread and another one, cancellations
    // racing with the completions.
    for (int i = 0; i < tasks; ++i) {
        asio::post(ex, [c = cs[static_cast<std::size_t>(i)], i] { c.complete({}, i); });
    }
    std::thread other([&] {
        for (auto& t : ts) {
            t.async_wait([&](std::error_code ec, int v) {
                if (!ec) {
                    sum += v;
                }
                count();
            });
        }
    });
    for (auto& t : ts) {
        auto& sig = signals.emplace_back(std::make_unique<asio::cancellation_signal>());
        t.async_wait(asio::bind_cancellation_slot(
            sig->slot(), asio::bind_executor(ex, [&](std::error_code ec, int) {
                if (ec == asio::error::operation_aborted) {
                    ++aborted;
                }
                count();
            })));
    }
    for (auto& sig : signals) {
        sig->emit(asio::cancellation_type::terminal);
    }
    for (auto& t : doubled) {
        t.async_wait([&](std::error_code ec, int v) {
            if (!ec) {
                sum += v;
            }
            count();
        });
    }
    other.join();

    auto done = all_waited.get_future();
    get(done);
    auto all = petrel::when_all(doubled);
    CHECK(wait_error(all) == std::error_code{});
    CHECK(waited == expected_waits);
    CHECK(sum == 3 * (tasks * (tasks - 1) / 2));
    CHECK(aborted <= tasks);
}
