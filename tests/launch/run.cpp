#include <petrel/launch/run.hpp>

#include "support/cluster.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/tls.hpp"

#include <petrel/cluster/manager_node.hpp>
#include <petrel/kv_store.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::start_job;

namespace {

std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// The keys worker `r` pushes: a dense stride of its own, sparse keys of its own, and
/// sparse keys every worker shares. Sorted and unique.
std::vector<std::uint64_t> keys_of(std::uint32_t r) {
    std::set<std::uint64_t> s;
    for (std::uint64_t k = 0; k < 20000; k += r + 2) {
        s.insert(k);
    }
    for (std::uint64_t i = 0; i < 1000; ++i) {
        s.insert(mix(r * 100000 + i) >> 2);
    }
    for (std::uint64_t i = 0; i < 500; ++i) {
        s.insert(mix(7770000 + i) >> 2);
    }
    return {s.begin(), s.end()};
}

struct tally {
    std::atomic<std::size_t> workers{0};
    std::atomic<std::size_t> checked{0};
    std::atomic<std::size_t> mismatches{0};
};

constexpr int rounds = 5;

/// Every worker pushes `rounds` times to overlapping key sets, then every worker pulls
/// the union and compares with the exact sums.
void exact_sums(petrel::worker_node& w, tally& t) {
    petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 3});
    const auto mine = keys_of(w.rank());
    const xt::xtensor<float, 1> values = xt::ones<float>({mine.size()}) * float(w.rank() + 1);
    for (int i = 0; i < rounds; ++i) {
        kv.push(mine, values, asio::use_future).get();
        kv.clock(); // sequential: the pull below, at clock `rounds`, sees every round
    }
    std::map<std::uint64_t, float> expected;
    for (std::uint32_t q = 0; q < w.workers(); ++q) {
        for (auto k : keys_of(q)) {
            expected[k] += float(rounds) * float(q + 1);
        }
    }
    std::vector<std::uint64_t> all;
    for (const auto& [k, v] : expected) {
        all.push_back(k);
    }
    const auto got = kv.pull(all, asio::use_future).get();
    std::size_t bad = got.size() == all.size() ? 0 : 1;
    for (std::size_t i = 0; i < all.size() && i < got.size(); ++i) {
        bad += got.values()(i) == expected[all[i]] ? 0 : 1;
    }
    t.checked += all.size();
    t.mismatches += bad;
    ++t.workers;
}

petrel::config quick_heartbeats() {
    petrel::config cfg;
    cfg.heartbeat_interval = 100ms;
    cfg.heartbeat_timeout = 1000ms;
    cfg.startup_timeout = 60000ms;
    return cfg;
}

} // namespace

TEST_CASE("run: a launched process that listens on every interface says so, with the advice",
          "[launch][security]") {
    petrel::settings s;
    s.bind = "127.0.0.1";
    CHECK(petrel::detail::wildcard_bind_warning(s).empty()); // embedded, one interface
    s.bind = "0.0.0.0";
    CHECK(petrel::detail::wildcard_bind_warning(s).empty()); // embedded: nobody else to reach
    s.launch.kind = petrel::launcher_kind::open_mpi;
    CHECK_THAT(petrel::detail::wildcard_bind_warning(s),
               Catch::Contains("every interface (0.0.0.0)") && Catch::Contains("--bind"));
    s.bind = "::";
    CHECK_THAT(petrel::detail::wildcard_bind_warning(s), Catch::Contains("(::)"));
    s.bind = "10.0.0.7";
    CHECK(petrel::detail::wildcard_bind_warning(s).empty());
}

TEST_CASE("run: a launched process without a secret refuses to start unless --insecure",
          "[launch][security]") {
    petrel::settings s;
    CHECK(petrel::detail::secret_refusal(s).empty()); // embedded: run makes a secret
    s.launch.kind = petrel::launcher_kind::slurm;
    CHECK_THAT(petrel::detail::secret_refusal(s),
               Catch::Contains("--secret-file") && Catch::Contains("--insecure"));
    s.insecure = true;
    CHECK(petrel::detail::secret_refusal(s).empty());
    s.insecure = false;
    s.secret = "0123456789abcdef";
    CHECK(petrel::detail::secret_refusal(s).empty());

    // The refusal comes before anything starts: no listener, no worker, no wait.
    s.secret.clear();
    petrel::test::log_capture log;
    bool called = false;
    CHECK(petrel::run(
              s, [&](petrel::worker_node&) { called = true; }, log.logger()) ==
          petrel::run_config_error);
    CHECK_FALSE(called);
    CHECK_THAT(log.all(), Catch::Contains("no secret") && Catch::Contains("--insecure"));

    // With --insecure it starts, and says what that means. (Its root's port is taken, so
    // the rank fails at once after the warning.)
    asio::io_context io;
    asio::ip::tcp::acceptor busy(io, {asio::ip::make_address("127.0.0.1"), 0});
    const auto env = petrel::map_environment(
        {{"PETREL_RANK", "0"},
         {"PETREL_SIZE", "2"},
         {"PETREL_ROOT", "127.0.0.1:" + std::to_string(busy.local_endpoint().port())},
         {"PETREL_ROLES", "manager"},
         {"PETREL_SERVERS", "1"},
         {"PETREL_WORKERS", "1"},
         {"PETREL_INSECURE", "1"}});
    const char* argv[] = {"trainer"};
    const auto insecure = petrel::resolve(quick_heartbeats(), 1, argv, env);
    REQUIRE(insecure.insecure);
    REQUIRE(insecure.secret.empty());
    petrel::test::log_capture warned;
    CHECK(petrel::run(
              insecure, [](petrel::worker_node&) {}, warned.logger()) == petrel::run_failed);
    CHECK_THAT(warned.all(), Catch::Contains("running without a secret (--insecure)"));
}

TEST_CASE("run: saves write under the checkpoint root; a directory out of it is refused at the "
          "worker",
          "[checkpoint][security]") {
    petrel::test::temp_dir dir;
    const auto root = dir.path() / "root";
    std::filesystem::create_directories(root);
    auto cfg = quick_heartbeats();
    cfg.servers = 2;
    cfg.workers = 1;
    cfg.checkpoint_root = root.string();
    petrel::test::log_capture log;
    std::vector<std::error_code> refusals;
    REQUIRE(petrel::run(
                cfg,
                [&](petrel::worker_node& w) {
                    petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 3});
                    const std::vector<std::uint64_t> keys{1, 5, 1u << 20};
                    kv.push(keys, xt::xtensor<float, 1>{1.0f, 2.0f, 3.0f}, asio::use_future).get();
                    kv.clock();
                    kv.save("run1/epoch1", asio::use_future).get();
                    for (const auto* bad : {"../outside", "/tmp/outside", "a/../../outside"}) {
                        try {
                            kv.save(bad, asio::use_future).get();
                            refusals.emplace_back();
                        } catch (const std::system_error& e) {
                            refusals.push_back(e.code());
                        }
                    }
                },
                log.logger()) == petrel::run_ok);
    REQUIRE(refusals.size() == 3);
    for (const auto& ec : refusals) {
        CHECK(ec == petrel::errc::invalid_argument);
    }
    CHECK_THAT(log.all(), Catch::Contains("checkpoint refused") && Catch::Contains("\"..\""));
    CHECK_FALSE(std::filesystem::exists(dir.path() / "outside"));
    // Shards and manifest side by side under the root.
    const auto m = petrel::read_checkpoint(root / "run1" / "epoch1", 3);
    CHECK(m.shards.size() == 2);
    std::uintmax_t rows = 0;
    for (const auto& shard : m.shards) {
        rows += shard.rows;
        CHECK(std::filesystem::exists(root / "run1" / "epoch1" / "table-3" / shard.file));
    }
    CHECK(rows == 3);
}

TEST_CASE("run: the limits given reach the nodes: a worker's pushes create no more rows than "
          "max_rows_per_connection",
          "[launch][security]") {
    auto cfg = quick_heartbeats();
    cfg.servers = 1;
    cfg.workers = 1;
    cfg.limits.max_rows_per_connection = 100;
    petrel::test::log_capture log;
    std::error_code refused;
    bool existing_taken = false;
    REQUIRE(petrel::run(
                cfg,
                [&](petrel::worker_node& w) {
                    petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 3});
                    // Rows 0..59, then 1000..1059 (under the limit when sent, 120 after),
                    // then 2000..2059: over the limit, refused whole.
                    std::array<std::vector<std::uint64_t>, 3> keys;
                    for (std::uint64_t part = 0; part < keys.size(); ++part) {
                        for (std::uint64_t i = 0; i < 60; ++i) {
                            keys[part].push_back(1000 * part + i);
                        }
                    }
                    const xt::xtensor<float, 1> ones = xt::ones<float>({std::size_t{60}});
                    kv.push(keys[0], ones, asio::use_future).get();
                    kv.push(keys[1], ones, asio::use_future).get();
                    try {
                        kv.push(keys[2], ones, asio::use_future).get();
                    } catch (const std::system_error& e) {
                        refused = e.code();
                    }
                    kv.push(keys[0], ones, asio::use_future).get(); // rows that exist: taken
                    existing_taken = true;
                    kv.clock();
                },
                log.logger()) == petrel::run_ok);
    CHECK(refused == petrel::errc::too_many_rows);
    CHECK(existing_taken);
}

// The job itself. Without a launcher it is an in-process cluster of 3 servers and 4
// workers over loopback TCP; started by the tests below (PETREL_*, mpirun, namespaces)
// each process hosts its share.
TEST_CASE("run: servers and workers give exact sums over overlapping keys", "[cluster][spmd]") {
    auto cfg = quick_heartbeats();
    const auto launch = petrel::detect_launcher(petrel::process_environment());
    if (launch.kind == petrel::launcher_kind::embedded) {
        cfg.servers = 3;
        cfg.workers = 4;
    }
    tally t;
    const int status = petrel::run(cfg, [&](petrel::worker_node& w) { exact_sums(w, t); });
    REQUIRE(status == petrel::run_ok);
    CHECK(t.mismatches == 0);
    CHECK(t.checked >= t.workers * 10000); // every worker of this process compared its pull
    if (launch.kind == petrel::launcher_kind::embedded) {
        CHECK(t.workers == 4);
    }
}

