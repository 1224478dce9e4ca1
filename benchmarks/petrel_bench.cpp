// Petrel's benchmark: each case prints one JSON line. Petrel's cases are compared with a
// raw Asio TCP baseline measured in the same run for the same bytes.
//
//   petrel_bench                 all cases
//   petrel_bench --case NAME     the cases whose name contains NAME (repeatable)
//   petrel_bench --quick         few iterations (a smoke run)
//   petrel_bench --list          case names
//   petrel_bench --tls-dir DIR   the certificates of the _tls cases (node.pem, node.key,
//                                ca.pem; default: the test ones)
//   (petrel_bench --recovery-server ROOT: a server process the recovery case kills;
//    petrel_bench --threads-server T FILE: the server process of the server_threads cases)
#include <petrel/all.hpp>
#include <petrel/server/detail/part_runner.hpp>
#include <petrel/server/detail/table.hpp>

#include "bench_stats.hpp"
#include "raw_asio_baseline.hpp"

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <xtensor/xtensor.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using petrel_bench::samples;
using clock_type = std::chrono::steady_clock;

struct settings {
    bool quick = false;
    std::vector<std::string> only;
    /// The link speed assumed by the adaptive compression cases, in Gbit/s.
    double link_gbps = 10.0;
    /// Where the _tls cases find node.pem, node.key and ca.pem.
    std::string tls_dir = PETREL_BENCH_TLS_DIR;
};

/// Minor page faults of this process so far (fresh memory touched for the first time).
long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/// Iteration budget for a payload size: (min iterations, min seconds, max iterations).
struct budget {
    std::size_t min_iterations;
    double min_seconds;
    std::size_t max_iterations;
};

budget budget_for(std::size_t bytes, bool quick) {
    if (quick) {
        return {2, 0.0, 3};
    }
    if (bytes >= (std::size_t{32} << 20)) {
        return {15, 1.0, 60};
    }
    if (bytes >= (std::size_t{1} << 20)) {
        return {50, 1.0, 2000};
    }
    return {2000, 1.0, 200000};
}

/// An io_context on its own thread.
class io_thread {
public:
    io_thread() : work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
    ~io_thread() {
        work_.reset();
        io_.stop();
        thread_.join();
    }
    asio::any_io_executor executor() { return io_.get_executor(); }

private:
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

/// Medians of the raw baseline, by payload size, for ratio_to_raw.
std::map<std::size_t, double> raw_push_pull_median;
/// Median of the raw 64-byte ping-pong, for the small-request cases.
double raw_pingpong_median = 0;
/// Goodput of the raw one-way stream, for goodput_vs_raw_stream.
double raw_stream_gbps = 0;

/// Medians of the petrel_push_pull cases without a secret or TLS, by payload size, for
/// ratio_to_plain (what the _auth and _tls cases cost).
std::map<std::size_t, double> plain_push_pull_median;

void print(const std::string& name, const samples& s, std::size_t bytes_moved, double raw_median,
           std::size_t payload, double faults = -1, double wire_bytes = -1,
           double plain_median = 0) {
    petrel_bench::json_line line;
    line.add("case", name)
        .add("median_us", s.median())
        .add("p99_us", s.p99())
        .add("min_us", s.min())
        .add("goodput_gbps", petrel_bench::gbit_per_s(bytes_moved, s.median()))
        .add("ratio_to_raw", raw_median > 0 ? s.median() / raw_median : 1.0)
        .add("bytes", payload)
        .add("iterations", s.size());
    if (plain_median > 0) {
        line.add("ratio_to_plain", s.median() / plain_median);
    }
    if (faults >= 0) {
        line.add("minor_faults_per_iteration", faults);
    }
    if (wire_bytes >= 0) {
        line.add("bytes_on_wire", wire_bytes); // per iteration, both directions, whole frames
    }
    if (raw_stream_gbps > 0 && name.rfind("petrel_", 0) == 0) {
        line.add("goodput_vs_raw_stream",
                 petrel_bench::gbit_per_s(bytes_moved, s.median()) / raw_stream_gbps);
    }
    line.print();
}

void raw_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    const std::size_t mib = std::size_t{1} << 20;
    if (wanted("raw_stream_64MiB")) {
        auto s = petrel_bench::raw::stream_throughput(64 * mib, mib, st.quick ? 2 : 15);
        print("raw_stream_64MiB", s, 64 * mib, 0, 64 * mib, -1, 64.0 * mib + 1);
        raw_stream_gbps = petrel_bench::gbit_per_s(64 * mib, s.median());
    }
    if (wanted("raw_pingpong_64B")) {
        auto b = budget_for(64, st.quick);
        auto s = petrel_bench::raw::pingpong(64, b.min_iterations, b.min_seconds, b.max_iterations);
        print("raw_pingpong_64B", s, 128, 0, 64, -1, 128);
        raw_pingpong_median = s.median();
    }
    for (auto [label, bytes] : {std::pair{"1key", std::size_t{4}}, std::pair{"4MiB", 4 * mib},
                                std::pair{"64MiB", 64 * mib}}) {
        const std::string name = std::string("raw_push_pull_") + label;
        if (!wanted(name) && !wanted(std::string("petrel_push_pull_") + label)) {
            continue;
        }
        auto b = budget_for(bytes, st.quick);
        auto s =
            petrel_bench::raw::push_pull(bytes, b.min_iterations, b.min_seconds, b.max_iterations);
        raw_push_pull_median[bytes] = s.median();
        // Push and pull each carry a 16-byte header, as do the ack and the pull request.
        print(name, s, 2 * bytes, 0, bytes, -1, 2.0 * static_cast<double>(bytes) + 64);
    }
}

/// Push+pull of `keys` keys of `width` floats each, one worker and one server over TCP on
/// loopback, each node on its own io thread. The worker drives the loop from a coroutine.
enum class style { coroutine, future, shared };

/// Minor page faults, and bytes on the wire (sent and received, whole frames), per
/// measured iteration of the last `petrel_push_pull` or `dense_push_pull`.
double last_faults_per_iteration = 0;
double last_wire_bytes = 0;

template <typename Store>
std::uint64_t wire_total(const Store& kv) {
    const auto t = kv.traffic();
    return t.sent_bytes + t.received_bytes;
}

/// `topts`: the transports' options (a secret, TLS) of both ends.
samples petrel_push_pull(std::size_t keys, std::size_t width, budget b, style how,
                         std::size_t server_count = 1,
                         const petrel::transport_options& topts = {}) {
    std::vector<std::unique_ptr<io_thread>> server_io;
    std::vector<std::unique_ptr<petrel::server_node>> servers;
    petrel::kv_store_options<std::uint64_t> o;
    for (std::size_t i = 0; i < server_count; ++i) {
        server_io.push_back(std::make_unique<io_thread>());
        servers.push_back(std::make_unique<petrel::server_node>(
            petrel::tcp_transport(server_io.back()->executor(), topts)));
        o.servers.push_back(servers.back()->listen("127.0.0.1:0"));
    }
    io_thread worker_io;
    o.width = width;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(worker_io.executor(), topts), o);

    std::vector<std::uint64_t> key_list(keys);
    std::iota(key_list.begin(), key_list.end(), std::uint64_t{0});
    auto grad = std::make_shared<xt::xtensor<float, 2>>(xt::ones<float>({keys, width}));
    // The first rounds create the server's table and fill the buffer pools and socket
    // buffers; the measured rounds are the steady state a training loop sees.
    const std::size_t warmup =
        std::max<std::size_t>(5, std::min<std::size_t>(b.min_iterations / 10, 20));

    if (how == style::future) {
        auto once = [&] {
            kv.push(key_list, *grad, asio::use_future).get();
            auto got = kv.pull(key_list, asio::use_future).get();
            if (got.size() != keys) {
                throw std::runtime_error("petrel pull returned the wrong number of keys");
            }
        };
        for (std::size_t i = 0; i < warmup; ++i) {
            once();
        }
        const long faults = minor_faults();
        const auto wire = wire_total(kv);
        auto s =
            petrel_bench::run_timed(once, b.min_iterations, b.min_seconds, b.max_iterations, 0);
        last_faults_per_iteration =
            static_cast<double>(minor_faults() - faults) / static_cast<double>(s.size());
        last_wire_bytes =
            static_cast<double>(wire_total(kv) - wire) / static_cast<double>(s.size());
        return s;
    }
    long faults = 0;
    std::uint64_t wire = 0;
    auto loop = [&]() -> asio::awaitable<samples> {
        samples s;
        const auto start = clock_type::now();
        for (std::size_t i = 0; i < warmup + b.max_iterations; ++i) {
            const auto t0 = clock_type::now();
            if (how == style::shared) {
                co_await kv.push(key_list, grad, asio::use_awaitable); // no copy
            } else {
                co_await kv.push(key_list, *grad, asio::use_awaitable);
            }
            auto got = co_await kv.pull(key_list, asio::use_awaitable);
            const auto t1 = clock_type::now();
            if (got.size() != keys) {
                throw std::runtime_error("petrel pull returned the wrong number of keys");
            }
            if (i < warmup) {
                if (i + 1 == warmup) {
                    faults = minor_faults();
                    wire = wire_total(kv);
                }
                continue;
            }
            s.add(t1 - t0);
            const double elapsed = std::chrono::duration<double>(t1 - start).count();
            if (s.size() >= b.min_iterations && elapsed >= b.min_seconds) {
                break;
            }
        }
        co_return s;
    };
    auto s = asio::co_spawn(worker_io.executor(), loop(), asio::use_future).get();
    last_faults_per_iteration =
        static_cast<double>(minor_faults() - faults) / static_cast<double>(s.size());
    last_wire_bytes = static_cast<double>(wire_total(kv) - wire) / static_cast<double>(s.size());
    return s;
}

