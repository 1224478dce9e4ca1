#include <petrel/consistency/policy.hpp>

#include "support/cluster.hpp"
#include "support/frames.hpp"

#include <petrel/kv_store.hpp>
#include <petrel/launch/run.hpp>
#include <petrel/server/server_node.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xrandom.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------
// The policies as types.
// ---------------------------------------------------------------------------------------

static_assert(petrel::consistency_policy<petrel::sequential>);
static_assert(petrel::consistency_policy<petrel::eventual>);
static_assert(petrel::consistency_policy<petrel::bounded_delay<0>>);
static_assert(petrel::consistency_policy<petrel::bounded_delay<8>>);
static_assert(!petrel::consistency_policy<int>);
static_assert(!petrel::consistency_policy<void>);
struct look_alike {
    static constexpr std::uint64_t delay = 0;
    static constexpr bool waits = true;
    static constexpr bool ordered = true;
};
static_assert(!petrel::consistency_policy<look_alike>); // the set is closed

TEST_CASE("policy: the read requirement of each model", "[consistency][policy]") {
    using petrel::required_clock;
    CHECK(required_clock<petrel::sequential>(0) == 0);
    CHECK(required_clock<petrel::sequential>(7) == 7);
    CHECK(required_clock<petrel::bounded_delay<0>>(7) == 7);
    CHECK(required_clock<petrel::bounded_delay<3>>(2) == 0);
    CHECK(required_clock<petrel::bounded_delay<3>>(3) == 0);
    CHECK(required_clock<petrel::bounded_delay<3>>(10) == 7);
    CHECK(required_clock<petrel::eventual>(1000) == 0);
    CHECK(petrel::policy_name<petrel::bounded_delay<4>>() == "bounded_delay<4>");
    CHECK(petrel::policy_name<petrel::sequential>() == "sequential");
    CHECK(petrel::policy_name<petrel::eventual>() == "eventual");
    // The same models as values, for the parts compiled once for every model.
    using petrel::detail::policy_traits;
    using petrel::detail::policy_traits_of;
    STATIC_REQUIRE(policy_traits_of<petrel::sequential> == policy_traits{0, true, true});
    STATIC_REQUIRE(policy_traits_of<petrel::eventual> == policy_traits{0, false, false});
    STATIC_REQUIRE(policy_traits_of<petrel::bounded_delay<3>> == policy_traits{3, true, false});
    for (const petrel::clock_type t : {0, 2, 3, 10, 1000}) {
        CHECK(petrel::detail::required_clock(policy_traits_of<petrel::bounded_delay<3>>, t) ==
              required_clock<petrel::bounded_delay<3>>(t));
        CHECK(petrel::detail::required_clock(policy_traits_of<petrel::sequential>, t) == t);
        CHECK(petrel::detail::required_clock(policy_traits_of<petrel::eventual>, t) == 0);
    }
    // The default model of a store.
    STATIC_REQUIRE(
        std::is_same_v<petrel::kv_store<std::uint64_t, float>::consistency, petrel::sequential>);
}