// Pushes until something fails (a process of the job is killed by the test below).
TEST_CASE("run: workers push until the job fails", "[.][spmd_until_failure]") {
    auto cfg = quick_heartbeats();
    const int status = petrel::run(cfg, [](petrel::worker_node& w) {
        petrel::kv_store<std::uint64_t, float> kv(w);
        std::vector<std::uint64_t> keys(20000);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            keys[i] = i;
        }
        const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
        const auto stop = std::chrono::steady_clock::now() + 60s;
        while (std::chrono::steady_clock::now() < stop) {
            kv.push(keys, ones, asio::use_future).get(); // throws once a server is gone
            kv.pull(keys, asio::use_future).get();
            kv.clock();
            std::this_thread::sleep_for(5ms);
        }
    });
    CHECK(status == petrel::run_ok); // fails, as it should, when a node died
}

TEST_CASE("run: a training function that throws fails the run with its message",
          "[cluster][launch]") {
    auto cfg = quick_heartbeats();
    cfg.servers = 1;
    cfg.workers = 2;
    std::mutex mutex;
    std::string logged;
    const int status = petrel::run(
        cfg,
        [](petrel::worker_node& w) {
            if (w.rank() == 1) {
                throw std::runtime_error("diverged at step 7");
            }
        },
        [&](petrel::log_level, std::string_view text) {
            std::lock_guard lock(mutex);
            logged += std::string(text) + "\n";
        });
    CHECK(status == petrel::run_failed);
    CHECK_THAT(logged, Catch::Contains("diverged at step 7") && Catch::Contains("worker 3"));
}

TEST_CASE("run: a training function that throws fails the job with one line naming the worker",
          "[cluster][launch]") {
    auto cfg = quick_heartbeats();
    cfg.job_id = "one-line";
    cfg.servers = 1;
    cfg.workers = 2;
    std::mutex mutex;
    std::vector<std::string> errors;
    const int status = petrel::run(
        cfg,
        [](petrel::worker_node& w) {
            if (w.rank() == 1) {
                throw std::runtime_error("diverged at step 7\nloss is nan");
            }
        },
        [&](petrel::log_level level, std::string_view text) {
            if (level == petrel::log_level::error) {
                std::lock_guard lock(mutex);
                errors.emplace_back(text);
            }
        });
    CHECK(status == petrel::run_failed);
    // The last word is one line that says why, the worker and its exception named.
    REQUIRE_FALSE(errors.empty());
    CHECK(errors.back() == "petrel: job 'one-line' failed (rank 0): worker 3 (worker #1, rank 0) "
                           "failed: the training function failed: diverged at step 7; loss is nan");
}

TEST_CASE("run: --help prints the options, a bad option is refused", "[cluster][launch]") {
    const char* help[] = {"trainer", "--help"};
    CHECK(petrel::run({}, 2, help, [](petrel::worker_node&) { FAIL("no job runs on --help"); }) ==
          petrel::run_ok);
    const char* bad[] = {"trainer", "--servers", "many"};
    CHECK(petrel::run({}, 3, bad, [](petrel::worker_node&) {}) == petrel::run_config_error);
}

TEST_CASE("run: the servers of a process share its threads when they cut large requests",
          "[cluster][launch]") {
    using petrel::detail::server_split_threads;
    CHECK(server_split_threads(16, 1) == 16);
    CHECK(server_split_threads(16, 2) == 8);
    CHECK(server_split_threads(16, 3) == 5);
    CHECK(server_split_threads(2, 2) == 1); // two servers on two threads: none cuts
    CHECK(server_split_threads(2, 4) == 1); // its own thread, at least
    CHECK(server_split_threads(4, 0) == 4); // a process with no server
    CHECK(server_split_threads(1, 1) == 1);
}

TEST_CASE("run: a kv_store in a job fails at once on a server the manager declared failed",
          "[cluster][launch]") {
    // A manager, one real server, one server that accepts requests but never answers (a
    // hung process), and one worker.
    petrel::test::io_threads io{2};
    petrel::transport_options quiet;
    quiet.log = nullptr;
    petrel::manager_node manager(petrel::tcp_transport(io.executor(), quiet),
                                 {.job_id = "j",
                                  .servers = 2,
                                  .workers = 1,
                                  .ring = {.partitions = 16, .stripe_keys = 1},
                                  .heartbeat_timeout = 1000ms,
                                  .startup_timeout = 10000ms});
    const auto root = manager.listen("127.0.0.1:0");
    petrel::server_node real(petrel::tcp_transport(io.executor(), quiet));
    const auto real_address = real.listen("127.0.0.1:0");
    auto hung = petrel::tcp_transport(io.executor(), quiet);
    petrel::connection_handlers silent;
    silent.on_message = [](const petrel::connection_ptr&, petrel::wire::message&&) {};
    silent.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    const auto hung_address = hung.listen("127.0.0.1:0", silent);
    auto member_of = [&](petrel::node_role role, std::uint32_t rank, std::string address) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "j";
        o.role = role;
        o.rank = rank;
        o.address = std::move(address);
        o.heartbeat_interval = 100ms;
        o.heartbeat_timeout = 1000ms;
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet), o);
    };
    auto m_real = member_of(petrel::node_role::server, 0, real_address);
    auto m_hung = member_of(petrel::node_role::server, 1, hung_address);
    auto m_worker = member_of(petrel::node_role::worker, 2, {});
    auto j1 = m_real->async_join(asio::use_future);
    auto j2 = m_hung->async_join(asio::use_future);
    auto j3 = m_worker->async_join(asio::use_future);
    j1.get();
    j2.get();
    j3.get();
    petrel::worker_node w(petrel::tcp_transport(io.executor(), quiet), m_worker, 30s);
    CHECK(w.rank() == 0);
    CHECK(w.servers() == 2);
    petrel::kv_store<std::uint64_t, float> kv(w);

    std::vector<std::uint64_t> keys(64);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        keys[i] = i;
    }
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    auto waiting = kv.push(keys, ones, asio::use_future); // a slice waits on the hung server
    CHECK(waiting.wait_for(200ms) == std::future_status::timeout);
    const auto start = std::chrono::steady_clock::now();
    m_hung->close(); // the manager loses it and tells the worker
    REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
    CHECK(std::chrono::steady_clock::now() - start < 5s); // not the 30 s request timeout
    try {
        waiting.get();
        FAIL("the push should fail");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::node_failed);
    }
    // Keys of the live server still work; keys of the failed one fail at once.
    std::vector<std::uint64_t> live, dead;
    const auto v = kv.view();
    for (auto k : keys) {
        (v->ring.owner(k) == m_real->id() ? live : dead).push_back(k);
    }
    REQUIRE(!live.empty());
    REQUIRE(!dead.empty());
    CHECK(kv.pull(live, asio::use_future).get().size() == live.size());
    CHECK_THROWS_AS(kv.pull(dead, asio::use_future).get(), std::system_error);

    // Stores share the worker's transport: closing one leaves the others working, and a
    // store made later sees the failure at once.
    kv.close();
    petrel::kv_store<std::uint64_t, float, petrel::eventual> other(w, {.table_id = 2});
    other.push(live, xt::xtensor<float, 1>(xt::ones<float>({live.size()})), asio::use_future).get();
    CHECK(other.pull(live, asio::use_future).get().values()(0) == 1.0f);
    CHECK_THROWS_AS(other.pull(dead, asio::use_future).get(), std::system_error);
    hung.close();
}

TEST_CASE("run: a rank whose manager cannot listen fails at once, no hang", "[cluster][launch]") {
    asio::io_context io;
    asio::ip::tcp::acceptor busy(io, {asio::ip::make_address("127.0.0.1"), 0});
    const auto root = "127.0.0.1:" + std::to_string(busy.local_endpoint().port());
    const auto env = petrel::map_environment({{"PETREL_RANK", "0"},
                                              {"PETREL_SIZE", "2"},
                                              {"PETREL_ROOT", root},
                                              {"PETREL_ROLES", "manager"},
                                              {"PETREL_SERVERS", "1"},
                                              {"PETREL_WORKERS", "1"},
                                              {"PETREL_SECRET", petrel::test::job_secret()}});
    const char* argv[] = {"trainer"};
    const auto s = petrel::resolve(quick_heartbeats(), 1, argv, env);
    CHECK(s.managers_here == 1);
    std::string logged;
    const int status = petrel::run(
        s, [](petrel::worker_node&) {},
        [&](petrel::log_level, std::string_view t) { logged += t; });
    CHECK(status == petrel::run_failed);
    CHECK_THAT(logged, Catch::Contains("could not start"));
}

TEST_CASE("run: a process declaring another update rule fails at join, naming table and field",
          "[cluster][launch]") {
    // Two ranks of one job in this process: rank 0 (manager, a server, the worker) declares
    // adagrad for table 0, rank 1 (the other server) sgd. Neither may train.
    const auto root = "127.0.0.1:" + std::to_string(petrel::test::free_port());
    struct rank_run {
        std::mutex mutex;
        std::string logged;
        int status = -1;
    };
    std::array<rank_run, 2> ranks;
    std::atomic<int> trained{0};
    auto start = [&](std::uint32_t rank, const char* roles, auto rule) {
        auto cfg = quick_heartbeats();
        cfg.startup_timeout = 3000ms;
        petrel::table_registry tables;
        tables.add<std::uint64_t, float>(0, {.width = 4}, rule);
        cfg.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
        const auto env = petrel::map_environment({{"PETREL_RANK", std::to_string(rank)},
                                                  {"PETREL_SIZE", "2"},
                                                  {"PETREL_ROOT", root},
                                                  {"PETREL_ROLES", roles},
                                                  {"PETREL_SERVERS", "2"},
                                                  {"PETREL_WORKERS", "1"},
                                                  {"PETREL_JOB_ID", "declarations"},
                                                  {"PETREL_SECRET", petrel::test::job_secret()}});
        const char* argv[] = {"trainer"};
        const auto s = petrel::resolve(cfg, 1, argv, env);
        auto& r = ranks[rank];
        return std::thread([&r, &trained, s] {
            r.status = petrel::run(
                s, [&](petrel::worker_node&) { ++trained; },
                [&r](petrel::log_level, std::string_view text) {
                    std::lock_guard lock(r.mutex);
                    r.logged += std::string(text) + "\n";
                });
        });
    };
    auto first = start(0, "manager,server,worker", petrel::adagrad{});
    std::this_thread::sleep_for(300ms); // rank 0's nodes usually register first
    auto second = start(1, "server", petrel::sgd{});
    first.join();
    second.join();
    const std::string all = ranks[0].logged + ranks[1].logged;
    INFO(all);
    CHECK(ranks[0].status == petrel::run_failed);
    CHECK(ranks[1].status == petrel::run_failed);
    CHECK(trained == 0);
    // The refused rank names the first difference with both values.
    CHECK_THAT(all, Catch::Contains("could not join: table 0: update rule is ") &&
                        Catch::Contains("sgd{eta=0.01,l1=0,l2=0}") &&
                        Catch::Contains("adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0}"));
}