void petrel_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    const std::size_t mib = std::size_t{1} << 20;
    struct shape {
        const char* label;
        std::size_t keys;
        std::size_t width;
    };
    // Large payloads as rows of 4096 floats (16 KiB per key), as for embeddings or layers.
    for (auto sh : {shape{"1key", 1, 1}, shape{"4MiB", 256, 4096}, shape{"64MiB", 4096, 4096}}) {
        const std::size_t bytes = sh.keys * sh.width * sizeof(float);
        const double raw = raw_push_pull_median.contains(bytes) ? raw_push_pull_median[bytes] : 0;
        const auto b = budget_for(bytes == 4 ? 4 : bytes < mib ? 4 : bytes, st.quick);
        const std::string name = std::string("petrel_push_pull_") + sh.label;
        if (wanted(name)) {
            auto s = petrel_push_pull(sh.keys, sh.width, b, style::coroutine);
            print(name, s, 2 * bytes, raw, bytes, last_faults_per_iteration, last_wire_bytes);
            plain_push_pull_median[bytes] = s.median();
        }
        // What authentication and TLS cost: the same case with the job's secret (a
        // handshake per connection, nothing per message), then with mutual TLS as well.
        if (sh.keys != 256) {
            petrel::transport_options topts;
            topts.secret = "a secret of the benchmark's job";
            const double plain =
                plain_push_pull_median.contains(bytes) ? plain_push_pull_median[bytes] : 0;
            if (wanted(name + "_auth")) {
                auto s = petrel_push_pull(sh.keys, sh.width, b, style::coroutine, 1, topts);
                print(name + "_auth", s, 2 * bytes, raw, bytes, last_faults_per_iteration,
                      last_wire_bytes, plain);
            }
            topts.tls = {st.tls_dir + "/node.pem", st.tls_dir + "/node.key",
                         st.tls_dir + "/ca.pem"};
            if (wanted(name + "_tls")) {
                auto s = petrel_push_pull(sh.keys, sh.width, b, style::coroutine, 1, topts);
                print(name + "_tls", s, 2 * bytes, raw, bytes, last_faults_per_iteration,
                      last_wire_bytes, plain);
            }
        }
        if (wanted(name + "_2servers")) {
            auto s = petrel_push_pull(sh.keys, sh.width, b, style::coroutine, 2);
            print(name + "_2servers", s, 2 * bytes, raw, bytes, last_faults_per_iteration,
                  last_wire_bytes);
        }
        if (sh.keys == 1 && wanted(name + "_future")) {
            auto s = petrel_push_pull(sh.keys, sh.width, b, style::future);
            print(name + "_future", s, 2 * bytes, raw, bytes, last_faults_per_iteration,
                  last_wire_bytes);
        }
        if (sh.keys > 1 && wanted(name + "_shared")) {
            auto s = petrel_push_pull(sh.keys, sh.width, b, style::shared);
            print(name + "_shared", s, 2 * bytes, raw, bytes, last_faults_per_iteration,
                  last_wire_bytes);
        }
    }
}

/// Push+pull of 16 Mi scalar floats (64 MiB of values) on one server's dense table
/// [0, 16 Mi): by key list (u32 keys, 64 MiB more each way) or by key range (runs only).
samples dense_push_pull(bool ranged, budget b) {
    constexpr std::uint32_t n = std::uint32_t{1} << 24;
    io_thread server_io;
    io_thread worker_io;
    petrel::table_registry tables;
    tables.add<std::uint32_t, float>(0, {.dense = petrel::key_range<std::uint64_t>{0, n}});
    petrel::server_node server(
        petrel::tcp_transport(server_io.executor()),
        {.tables = std::make_shared<const petrel::table_registry>(std::move(tables))});
    petrel::kv_store_options<std::uint32_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    petrel::kv_store<std::uint32_t, float, petrel::eventual> kv(
        petrel::tcp_transport(worker_io.executor()), o);
    std::vector<std::uint32_t> keys(n);
    std::iota(keys.begin(), keys.end(), std::uint32_t{0});
    const petrel::key_range<std::uint32_t> all{0, n};
    auto grad = std::make_shared<xt::xtensor<float, 1>>(xt::ones<float>({std::size_t{n}}));
    auto once = [&] {
        if (ranged) {
            kv.push(all, grad, asio::use_future).get();
            if (kv.pull(all, asio::use_future).get().size() != n) {
                throw std::runtime_error("petrel range pull returned the wrong number of keys");
            }
        } else {
            kv.push(keys, grad, asio::use_future).get();
            if (kv.pull(keys, asio::use_future).get().size() != n) {
                throw std::runtime_error("petrel pull returned the wrong number of keys");
            }
        }
    };
    for (int i = 0; i < 3; ++i) {
        once();
    }
    const auto wire = wire_total(kv);
    auto s = petrel_bench::run_timed(once, b.min_iterations, b.min_seconds, b.max_iterations, 0);
    last_wire_bytes = static_cast<double>(wire_total(kv) - wire) / static_cast<double>(s.size());
    return s;
}

void dense_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    const std::size_t bytes = std::size_t{64} << 20;
    const double raw = raw_push_pull_median.contains(bytes) ? raw_push_pull_median[bytes] : 0;
    const auto b = budget_for(bytes, st.quick);
    if (wanted("petrel_dense_16Mi_scalars_keyed")) {
        auto s = dense_push_pull(false, b);
        print("petrel_dense_16Mi_scalars_keyed", s, 2 * bytes, raw, bytes, -1, last_wire_bytes);
    }
    if (wanted("petrel_dense_16Mi_scalars_range")) {
        auto s = dense_push_pull(true, b);
        print("petrel_dense_16Mi_scalars_range", s, 2 * bytes, raw, bytes, -1, last_wire_bytes);
    }
}

// ---------------------------------------------------------------------------------------
// Consistency: iterations per second of 4 workers with a straggler, per model.
// ---------------------------------------------------------------------------------------

/// One run of the straggler workload: 2 servers and 4 workers in this process. Each
/// iteration a worker pulls 4096 weights, "computes" for 1 ms, pushes 4096 gradients and
/// advances its clock; with probability 1/4 an iteration is slowed by a further 8 ms (a
/// straggler at a time, a different worker each time: garbage collection, a busy core,
/// a slow disk). Returns the seconds the whole job took to do every iteration.
template <typename Policy>
double straggler_run(std::size_t iterations) {
    petrel::config cfg;
    cfg.servers = 2;
    cfg.workers = 4;
    cfg.threads = 2;
    const auto start = clock_type::now();
    const int status = petrel::run(
        cfg,
        [&](petrel::worker_node& w) {
            petrel::kv_store<std::uint64_t, float, Policy> kv(w);
            std::vector<std::uint64_t> keys(4096);
            std::iota(keys.begin(), keys.end(), std::uint64_t{0});
            const xt::xtensor<float, 1> grad = xt::ones<float>({keys.size()}) * 1e-3f;
            std::mt19937 rng(17 + w.rank());
            std::bernoulli_distribution slow(0.25);
            for (std::size_t it = 0; it < iterations; ++it) {
                auto weights = kv.pull(keys, asio::use_future).get();
                std::this_thread::sleep_for(std::chrono::milliseconds(slow(rng) ? 9 : 1));
                kv.push(keys, grad, asio::use_future).get();
                kv.clock();
            }
        },
        petrel::logger{});
    if (status != petrel::run_ok) {
        throw std::runtime_error("the straggler job failed");
    }
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

template <typename Policy>
void straggler_case(const settings& st, const std::string& name, int tau, double& tau0_rate) {
    const std::size_t iterations = st.quick ? 10 : 200;
    const int repeats = st.quick ? 1 : 3;
    std::vector<double> rates;
    for (int r = 0; r < repeats; ++r) {
        rates.push_back(double(4 * iterations) / straggler_run<Policy>(iterations));
    }
    std::sort(rates.begin(), rates.end());
    const double median = rates[rates.size() / 2];
    if (tau == 0 && tau0_rate == 0) {
        tau0_rate = median;
    }
    petrel_bench::json_line line;
    line.add("case", name)
        .add("policy", petrel::policy_name<Policy>())
        .add("tau", tau)
        .add("workers", 4)
        .add("iterations_per_worker", iterations)
        .add("iterations_per_second", median)
        .add("min_iterations_per_second", rates.front())
        .add("max_iterations_per_second", rates.back())
        .add("speedup_vs_tau0", tau0_rate > 0 ? median / tau0_rate : 1.0)
        .add("runs", rates.size());
    line.print();
}

void consistency_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    double tau0 = 0;
    if (wanted("straggler_tau0")) {
        straggler_case<petrel::bounded_delay<0>>(st, "straggler_tau0", 0, tau0);
    }
    if (wanted("straggler_tau1")) {
        straggler_case<petrel::bounded_delay<1>>(st, "straggler_tau1", 1, tau0);
    }
    if (wanted("straggler_tau2")) {
        straggler_case<petrel::bounded_delay<2>>(st, "straggler_tau2", 2, tau0);
    }
    if (wanted("straggler_tau4")) {
        straggler_case<petrel::bounded_delay<4>>(st, "straggler_tau4", 4, tau0);
    }
    if (wanted("straggler_tau8")) {
        straggler_case<petrel::bounded_delay<8>>(st, "straggler_tau8", 8, tau0);
    }
    if (wanted("straggler_eventual")) {
        straggler_case<petrel::eventual>(st, "straggler_eventual", -1, tau0);
    }
    if (wanted("straggler_sequential")) {
        straggler_case<petrel::sequential>(st, "straggler_sequential", 0, tau0);
    }
}