namespace {

petrel::config job_config(std::uint32_t servers, std::uint32_t workers) {
    petrel::config cfg;
    cfg.servers = servers;
    cfg.workers = workers;
    cfg.heartbeat_interval = 100ms;
    cfg.heartbeat_timeout = 2000ms;
    cfg.startup_timeout = 30000ms;
    cfg.request_timeout = 20000ms; // a deadlock fails the test with timed_out, not a hang
    return cfg;
}

std::vector<std::uint64_t> dense_keys(std::size_t n) {
    std::vector<std::uint64_t> keys(n);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    return keys;
}

/// What the workers of a straggler run saw.
struct straggler_log {
    std::mutex mutex;
    std::vector<std::uint64_t> max_lag;     // per worker: its clock minus the reply's clock
    std::vector<std::uint64_t> final_clock; // per worker
    std::size_t value_errors = 0;
    // Clocks of the straggler seen by worker 0 at its last pull.
    std::uint64_t straggler_seen = 0;
};

constexpr std::uint32_t straggler_workers = 4;
constexpr int straggler_iterations = 16;

template <typename Policy>
void straggler_worker(petrel::worker_node& w, straggler_log& log) {
    petrel::kv_store<std::uint64_t, float, Policy> kv(w);
    const auto keys = dense_keys(256);
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    const bool straggler = w.rank() == straggler_workers - 1;
    std::uint64_t max_lag = 0;
    std::size_t bad = 0;
    std::uint64_t seen = 0;
    for (int it = 0; it < straggler_iterations; ++it) {
        const std::uint64_t t = kv.current_clock();
        const auto got = kv.pull(keys, asio::use_future).get();
        const std::uint64_t fresh = got.min_clock();
        max_lag = std::max(max_lag, t > fresh ? t - fresh : 0);
        // Every worker pushes 1 per key per clock: the values hold at least the pushes of
        // the clocks every worker has completed, and under sequential exactly those.
        const float floor = float(straggler_workers) * float(std::min<std::uint64_t>(fresh, t));
        for (std::size_t i = 0; i < keys.size(); ++i) {
            const float v = got.values()(i);
            if (v < floor || (Policy::ordered && v != float(straggler_workers) * float(t))) {
                ++bad;
            }
        }
        for (const auto& c : got.clocks()) {
            if (c.worker == straggler_workers - 1) {
                seen = c.clock;
            }
        }
        if (straggler) {
            std::this_thread::sleep_for(15ms);
        }
        kv.push(keys, ones, asio::use_future).get();
        kv.clock();
    }
    std::lock_guard lock(log.mutex);
    log.max_lag[w.rank()] = max_lag;
    log.final_clock[w.rank()] = kv.current_clock();
    log.value_errors += bad;
    if (w.rank() == 0) {
        log.straggler_seen = seen;
    }
}

} // namespace

TEMPLATE_TEST_CASE("policy: a straggler holds the others back by at most the bound",
                   "[consistency][policy][straggler]", petrel::sequential, petrel::eventual,
                   petrel::bounded_delay<0>, petrel::bounded_delay<2>, petrel::bounded_delay<4>) {
    straggler_log log;
    log.max_lag.assign(straggler_workers, 0);
    log.final_clock.assign(straggler_workers, 0);
    const int status = petrel::run(job_config(2, straggler_workers), [&](petrel::worker_node& w) {
        straggler_worker<TestType>(w, log);
    });
    REQUIRE(status == petrel::run_ok);
    CHECK(log.value_errors == 0);
    for (std::uint32_t r = 0; r < straggler_workers; ++r) {
        CHECK(log.final_clock[r] == straggler_iterations);
    }
    const auto fastest = *std::max_element(log.max_lag.begin(), log.max_lag.end() - 1);
    if constexpr (TestType::waits) {
        // Checked from the clocks on the replies: nobody read more than Tau clocks ahead
        // of the slowest worker (sequential: lockstep).
        for (std::uint32_t r = 0; r < straggler_workers; ++r) {
            CHECK(log.max_lag[r] <= TestType::delay);
        }
    } else {
        // Nobody waits: the fast workers ran far ahead of the straggler (it sleeps 15 ms
        // per iteration, they do not sleep at all).
        CHECK(fastest >= straggler_iterations / 2);
        CHECK(log.straggler_seen < straggler_iterations / 2);
    }
}

