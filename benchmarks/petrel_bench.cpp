// Petrel's benchmark: each case prints one JSON line. Petrel's cases are compared with a
// raw Asio TCP baseline measured in the same run for the same bytes.
//
//   petrel_bench                 all cases
//   petrel_bench --case NAME     the cases whose name contains NAME (repeatable)
//   petrel_bench --quick         few iterations (a smoke run)
//   petrel_bench --list          case names
#include <petrel/petrel.hpp>

#include "bench_stats.hpp"
#include "raw_asio_baseline.hpp"

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
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
};

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
/// Goodput of the raw one-way stream, for goodput_vs_raw_stream.
double raw_stream_gbps = 0;

void print(const std::string& name, const samples& s, std::size_t bytes_moved, double raw_median,
           std::size_t payload) {
    petrel_bench::json_line line;
    line.add("case", name)
        .add("median_us", s.median())
        .add("p99_us", s.p99())
        .add("min_us", s.min())
        .add("goodput_gbps", petrel_bench::gbit_per_s(bytes_moved, s.median()))
        .add("ratio_to_raw", raw_median > 0 ? s.median() / raw_median : 1.0)
        .add("bytes", payload)
        .add("iterations", s.size());
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
        print("raw_stream_64MiB", s, 64 * mib, 0, 64 * mib);
        raw_stream_gbps = petrel_bench::gbit_per_s(64 * mib, s.median());
    }
    if (wanted("raw_pingpong_64B")) {
        auto b = budget_for(64, st.quick);
        auto s = petrel_bench::raw::pingpong(64, b.min_iterations, b.min_seconds, b.max_iterations);
        print("raw_pingpong_64B", s, 128, 0, 64);
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
        print(name, s, 2 * bytes, 0, bytes);
    }
}

/// Push+pull of `keys` keys of `width` floats each, one worker and one server over TCP on
/// loopback, each node on its own io thread. The worker drives the loop from a coroutine.
enum class style { coroutine, future, shared };

samples petrel_push_pull(std::size_t keys, std::size_t width, budget b, style how) {
    io_thread server_io;
    io_thread worker_io;
    petrel::server_node server(petrel::tcp_transport(server_io.executor()));
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    o.width = width;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(worker_io.executor()), o);

    std::vector<std::uint64_t> key_list(keys);
    std::iota(key_list.begin(), key_list.end(), std::uint64_t{0});
    auto grad = std::make_shared<xt::xtensor<float, 2>>(xt::ones<float>({keys, width}));
    // The first rounds create the server's table and fill the buffer pools and socket
    // buffers; the measured rounds are the steady state a training loop sees.
    const std::size_t warmup =
        std::max<std::size_t>(3, std::min<std::size_t>(b.min_iterations / 10, 20));

    if (how == style::future) {
        auto once = [&] {
            kv.push(key_list, *grad, asio::use_future).get();
            auto got = kv.pull(key_list, asio::use_future).get();
            if (got.size() != keys) {
                throw std::runtime_error("petrel pull returned the wrong number of keys");
            }
        };
        return petrel_bench::run_timed(once, b.min_iterations, b.min_seconds, b.max_iterations,
                                       warmup);
    }
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
    return asio::co_spawn(worker_io.executor(), loop(), asio::use_future).get();
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
            print(name, petrel_push_pull(sh.keys, sh.width, b, style::coroutine), 2 * bytes, raw,
                  bytes);
        }
        if (sh.keys == 1 && wanted(name + "_future")) {
            print(name + "_future", petrel_push_pull(sh.keys, sh.width, b, style::future),
                  2 * bytes, raw, bytes);
        }
        if (sh.keys > 1 && wanted(name + "_shared")) {
            print(name + "_shared", petrel_push_pull(sh.keys, sh.width, b, style::shared),
                  2 * bytes, raw, bytes);
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
    return petrel_bench::run_timed(once, b.min_iterations, b.min_seconds, b.max_iterations, 3);
}

void dense_cases(const settings& st, const std::function<bool(const std::string&)>& wanted) {
    const std::size_t bytes = std::size_t{64} << 20;
    const double raw = raw_push_pull_median.contains(bytes) ? raw_push_pull_median[bytes] : 0;
    const auto b = budget_for(bytes, st.quick);
    if (wanted("petrel_dense_16Mi_scalars_keyed")) {
        print("petrel_dense_16Mi_scalars_keyed", dense_push_pull(false, b), 2 * bytes, raw, bytes);
    }
    if (wanted("petrel_dense_16Mi_scalars_range")) {
        print("petrel_dense_16Mi_scalars_range", dense_push_pull(true, b), 2 * bytes, raw, bytes);
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
                                            "petrel_push_pull_4MiB",
                                            "petrel_push_pull_4MiB_shared",
                                            "petrel_push_pull_64MiB",
                                            "petrel_push_pull_64MiB_shared",
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
                                            "sparse_memory_adagrad"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {
            st.quick = true;
        } else if (a == "--case" && i + 1 < argc) {
            st.only.emplace_back(argv[++i]);
        } else if (a == "--list") {
            for (const auto& n : names) {
                std::printf("%s\n", n.c_str());
            }
            return 0;
        } else {
            std::fprintf(stderr,
                         "usage: petrel_bench [--quick] [--case NAME]... [--list]\n"
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
    } catch (const std::exception& e) {
        std::fprintf(stderr, "petrel_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