/// Resident memory of this process, from /proc/self/statm (0 where there is none).
std::size_t resident_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) {
        return 0;
    }
    unsigned long pages = 0;
    unsigned long resident = 0;
    const int got = std::fscanf(f, "%lu %lu", &pages, &resident);
    std::fclose(f);
    return got == 2 ? resident * 4096 : 0;
}

/// Bytes per stored key of a sparse table of random u64 keys with float values, as the
/// table counts them and as the process's resident memory grows, against the raw size of
/// key + value + optimizer state.
template <typename Updater>
void sparse_memory_case(const settings& st, const std::string& name, Updater rule) {
    const std::size_t keys_total = st.quick ? 1'000'000 : 10'000'000;
    const std::size_t batch = 1'000'000;
    const std::size_t rss_before = resident_bytes();
    petrel::detail::table<std::uint64_t, float> table(1, petrel::detail::make_updater<float>(rule),
                                                      petrel::initializer::zeros(), std::nullopt);
    std::uint64_t x = 12345;
    auto next = [&x] {
        x += 0x9E3779B97F4A7C15ULL;
        std::uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return (z ^ (z >> 31)) >> 1; // below the reserved largest key
    };
    const auto start = clock_type::now();
    for (std::size_t done = 0; done < keys_total; done += batch) {
        std::vector<std::uint64_t> keys(std::min(batch, keys_total - done));
        for (auto& k : keys) {
            k = next();
        }
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        std::vector<float> values(keys.size(), 0.5f);
        petrel::wire::message m;
        m.header.key_count = keys.size();
        m.set_segment(petrel::wire::keys_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        m.set_segment(petrel::wire::values_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
        table.add(m);
    }
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    const std::size_t rss_after = resident_bytes();
    const double n = static_cast<double>(table.size());
    const double raw = 8.0 + 4.0 * (1.0 + static_cast<double>(table.state_width()));
    const double counted = static_cast<double>(table.memory_bytes()) / n;
    petrel_bench::json_line line;
    line.add("case", name)
        .add("keys", table.size())
        .add("updater", std::string(table.update_rule().name()))
        .add("raw_bytes_per_key", raw)
        .add("bytes_per_key", counted)
        .add("ratio_to_raw", counted / raw)
        .add("rss_bytes_per_key",
             rss_after > rss_before ? static_cast<double>(rss_after - rss_before) / n : 0.0)
        .add("inserts_per_second", n / seconds);
    line.print();
}

void server_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    if (wanted("sparse_memory_sum")) {
        sparse_memory_case(st, "sparse_memory_sum", petrel::sum{});
    }
    if (wanted("sparse_memory_adagrad")) {
        sparse_memory_case(st, "sparse_memory_adagrad", petrel::adagrad{});
    }
}

// ---------------------------------------------------------------------------------------
// Communication efficiency: sparse pushes with key caching, compression and filters;
// concurrent small requests; scaling with servers and workers.
// ---------------------------------------------------------------------------------------

/// Median of the raw one-way stream of the sparse payload (keys + values), for ratio_to_raw.
double raw_sparse_push_median = 0;

/// `n` sorted, unique random u64 keys (below the reserved largest key).
std::vector<std::uint64_t> random_keys(std::size_t n, std::uint64_t seed) {
    std::vector<std::uint64_t> keys;
    keys.reserve(n + n / 8);
    std::uint64_t x = seed;
    while (keys.size() < n) {
        const std::size_t want = n - keys.size();
        for (std::size_t i = 0; i < want + want / 16 + 16; ++i) {
            x += 0x9E3779B97F4A7C15ULL;
            std::uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            keys.push_back((z ^ (z >> 31)) >> 1);
        }
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    keys.resize(n);
    return keys;
}

/// A gradient of `n` floats of which 9 in 10 are zero (a sparse model's typical update).
std::vector<float> mostly_zero_gradient(std::size_t n) {
    std::vector<float> g(n, 0.0f);
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 0.01f);
    for (std::size_t i = 0; i < n; i += 10) {
        g[i] = d(rng);
    }
    return g;
}

struct sparse_variant {
    const char* name;
    bool key_caching = false;
    petrel::wire::compression_mode compression = petrel::wire::compression_mode::off;
    float filter_threshold = 0; // > 0: a significance filter
};

/// Pushes of the same 1 million random keys (u64 keys, one float each, 9 in 10 values
/// zero) to one server, again and again, as a worker does with its working set.
void sparse_case(const settings& st, const sparse_variant& v, double plain_rate, double& rate_out) {
    const std::size_t n = st.quick ? 100'000 : 1'000'000;
    io_thread server_io;
    io_thread worker_io;
    petrel::server_options so;
    so.compression = {.mode = petrel::wire::compression_mode::adaptive, .link_gbps = st.link_gbps};
    petrel::server_node server(petrel::tcp_transport(server_io.executor()), so);
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    o.key_caching = v.key_caching;
    o.compression = {.mode = v.compression, .link_gbps = st.link_gbps};
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(worker_io.executor()), o);
    if (v.filter_threshold > 0) {
        kv.set_filters({std::make_shared<petrel::wire::significance_filter<std::uint64_t, float>>(
            v.filter_threshold)});
    }
    const auto keys = random_keys(n, 11);
    const auto grad = mostly_zero_gradient(n);
    auto once = [&] { kv.push(keys, std::span<const float>(grad), asio::use_future).get(); };
    const auto b = budget_for(n * 12, st.quick);
    for (int i = 0; i < 3; ++i) {
        once();
    }
    const auto before = kv.traffic();
    auto s = petrel_bench::run_timed(once, st.quick ? 2 : 10, st.quick ? 0.0 : 1.0,
                                     std::min<std::size_t>(b.max_iterations, 200), 0);
    const auto after = kv.traffic();
    const double pushes = static_cast<double>(s.size());
    const double wire_bytes = static_cast<double>(after.sent_bytes - before.sent_bytes) / pushes;
    const double raw_bytes = static_cast<double>(n * (sizeof(std::uint64_t) + sizeof(float)));
    const double rate = static_cast<double>(n) / (s.median() * 1e-6);
    rate_out = rate;
    petrel_bench::json_line line;
    line.add("case", std::string(v.name))
        .add("keys", n)
        .add("median_us", s.median())
        .add("p99_us", s.p99())
        .add("keys_per_second", rate)
        .add("bytes_raw", raw_bytes)
        .add("bytes_on_wire", wire_bytes)
        .add("bytes_saved_fraction", 1.0 - wire_bytes / raw_bytes)
        .add("ratio_to_raw", raw_sparse_push_median > 0 ? s.median() / raw_sparse_push_median : 1.0)
        .add("throughput_vs_plain", plain_rate > 0 ? rate / plain_rate : 1.0)
        .add("key_cache_hits", after.key_cache_hits - before.key_cache_hits)
        .add("compressed_fraction",
             after.compression.in > before.compression.in
                 ? 1.0 - static_cast<double>(after.compression.out - before.compression.out) /
                             static_cast<double>(after.compression.in - before.compression.in)
                 : 0.0)
        .add("iterations", s.size());
    line.print();
}

void sparse_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    using mode = petrel::wire::compression_mode;
    const std::vector<sparse_variant> variants = {
        {"sparse_push_1M"},
        {"sparse_push_1M_keycache", true},
        {"sparse_push_1M_snappy", false, mode::always},
        {"sparse_push_1M_keycache_snappy", true, mode::always},
        {"sparse_push_1M_keycache_adaptive", true, mode::adaptive},
        {"sparse_push_1M_filter_snappy", false, mode::always, 1e-3f},
        {"sparse_push_1M_keycache_filter_snappy", true, mode::always, 1e-3f},
    };
    bool any = false;
    for (const auto& v : variants) {
        any = any || wanted(v.name);
    }
    if (!any) {
        return;
    }
    const std::size_t n = st.quick ? 100'000 : 1'000'000;
    const std::size_t payload = n * (sizeof(std::uint64_t) + sizeof(float));
    auto raw =
        petrel_bench::raw::stream_throughput(payload, std::size_t{1} << 20, st.quick ? 2 : 15);
    raw_sparse_push_median = raw.median();
    print("raw_push_sparse_payload", raw, payload, 0, payload, -1,
          static_cast<double>(payload) + 1);
    double plain = 0;
    for (const auto& v : variants) {
        if (!wanted(v.name)) {
            continue;
        }
        double rate = 0;
        sparse_case(st, v, plain, rate);
        if (plain == 0 && std::string(v.name) == "sparse_push_1M") {
            plain = rate;
        }
    }
}