namespace {

// ---------------------------------------------------------------------------------------
// Bitwise reproducibility: mini-batch SGD for linear regression.
// ---------------------------------------------------------------------------------------

constexpr std::size_t features = 300;
constexpr std::size_t sgd_batch = 16;
constexpr int sgd_iterations = 12;
constexpr float learning_rate = 0.05f;

/// Worker `rank`'s examples, the same in every run and every process.
struct shard {
    xt::xtensor<float, 2> x;
    xt::xtensor<float, 1> y;
};

shard sgd_shard_of(std::uint32_t rank) {
    std::mt19937 rng(1000 + rank);
    std::mt19937 truth_rng(7);
    const xt::xtensor<float, 1> truth = xt::random::randn<float>({features}, 0.0f, 1.0f, truth_rng);
    shard s;
    s.x = xt::random::randn<float>({sgd_batch * sgd_iterations, features}, 0.0f, 1.0f, rng);
    s.y = xt::sum(s.x * truth, {1});
    return s;
}

/// The step -lr * gradient / workers of one mini-batch, at the weights `w`.
xt::xtensor<float, 1> step(const shard& s, int iteration, const float* w, std::uint32_t workers) {
    xt::xtensor<float, 1> delta = xt::zeros<float>({features});
    for (std::size_t e = 0; e < sgd_batch; ++e) {
        const std::size_t row = static_cast<std::size_t>(iteration) * sgd_batch + e;
        float err = -s.y(row);
        for (std::size_t j = 0; j < features; ++j) {
            err += s.x(row, j) * w[j];
        }
        for (std::size_t j = 0; j < features; ++j) {
            delta(j) -= learning_rate * err * s.x(row, j) / float(sgd_batch * workers);
        }
    }
    return delta;
}

/// Runs the job and returns the final weights as every worker pulled them.
std::vector<float> train_sequential(std::uint32_t servers, std::uint32_t workers) {
    std::mutex mutex;
    std::vector<std::vector<float>> finals(workers);
    const int status = petrel::run(job_config(servers, workers), [&](petrel::worker_node& w) {
        petrel::kv_store<std::uint64_t, float, petrel::sequential> kv(w);
        const auto keys = dense_keys(features);
        const auto data = sgd_shard_of(w.rank());
        for (int it = 0; it < sgd_iterations; ++it) {
            const auto weights = kv.pull(keys, asio::use_future).get();
            kv.push(keys, step(data, it, weights.value_span().data(), w.workers()),
                    asio::use_future)
                .get();
            kv.clock();
        }
        const auto weights = kv.pull(keys, asio::use_future).get();
        std::lock_guard lock(mutex);
        finals[w.rank()].assign(weights.value_span().begin(), weights.value_span().end());
    });
    REQUIRE(status == petrel::run_ok);
    for (std::uint32_t r = 1; r < workers; ++r) {
        REQUIRE(std::memcmp(finals[r].data(), finals[0].data(), features * sizeof(float)) == 0);
    }
    return finals[0];
}

/// The same mini-batch SGD in one loop: every worker's step at the same weights, added
/// in worker order.
std::vector<float> train_reference(std::uint32_t workers) {
    std::vector<shard> data;
    for (std::uint32_t r = 0; r < workers; ++r) {
        data.push_back(sgd_shard_of(r));
    }
    std::vector<float> w(features, 0.0f);
    for (int it = 0; it < sgd_iterations; ++it) {
        std::vector<xt::xtensor<float, 1>> steps;
        for (std::uint32_t r = 0; r < workers; ++r) {
            steps.push_back(step(data[r], it, w.data(), workers));
        }
        for (std::uint32_t r = 0; r < workers; ++r) {
            for (std::size_t j = 0; j < features; ++j) {
                w[j] += steps[r](j);
            }
        }
    }
    return w;
}

} // namespace

TEST_CASE("policy: sequential is bitwise reproducible and equals the single-process loop",
          "[consistency][policy][reproducible]") {
    const auto first = train_sequential(2, 4);
    const auto second = train_sequential(3, 4); // another placement of the keys, too
    const auto reference = train_reference(4);
    CHECK(std::memcmp(first.data(), second.data(), features * sizeof(float)) == 0);
    CHECK(std::memcmp(first.data(), reference.data(), features * sizeof(float)) == 0);
    // The model did learn something (the weights are not all zero).
    CHECK(std::any_of(first.begin(), first.end(), [](float v) { return v != 0.0f; }));
}

TEMPLATE_TEST_CASE("policy: a worker that leaves early drops out of the clock",
                   "[consistency][policy][leave]", petrel::sequential, petrel::eventual,
                   petrel::bounded_delay<1>) {
    std::atomic<int> finished{0};
    std::atomic<std::size_t> bad{0};
    const int status = petrel::run(job_config(2, 3), [&](petrel::worker_node& w) {
        petrel::kv_store<std::uint64_t, float, TestType> kv(w);
        const auto keys = dense_keys(64);
        const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
        const int iterations = w.rank() == 2 ? 3 : 20; // worker 2 leaves after 3 clocks
        for (int it = 0; it < iterations; ++it) {
            const auto got = kv.pull(keys, asio::use_future).get();
            if (got.size() != keys.size()) {
                ++bad;
            }
            kv.push(keys, ones, asio::use_future).get();
            kv.clock();
        }
        ++finished;
    });
    CHECK(status == petrel::run_ok);
    CHECK(finished == 3);
    CHECK(bad == 0);
}