TEST_CASE("run: a job under mutual TLS trains exactly, and a peer without a certificate of the "
          "job's authority is refused and changes nothing",
          "[cluster][launch][security][tls]") {
    // Two ranks of one launched job in this process, each node's connections under TLS and
    // the secret. While they train, hostile peers that hold the secret try the manager.
    const auto root = "127.0.0.1:" + std::to_string(petrel::test::free_port());
    struct rank_run {
        std::mutex mutex;
        std::string logged;
        int status = -1;
    };
    std::array<rank_run, 2> ranks;
    tally t;
    std::atomic<int> refused{0};
    auto try_as_stranger = [&](petrel::tls_files tls) {
        asio::io_context io;
        petrel::tcp_transport hostile(
            io.get_executor(),
            {.log = nullptr, .secret = petrel::test::job_secret(), .tls = std::move(tls)});
        auto connected = hostile.async_connect(root, {}, asio::use_future);
        auto work = asio::make_work_guard(io);
        std::thread runner([&io] { io.run(); });
        if (connected.wait_for(10s) == std::future_status::ready) {
            try {
                connected.get()->close(); // not refused: counted as such
            } catch (const std::system_error&) {
                ++refused;
            }
        }
        hostile.close();
        work.reset();
        io.stop();
        runner.join();
    };
    auto start = [&](std::uint32_t rank, const char* roles) {
        const auto env =
            petrel::map_environment({{"PETREL_RANK", std::to_string(rank)},
                                     {"PETREL_SIZE", "2"},
                                     {"PETREL_ROOT", root},
                                     {"PETREL_ROLES", roles},
                                     {"PETREL_SERVERS", "2"},
                                     {"PETREL_WORKERS", "2"},
                                     {"PETREL_JOB_ID", "tls"},
                                     {"PETREL_SECRET", petrel::test::job_secret()},
                                     {"PETREL_TLS_CERT", petrel::test::tls_path("node.pem")},
                                     {"PETREL_TLS_KEY", petrel::test::tls_path("node.key")},
                                     {"PETREL_TLS_CA", petrel::test::tls_path("ca.pem")}});
        const char* argv[] = {"trainer"};
        const auto s = petrel::resolve(quick_heartbeats(), 1, argv, env);
        REQUIRE(s.tls.enabled());
        auto& r = ranks[rank];
        return std::thread([&r, &t, &try_as_stranger, s] {
            r.status = petrel::run(
                s,
                [&](petrel::worker_node& w) {
                    if (w.rank() == 0) {
                        try_as_stranger(petrel::test::tls_of("stranger", "other_ca"));
                        try_as_stranger(petrel::test::tls_of("stranger", "ca"));
                        try_as_stranger({}); // no TLS
                    }
                    exact_sums(w, t);
                },
                [&r](petrel::log_level, std::string_view text) {
                    std::lock_guard lock(r.mutex);
                    r.logged += std::string(text) + "\n";
                });
        });
    };
    auto first = start(0, "manager,server,worker");
    auto second = start(1, "server,worker");
    first.join();
    second.join();
    const std::string all = ranks[0].logged + ranks[1].logged;
    INFO(all);
    CHECK(ranks[0].status == petrel::run_ok);
    CHECK(ranks[1].status == petrel::run_ok);
    CHECK(t.workers == 2);
    CHECK(t.checked > 0);
    CHECK(t.mismatches == 0);
    CHECK(refused == 3);
    CHECK_THAT(ranks[0].logged, Catch::Contains("refused a connection from 127.0.0.1"));
}

TEST_CASE("run: with ranked certificates a job whose certificates name its ranks trains; a "
          "process whose certificate names another rank stops before it starts",
          "[launch][security][tls]") {
    auto cfg = quick_heartbeats();
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.tls_ranks = true;
    const auto files = petrel::test::tls_of("rank-0"); // every node here is rank 0's
    cfg.tls_cert = files.certificate;
    cfg.tls_key = files.private_key;
    cfg.tls_ca = files.authority;
    tally t;
    CHECK(petrel::run(cfg, [&](petrel::worker_node& w) { exact_sums(w, t); }) == petrel::run_ok);
    CHECK(t.workers == 2);
    CHECK(t.mismatches == 0);

    const auto other = petrel::test::tls_of("rank-1");
    cfg.tls_cert = other.certificate;
    cfg.tls_key = other.private_key;
    petrel::test::log_capture log;
    bool trained = false;
    CHECK(petrel::run(
              cfg, [&](petrel::worker_node&) { trained = true; }, log.logger()) ==
          petrel::run_config_error);
    CHECK_FALSE(trained);
    CHECK_THAT(log.all(), Catch::Contains("is named 'rank-1', not rank-0"));
}

TEST_CASE("run: TLS files that cannot be used stop the process before it starts",
          "[launch][security][tls]") {
    const auto env =
        petrel::map_environment({{"PETREL_RANK", "0"},
                                 {"PETREL_SIZE", "2"},
                                 {"PETREL_ROOT", "127.0.0.1:1"},
                                 {"PETREL_SECRET", petrel::test::job_secret()},
                                 {"PETREL_TLS_CERT", petrel::test::tls_path("node.pem")},
                                 {"PETREL_TLS_KEY", petrel::test::tls_path("stranger.key")},
                                 {"PETREL_TLS_CA", petrel::test::tls_path("ca.pem")}});
    const char* argv[] = {"trainer"};
    const auto s = petrel::resolve(quick_heartbeats(), 1, argv, env);
    petrel::test::log_capture log;
    std::atomic<int> trained{0};
    CHECK(petrel::run(
              s, [&](petrel::worker_node&) { ++trained; }, log.logger()) ==
          petrel::run_config_error);
    CHECK(trained == 0);
    CHECK_THAT(log.all(), Catch::Contains("stranger.key"));
}

TEST_CASE("run: four processes under the PETREL_ launcher", "[cluster][process]") {
    auto procs = start_job("[spmd]", 4, {});
    for (auto& p : procs) {
        REQUIRE(p->wait_for(180s));
        INFO(p->output());
        CHECK(p->exit_code() == 0);
    }
}

// Every worker pushes once; the training function of worker #1 (process rank 3 under the
// test below) then throws. The test below checks that every process fails, saying why.
TEST_CASE("run: a worker whose training function throws", "[.][spmd_worker_throws]") {
    const int status = petrel::run(quick_heartbeats(), [](petrel::worker_node& w) {
        petrel::kv_store<std::uint64_t, float> kv(w);
        const std::vector<std::uint64_t> keys{1, 2, 3};
        const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
        kv.push(keys, ones, asio::use_future).get();
        kv.clock();
        if (w.rank() == 1) {
            throw std::runtime_error("width 4 expected, 3 values given");
        }
    });
    std::fprintf(stderr, "petrel::run returned %d\n", status);
    CHECK(status == petrel::run_ok); // fails, as it should: the job failed
}

TEST_CASE("run: a worker whose training function throws fails every process, servers too, "
          "each saying why in one line",
          "[cluster][process]") {
    // Ranks 0 and 1 host only servers (ids 1 and 2; rank 0 the manager too), ranks 2 and 3
    // the workers (ids 3 and 4).
    const auto started = std::chrono::steady_clock::now();
    auto procs = start_job("[spmd_worker_throws]", 4, {{"PETREL_HEARTBEAT_TIMEOUT", "1000"}});
    const std::string why = "worker 4 (worker #1, rank 3) failed: the training function "
                            "failed: width 4 expected, 3 values given";
    for (int r = 0; r < 4; ++r) {
        auto& p = procs[static_cast<std::size_t>(r)];
        REQUIRE(p->wait_for(60s)); // no hang
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() != 0);
        CHECK_THAT(p->output(), Catch::Contains("petrel::run returned 1\n"));
        CHECK_THAT(p->output(),
                   Catch::Contains("petrel: job 'test-" + std::to_string(::getpid()) +
                                   "' failed (rank " + std::to_string(r) + "): " + why + "\n"));
    }
    CHECK(std::chrono::steady_clock::now() - started < 40s);
}

namespace {

/// Starts a job of 4 processes whose workers push until something fails, sends `sig` to
/// rank 1 (server 2) while they push, and checks that every other process exits
/// non-zero, naming the server. Returns how long they took after the signal.
std::chrono::milliseconds fail_server_during_pushes(int sig) {
    // Ranks 0 and 1 host the servers (ids 1 and 2), ranks 2 and 3 the workers.
    // Without replicas, a server's keys die with it.
    auto procs = start_job("[spmd_until_failure]", 4,
                           {{"PETREL_HEARTBEAT_TIMEOUT", "1000"}, {"PETREL_REPLICAS", "0"}});
    std::this_thread::sleep_for(3s); // the job forms and the workers push
    for (auto& p : procs) {
        REQUIRE_FALSE(p->wait_for(0ms)); // nobody stopped early
    }
    const auto signalled = std::chrono::steady_clock::now();
    procs[1]->kill(sig);
    for (int r : {0, 2, 3}) {
        auto& p = procs[static_cast<std::size_t>(r)];
        REQUIRE(p->wait_for(30s)); // no hang
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() != 0);
        CHECK_THAT(p->output(), Catch::Contains("server 2") && Catch::Contains("failed"));
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 signalled);
}

} // namespace