/// The numbers of pushes in flight of the small-request cases.
constexpr std::array<std::size_t, 3> small_in_flight{16, 64, 1000};

/// How the small-request cases learn that their pushes completed.
enum class completion {
    callback, ///< a lambda per push; the last one to run sets a promise
    task,     ///< `petrel::use_task`, all of them awaited through `when_all`
    future,   ///< `asio::use_future`, one future per push
};

/// A completion style's case name suffix and its name in the JSON line.
struct completion_label {
    const char* suffix;
    const char* name;
};

completion_label label_of(completion how) {
    switch (how) {
    case completion::task:
        return {"_task", "use_task"};
    case completion::future:
        return {"_future", "use_future"};
    case completion::callback:
        break;
    }
    return {"", "callback"};
}

/// How long a benchmark waits for pushes it started before it gives up loudly.
constexpr auto small_wait_limit = std::chrono::seconds(60);

/// Waits for `f` at most `small_wait_limit`, then returns its value (or rethrows its error);
/// throws when it did not become ready.
template <typename T>
T get_within_limit(std::future<T>& f, const char* what) {
    if (f.wait_for(small_wait_limit) != std::future_status::ready) {
        throw std::runtime_error(std::string(what) + ": not complete within " +
                                 std::to_string(small_wait_limit.count()) + " s");
    }
    return f.get();
}

/// The pushes of the small-request cases: a one-key push of one float to one server.
using small_store = petrel::kv_store<std::uint64_t, float, petrel::eventual>;

/// Pushes keys 0 .. k-1 (one float each) at once and waits until every push completed.
void small_batch(small_store& kv, std::size_t k, completion how) {
    static const std::vector<float> one{1.0f};
    const std::span<const float> value(one);
    switch (how) {
    case completion::callback: {
        struct countdown {
            std::atomic<std::size_t> left;
            std::atomic<bool> failed{false};
            std::promise<void> done;
        };
        auto c = std::make_shared<countdown>();
        c->left = k;
        auto done = c->done.get_future();
        for (std::size_t i = 0; i < k; ++i) {
            const std::uint64_t key = i;
            kv.push(std::span<const std::uint64_t>(&key, 1), value, [c](std::error_code ec) {
                if (ec) {
                    c->failed = true;
                }
                if (c->left.fetch_sub(1) == 1) {
                    if (c->failed) {
                        c->done.set_exception(std::make_exception_ptr(
                            std::runtime_error("small push: a push failed")));
                    } else {
                        c->done.set_value();
                    }
                }
            });
        }
        get_within_limit(done, "small push (callbacks)");
        break;
    }
    case completion::task: {
        std::vector<petrel::task<>> pushes;
        pushes.reserve(k);
        for (std::size_t i = 0; i < k; ++i) {
            const std::uint64_t key = i;
            pushes.push_back(
                kv.push(std::span<const std::uint64_t>(&key, 1), value, petrel::use_task));
        }
        auto all = petrel::when_all(pushes).async_wait(asio::use_future);
        get_within_limit(all, "small push (use_task)");
        break;
    }
    case completion::future: {
        std::vector<std::future<void>> f;
        f.reserve(k);
        for (std::size_t i = 0; i < k; ++i) {
            const std::uint64_t key = i;
            f.push_back(kv.push(std::span<const std::uint64_t>(&key, 1), value, asio::use_future));
        }
        for (auto& x : f) {
            get_within_limit(x, "small push (use_future)");
        }
        break;
    }
    }
}

/// Bytes on the wire of one one-key push (whole frames): the request and its reply, as
/// `kv.traffic()` counts them once the connection is warm. Sizes the raw pipelined case.
struct push_frame_bytes {
    double request = 0;
    double reply = 0;
};

push_frame_bytes measure_push_frame() {
    io_thread server_io;
    io_thread worker_io;
    petrel::server_node server(petrel::tcp_transport(server_io.executor()));
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    small_store kv(petrel::tcp_transport(worker_io.executor()), o);
    small_batch(kv, 16, completion::future); // connects and creates the table
    const std::size_t pushes = 64;
    const auto before = kv.traffic();
    for (std::size_t i = 0; i < pushes; ++i) {
        small_batch(kv, 1, completion::future);
    }
    const auto after = kv.traffic();
    return {static_cast<double>(after.sent_bytes - before.sent_bytes) / static_cast<double>(pushes),
            static_cast<double>(after.received_bytes - before.received_bytes) /
                static_cast<double>(pushes)};
}