// ---------------------------------------------------------------------------------------
// Waits end: a departure, a deadline or a cancellation completes them.
// ---------------------------------------------------------------------------------------

namespace {

/// One server for two workers over TCP, and stores for each worker.
template <typename Policy>
struct two_workers {
    petrel::test::io_threads io{2};
    petrel::server_node server;
    std::string address;
    petrel::test::log_capture log;

    explicit two_workers(std::shared_ptr<const petrel::function_registry> functions = nullptr)
        : server(petrel::tcp_transport(io.executor()),
                 {.node_id = 0, .workers = 2, .functions = std::move(functions)}),
          address(server.listen("127.0.0.1:0")) {}

    std::unique_ptr<petrel::kv_store<std::uint64_t, float, Policy>>
    store(std::uint32_t worker, std::chrono::milliseconds timeout = 10s) {
        petrel::transport_options topts;
        topts.log = log.logger();
        return std::make_unique<petrel::kv_store<std::uint64_t, float, Policy>>(
            petrel::tcp_transport(io.executor(), topts),
            petrel::kv_store_options<std::uint64_t>{
                .servers = {address}, .worker = worker, .request_timeout = timeout});
    }
};

} // namespace

TEST_CASE("policy: a pull waiting for a worker completes when that worker departs",
          "[consistency][policy]") {
    two_workers<petrel::sequential> c;
    auto w0 = c.store(0);
    const auto keys = dense_keys(8);
    w0->push(keys, xt::xtensor<float, 1>(xt::ones<float>({8})), asio::use_future).get();
    w0->clock(asio::use_future).get();
    auto waiting = w0->pull(keys, asio::use_future); // needs worker 1's clock 0 as well
    CHECK(waiting.wait_for(200ms) == std::future_status::timeout);
    c.server.depart_worker(1); // the job's view says worker 1 left
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    const auto got = waiting.get();
    CHECK(got.values()(0) == 1.0f); // the held push of clock 0 was applied first
    CHECK(got.min_clock() == 1);    // worker 0 at 1, worker 1 departed
}

TEST_CASE("policy: finish() takes a worker out of the clock", "[consistency][policy]") {
    two_workers<petrel::bounded_delay<1>> c;
    auto w0 = c.store(0);
    auto w1 = c.store(1);
    const auto keys = dense_keys(8);
    w0->clock();
    w0->clock(asio::use_future).get();
    auto waiting = w0->pull(keys, asio::use_future); // clock 2 needs clock 1 of worker 1
    CHECK(waiting.wait_for(200ms) == std::future_status::timeout);
    w1->finish(asio::use_future).get();
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    CHECK(waiting.get().size() == keys.size());
}

TEST_CASE("policy: a waiting pull ends at its deadline", "[consistency][policy]") {
    two_workers<petrel::sequential> c;
    auto w0 = c.store(0, 300ms);
    w0->clock(asio::use_future).get();
    auto waiting = w0->pull(dense_keys(4), asio::use_future);
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    try {
        waiting.get();
        FAIL("the pull should time out");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::timed_out);
    }
}

TEST_CASE("policy: a waiting pull is cancelled through its cancellation slot",
          "[consistency][policy]") {
    two_workers<petrel::sequential> c;
    auto w0 = c.store(0);
    w0->clock(asio::use_future).get();
    asio::cancellation_signal cancel;
    std::promise<std::error_code> done;
    w0->pull(dense_keys(4),
             asio::bind_cancellation_slot(
                 cancel.slot(), [&](std::error_code ec, petrel::kv_pairs<std::uint64_t, float>) {
                     done.set_value(ec);
                 }));
    auto result = done.get_future();
    CHECK(result.wait_for(200ms) == std::future_status::timeout);
    cancel.emit(asio::cancellation_type::terminal);
    REQUIRE(result.wait_for(10s) == std::future_status::ready);
    CHECK(result.get() == asio::error::operation_aborted);
}