TEST_CASE("run: a server killed with SIGKILL fails the job at once, naming the server",
          "[cluster][process]") {
    // The kernel closes the dead process's connections: no need to wait for heartbeats.
    CHECK(fail_server_during_pushes(SIGKILL) < 10s);
}

TEST_CASE("run: a stopped server fails the job after the heartbeat timeout, naming it",
          "[cluster][process]") {
    // A stopped process keeps its connections open: only the missing heartbeats tell.
    const auto took = fail_server_during_pushes(SIGSTOP);
    // Not before the heartbeat timeout (1000 ms) less one heartbeat interval (100 ms): the
    // last heartbeat may have left just before the stop.
    CHECK(took >= 900ms);
    CHECK(took < 15s);
}

// Integer-valued pushes over many clocks, slowly, so that a server can be killed in
// between (the failover tests below); every worker then checks the exact sums.
namespace {

/// The log level of the job processes the tests start: the membership tests read the
/// membership changes, which are logged as info (PETREL_TEST_LOG_INFO).
petrel::log_level test_log_level() {
    return std::getenv("PETREL_TEST_LOG_INFO") ? petrel::log_level::info
                                               : petrel::log_level::warning;
}

/// Starts one process of case `spec` that joins the running job `job` at the root on
/// loopback port `port` as a node of `role` (PETREL_JOIN), with the job's totals.
std::unique_ptr<petrel::test::child_process>
start_joiner(const std::string& spec, std::uint16_t port, const std::string& job,
             const std::string& role, int servers, int workers) {
    return std::make_unique<petrel::test::child_process>(
        std::vector<std::string>{petrel::test::self_path(), spec},
        std::map<std::string, std::string>{{"PETREL_ROOT", "127.0.0.1:" + std::to_string(port)},
                                           {"PETREL_SERVERS", std::to_string(servers)},
                                           {"PETREL_WORKERS", std::to_string(workers)},
                                           {"PETREL_JOB_ID", job},
                                           {"PETREL_JOIN", role},
                                           {"PETREL_SECRET", petrel::test::job_secret()},
                                           {"PETREL_TEST_LOG_INFO", "1"}},
        "/tmp/petrel-test-" + std::to_string(::getpid()) + "-join-" + role + ".log");
}

} // namespace

TEST_CASE("run: exact sums through a server failure", "[.][spmd_failover]") {
    auto cfg = quick_heartbeats();
    // A killed process's connections close at once: the heartbeat timeout only needs to
    // be long enough that a loaded machine declares no live node dead. A network cut is
    // only noticed by the heartbeats: that test sets PETREL_HEARTBEAT_TIMEOUT.
    cfg.heartbeat_timeout = 5000ms;
    if (std::getenv("PETREL_HEARTBEAT_TIMEOUT")) {
        cfg.heartbeat_timeout.reset();
    }
    std::atomic<std::size_t> bad{0};
    std::atomic<std::size_t> checked{0};
    if (const char* dir = std::getenv("PETREL_TEST_PID_DIR")) {
        // Under mpirun the test finds the rank to kill by the id this file names.
        const auto launch = petrel::detect_launcher(petrel::process_environment());
        std::ofstream(std::string(dir) + "/rank-" + std::to_string(launch.rank) + ".pid")
            << ::getpid() << "\n";
    }
    if (std::getenv("PETREL_TEST_RANKED_TLS")) {
        // Each process shows the certificate of its own rank, and checks its peers'.
        const auto launch_rank = petrel::detect_launcher(petrel::process_environment()).rank;
        const auto files = petrel::test::tls_of("rank-" + std::to_string(launch_rank));
        cfg.tls_cert = files.certificate;
        cfg.tls_key = files.private_key;
        cfg.tls_ca = files.authority;
        cfg.tls_ranks = true;
        std::fprintf(stderr, "test: rank %u shows the certificate %s, ranks checked\n", launch_rank,
                     files.certificate.c_str());
    }
    const char* clocks_text = std::getenv("PETREL_TEST_CLOCKS");
    const int clocks = clocks_text ? std::atoi(clocks_text) : 40;
    const int status = petrel::run(
        cfg,
        [&](petrel::worker_node& w) {
            petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 5});
            std::vector<std::uint64_t> keys(20000);
            for (std::size_t i = 0; i < keys.size(); ++i) {
                keys[i] = i * 3;
            }
            const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
            for (int i = 0; i < clocks; ++i) {
                kv.push(keys, ones, asio::use_future).get();
                kv.clock();
                std::this_thread::sleep_for(50ms);
            }
            const auto got = kv.pull(keys, asio::use_future).get(); // sees every clock
            const float expected = float(clocks) * float(w.workers());
            // With a worker killed (PETREL_TEST_WORKER_DIES), what it pushed before it died
            // is in, on some keys of its last push perhaps not: every key holds at least
            // the others' sums.
            const float least = std::getenv("PETREL_TEST_WORKER_DIES")
                                    ? float(clocks) * float(w.workers() - 1)
                                    : expected;
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < keys.size(); ++i) {
                const float x = got.values()(i);
                wrong += x >= least && x <= expected && x == std::floor(x) ? 0 : 1;
            }
            if (wrong != 0) {
                std::fprintf(stderr, "worker %u: %zu of %zu sums wrong (key 0: %g, expected %g)\n",
                             w.rank(), wrong, keys.size(), double(got.values()(0)),
                             double(expected));
            }
            bad += wrong;
            checked += keys.size();
        },
        petrel::stderr_logger(test_log_level()));
    CHECK(status == petrel::run_ok);
    CHECK(bad == 0);
}

namespace {

/// Starts the `[spmd_failover]` job on `size` processes with `servers` servers (ranks
/// 0 .. servers-1), kills each rank of `victims` with SIGKILL after `after` (one by one,
/// `gap` apart; with no gap all are stopped first, then killed), and returns the
/// processes once all have exited.
std::vector<std::unique_ptr<petrel::test::child_process>>
kill_servers_during_training(int size, int servers, std::vector<int> victims,
                             std::map<std::string, std::string> env,
                             std::chrono::milliseconds after, std::chrono::milliseconds gap) {
    env.emplace("PETREL_SERVERS", std::to_string(servers));
    auto procs = start_job("[spmd_failover]", size, env);
    std::this_thread::sleep_for(after);
    if (gap == 0ms) {
        // At once: stopped together first, so that none acts on the others' failure.
        for (int v : victims) {
            REQUIRE_FALSE(procs[static_cast<std::size_t>(v)]->wait_for(0ms));
            procs[static_cast<std::size_t>(v)]->kill(SIGSTOP);
        }
    }
    for (std::size_t i = 0; i < victims.size(); ++i) {
        if (i > 0) {
            std::this_thread::sleep_for(gap);
        }
        auto& p = procs[static_cast<std::size_t>(victims[i])];
        REQUIRE_FALSE(p->wait_for(0ms)); // still training when killed
        p->kill(SIGKILL);
    }
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s)); // no hang
    }
    return procs;
}

} // namespace

TEST_CASE("run: training survives a server killed with SIGKILL, no update lost",
          "[fault][process]") {
    // Ranks 0-2 host the servers (ids 1-3), ranks 3 and 4 the workers; one copy besides
    // each primary (the default).
    auto procs = kill_servers_during_training(5, 3, {1}, {}, 1500ms, 0ms);
    for (int r : {0, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    CHECK_THAT(procs[0]->output(), Catch::Contains("moved to their replicas"));
}

TEST_CASE("run: a job that drops failed workers goes on without a killed worker process",
          "[fault][process]") {
    // Ranks 0-2 host the servers, ranks 3 and 4 the workers; rank 4 is killed while they
    // train. The job drops it: the other worker does not wait for it and finishes, and
    // every process but the killed one ends with success.
    auto procs = start_job("[spmd_failover]", 5,
                           {{"PETREL_SERVERS", "3"},
                            {"PETREL_WORKER_FAILURE", "drop"},
                            {"PETREL_TEST_WORKER_DIES", "1"},
                            {"PETREL_TEST_LOG_INFO", "1"}});
    std::this_thread::sleep_for(1500ms);
    REQUIRE_FALSE(procs[4]->wait_for(0ms)); // still training when killed
    procs[4]->kill(SIGKILL);
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s)); // no hang
    }
    for (int r : {0, 1, 2, 3}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    CHECK_THAT(procs[0]->output(), Catch::Contains("worker 5") && Catch::Contains("failed"));
}