/// Batches per small-request case: fewer for many requests in flight.
std::size_t small_rounds(const settings& st, std::size_t in_flight) {
    return st.quick ? 20 : std::clamp<std::size_t>(200'000 / in_flight, 20, 400);
}

/// The raw Asio counterpart of the small-request cases: `in_flight` requests of a one-key
/// push's size on one connection, answered with replies of its reply's size. Returns the
/// requests per second.
double raw_pipelined_case(const settings& st, std::size_t in_flight, push_frame_bytes frame) {
    const auto request = static_cast<std::size_t>(std::lround(frame.request));
    const auto reply = static_cast<std::size_t>(std::lround(frame.reply));
    const std::size_t rounds = small_rounds(st, in_flight);
    auto s = petrel_bench::raw::pipelined(request, reply, in_flight, rounds, 0.0, rounds);
    const double rate = 1e6 * static_cast<double>(in_flight) / s.median();
    petrel_bench::json_line line;
    line.add("case", "raw_pipelined_1key_x" + std::to_string(in_flight))
        .add("in_flight", in_flight)
        .add("median_us", s.median())
        .add("p99_us", s.p99())
        .add("requests_per_second", rate)
        .add("request_bytes", request)
        .add("reply_bytes", reply)
        .add("iterations", s.size());
    line.print();
    return rate;
}

/// Many small requests in flight at once to one server: `in_flight` concurrent 1-key
/// pushes (as from many threads or coroutines) against the same pushes one at a time,
/// each completing through `how`. The transport writes what queues meanwhile in one
/// gathered write, and the server's replies likewise, so concurrent small requests share
/// system calls. `raw_rate`: requests per second of the raw pipelined case.
void small_requests_case(const settings& st, std::size_t in_flight, completion how,
                         double raw_rate) {
    io_thread server_io;
    io_thread worker_io;
    petrel::server_node server(petrel::tcp_transport(server_io.executor()));
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    small_store kv(petrel::tcp_transport(worker_io.executor()), o);
    const std::size_t rounds = small_rounds(st, in_flight);
    small_batch(kv, in_flight, how); // warm up
    const auto before = kv.traffic();
    samples concurrent;
    for (std::size_t r = 0; r < rounds; ++r) {
        const auto t0 = clock_type::now();
        small_batch(kv, in_flight, how);
        concurrent.add(clock_type::now() - t0);
    }
    const auto after = kv.traffic();
    samples serial;
    const std::size_t serial_rounds =
        std::min(rounds / 4 + 1, std::max<std::size_t>(1, 20'000 / in_flight));
    for (std::size_t r = 0; r < serial_rounds; ++r) {
        const auto t0 = clock_type::now();
        for (std::size_t i = 0; i < in_flight; ++i) {
            small_batch(kv, 1, how);
        }
        serial.add(clock_type::now() - t0);
    }
    const double per_request_concurrent = concurrent.median() / static_cast<double>(in_flight);
    const double per_request_serial = serial.median() / static_cast<double>(in_flight);
    const double rate = 1e6 / per_request_concurrent;
    petrel_bench::json_line line;
    line.add("case", "small_push_1key_x" + std::to_string(in_flight) + label_of(how).suffix)
        .add("completion", label_of(how).name)
        .add("in_flight", in_flight)
        .add("median_us", concurrent.median())
        .add("p99_us", concurrent.p99())
        .add("requests_per_second", rate)
        .add("serial_requests_per_second", 1e6 / per_request_serial)
        .add("speedup_vs_serial", per_request_serial / per_request_concurrent)
        .add("ratio_to_raw",
             raw_pingpong_median > 0 ? per_request_concurrent / raw_pingpong_median : 1.0)
        .add("ratio_to_raw_pipelined", raw_rate > 0 ? rate / raw_rate : 0.0)
        .add("bytes_on_wire_per_request",
             static_cast<double>(after.sent_bytes - before.sent_bytes) /
                 static_cast<double>(rounds * in_flight))
        .add("iterations", concurrent.size());
    line.print();
}

/// The raw baseline's push+pull median for one worker's iteration of 64 Ki keys (4 Ki
/// with --quick) of 16 floats: keys and values out, values back.
double raw_median_for_rows(const settings& st) {
    const std::size_t keys = st.quick ? 4096 : 65536;
    const std::size_t payload = keys * (sizeof(std::uint64_t) + 16 * sizeof(float));
    auto b = budget_for(payload, st.quick);
    return petrel_bench::raw::push_pull(payload, b.min_iterations, b.min_seconds, b.max_iterations)
        .median();
}

/// Goodput in Gbit/s of `streams` streams that each pushed and pulled `keys` rows of
/// `width` floats `iterations` times in `seconds`.
double push_pull_gbps(std::size_t streams, std::size_t iterations, std::size_t keys,
                      std::size_t width, double seconds) {
    const double bytes =
        static_cast<double>(streams * iterations * 2 * keys * width * sizeof(float));
    return bytes * 8 / seconds / 1e9;
}

/// Total push+pull throughput of `n` servers and `n` workers in this process (one job
/// through petrel::run): each worker pushes and pulls 64 Ki random keys with 16 floats each
/// (4 MiB of values) per iteration.
void scaling_case(const settings& st, std::size_t n, double& base, double raw_median) {
    const std::size_t iterations = st.quick ? 3 : 30;
    const std::size_t key_count = st.quick ? 4096 : 65536;
    constexpr std::size_t width = 16;
    petrel::config cfg;
    cfg.servers = static_cast<int>(n);
    cfg.workers = static_cast<int>(n); // threads: the default, the machine's
    std::mutex mutex;
    std::vector<double> seconds;
    samples per_iteration; // every worker's iterations
    std::uint64_t sent = 0;
    const int status = petrel::run(
        cfg,
        [&](petrel::worker_node& w) {
            petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(w, {.width = width});
            const auto keys = random_keys(key_count, 100 + w.rank());
            auto grad = std::make_shared<std::vector<float>>(key_count * width, 0.5f);
            kv.push(keys, grad, asio::use_future).get(); // creates the rows
            const auto before = kv.traffic().sent_bytes;
            std::vector<clock_type::duration> mine;
            const auto t0 = clock_type::now();
            for (std::size_t i = 0; i < iterations; ++i) {
                const auto t1 = clock_type::now();
                kv.push(keys, grad, asio::use_future).get();
                if (kv.pull(keys, asio::use_future).get().size() != keys.size()) {
                    throw std::runtime_error("scaling: short pull");
                }
                mine.push_back(clock_type::now() - t1);
            }
            const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
            std::lock_guard lock(mutex);
            seconds.push_back(t);
            for (auto d : mine) {
                per_iteration.add(d);
            }
            sent += kv.traffic().sent_bytes - before;
        },
        petrel::logger{});
    if (status != petrel::run_ok || seconds.size() != n) {
        throw std::runtime_error("the scaling job failed");
    }
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    const double gbps = push_pull_gbps(n, iterations, key_count, width, slowest);
    if (n == 1) {
        base = gbps;
    }
    petrel_bench::json_line line;
    line.add("case", "scaling_" + std::to_string(n))
        .add("median_us", per_iteration.median())
        .add("p99_us", per_iteration.p99())
        .add("bytes_on_wire_per_iteration",
             static_cast<double>(sent) / static_cast<double>(n * iterations))
        .add("ratio_to_raw", raw_median > 0 ? per_iteration.median() / raw_median : 1.0)
        .add("servers", n)
        .add("workers", n)
        .add("keys_per_worker", key_count)
        .add("width", width)
        .add("iterations_per_worker", iterations)
        .add("total_goodput_gbps", gbps)
        .add("speedup_vs_1", base > 0 ? gbps / base : 1.0)
        .add("io_threads", static_cast<std::size_t>(petrel::default_io_threads()))
        .add("cores", static_cast<std::size_t>(std::thread::hardware_concurrency()));
    line.print();
}

// ---------------------------------------------------------------------------------------
// Server threads: one server's push+pull rate with T I/O threads, over the network from
// another process, and its tables alone (already decoded pushes, no network).
// ---------------------------------------------------------------------------------------

std::string self_path();

/// 1, 2, 4, ... up to the machine's hardware threads (at most 16), and that count.
std::vector<std::size_t> thread_counts() {
    const std::size_t cores = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
    std::vector<std::size_t> out;
    for (std::size_t t = 1; t < cores; t *= 2) {
        out.push_back(t);
    }
    out.push_back(cores);
    return out;
}

/// The server process of the server_threads cases: one server whose I/O runs on
/// `threads` threads, listening on loopback; its address is written to `file`. It serves
/// until it is killed (or for at most ten minutes).
int threads_server(std::size_t threads, const std::string& file) {
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    petrel::transport_options quiet;
    quiet.log = nullptr;
    petrel::server_node server(petrel::tcp_transport(io.get_executor(), quiet));
    const std::string address = server.listen("127.0.0.1:0");
    std::vector<std::thread> pool;
    for (std::size_t i = 0; i < threads; ++i) {
        pool.emplace_back([&io] { io.run(); });
    }
    {
        FILE* f = std::fopen((file + ".tmp").c_str(), "w");
        if (f == nullptr || std::fputs(address.c_str(), f) < 0 || std::fclose(f) != 0) {
            return 1;
        }
        std::rename((file + ".tmp").c_str(), file.c_str());
    }
    std::this_thread::sleep_for(std::chrono::minutes(10));
    ::_exit(0);
}

/// Starts this program as `args` (after the program's path) and returns its process id.
pid_t spawn_self(std::vector<std::string> args) {
    const std::string exe = self_path();
    args.insert(args.begin(), exe);
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t child = 0;
    if (::posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
        throw std::runtime_error("cannot start " + args[1]);
    }
    return child;
}

/// Kills and reaps a child process when it goes out of scope.
struct child_process {
    pid_t pid;
    ~child_process() {
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
    }
};

/// The address the server process wrote to `file`, within 20 s.
std::string wait_for_address(const std::string& file) {
    const auto until = clock_type::now() + std::chrono::seconds(20);
    while (clock_type::now() < until) {
        if (FILE* f = std::fopen(file.c_str(), "r")) {
            char buf[256] = {};
            const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
            std::fclose(f);
            std::remove(file.c_str());
            return std::string(buf, n);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("the server process did not start");
}

/// Runs `body(i)` on `n` threads that start together; returns the seconds until the last
/// one ended.
double run_together(std::size_t n, const std::function<void(std::size_t)>& body) {
    std::mutex mutex;
    std::size_t ready = 0;
    bool go = false;
    std::condition_variable cv;
    std::vector<std::thread> threads;
    std::exception_ptr failure;
    for (std::size_t i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
            {
                std::unique_lock lock(mutex);
                ++ready;
                cv.notify_all();
                cv.wait(lock, [&] { return go; });
            }
            try {
                body(i);
            } catch (...) {
                std::lock_guard lock(mutex);
                failure = std::current_exception();
            }
        });
    }
    clock_type::time_point start;
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return ready == n; });
        go = true;
        start = clock_type::now();
    }
    cv.notify_all();
    for (auto& t : threads) {
        t.join();
    }
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    if (failure) {
        std::rethrow_exception(failure);
    }
    return seconds;
}

/// Runs `once(i)` `n` times on each of `threads` threads that start together, adding each
/// call's time to `times` (when given); returns the seconds until the last thread ended.
double timed_together(std::size_t threads, std::size_t n,
                      const std::function<void(std::size_t)>& once, samples* times) {
    std::mutex mutex;
    return run_together(threads, [&](std::size_t i) {
        std::vector<clock_type::duration> mine;
        for (std::size_t r = 0; r < n; ++r) {
            const auto t0 = clock_type::now();
            once(i);
            mine.push_back(clock_type::now() - t0);
        }
        if (times) {
            std::lock_guard lock(mutex);
            for (auto d : mine) {
                times->add(d);
            }
        }
    });
}