TEST_CASE("policy: a job whose server's parked reads fill up ends with a report, no hang",
          "[consistency][policy][deadline]") {
    auto cfg = job_config(1, 2);
    constexpr auto deadline = 2000ms;
    cfg.request_timeout = deadline;
    std::atomic<bool> filled{false};
    std::atomic<bool> trained{false};
    std::atomic<bool> late{false};
    std::mutex mutex;
    std::error_code ended;
    std::string logged;
    const auto t0 = std::chrono::steady_clock::now();
    const int status = petrel::run(
        cfg,
        [&](petrel::worker_node& w) {
            if (w.rank() == 1) {
                // A client that fills the server's list of parked reads: pulls, as worker 1,
                // that wait for a clock no worker reaches; it never reads the replies.
                const auto address = w.view()->of_role(petrel::node_role::server).at(0)->address;
                const auto colon = address.rfind(':');
                asio::io_context io;
                asio::ip::tcp::socket flood(io);
                flood.connect({asio::ip::make_address(address.substr(0, colon)),
                               static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)))});
                const std::vector<std::uint64_t> keys{1, 2, 3};
                std::vector<std::byte> frames;
                for (std::size_t i = 0; i < (std::size_t{1} << 16) + 16; ++i) {
                    petrel::wire::message m;
                    auto& h = m.header;
                    h.kind = petrel::wire::message_kind::pull;
                    h.sender = w.id();
                    h.request_id = i + 1;
                    h.key_type = petrel::wire::scalar_type_of<std::uint64_t>;
                    h.value_type = petrel::wire::scalar_type_of<float>;
                    h.key_count = keys.size();
                    h.range_begin = keys.front();
                    h.range_end = keys.back() + 1;
                    h.worker = w.rank();
                    h.clock = 1'000'000;
                    m.set_segment(petrel::wire::keys_segment,
                                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
                    const auto f = petrel::test::frame_of(m);
                    frames.insert(frames.end(), f.begin(), f.end());
                }
                asio::write(flood, asio::buffer(frames));
                filled = true;
                for (int i = 0; i < 600 && !trained; ++i) {
                    std::this_thread::sleep_for(50ms);
                }
                return;
            }
            // Worker 0 trains; its reads wait for worker 1, which never ticks: the server
            // refuses them (its list is full) or they time out.
            petrel::kv_store<std::uint64_t, float, petrel::sequential> kv(w);
            for (int i = 0; i < 600 && !filled; ++i) {
                std::this_thread::sleep_for(10ms);
            }
            const auto keys = dense_keys(16);
            const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
            struct done_flag {
                std::atomic<bool>& flag;
                ~done_flag() { flag = true; }
            } done{trained};
            for (int it = 0; it < 10; ++it) {
                auto pull = kv.pull(keys, asio::use_future);
                if (pull.wait_for(deadline + 1s) != std::future_status::ready) {
                    late = true;
                    throw std::runtime_error("a pull outlived its deadline");
                }
                try {
                    pull.get();
                } catch (const std::system_error& e) {
                    std::lock_guard lock(mutex);
                    ended = e.code();
                    throw;
                }
                kv.push(keys, ones, asio::use_future).get();
                kv.clock();
            }
        },
        [&](petrel::log_level level, std::string_view text) {
            if (level == petrel::log_level::error) {
                std::lock_guard lock(mutex);
                logged += std::string(text) + "\n";
            }
        });
    std::lock_guard lock(mutex);
    INFO(logged);
    CHECK(status == petrel::run_failed);
    CHECK_FALSE(late);
    CHECK((ended == petrel::errc::backlog_full || ended == petrel::errc::timed_out));
    CHECK_THAT(logged, Catch::Contains("the training function failed"));
    CHECK(std::chrono::steady_clock::now() - t0 < 60s);
}

TEST_CASE("policy: a worker index the servers do not know is refused", "[consistency][policy]") {
    two_workers<petrel::sequential> c;
    auto w5 = c.store(5);
    CHECK_THROWS_AS(w5->clock(asio::use_future).get(), std::system_error);
    try {
        w5->push(dense_keys(2), xt::xtensor<float, 1>{1.0f, 2.0f}, asio::use_future).get();
        FAIL("the push should be refused");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::unknown_worker);
    }
}