TEST_CASE("run: two servers killed one after the other survive with one replica",
          "[fault][process]") {
    // Four servers: after the first failure the chains are restored (the rows copied to
    // the new replicas) before the second.
    auto procs = kill_servers_during_training(6, 4, {1, 2}, {}, 1000ms, 700ms);
    for (int r : {0, 3, 4, 5}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
}

TEST_CASE("run: more simultaneous failures than replicas fail the job clearly",
          "[fault][process]") {
    // Servers 2 and 3 hold both copies of server 2's partitions: killed together, those
    // keys are gone. The job fails naming them; it does not train on with a wrong model.
    auto procs = kill_servers_during_training(5, 3, {1, 2}, {}, 1500ms, 0ms);
    for (int r : {0, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() != 0);
    }
    CHECK_THAT(procs[0]->output(), Catch::Contains("are lost"));
}

TEST_CASE("run: a server process given SIGTERM hands its keys over and leaves, no update lost",
          "[fault][process]") {
    // Rank 1 hosts only server 2: on SIGTERM it leaves gracefully while the workers train;
    // nothing fails, and every worker's exact sums hold. With a replica its keys move
    // there; without, it copies them to the other servers first.
    const std::string replicas = GENERATE(as<std::string>{}, "1", "0");
    auto procs = start_job("[spmd_failover]", 5,
                           {{"PETREL_SERVERS", "3"},
                            {"PETREL_REPLICAS", replicas},
                            {"PETREL_TEST_CLOCKS", "60"},
                            {"PETREL_TEST_LOG_INFO", "1"}});
    std::this_thread::sleep_for(1500ms);
    REQUIRE_FALSE(procs[1]->wait_for(0ms)); // still training
    procs[1]->kill(SIGTERM);
    REQUIRE(procs[1]->wait_for(30s));
    INFO("rank 1:\n" << procs[1]->output());
    CHECK(procs[1]->exit_code() == 0);
    CHECK_THAT(procs[1]->output(), Catch::Contains("left the job"));
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s)); // no hang
    }
    for (int r : {0, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    CHECK_THAT(procs[0]->output(),
               Catch::Contains(replicas == "1" ? "left; its key ranges moved to their replicas"
                                               : "left; it had handed its key partitions over"));
    CHECK_THAT(procs[0]->output(), !Catch::Contains("failed: "));
}

TEST_CASE("run: a server process joins the running job and takes its share, no update lost",
          "[fault][process]") {
    // Three servers train with two workers; a sixth process started with PETREL_JOIN=server
    // joins, receives the partitions that move to it and takes them over while the
    // workers train on. Every worker's exact sums hold and nothing fails.
    const auto port = petrel::test::free_port();
    const std::string job = "test-join-" + std::to_string(::getpid());
    auto procs = start_job("[spmd_failover]", 5,
                           {{"PETREL_SERVERS", "3"},
                            {"PETREL_MAX_SERVERS", "4"},
                            {"PETREL_TEST_CLOCKS", "60"},
                            {"PETREL_JOB_ID", job},
                            {"PETREL_TEST_LOG_INFO", "1"}},
                           {}, port);
    std::this_thread::sleep_for(1500ms);
    REQUIRE_FALSE(procs[3]->wait_for(0ms)); // still training
    procs.push_back(start_joiner("[spmd_failover]", port, job, "server", 3, 2));
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s)); // no hang
    }
    for (std::size_t r = 0; r < procs.size(); ++r) {
        INFO("process " << r << ":\n" << procs[r]->output());
        CHECK(procs[r]->exit_code() == 0);
    }
    CHECK_THAT(procs[5]->output(), Catch::Contains("took over its share of the keys"));
    CHECK_THAT(procs[0]->output(), Catch::Contains("took over its share of the key partitions"));
    CHECK_THAT(procs[0]->output(), !Catch::Contains("failed: "));
}

TEST_CASE("run: exact sums for every worker, also one that joins late", "[.][spmd_late_worker]") {
    auto cfg = quick_heartbeats();
    cfg.heartbeat_timeout = 5000ms;
    std::atomic<std::size_t> bad{0};
    const int status = petrel::run(
        cfg,
        [&](petrel::worker_node& w) {
            // Each worker pushes ones on its own keys: its sums are exact whenever it
            // joined (a late worker takes the job's clock from its first pull).
            petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 7});
            std::vector<std::uint64_t> keys(2000);
            for (std::size_t i = 0; i < keys.size(); ++i) {
                keys[i] = std::uint64_t{w.rank()} * 100000 + i;
            }
            (void)kv.pull(keys, asio::use_future).get();
            const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
            constexpr int clocks = 40;
            for (int i = 0; i < clocks; ++i) {
                kv.push(keys, ones, asio::use_future).get();
                kv.clock();
                std::this_thread::sleep_for(50ms);
            }
            const auto got = kv.pull(keys, asio::use_future).get();
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < keys.size(); ++i) {
                wrong += got.values()(i) == float(clocks) ? 0 : 1;
            }
            if (wrong != 0) {
                std::fprintf(stderr, "worker %u: %zu of %zu sums wrong (key 0: %g)\n", w.rank(),
                             wrong, keys.size(), double(got.values()(0)));
            }
            std::fprintf(stderr, "worker %u trained %d clocks\n", w.rank(), clocks);
            bad += wrong;
        },
        petrel::stderr_logger(test_log_level()));
    CHECK(status == petrel::run_ok);
    CHECK(bad == 0);
}

TEST_CASE("run: a worker process joins the running job and trains with exact sums",
          "[fault][process]") {
    // Two servers and two workers train; a fifth process started with PETREL_JOIN=worker
    // joins while they do, takes the next worker index and trains its own clocks.
    const auto port = petrel::test::free_port();
    const std::string job = "test-late-" + std::to_string(::getpid());
    auto procs = start_job(
        "[spmd_late_worker]", 4,
        {{"PETREL_MAX_WORKERS", "3"}, {"PETREL_JOB_ID", job}, {"PETREL_TEST_LOG_INFO", "1"}}, {},
        port);
    std::this_thread::sleep_for(1000ms);
    REQUIRE_FALSE(procs[3]->wait_for(0ms)); // still training
    procs.push_back(start_joiner("[spmd_late_worker]", port, job, "worker", 2, 2));
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s));
    }
    for (std::size_t r = 0; r < procs.size(); ++r) {
        INFO("process " << r << ":\n" << procs[r]->output());
        CHECK(procs[r]->exit_code() == 0);
    }
    CHECK_THAT(procs[4]->output(), Catch::Contains("worker 2 trained 40 clocks"));
    CHECK_THAT(procs[0]->output(), Catch::Contains("joined the running job"));
}

TEST_CASE("run: four processes under mpirun", "[cluster][mpi]") {
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
        WARN("mpi test skipped: mpirun not found (scripts/setup installs openmpi-bin)");
        return;
    }
    const auto port = petrel::test::free_port();
    std::vector<std::string> argv{"mpirun",
                                  "--allow-run-as-root",
                                  "--oversubscribe",
                                  "-np",
                                  "4",
                                  "-x",
                                  "PETREL_ROOT=127.0.0.1:" + std::to_string(port),
                                  "-x",
                                  "PETREL_SERVERS=2",
                                  "-x",
                                  "PETREL_SECRET=" + petrel::test::job_secret(),
                                  petrel::test::self_path(),
                                  "[spmd]"};
    petrel::test::child_process p(argv, {},
                                  "/tmp/petrel-test-" + std::to_string(::getpid()) + "-mpirun.log");
    const bool done = p.wait_for(240s);
    if (!done) {
        p.kill(SIGTERM); // mpirun stops its ranks; the destructor kills what is left
        p.wait_for(5s);
    }
    INFO(p.output());
    REQUIRE(done);
    CHECK(p.exit_code() == 0);
}

namespace {

/// Two "hosts": network namespaces `a` and `b` joined by a veth pair (`link_a` in `a`),
/// with addresses `net`1 and `net`2; both are deleted, with their links, at the end.
struct two_hosts {
    std::string a, b, link_a, link_b, net;

    two_hosts(const std::string& names, int subnet) {
        const std::string tag = std::to_string(::getpid() % 100000);
        a = "ptl" + tag + names.substr(0, 1);
        b = "ptl" + tag + names.substr(1, 1);
        link_a = "v" + tag + names.substr(0, 1);
        link_b = "v" + tag + names.substr(1, 1);
        net = "10." + std::to_string(subnet) + "." + std::to_string(::getpid() % 250) + ".";
    }
    two_hosts(const two_hosts&) = delete;
    two_hosts& operator=(const two_hosts&) = delete;
    ~two_hosts() {
        std::system(("ip netns del " + a + " 2>/dev/null").c_str());
        std::system(("ip netns del " + b + " 2>/dev/null").c_str());
    }

    /// Makes both hosts; returns the command that failed, empty on success.
    std::string make() const {
        const std::vector<std::string> setup{
            "ip netns add " + a,
            "ip netns add " + b,
            "ip link add " + link_a + " netns " + a + " type veth peer name " + link_b + " netns " +
                b,
            "ip -n " + a + " addr add " + net + "1/24 dev " + link_a,
            "ip -n " + b + " addr add " + net + "2/24 dev " + link_b,
            "ip -n " + a + " link set " + link_a + " up",
            "ip -n " + b + " link set " + link_b + " up",
            "ip -n " + a + " link set lo up",
            "ip -n " + b + " link set lo up"};
        for (const auto& cmd : setup) {
            if (std::system(cmd.c_str()) != 0) {
                return cmd;
            }
        }
        return {};
    }
};

} // namespace

TEST_CASE("run: nodes in separate network namespaces bind and advertise their own address",
          "[cluster][netns]") {
    if (::geteuid() != 0 || std::system("command -v ip > /dev/null 2>&1") != 0) {
        WARN("netns test skipped: needs root and the ip command");
        return;
    }
    const two_hosts hosts("ab", 231);
    const std::string failed = hosts.make();
    INFO("failed: " << failed);
    REQUIRE(failed.empty());
    const std::string& a = hosts.a;
    const std::string& b = hosts.b;
    const std::string& net = hosts.net;
    const std::string tag = std::to_string(::getpid() % 100000);
    // Ranks 0 (manager, server) and 2 (worker) on host a; 1 (server) and 3 (worker) on
    // host b. Servers bind the wildcard and advertise their host's address.
    const std::string root = net + "1:" + std::to_string(20000 + ::getpid() % 20000);
    std::vector<std::unique_ptr<petrel::test::child_process>> procs;
    for (int r = 0; r < 4; ++r) {
        const bool on_a = r % 2 == 0;
        std::vector<std::string> argv{
            "ip", "netns", "exec", on_a ? a : b, petrel::test::self_path(), "[spmd]"};
        std::map<std::string, std::string> env{{"PETREL_RANK", std::to_string(r)},
                                               {"PETREL_SIZE", "4"},
                                               {"PETREL_ROOT", root},
                                               {"PETREL_SERVERS", "2"},
                                               {"PETREL_BIND", "0.0.0.0"},
                                               {"PETREL_ADVERTISE", net + (on_a ? "1" : "2")},
                                               {"PETREL_JOB_ID", "netns-" + tag},
                                               {"PETREL_SECRET", petrel::test::job_secret()}};
        procs.push_back(std::make_unique<petrel::test::child_process>(
            argv, env, "/tmp/petrel-test-" + tag + "-netns-" + std::to_string(r) + ".log"));
    }
    for (auto& p : procs) {
        REQUIRE(p->wait_for(180s));
        INFO(p->output());
        CHECK(p->exit_code() == 0);
    }
}