/// One server process with `threads` I/O threads; as many clients (each a `kv_store` with
/// its own connection, in this process) push and pull 64 Ki random keys of 16 floats each
/// per iteration, all at once.
void server_threads_case(const settings& st, std::size_t threads, double& base, double raw_median) {
    const std::size_t iterations = st.quick ? 3 : 20;
    const std::size_t key_count = st.quick ? 4096 : 65536;
    constexpr std::size_t width = 16;
    const std::string file =
        "/tmp/petrel_bench_server_" + std::to_string(::getpid()) + "_" + std::to_string(threads);
    child_process server{spawn_self({"--threads-server", std::to_string(threads), file})};
    const std::string address = wait_for_address(file);
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> io_pool;
    for (std::size_t i = 0; i < threads; ++i) {
        io_pool.emplace_back([&io] { io.run(); });
    }
    struct stop_io {
        asio::io_context& io;
        std::vector<std::thread>& pool;
        ~stop_io() {
            io.stop();
            for (auto& t : pool) {
                t.join();
            }
        }
    } stop{io, io_pool};
    petrel::transport_options quiet;
    quiet.log = nullptr;
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {address};
    o.width = width;
    using store = petrel::kv_store<std::uint64_t, float, petrel::eventual>;
    std::vector<std::unique_ptr<store>> clients;
    std::vector<std::vector<std::uint64_t>> keys;
    for (std::size_t i = 0; i < threads; ++i) {
        clients.push_back(
            std::make_unique<store>(petrel::tcp_transport(io.get_executor(), quiet), o));
        keys.push_back(random_keys(key_count, 7000 + i));
    }
    const auto grad = std::make_shared<std::vector<float>>(key_count * width, 0.5f);
    samples per_iteration;
    auto once = [&](std::size_t i) {
        auto& kv = *clients[i];
        kv.push(keys[i], grad, asio::use_future).get();
        if (kv.pull(keys[i], asio::use_future).get().size() != key_count) {
            throw std::runtime_error("server_threads: short pull");
        }
    };
    timed_together(threads, 2, once, nullptr); // creates the rows, fills the buffers
    const double seconds = timed_together(threads, iterations, once, &per_iteration);
    clients.clear();
    const double gbps = push_pull_gbps(threads, iterations, key_count, width, seconds);
    if (threads == 1) {
        base = gbps;
    }
    petrel_bench::json_line line;
    line.add("case", "server_threads_" + std::to_string(threads))
        .add("median_us", per_iteration.median())
        .add("p99_us", per_iteration.p99())
        .add("ratio_to_raw", raw_median > 0 ? per_iteration.median() / raw_median : 1.0)
        .add("io_threads", threads)
        .add("clients", threads)
        .add("keys_per_client", key_count)
        .add("width", width)
        .add("iterations_per_client", iterations)
        .add("total_goodput_gbps", gbps)
        .add("speedup_vs_1_thread", base > 0 ? gbps / base : 1.0)
        .add("cores", static_cast<std::size_t>(std::thread::hardware_concurrency()));
    line.print();
}

/// A push to a table, as a server receives it: the sorted keys `keys` (u64), each with
/// `width` floats of 0.5.
petrel::wire::message table_push(const std::vector<std::uint64_t>& keys, std::uint32_t width) {
    const std::vector<float> values(keys.size() * width, 0.5f);
    petrel::wire::message m;
    m.header.kind = petrel::wire::message_kind::push;
    m.header.key_type = petrel::wire::scalar_type::u64;
    m.header.value_type = petrel::wire::scalar_type::f32;
    m.header.width = width;
    m.header.key_count = keys.size();
    m.header.range_begin = keys.front();
    m.header.range_end = keys.back() + 1;
    m.set_segment(petrel::wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(petrel::wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

/// A server's table alone: `threads` threads apply already decoded pushes of 64 Ki random
/// keys of 16 floats each, and read them back, as a server's I/O threads do for unordered
/// pushes and ready pulls. The table holds the keys of every thread count's threads from
/// the start, so that each count works on the same table (the same index and rows).
///
/// With `separate`, each thread has a table of its own instead, holding its keys only (the
/// most that splitting a table by key range could give).
void server_threads_apply_case(const settings& st, std::size_t threads, bool separate,
                               double& base) {
    const std::size_t iterations = st.quick ? 5 : 40;
    const std::size_t key_count = st.quick ? 4096 : 65536;
    constexpr std::uint32_t width = 16;
    const std::size_t most = thread_counts().back();
    using table_type = petrel::detail::table<std::uint64_t, float>;
    std::vector<std::unique_ptr<table_type>> tables;
    for (std::size_t i = 0; i < (separate ? most : 1); ++i) {
        tables.push_back(std::make_unique<table_type>(width));
    }
    auto table_of = [&](std::size_t i) -> table_type& { return *tables[separate ? i : 0]; };
    std::vector<petrel::wire::message> pushes;
    for (std::size_t i = 0; i < most; ++i) {
        auto m = table_push(random_keys(key_count, 9000 + i), width);
        if (table_of(i).apply_shared(m)) { // creates the rows
            throw std::runtime_error("server_threads_apply: no memory");
        }
        pushes.push_back(std::move(m));
    }
    std::vector<std::vector<float>> out(threads, std::vector<float>(key_count * width));
    samples per_iteration;
    auto once = [&](std::size_t i) {
        if (table_of(i).apply_shared(pushes[i])) {
            throw std::runtime_error("server_threads_apply: no memory");
        }
        table_of(i).read_shared(pushes[i], reinterpret_cast<std::byte*>(out[i].data()));
    };
    timed_together(threads, 1, once, nullptr);
    const double seconds = timed_together(threads, iterations, once, &per_iteration);
    const double gbps = push_pull_gbps(threads, iterations, key_count, width, seconds);
    if (threads == 1) {
        base = gbps;
    }
    petrel_bench::json_line line;
    line.add("case",
             std::string(separate ? "server_threads_apply_separate_" : "server_threads_apply_") +
                 std::to_string(threads))
        .add("median_us", per_iteration.median())
        .add("p99_us", per_iteration.p99())
        .add("threads", threads)
        .add("keys_per_thread", key_count)
        .add("table_keys", table_of(0).size())
        .add("width", static_cast<std::size_t>(width))
        .add("iterations_per_thread", iterations)
        .add("rows_per_second", static_cast<double>(threads * iterations * 2 * key_count) / seconds)
        .add("total_goodput_gbps", gbps)
        .add("speedup_vs_1_thread", base > 0 ? gbps / base : 1.0)
        .add("cores", static_cast<std::size_t>(std::thread::hardware_concurrency()));
    line.print();
}

/// One large push and pull (64 Ki random u64 keys of 16 floats: 4 MiB each way) to one
/// table, as a server applies and reads a large request: cut into `threads` parts of
/// contiguous keys (`split_request`, timed with the rest) that the caller and `threads` - 1
/// threads of an io_context run at once (`run_parts`). With 1 thread, the request whole
/// (`apply_shared`, `read_shared`): the baseline of the ratios.
void server_split_apply_case(const settings& st, std::size_t threads, double& base) {
    const std::size_t iterations = st.quick ? 5 : 40;
    const std::size_t key_count = st.quick ? 4096 : 65536;
    constexpr std::uint32_t width = 16;
    petrel::detail::table<std::uint64_t, float> table(width);
    const auto m = table_push(random_keys(key_count, 9100), width);
    if (table.apply_shared(m)) { // creates the rows
        throw std::runtime_error("server_split_apply: no memory");
    }
    asio::io_context io;
    auto guard = asio::make_work_guard(io);
    std::vector<std::thread> helpers;
    for (std::size_t i = 1; i < threads; ++i) {
        helpers.emplace_back([&io] { io.run(); });
    }
    const petrel::detail::part_runner on_threads = [&](std::size_t n,
                                                       const std::function<void(std::size_t)>& f) {
        petrel::detail::run_parts(io.get_executor(), n, threads - 1, f);
    };
    std::vector<float> out(key_count * width);
    auto* target = reinterpret_cast<std::byte*>(out.data());
    auto once = [&](std::size_t) {
        if (threads == 1) {
            if (table.apply_shared(m)) {
                throw std::runtime_error("server_split_apply: no memory");
            }
            table.read_shared(m, target);
            return;
        }
        const auto parts = petrel::detail::split_request(m, threads);
        if (table.apply_split(parts, on_threads)) {
            throw std::runtime_error("server_split_apply: no memory");
        }
        table.read_split(parts, target, on_threads);
    };
    samples per_iteration;
    timed_together(1, 1, once, nullptr);
    const double seconds = timed_together(1, iterations, once, &per_iteration);
    guard.reset();
    for (auto& h : helpers) {
        h.join();
    }
    const double gbps = push_pull_gbps(1, iterations, key_count, width, seconds);
    if (threads == 1) {
        base = per_iteration.median();
    }
    petrel_bench::json_line line;
    line.add("case", "server_split_apply_" + std::to_string(threads))
        .add("median_us", per_iteration.median())
        .add("p99_us", per_iteration.p99())
        .add("threads", threads)
        .add("keys", key_count)
        .add("width", static_cast<std::size_t>(width))
        .add("iterations", iterations)
        .add("goodput_gbps", gbps)
        .add("speedup_vs_whole", base > 0 ? base / per_iteration.median() : 1.0)
        .add("cores", static_cast<std::size_t>(std::thread::hardware_concurrency()));
    line.print();
}

void server_threads_cases(const settings& st,
                          const std::function<bool(const std::string&)>& wanted) {
    for (const bool separate : {false, true}) {
        double apply_base = 0;
        for (std::size_t t : thread_counts()) {
            const std::string name =
                std::string(separate ? "server_threads_apply_separate_" : "server_threads_apply_") +
                std::to_string(t);
            if (wanted(name)) {
                server_threads_apply_case(st, t, separate, apply_base);
            }
        }
    }
    double split_base = 0;
    for (std::size_t t : thread_counts()) {
        if (wanted("server_split_apply_" + std::to_string(t))) {
            server_split_apply_case(st, t, split_base);
        }
    }
    double base = 0;
    double raw = -1;
    for (std::size_t t : thread_counts()) {
        const std::string name = "server_threads_" + std::to_string(t);
        if (wanted(name)) {
            if (raw < 0) {
                raw = raw_median_for_rows(st);
            }
            server_threads_case(st, t, base, raw);
        }
    }
}

void efficiency_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    sparse_cases(st, wanted);
    const std::array small_styles{completion::callback, completion::task, completion::future};
    auto small_name = [](std::size_t k, completion how) {
        return "small_push_1key_x" + std::to_string(k) + label_of(how).suffix;
    };
    bool small = false;
    bool pipelined = false;
    for (std::size_t k : small_in_flight) {
        for (auto how : small_styles) {
            small = small || wanted(small_name(k, how));
        }
        pipelined = pipelined || wanted("raw_pipelined_1key_x" + std::to_string(k));
    }
    if (small && raw_pingpong_median == 0) {
        auto b = budget_for(64, st.quick);
        raw_pingpong_median =
            petrel_bench::raw::pingpong(64, b.min_iterations, b.min_seconds, b.max_iterations)
                .median();
    }
    const push_frame_bytes frame = small || pipelined ? measure_push_frame() : push_frame_bytes{};
    for (std::size_t k : small_in_flight) {
        bool any = wanted("raw_pipelined_1key_x" + std::to_string(k));
        for (auto how : small_styles) {
            any = any || wanted(small_name(k, how));
        }
        if (!any) {
            continue;
        }
        const double raw_rate = raw_pipelined_case(st, k, frame);
        for (auto how : small_styles) {
            if (wanted(small_name(k, how))) {
                small_requests_case(st, k, how, raw_rate);
            }
        }
    }
    bool scaling = false;
    for (std::size_t n : {1, 2, 4}) {
        scaling = scaling || wanted("scaling_" + std::to_string(n));
    }
    if (!scaling) {
        return;
    }
    const double raw = raw_median_for_rows(st);
    double base = 0;
    for (std::size_t n : {1, 2, 4}) {
        if (wanted("scaling_" + std::to_string(n))) {
            scaling_case(st, n, base, raw);
        }
    }
}

// ---- fault tolerance ----------------------------------------------------------------

/// Push cost of replication: 3 servers in this process, one worker pushing 64 Ki keys of
/// 16 floats (4 MiB) under `eventual` (acknowledged once the chain applied it) and under
/// `sequential` (push and clock; the replicas get each clock's changed rows), with k
/// copies besides each primary.
void replication_case(const settings& st, std::uint32_t k, double& k0_eventual,
                      double& k0_sequential, double raw_median) {
    constexpr std::size_t servers = 3;
    const std::size_t keys = st.quick ? 4096 : 65536;
    constexpr std::size_t width = 16;
    std::vector<std::unique_ptr<io_thread>> server_io;
    std::vector<std::unique_ptr<petrel::server_node>> nodes;
    petrel::kv_store_options<std::uint64_t> o;
    o.ring.replicas = k;
    o.width = width;
    for (std::size_t i = 0; i < servers; ++i) {
        server_io.push_back(std::make_unique<io_thread>());
        nodes.push_back(std::make_unique<petrel::server_node>(
            petrel::tcp_transport(server_io.back()->executor()),
            petrel::server_options{.node_id = static_cast<std::uint32_t>(i + 1)}));
        o.servers.push_back(nodes.back()->listen("127.0.0.1:0"));
    }
    io_thread worker_io;
    std::vector<std::uint64_t> key_list(keys);
    std::iota(key_list.begin(), key_list.end(), std::uint64_t{0});
    const xt::xtensor<float, 2> grad = xt::ones<float>({keys, width});
    auto b = budget_for(keys * width * sizeof(float), st.quick);
    samples eventual;
    samples sequential;
    {
        o.table_id = 1;
        petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
            petrel::tcp_transport(worker_io.executor()), o);
        for (auto& n : nodes) {
            n->replicate(petrel::replication_plan_of(*kv.view()));
        }
        for (int i = 0; i < 5; ++i) {
            kv.push(key_list, grad, asio::use_future).get();
        }
        eventual = petrel_bench::run_timed([&] { kv.push(key_list, grad, asio::use_future).get(); },
                                           b.min_iterations, b.min_seconds, b.max_iterations, 0);
    }
    {
        o.table_id = 2;
        petrel::kv_store<std::uint64_t, float, petrel::sequential> kv(
            petrel::tcp_transport(worker_io.executor()), o);
        auto once = [&] {
            kv.push(key_list, grad, asio::use_future).get();
            kv.clock(asio::use_future).get(); // the clock completes: its rows go to the chain
        };
        for (int i = 0; i < 5; ++i) {
            once();
        }
        sequential =
            petrel_bench::run_timed(once, b.min_iterations, b.min_seconds, b.max_iterations, 0);
    }
    if (k == 0) {
        k0_eventual = eventual.median();
        k0_sequential = sequential.median();
    }
    petrel_bench::json_line line;
    line.add("case", "replication_k" + std::to_string(k))
        .add("replicas", static_cast<std::size_t>(k))
        .add("servers", servers)
        .add("bytes", keys * width * sizeof(float))
        .add("median_us", eventual.median())
        .add("p99_us", eventual.p99())
        .add("ratio_to_k0", k0_eventual > 0 ? eventual.median() / k0_eventual : 1.0)
        .add("ratio_to_raw", raw_median > 0 ? eventual.median() / raw_median : 1.0)
        .add("sequential_median_us", sequential.median())
        .add("sequential_ratio_to_k0",
             k0_sequential > 0 ? sequential.median() / k0_sequential : 1.0)
        .add("iterations", eventual.size());
    line.print();
}

/// The path of this program, to start it again as a server process.
std::string self_path() {
    std::vector<char> buf(4096);
    const auto n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) {
        throw std::runtime_error("cannot read /proc/self/exe");
    }
    return std::string(buf.data(), static_cast<std::size_t>(n));
}