TEST_CASE("policy: tasks chain pushes and pulls with after() and when_all()",
          "[consistency][policy][task]") {
    two_workers<petrel::eventual> c;
    auto w0 = c.store(0);
    const auto keys = dense_keys(16);
    const xt::xtensor<float, 1> ones = xt::ones<float>({16});
    auto a = w0->push(keys, ones, petrel::use_task);
    auto b = w0->push(keys, ones, petrel::use_task);
    auto pulled =
        petrel::after(petrel::when_all(a, b), [&] { return w0->pull(keys, petrel::use_task); });
    const auto got = pulled.async_wait(asio::use_future).get();
    CHECK(got.values()(15) == 2.0f);
}

// ---------------------------------------------------------------------------------------
// Remote functions: a task with the same consistency gate as a pull.
// ---------------------------------------------------------------------------------------

namespace {

/// The sum of the values a server stores in the range, registered by type.
struct range_sum {
    static constexpr std::string_view name = "range_sum";
    using args_type = petrel::no_args;
    using result_type = double;
    template <typename Rows>
    double operator()(Rows& rows, const args_type&) const {
        double s = 0;
        rows.for_each([&](auto, auto row) {
            for (auto v : row) {
                s += double(v);
            }
        });
        return s;
    }
};

std::shared_ptr<const petrel::function_registry> functions() {
    auto f = std::make_shared<petrel::function_registry>();
    f->add<range_sum>();
    f->add<float, std::uint64_t>("scale", [](auto& rows, const float& by) -> std::uint64_t {
        std::uint64_t n = 0;
        rows.for_each([&](auto, auto row) {
            for (auto& v : row) {
                v *= by;
            }
            ++n;
        });
        return n;
    });
    f->add<petrel::no_args, int>("fails", [](auto&, const petrel::no_args&) -> int {
        throw std::runtime_error("the function failed on purpose");
    });
    return f;
}

double total(const std::vector<double>& parts) {
    return std::accumulate(parts.begin(), parts.end(), 0.0);
}

} // namespace

TEST_CASE("policy: remote functions run on the servers that own a key range",
          "[consistency][policy][remote_function]") {
    two_workers<petrel::eventual> c(functions());
    auto w0 = c.store(0);
    const auto keys = dense_keys(1000);
    w0->push(keys, xt::xtensor<float, 1>(xt::ones<float>({1000})), asio::use_future).get();
    const auto parts = w0->call<range_sum>({100, 200}, petrel::no_args{}, asio::use_future).get();
    CHECK(total(parts) == 100.0);
    // A function that changes the rows.
    const auto scaled = w0->call<std::uint64_t>("scale", {0, 10}, 3.0f, asio::use_future).get();
    CHECK(std::accumulate(scaled.begin(), scaled.end(), std::uint64_t{0}) == 10);
    const auto got = w0->pull(dense_keys(11), asio::use_future).get();
    CHECK(got.values()(9) == 3.0f);
    CHECK(got.values()(10) == 1.0f);
    // Errors: an unknown name, a function that throws (its message is logged).
    try {
        (void)w0->call<int>("missing", {0, 10}, petrel::no_args{}, asio::use_future).get();
        FAIL("an unknown function should be refused");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::unknown_function);
    }
    try {
        (void)w0->call<int>("fails", {0, 10}, petrel::no_args{}, asio::use_future).get();
        FAIL("a throwing function should fail the call");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::handler_failed);
    }
    CHECK(c.log.all().find("the function failed on purpose") != std::string::npos);
}

TEST_CASE("policy: a remote function waits for the clock like a pull",
          "[consistency][policy][remote_function]") {
    two_workers<petrel::sequential> c(functions());
    auto w0 = c.store(0);
    auto w1 = c.store(1);
    const auto keys = dense_keys(10);
    const xt::xtensor<float, 1> ones = xt::ones<float>({10});
    w0->push(keys, ones, asio::use_future).get();
    w0->clock(asio::use_future).get();
    auto waiting = w0->call<range_sum>({0, 10}, petrel::no_args{}, asio::use_future);
    CHECK(waiting.wait_for(200ms) == std::future_status::timeout); // worker 1 is at clock 0
    w1->push(keys, ones, asio::use_future).get();
    w1->clock(asio::use_future).get();
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    CHECK(total(waiting.get()) == 20.0); // both pushes of clock 0, applied in worker order
}