namespace {

/// Runs the `[spmd_failover]` job on 5 ranks under mpirun (3 servers) and sends `sig` to
/// rank 1 (server 2 alone) once the workers train; returns mpirun's output, or nothing
/// when mpirun is missing.
std::optional<std::string> signal_server_under_mpirun(int sig) {
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
        WARN("mpi test skipped: mpirun not found (scripts/setup installs openmpi-bin)");
        return std::nullopt;
    }
    struct pid_dir {
        std::filesystem::path path =
            std::filesystem::temp_directory_path() / ("petrel-pids-" + std::to_string(::getpid()));
        pid_dir() { std::filesystem::create_directories(path); }
        ~pid_dir() {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
    } pids;
    const auto port = petrel::test::free_port();
    // Open MPI ends the whole job when a rank dies unless recovery is on.
    std::vector<std::string> argv{"mpirun",
                                  "--allow-run-as-root",
                                  "--oversubscribe",
                                  "--mca",
                                  "orte_enable_recovery",
                                  "1",
                                  "--mca",
                                  "orte_abort_on_non_zero_status",
                                  "0",
                                  "-np",
                                  "5",
                                  "-x",
                                  "PETREL_ROOT=127.0.0.1:" + std::to_string(port),
                                  "-x",
                                  "PETREL_SERVERS=3",
                                  "-x",
                                  "PETREL_TEST_CLOCKS=80",
                                  "-x",
                                  "PETREL_TEST_LOG_INFO=1",
                                  "-x",
                                  "PETREL_TEST_PID_DIR=" + pids.path.string(),
                                  "-x",
                                  "PETREL_SECRET=" + petrel::test::job_secret(),
                                  petrel::test::self_path(),
                                  "[spmd_failover]"};
    petrel::test::child_process p(argv, {},
                                  "/tmp/petrel-test-" + std::to_string(::getpid()) + "-mpirun-" +
                                      std::to_string(sig) + ".log");
    // Rank 1 hosts server 2; it gets the signal once the workers train.
    const auto file = pids.path / "rank-1.pid";
    const auto until = std::chrono::steady_clock::now() + 120s;
    while (!std::filesystem::exists(file) && std::chrono::steady_clock::now() < until &&
           !p.wait_for(0ms)) {
        std::this_thread::sleep_for(20ms);
    }
    REQUIRE(std::filesystem::exists(file));
    std::this_thread::sleep_for(2500ms);
    ::pid_t target = 0;
    std::ifstream(file) >> target;
    REQUIRE(target > 0);
    REQUIRE_FALSE(p.wait_for(0ms)); // still training
    REQUIRE(::kill(target, sig) == 0);
    const bool done = p.wait_for(240s);
    if (!done) {
        p.kill(SIGTERM); // mpirun stops its ranks; the destructor kills what is left
        p.wait_for(5s);
    }
    INFO(p.output());
    REQUIRE(done);
    return p.output();
}

/// The lines of `out` in which the manager declares a node failed.
std::size_t manager_failures(const std::string& out) {
    std::size_t n = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        n += line.find("petrel manager:") != std::string::npos &&
                     line.find(" failed: ") != std::string::npos
                 ? 1
                 : 0;
    }
    return n;
}

/// How many ranks' test runs passed in an mpirun output.
std::size_t ranks_passed(const std::string& out) {
    std::size_t passed = 0;
    for (auto at = out.find("All tests passed"); at != std::string::npos;
         at = out.find("All tests passed", at + 1)) {
        ++passed;
    }
    return passed;
}

} // namespace

TEST_CASE("run: training under mpirun survives a server killed with SIGKILL", "[fault][mpi]") {
    const auto out = signal_server_under_mpirun(SIGKILL);
    if (!out) {
        return;
    }
    INFO(*out);
    // The other four ranks each passed (their workers checked exact sums); mpirun itself
    // reports the killed rank.
    CHECK(ranks_passed(*out) == 4);
    CHECK(out->find("FAILED") == std::string::npos);
    CHECK_THAT(*out, Catch::Contains("moved to their replicas"));
}

TEST_CASE("run: a server under mpirun given SIGTERM leaves gracefully, no update lost",
          "[fault][mpi]") {
    const auto out = signal_server_under_mpirun(SIGTERM);
    if (!out) {
        return;
    }
    INFO(*out);
    // All five ranks pass: the server's rank ends with success once its keys moved.
    CHECK(ranks_passed(*out) == 5);
    CHECK(out->find("FAILED") == std::string::npos);
    CHECK_THAT(*out, Catch::Contains("left; its key ranges moved to their replicas"));
    CHECK_THAT(*out, Catch::Contains("server 2 left the job"));
    // The manager declared nobody failed (workers may log a request that met the closed
    // server, which they then sent to the new owner).
    CHECK(manager_failures(*out) == 0);
}

TEST_CASE("run: a server cut off by the network is declared failed, writes nothing more, and "
          "rejoins as a new node",
          "[fault][netns]") {
    if (::geteuid() != 0 || std::system("command -v ip > /dev/null 2>&1") != 0) {
        WARN("netns test skipped: needs root and the ip command");
        return;
    }
    // Host a (namespace a) runs the manager, servers 1 and 3 and both workers; host b
    // runs server 2. Cutting the link between them partitions server 2 away while the
    // workers train; the link comes back later, the cut-off process stops, and a new
    // server process on host b joins the running job as a new node.
    const two_hosts hosts("cd", 232);
    const std::string failed = hosts.make();
    INFO("failed: " << failed);
    REQUIRE(failed.empty());
    const std::string& a = hosts.a;
    const std::string& b = hosts.b;
    const std::string& net = hosts.net;
    const std::string& link_a = hosts.link_a;
    std::vector<std::string> prefixes;
    for (int r = 0; r < 5; ++r) {
        const bool on_b = r == 1;
        prefixes.push_back("ip netns exec " + (on_b ? b : a) + " env PETREL_ADVERTISE=" + net +
                           (on_b ? "2" : "1"));
    }
    const auto port = static_cast<std::uint16_t>(20000 + ::getpid() % 20000);
    auto procs = start_job("[spmd_failover]", 5,
                           {{"PETREL_SERVERS", "3"},
                            {"PETREL_ROOT", net + "1:" + std::to_string(port)},
                            {"PETREL_BIND", "0.0.0.0"},
                            {"PETREL_HEARTBEAT_TIMEOUT", "1500"},
                            {"PETREL_MAX_SERVERS", "3"},
                            {"PETREL_TEST_LOG_INFO", "1"},
                            {"PETREL_TEST_CLOCKS", "200"}},
                           prefixes, port);
    std::this_thread::sleep_for(2500ms); // the job forms and the workers train
    for (auto& p : procs) {
        REQUIRE_FALSE(p->wait_for(0ms));
    }
    REQUIRE(std::system(("ip -n " + a + " link set " + link_a + " down").c_str()) == 0);
    std::this_thread::sleep_for(3500ms); // past the heartbeat timeout: declared failed
    REQUIRE(std::system(("ip -n " + a + " link set " + link_a + " up").c_str()) == 0);
    // The cut-off process stops on its own; a new one takes its place on host b.
    REQUIRE(procs[1]->wait_for(30s));
    REQUIRE_FALSE(procs[3]->wait_for(0ms)); // the workers still train
    std::vector<std::string> argv{"ip",
                                  "netns",
                                  "exec",
                                  b,
                                  "env",
                                  "PETREL_ADVERTISE=" + net + "2",
                                  petrel::test::self_path(),
                                  "[spmd_failover]"};
    procs.push_back(std::make_unique<petrel::test::child_process>(
        argv,
        std::map<std::string, std::string>{{"PETREL_ROOT", net + "1:" + std::to_string(port)},
                                           {"PETREL_BIND", "0.0.0.0"},
                                           {"PETREL_SERVERS", "3"},
                                           {"PETREL_WORKERS", "2"},
                                           {"PETREL_JOB_ID", "test-" + std::to_string(::getpid())},
                                           {"PETREL_HEARTBEAT_TIMEOUT", "1500"},
                                           {"PETREL_SECRET", petrel::test::job_secret()},
                                           {"PETREL_JOIN", "server"},
                                           {"PETREL_TEST_LOG_INFO", "1"}},
        "/tmp/petrel-test-" + std::to_string(::getpid()) + "-rejoin.log"));
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s)); // no hang, the cut-off server included
    }
    // The job trained on with exact sums (every process checks its workers' pulls).
    for (int r : {0, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    CHECK_THAT(procs[0]->output(), Catch::Contains("moved to their replicas"));
    // The cut-off server learns that it is out of the job and stops, having taken no
    // write that counts (the sums above are exact).
    INFO("rank 1:\n" << procs[1]->output());
    CHECK(procs[1]->exit_code() != 0);
    CHECK_THAT(procs[1]->output(), Catch::Contains("stopped answering heartbeats") ||
                                       Catch::Contains("declared failed"));
    CHECK_THAT(procs[3]->output(), Catch::Contains("took over its keys"));
    // The new server joined as a new node (id 6) and took its share over.
    INFO("rejoined:\n" << procs[5]->output());
    CHECK(procs[5]->exit_code() == 0);
    CHECK_THAT(procs[5]->output(), Catch::Contains("server 6 joined the running job and took "
                                                   "over its share of the keys"));
    CHECK_THAT(procs[0]->output(), Catch::Contains("took over its share of the key partitions"));
}

TEST_CASE("run: a store takes its width from the table's declaration, and refuses a contradiction",
          "[cluster][launch]") {
    petrel::table_registry tables;
    tables.add<std::uint64_t, float>(6, {.width = 4});
    tables.add<std::uint64_t, float>(8, {.dense = petrel::key_range<std::uint64_t>{0, 65}});
    petrel::config cfg = quick_heartbeats();
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
    std::atomic<int> checked{0};
    petrel::test::log_capture log;
    REQUIRE(
        petrel::run(
            cfg,
            [&](petrel::worker_node& w) {
                petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 6});
                CHECK(kv.options().width == 4);
                const std::vector<std::uint64_t> keys{1, 70, 900};
                xt::xtensor<float, 2> rows({3, 4}, float(w.rank() + 1));
                kv.push(keys, rows, asio::use_future).get();
                kv.clock();
                const auto got = kv.pull(keys, asio::use_future).get();
                CHECK(got.values()(2, 3) == 3.0f); // 1 + 2, from both workers

                // A width that contradicts the declaration names both.
                try {
                    petrel::kv_store<std::uint64_t, float> bad(w, {.table_id = 6, .width = 3});
                    FAIL("a contradicting width was accepted");
                } catch (const std::invalid_argument& e) {
                    CHECK_THAT(e.what(), Catch::Contains("kv_store_options::width is 3") &&
                                             Catch::Contains("declared with width 4"));
                }
                // So do types that contradict it.
                try {
                    petrel::kv_store<std::uint32_t, double> bad(w, {.table_id = 6});
                    FAIL("contradicting types were accepted");
                } catch (const std::invalid_argument& e) {
                    CHECK_THAT(e.what(), Catch::Contains(
                                             "declared with keys std::uint64_t and values float"));
                }
                // A table that is not declared: scalars unless told otherwise.
                CHECK(petrel::kv_store<std::uint64_t, float>(w, {.table_id = 7}).options().width ==
                      1);

                // Refused requests: the log names the key and range, or the shapes.
                petrel::kv_store<std::uint64_t, float> dense(w, {.table_id = 8});
                const std::vector<std::uint64_t> outside{3, 70};
                CHECK_THROWS_AS(dense.pull(outside, asio::use_future).get(), std::system_error);
                CHECK_THROWS_AS(
                    dense.pull(petrel::key_range<std::uint64_t>{60, 66}, asio::use_future).get(),
                    std::system_error);
                const std::vector<std::uint64_t> two{1, 2};
                CHECK_THROWS_AS(
                    kv.push(two, xt::xtensor<float, 2>({2, 3}, 1.0f), asio::use_future).get(),
                    std::system_error);
                ++checked;
            },
            log.logger()) == petrel::run_ok);
    CHECK(checked == 2);
    const auto text = log.all();
    INFO(text);
    CHECK(text.find("key 70 is outside the dense range [0, 65) of table 8") != std::string::npos);
    CHECK(text.find("key 65 is outside the dense range [0, 65) of table 8") != std::string::npos);
    CHECK(text.find("values of shape [2, 3] for 2 keys; expected [2, 4] (or [8]): "
                    "kv_store_options::width is 4") != std::string::npos);
}