/// The server process of the recovery case: joins the job at `root` as one server and
/// serves until it is killed (or for at most a minute).
int recovery_server(const std::string& root) {
    io_thread a;
    io_thread b;
    petrel::transport_options quiet;
    quiet.log = nullptr;
    auto server = std::make_shared<petrel::server_node>(petrel::tcp_transport(a.executor(), quiet),
                                                        petrel::server_options{.workers = 2});
    petrel::member_options o;
    o.root = root;
    o.job_id = "recovery";
    o.role = petrel::node_role::server;
    o.rank = 1;
    o.address = server->listen("127.0.0.1:0");
    auto m = std::make_shared<petrel::member>(petrel::tcp_transport(b.executor(), quiet), o);
    m->async_join(asio::use_future).get();
    const petrel::server_agent agent(m, server); // follows the views
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
}

/// One kill: a job of 3 servers (one in a process of its own) and 2 workers training
/// under `sequential` (push, clock, pull of 4096 keys); the server process is killed with
/// SIGKILL and the time until every worker has completed a push and a pull issued after
/// the kill is returned (negative when the job did not recover within 10 s).
double recovery_trial(std::chrono::milliseconds heartbeat_timeout) {
    io_thread io1;
    io_thread io2;
    petrel::transport_options quiet;
    quiet.log = nullptr;
    petrel::manager_node manager(petrel::tcp_transport(io1.executor(), quiet),
                                 {.job_id = "recovery",
                                  .servers = 3,
                                  .workers = 2,
                                  .ring = {.replicas = 1},
                                  .heartbeat_timeout = heartbeat_timeout,
                                  .startup_timeout = std::chrono::milliseconds(20000)});
    const auto root = manager.listen("127.0.0.1:0");
    // The server to kill, in a process of its own.
    const std::string exe = self_path();
    std::vector<std::string> args{exe, "--recovery-server", root};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t child = 0;
    if (::posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
        throw std::runtime_error("cannot start the recovery server process");
    }
    struct reaper {
        pid_t pid;
        ~reaper() {
            ::kill(pid, SIGKILL);
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
    } reap{child};
    auto member_of = [&](petrel::node_role role, std::uint32_t rank, std::string address) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "recovery";
        o.role = role;
        o.rank = rank; // the server process is rank 1
        o.address = std::move(address);
        return std::make_shared<petrel::member>(petrel::tcp_transport(io1.executor(), quiet), o);
    };
    std::vector<std::shared_ptr<petrel::server_node>> servers;
    std::vector<std::shared_ptr<petrel::member>> members;
    for (int i = 0; i < 2; ++i) {
        servers.push_back(std::make_shared<petrel::server_node>(
            petrel::tcp_transport(io2.executor(), quiet), petrel::server_options{.workers = 2}));
        members.push_back(member_of(petrel::node_role::server, i == 0 ? 0 : 2,
                                    servers.back()->listen("127.0.0.1:0")));
    }
    for (int j = 0; j < 2; ++j) {
        members.push_back(
            member_of(petrel::node_role::worker, static_cast<std::uint32_t>(3 + j), {}));
    }
    std::vector<std::future<void>> joins;
    for (auto& m : members) {
        joins.push_back(m->async_join(asio::use_future));
    }
    for (auto& j : joins) {
        j.get();
    }
    std::vector<std::unique_ptr<petrel::server_agent>> agents; // they follow the views
    for (std::size_t i = 0; i < 2; ++i) {
        agents.push_back(std::make_unique<petrel::server_agent>(members[i], servers[i]));
    }
    std::atomic<bool> stop{false};
    std::atomic<long long> killed_at{0}; // steady-clock ns; 0 before the kill
    std::vector<std::future<double>> recovered;
    std::atomic<int> warm{0};
    for (int j = 0; j < 2; ++j) {
        recovered.push_back(std::async(std::launch::async, [&, j] {
            petrel::worker_node w(petrel::tcp_transport(io2.executor(), quiet),
                                  members[static_cast<std::size_t>(2 + j)],
                                  std::chrono::milliseconds(20000));
            petrel::kv_store<std::uint64_t, float> kv(w);
            std::vector<std::uint64_t> keys(4096);
            std::iota(keys.begin(), keys.end(), std::uint64_t{0});
            const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
            int rounds = 0;
            double took = -1;
            while (!stop) {
                const auto start = clock_type::now().time_since_epoch().count();
                try {
                    kv.push(keys, ones, asio::use_future).get();
                    kv.clock();
                    kv.pull(keys, asio::use_future).get();
                } catch (const std::exception&) {
                    return -1.0;
                }
                if (++rounds == 20) {
                    ++warm;
                }
                const auto k = killed_at.load();
                if (k != 0 && start >= k) {
                    took = static_cast<double>(clock_type::now().time_since_epoch().count() - k) /
                           1e3; // µs
                    break;
                }
            }
            w.finish(std::chrono::milliseconds(2000));
            return took;
        }));
    }
    const auto give_up = clock_type::now() + std::chrono::seconds(20);
    while (warm < 2 && clock_type::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (warm < 2) {
        stop = true;
        for (auto& r : recovered) {
            r.wait();
        }
        throw std::runtime_error("recovery: the job did not start training");
    }
    killed_at = clock_type::now().time_since_epoch().count();
    ::kill(child, SIGKILL);
    double worst = 0;
    bool ok = true;
    for (auto& r : recovered) {
        if (r.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
            stop = true;
            ok = false;
        }
        const double t = r.get();
        ok = ok && t >= 0;
        worst = std::max(worst, t);
    }
    stop = true;
    for (auto& m : members) {
        m->close();
    }
    manager.close();
    return ok ? worst : -1;
}

void fault_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    bool replication = false;
    for (std::uint32_t k : {0u, 1u, 2u}) {
        replication = replication || wanted("replication_k" + std::to_string(k));
    }
    if (replication) {
        const double raw = raw_median_for_rows(st);
        double k0_eventual = 0;
        double k0_sequential = 0;
        for (std::uint32_t k : {0u, 1u, 2u}) {
            replication_case(st, k, k0_eventual, k0_sequential, raw);
        }
    }
    if (wanted("recovery")) {
        const int kills = st.quick ? 2 : 12;
        const auto timeout = std::chrono::milliseconds(2000); // the default heartbeat timeout
        samples s;
        int failed = 0;
        for (int i = 0; i < kills; ++i) {
            const double t = recovery_trial(timeout);
            if (t < 0) {
                ++failed;
            } else {
                s.add_us(t);
            }
        }
        petrel_bench::json_line line;
        line.add("case", "recovery")
            .add("kills", static_cast<std::size_t>(kills))
            .add("recovered", s.size())
            .add("failed", static_cast<std::size_t>(failed))
            .add("median_us", s.empty() ? -1.0 : s.median())
            .add("p99_us", s.empty() ? -1.0 : s.p99())
            .add("max_us", s.empty() ? -1.0 : s.max())
            .add("heartbeat_timeout_ms", static_cast<std::size_t>(timeout.count()))
            .add("servers", std::size_t{3})
            .add("workers", std::size_t{2})
            .add("replicas", std::size_t{1});
        line.print();
        if (failed > 0) {
            throw std::runtime_error("recovery: " + std::to_string(failed) + " of " +
                                     std::to_string(kills) + " kills did not recover");
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    settings st;
    const std::vector<std::string> names = {"raw_stream_64MiB",
                                            "raw_pingpong_64B",
                                            "raw_push_pull_1key",
                                            "raw_push_pull_4MiB",
                                            "raw_push_pull_64MiB",
                                            "petrel_push_pull_1key",
                                            "petrel_push_pull_1key_future",
                                            "petrel_push_pull_1key_auth",
                                            "petrel_push_pull_1key_tls",
                                            "petrel_push_pull_4MiB",
                                            "petrel_push_pull_4MiB_shared",
                                            "petrel_push_pull_64MiB",
                                            "petrel_push_pull_64MiB_shared",
                                            "petrel_push_pull_64MiB_auth",
                                            "petrel_push_pull_64MiB_tls",
                                            "petrel_push_pull_1key_2servers",
                                            "petrel_push_pull_4MiB_2servers",
                                            "petrel_push_pull_64MiB_2servers",
                                            "petrel_dense_16Mi_scalars_keyed",
                                            "petrel_dense_16Mi_scalars_range",
                                            "straggler_tau0",
                                            "straggler_tau1",
                                            "straggler_tau2",
                                            "straggler_tau4",
                                            "straggler_tau8",
                                            "straggler_eventual",
                                            "straggler_sequential",
                                            "sparse_memory_sum",
                                            "sparse_memory_adagrad",
                                            "sparse_push_1M",
                                            "sparse_push_1M_keycache",
                                            "sparse_push_1M_snappy",
                                            "sparse_push_1M_keycache_snappy",
                                            "sparse_push_1M_keycache_adaptive",
                                            "sparse_push_1M_filter_snappy",
                                            "sparse_push_1M_keycache_filter_snappy",
                                            "raw_pipelined_1key_x16",
                                            "small_push_1key_x16",
                                            "small_push_1key_x16_task",
                                            "small_push_1key_x16_future",
                                            "raw_pipelined_1key_x64",
                                            "small_push_1key_x64",
                                            "small_push_1key_x64_task",
                                            "small_push_1key_x64_future",
                                            "raw_pipelined_1key_x1000",
                                            "small_push_1key_x1000",
                                            "small_push_1key_x1000_task",
                                            "small_push_1key_x1000_future",
                                            "scaling_1",
                                            "scaling_2",
                                            "scaling_4",
                                            "server_threads_apply_1",
                                            "server_threads_apply_2",
                                            "server_threads_apply_4",
                                            "server_threads_apply_8",
                                            "server_threads_apply_16",
                                            "server_threads_apply_separate_1",
                                            "server_threads_apply_separate_2",
                                            "server_threads_apply_separate_4",
                                            "server_threads_apply_separate_8",
                                            "server_threads_apply_separate_16",
                                            "server_split_apply_1",
                                            "server_split_apply_2",
                                            "server_split_apply_4",
                                            "server_split_apply_8",
                                            "server_split_apply_16",
                                            "server_threads_1",
                                            "server_threads_2",
                                            "server_threads_4",
                                            "server_threads_8",
                                            "server_threads_16",
                                            "replication_k0",
                                            "replication_k1",
                                            "replication_k2",
                                            "recovery"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--recovery-server" && i + 1 < argc) {
            return recovery_server(argv[i + 1]);
        }
        if (a == "--threads-server" && i + 2 < argc) {
            return threads_server(std::stoul(argv[i + 1]), argv[i + 2]);
        }
        if (a == "--quick") {
            st.quick = true;
        } else if (a == "--link-gbps" && i + 1 < argc) {
            const std::string g = argv[++i];
            try {
                st.link_gbps = std::stod(g);
            } catch (const std::exception&) {
                st.link_gbps = 0;
            }
            if (!(st.link_gbps > 0)) {
                std::fprintf(stderr, "petrel_bench: --link-gbps must be positive\n");
                return 2;
            }
        } else if (a == "--tls-dir" && i + 1 < argc) {
            st.tls_dir = argv[++i];
        } else if (a == "--case" && i + 1 < argc) {
            st.only.emplace_back(argv[++i]);
        } else if (a == "--list") {
            for (const auto& n : names) {
                std::printf("%s\n", n.c_str());
            }
            return 0;
        } else {
            std::fprintf(
                stderr,
                "usage: petrel_bench [--quick] [--case NAME]... [--link-gbps G] [--tls-dir DIR] "
                "[--list]\n"
                "unknown argument: %s\n",
                a.c_str());
            return 2;
        }
    }
    auto wanted = [&](const std::string& name) {
        if (st.only.empty()) {
            return true;
        }
        for (const auto& o : st.only) {
            if (name.find(o) != std::string::npos) {
                return true;
            }
        }
        return false;
    };
    try {
        raw_cases(st, wanted);
        petrel_cases(st, wanted);
        dense_cases(st, wanted);
        consistency_cases(st, wanted);
        server_cases(st, wanted);
        efficiency_cases(st, wanted);
        server_threads_cases(st, wanted);
        fault_cases(st, wanted);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "petrel_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