TEST_CASE("run: remote functions see each row once, whatever the replicas", "[cluster][launch]") {
    // Counts and sums over 3 servers: each server answers for the rows it holds as a
    // primary, so the results add up to the table exactly, and a function that changes
    // rows reports each row once.
    using rows_and_sum = std::pair<std::uint64_t, double>; // rows, sum of their values
    auto functions = std::make_shared<petrel::function_registry>();
    functions->add<petrel::no_args, rows_and_sum>(
        "count", [](auto& rows, const petrel::no_args&) -> rows_and_sum {
            rows_and_sum r{0, 0.0};
            rows.for_each([&](auto, auto row) {
                ++r.first;
                for (auto v : row) {
                    r.second += double(v);
                }
            });
            return r;
        });
    functions->add<float, std::uint64_t>("scale", [](auto& rows, const float& by) -> std::uint64_t {
        rows.for_each([&](auto, auto row) {
            for (auto& v : row) {
                v *= by;
            }
        });
        return rows.size();
    });
    for (std::uint32_t replicas : {0u, 1u, 2u}) {
        INFO("replicas " << replicas);
        petrel::config cfg = quick_heartbeats();
        cfg.servers = 3;
        cfg.workers = 1;
        cfg.replicas = replicas;
        cfg.functions = functions;
        std::atomic<std::uint64_t> rows{0};
        std::atomic<std::uint64_t> scaled{0};
        std::mutex mutex;
        double sum = 0;
        double expected = 0;
        REQUIRE(petrel::run(cfg, [&](petrel::worker_node& w) {
                    petrel::kv_store<std::uint64_t, float> kv(w, {.table_id = 4, .width = 2});
                    std::vector<std::uint64_t> keys;
                    for (std::uint64_t i = 0; i < 5000; ++i) {
                        keys.push_back(i < 3000 ? i : mix(i) >> 1);
                    }
                    std::sort(keys.begin(), keys.end());
                    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
                    xt::xtensor<float, 2> values({keys.size(), 2});
                    double total = 0;
                    for (std::size_t i = 0; i < keys.size(); ++i) {
                        values(i, 0) = float(i % 7);
                        values(i, 1) = 1.0f;
                        total += double(i % 7) + 1.0;
                    }
                    kv.push(keys, values, asio::use_future).get();
                    kv.clock();
                    const petrel::key_range<std::uint64_t> all{0, ~std::uint64_t{0}};
                    std::uint64_t n = 0;
                    double s = 0;
                    for (const auto& part :
                         kv.call<rows_and_sum>("count", all, petrel::no_args{}, asio::use_future)
                             .get()) {
                        n += part.first;
                        s += part.second;
                    }
                    std::uint64_t changed = 0;
                    for (auto c :
                         kv.call<std::uint64_t>("scale", all, 2.0f, asio::use_future).get()) {
                        changed += c;
                    }
                    std::lock_guard lock(mutex);
                    rows = n;
                    sum = s;
                    expected = total;
                    scaled = changed;
                    CHECK(n == keys.size());
                }) == petrel::run_ok);
        CHECK(rows.load() > 4900);
        CHECK(scaled.load() == rows.load());
        CHECK(sum == expected);
    }
}

// ---------------------------------------------------------------------------------------
// Checkpoints: a consistent cut under sequential, restored onto another number of servers.
// ---------------------------------------------------------------------------------------

namespace {

constexpr std::uint64_t ckpt_dense_keys = 3000;
constexpr int ckpt_iterations = 12;

/// A dense table with Adam (state per key) and a sparse one with FTRL.
std::shared_ptr<const petrel::table_registry> ckpt_tables() {
    petrel::table_registry t;
    t.add<std::uint64_t, float>(0,
                                {.dense = petrel::key_range<std::uint64_t>{0, ckpt_dense_keys},
                                 .init = petrel::initializer::normal(0.0, 0.5, 3),
                                 .aggregate = petrel::aggregation::mean},
                                petrel::adam{.eta = 0.01});
    t.add<std::uint64_t, float>(1, {.width = 2}, petrel::ftrl{.alpha = 0.5, .l1 = 0.01});
    return std::make_shared<const petrel::table_registry>(std::move(t));
}

struct ckpt_result {
    std::mutex mutex;
    std::vector<float> dense;
    std::vector<float> sparse;
    std::uint64_t started_at = 0;
    std::uint64_t clock_at_start = ~std::uint64_t{0}; // the store's clock, as a worker starts
};

/// Trains both tables from the checkpoint's clock (0 without one) to `ckpt_iterations`;
/// worker 0 saves both tables after clock `save_at` when `save_to` is set.
void ckpt_train(petrel::worker_node& w, ckpt_result& out, int save_at, const std::string& save_to) {
    petrel::kv_store<std::uint64_t, float, petrel::sequential> dense(w, {.table_id = 0});
    petrel::kv_store<std::uint64_t, float, petrel::sequential> sparse(w,
                                                                      {.table_id = 1, .width = 2});
    std::uint64_t start = 0;
    if (!w.restored_from().empty()) {
        start = petrel::read_checkpoint(w.restored_from(), 0).clock;
    }
    if (w.rank() == 0) {
        std::lock_guard lock(out.mutex);
        out.clock_at_start = dense.current_clock();
    }
    const petrel::key_range<std::uint64_t> all{0, ckpt_dense_keys};
    for (std::uint64_t it = start; it < ckpt_iterations; ++it) {
        const auto weights = dense.pull(all, asio::use_future).get();
        const auto v = weights.value_span();
        xt::xtensor<float, 1> grad = xt::zeros<float>({v.size()});
        std::copy(v.begin(), v.end(), grad.begin());
        for (std::size_t k = 0; k < grad.size(); ++k) {
            grad(k) = grad(k) - std::sin(float(k + w.rank() + it)); // toward a moving target
        }
        std::vector<std::uint64_t> keys;
        for (std::uint64_t i = 0; i < 50; ++i) {
            keys.push_back(mix(it * 7 + w.rank() * 1000 + i) >> 8);
        }
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        const auto rows = sparse.pull(keys, asio::use_future).get();
        xt::xtensor<float, 2> g = rows.values() - 0.25f;
        dense.push(all, grad, asio::use_future).get();
        sparse.push(keys, g, asio::use_future).get();
        dense.clock();
        sparse.clock();
        if (static_cast<int>(it + 1) == save_at && w.rank() == 0 && !save_to.empty()) {
            dense.save(save_to, asio::use_future).get();
            sparse.save(save_to, asio::use_future).get();
        }
    }
    const auto final_dense = dense.pull(all, asio::use_future).get();
    std::vector<std::uint64_t> probe;
    for (std::uint64_t i = 0; i < 4000; ++i) {
        probe.push_back(mix(i) >> 8);
    }
    std::sort(probe.begin(), probe.end());
    probe.erase(std::unique(probe.begin(), probe.end()), probe.end());
    const auto final_sparse = sparse.pull(probe, asio::use_future).get();
    if (w.rank() == 0) {
        std::lock_guard lock(out.mutex);
        out.dense.assign(final_dense.value_span().begin(), final_dense.value_span().end());
        out.sparse.assign(final_sparse.value_span().begin(), final_sparse.value_span().end());
        out.started_at = start;
    }
}

petrel::config ckpt_job(std::uint32_t servers, std::string restore = {}) {
    petrel::config cfg = quick_heartbeats();
    cfg.servers = servers;
    cfg.workers = 3;
    cfg.request_timeout = 20000ms;
    cfg.tables = ckpt_tables();
    if (!restore.empty()) {
        cfg.restore = std::move(restore);
    }
    return cfg;
}

} // namespace

TEST_CASE("run: train, checkpoint, stop, restore on more servers, continue: bitwise the same",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    ckpt_result straight;
    REQUIRE(petrel::run(ckpt_job(2), [&](petrel::worker_node& w) {
                ckpt_train(w, straight, 5, dir.path().string());
            }) == petrel::run_ok);
    REQUIRE(straight.dense.size() == ckpt_dense_keys);
    const auto manifest = petrel::read_checkpoint(dir.path(), 0);
    CHECK(manifest.clock == 5);
    CHECK(manifest.updater == "adam");
    CHECK(manifest.shards.size() == 2);
    CHECK(petrel::read_checkpoint(dir.path(), 1).updater == "ftrl");

    // The job stopped; a new one restores onto 3 servers and continues from clock 5.
    ckpt_result resumed;
    REQUIRE(petrel::run(ckpt_job(3, dir.path().string()), [&](petrel::worker_node& w) {
                ckpt_train(w, resumed, -1, {});
            }) == petrel::run_ok);
    CHECK(resumed.started_at == 5);
    REQUIRE(resumed.dense.size() == straight.dense.size());
    REQUIRE(resumed.sparse.size() == straight.sparse.size());
    CHECK(std::memcmp(resumed.dense.data(), straight.dense.data(),
                      straight.dense.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(resumed.sparse.data(), straight.sparse.data(),
                      straight.sparse.size() * sizeof(float)) == 0);
    // Some sparse weights moved away from zero, so the comparison means something.
    CHECK(std::count_if(straight.sparse.begin(), straight.sparse.end(),
                        [](float v) { return v != 0.0f; }) > 100);

    // A corrupted shard is refused, naming the file; the job does not start.
    const auto shard = dir.path() / "table-0" / manifest.shards[1].file;
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('\x5a');
    }
    ckpt_result refused;
    petrel::config cfg = ckpt_job(2, dir.path().string());
    petrel::test::log_capture log;
    CHECK(petrel::run(
              cfg, [&](petrel::worker_node& w) { ckpt_train(w, refused, -1, {}); }, log.logger()) ==
          petrel::run_failed);
    CHECK(refused.dense.empty());
    INFO(log.all());
    CHECK(log.all().find(shard.string()) != std::string::npos);
}

TEST_CASE("run: a job restored twice resumes at the job's iteration, bitwise the same",
          "[checkpoint]") {
    // One uninterrupted run, against: train to 5 and save; restore onto 3 servers, train
    // to 8 and save; restore onto 2 servers and finish. Clocks and the second manifest
    // count from the job's first iteration, not from the restore.
    ckpt_result straight;
    REQUIRE(petrel::run(ckpt_job(2), [&](petrel::worker_node& w) {
                ckpt_train(w, straight, -1, {});
            }) == petrel::run_ok);
    CHECK(straight.clock_at_start == 0);

    petrel::test::temp_dir first;
    petrel::test::temp_dir second;
    ckpt_result a;
    REQUIRE(petrel::run(ckpt_job(2), [&](petrel::worker_node& w) {
                ckpt_train(w, a, 5, first.path().string());
            }) == petrel::run_ok);
    REQUIRE(petrel::read_checkpoint(first.path(), 0).clock == 5);

    ckpt_result b;
    REQUIRE(petrel::run(ckpt_job(3, first.path().string()), [&](petrel::worker_node& w) {
                ckpt_train(w, b, 8, second.path().string());
            }) == petrel::run_ok);
    CHECK(b.started_at == 5);
    CHECK(b.clock_at_start == 5);
    for (std::uint32_t table : {0u, 1u}) {
        const auto m = petrel::read_checkpoint(second.path(), table);
        CHECK(m.clock == 8);
        CHECK(m.clock_limit == 8); // sequential: an exact cut
    }

    ckpt_result c;
    REQUIRE(petrel::run(ckpt_job(2, second.path().string()), [&](petrel::worker_node& w) {
                ckpt_train(w, c, -1, {});
            }) == petrel::run_ok);
    CHECK(c.started_at == 8);
    CHECK(c.clock_at_start == 8);
    REQUIRE(c.dense.size() == straight.dense.size());
    REQUIRE(c.sparse.size() == straight.sparse.size());
    CHECK(std::memcmp(c.dense.data(), straight.dense.data(),
                      straight.dense.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(c.sparse.data(), straight.sparse.data(),
                      straight.sparse.size() * sizeof(float)) == 0);
}

TEST_CASE("run: a checkpoint under bounded_delay records the clocks it may hold", "[checkpoint]") {
    // Each worker adds 1 to key t at clock t (after a pull that waits as bounded_delay<2>
    // says), worker 0 slowly. Worker 0 saves after clock 10: every push of the clocks
    // below the manifest's clock is in, none of a clock at or above its clock_limit.
    constexpr std::uint64_t iterations = 20;
    constexpr std::uint64_t save_at = 10;
    petrel::test::temp_dir dir;
    petrel::config cfg = quick_heartbeats();
    cfg.servers = 2;
    cfg.workers = 3;
    cfg.request_timeout = 20000ms;
    REQUIRE(petrel::run(cfg, [&](petrel::worker_node& w) {
                petrel::kv_store<std::uint64_t, float, petrel::bounded_delay<2>> kv(
                    w, {.table_id = 5});
                for (std::uint64_t t = 0; t < iterations; ++t) {
                    const std::vector<std::uint64_t> key{t};
                    (void)kv.pull(key, asio::use_future).get();
                    kv.push(key, xt::xtensor<float, 1>{1.0f}, asio::use_future).get();
                    if (w.rank() == 0) {
                        std::this_thread::sleep_for(30ms);
                    }
                    kv.clock();
                    if (w.rank() == 0 && t + 1 == save_at) {
                        kv.save(dir.path().string(), asio::use_future).get();
                    }
                }
            }) == petrel::run_ok);
    const auto m = petrel::read_checkpoint(dir.path(), 5);
    CHECK(m.clock == save_at - 2);  // a pull at clock 10 needs the clocks below 8
    CHECK(m.clock_limit > m.clock); // the other workers were ahead
    std::map<std::uint64_t, float> saved;
    for (const auto& shard : m.shards) {
        const auto rows =
            petrel::detail::read_shard(petrel::detail::table_dir(dir.path(), 5) / shard.file, m,
                                       shard, std::uint64_t{1} << 30);
        for (std::uint64_t r = 0; r < rows.rows; ++r) {
            std::uint64_t key = 0;
            float value = 0;
            std::memcpy(&key, rows.keys.data() + r * sizeof key, sizeof key);
            std::memcpy(&value, rows.values.data() + r * sizeof value, sizeof value);
            saved[key] = value;
        }
    }
    for (std::uint64_t t = 0; t < iterations; ++t) {
        INFO("key " << t << ", clock " << m.clock << ", clock_limit " << m.clock_limit);
        const float v = saved.count(t) != 0 ? saved[t] : 0.0f;
        if (t < m.clock) {
            CHECK(v == 3.0f);
        } else if (t >= m.clock_limit) {
            CHECK(v == 0.0f);
        }
    }
}

TEST_CASE("run: a standby manager takes the job over when the manager's process is killed, no "
          "update lost",
          "[fault][process]") {
    // Rank 0 hosts the manager and server 1, rank 1 server 2 and the standby manager,
    // rank 2 server 3, ranks 3 and 4 the workers. Rank 0 is killed while they train:
    // the nodes register again with the standby, which declares server 1 failed and
    // moves its keys to their replicas; training completes with exact sums.
    const auto standby = "127.0.0.1:" + std::to_string(petrel::test::free_port());
    auto procs = kill_servers_during_training(
        5, 3, {0}, {{"PETREL_STANDBY", standby}, {"PETREL_TEST_LOG_INFO", "1"}}, 1500ms, 0ms);
    for (int r : {1, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    CHECK_THAT(procs[1]->output(),
               Catch::Contains("took job") && Catch::Contains("moved to their replicas"));
    CHECK_THAT(procs[3]->output(),
               Catch::Contains("registered again with the manager at " + standby));
}

TEST_CASE("run: under ranked certificates a standby manager takes the job over when the "
          "manager's process is killed, no update lost",
          "[fault][process][security][tls]") {
    // As above, each process showing the certificate of its rank (rank-0 .. rank-4): the
    // manager admits each node only as its own rank; the nodes accept only rank 0's
    // certificate at the root and rank 1's at the standby, and register again there.
    const auto standby = "127.0.0.1:" + std::to_string(petrel::test::free_port());
    auto procs = kill_servers_during_training(5, 3, {0},
                                              {{"PETREL_STANDBY", standby},
                                               {"PETREL_TEST_RANKED_TLS", "1"},
                                               {"PETREL_TEST_LOG_INFO", "1"}},
                                              1500ms, 0ms);
    for (int r : {1, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
        CHECK_THAT(p->output(),
                   Catch::Contains("test: rank " + std::to_string(r) + " shows the certificate " +
                                   petrel::test::tls_path("rank-" + std::to_string(r) + ".pem") +
                                   ", ranks checked") &&
                       !Catch::Contains("registers only as the rank its TLS") &&
                       !Catch::Contains("shows the certificate of '"));
    }
    CHECK_THAT(procs[1]->output(),
               Catch::Contains("took job") && Catch::Contains("moved to their replicas"));
    CHECK_THAT(procs[3]->output(),
               Catch::Contains("registered again with the manager at " + standby));
}

TEST_CASE("run: a manager restarted with --join manager takes the running job over",
          "[fault][process]") {
    // No standby: rank 0 (the manager and server 1) is killed, and a new manager process
    // is started at the root. The nodes wait for it while they train, register again
    // with it, and the job completes with exact sums.
    const auto port = petrel::test::free_port();
    const std::string job = "test-" + std::to_string(::getpid());
    auto procs = start_job("[spmd_failover]", 5,
                           {{"PETREL_SERVERS", "3"}, {"PETREL_TEST_LOG_INFO", "1"}}, {}, port);
    std::this_thread::sleep_for(1500ms);
    REQUIRE_FALSE(procs[0]->wait_for(0ms)); // still training when killed
    procs[0]->kill(SIGKILL);
    std::this_thread::sleep_for(1000ms); // the nodes look for a manager meanwhile
    auto manager = start_joiner("[spmd_failover]", port, job, "manager", 3, 2);
    for (std::size_t r = 1; r < procs.size(); ++r) {
        REQUIRE(procs[r]->wait_for(120s)); // no hang
    }
    REQUIRE(manager->wait_for(60s));
    for (int r : {1, 2, 3, 4}) {
        const auto& p = procs[static_cast<std::size_t>(r)];
        INFO("rank " << r << ":\n" << p->output());
        CHECK(p->exit_code() == 0);
    }
    INFO("manager:\n" << manager->output());
    CHECK(manager->exit_code() == 0);
    CHECK_THAT(manager->output(), Catch::Contains("took job"));
}
