#include <petrel/launch/attachment.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/process.hpp"
#include "support/requests.hpp"

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/manager_node.hpp>
#include <petrel/kv_store.hpp>
#include <petrel/launch/run.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/detail/request_link.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::code_of;
using petrel::test::io_threads;
using petrel::test::log_capture;
namespace wire = petrel::wire;

namespace {

constexpr std::uint64_t n_keys = 512;
constexpr int clocks = 60;

/// A job of two servers and two training workers on loopback, formed.
struct training_job {
    explicit training_job(std::uint32_t max_readers = 64, std::string job_secret = {})
        : secret(std::move(job_secret)), manager(petrel::tcp_transport(io.executor(), quiet()),
                                                 {.job_id = "live",
                                                  .servers = 2,
                                                  .workers = 2,
                                                  .ring = {.partitions = 16, .stripe_keys = 8},
                                                  .heartbeat_timeout = 2000ms,
                                                  .startup_timeout = 10000ms,
                                                  .max_readers = max_readers}),
          root(manager.listen("127.0.0.1:0")) {
        for (int i = 0; i < 2; ++i) {
            servers.push_back(
                std::make_unique<petrel::server_node>(petrel::tcp_transport(io.executor(), quiet()),
                                                      petrel::server_options{.workers = 2}));
            const auto address = servers.back()->listen("127.0.0.1:0");
            server_addresses.push_back(address);
            members.push_back(member_of(petrel::node_role::server, i, address));
        }
        for (int i = 0; i < 2; ++i) {
            members.push_back(member_of(petrel::node_role::worker, 2 + i, {}));
        }
        std::vector<std::future<void>> joins;
        for (auto& m : members) {
            joins.push_back(m->async_join(asio::use_future));
        }
        for (auto& f : joins) {
            REQUIRE_FALSE(code_of(f));
        }
        for (int i = 0; i < 2; ++i) {
            workers.push_back(std::make_unique<petrel::worker_node>(
                petrel::tcp_transport(io.executor(), quiet()), members[2 + i], 30s));
        }
    }

    ~training_job() {
        workers.clear();
        for (auto& m : members) {
            m->close();
        }
        for (auto& s : servers) {
            s->close();
        }
        manager.close();
    }

    petrel::transport_options quiet() {
        petrel::transport_options o;
        o.log = logs.logger();
        o.secret = secret;
        return o;
    }

    std::shared_ptr<petrel::member> member_of(petrel::node_role role, int rank,
                                              std::string address) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "live";
        o.role = role;
        o.rank = static_cast<std::uint32_t>(rank);
        o.address = std::move(address);
        o.heartbeat_interval = 50ms;
        o.heartbeat_timeout = 2000ms;
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet()), o);
    }

    petrel::attach_options reader_options(std::string group = "serve") {
        return {.root = root,
                .job_id = "live",
                .group = std::move(group),
                .heartbeat_interval = 50ms,
                .heartbeat_timeout = 2000ms,
                .startup_timeout = 5000ms,
                .secret = secret};
    }

    log_capture logs;
    io_threads io{2};
    std::string secret;
    petrel::manager_node manager;
    std::string root;
    std::vector<std::string> server_addresses;
    std::vector<std::unique_ptr<petrel::server_node>> servers;
    std::vector<std::shared_ptr<petrel::member>> members;
    std::vector<std::unique_ptr<petrel::worker_node>> workers;
};

using store = petrel::kv_store<std::uint64_t, float, petrel::sequential>;
const petrel::key_range<std::uint64_t> all_keys{0, n_keys};

/// Every worker adds 1 to every key once per clock.
void train(petrel::worker_node& w, std::atomic<int>& progress) {
    store kv(w);
    const xt::xtensor<float, 1> ones = xt::ones<float>({n_keys});
    for (int t = 0; t < clocks; ++t) {
        kv.push(all_keys, ones, asio::use_future).get();
        kv.clock(asio::use_future).get();
        progress.fetch_add(1);
        std::this_thread::sleep_for(2ms);
    }
}

} // namespace

TEST_CASE("attachment: a reader pulls the newest completed clock while training runs, and "
          "never holds it back",
          "[scheduler]") {
    training_job job;
    std::atomic<int> progress{0};
    std::thread t0([&] { train(*job.workers[0], progress); });
    std::thread t1([&] { train(*job.workers[1], progress); });
    while (progress.load() < 10) {
        std::this_thread::sleep_for(1ms);
    }

    int pulls = 0;
    std::uint64_t last_min = 0;
    std::uint64_t mismatches = 0;
    {
        petrel::attachment reader(job.reader_options(), job.logs.logger());
        CHECK(reader.node().read_only());
        CHECK(reader.node().worker_group() == "serve");
        store kv(reader.node());
        // Readers only pull.
        auto push =
            kv.push(all_keys, xt::xtensor<float, 1>(xt::ones<float>({n_keys})), asio::use_future);
        CHECK(code_of(push) == petrel::errc::read_only);
        auto tick = kv.clock(asio::use_future);
        CHECK(code_of(tick) == petrel::errc::read_only);

        // The keys of each server: a pull of one server's keys carries that server's
        // clocks only, so each row can be checked against them.
        std::vector<std::vector<std::uint64_t>> by_server(2);
        const auto view = kv.view();
        for (std::uint64_t k = 0; k < n_keys; ++k) {
            by_server[view->ring.owner(k) == job.members[0]->id() ? 0 : 1].push_back(k);
        }
        REQUIRE_FALSE(by_server[0].empty());
        REQUIRE_FALSE(by_server[1].empty());
        while (progress.load() < clocks && pulls < 1000) {
            for (const auto& keys : by_server) {
                const auto p = kv.pull(keys, asio::use_future).get();
                REQUIRE(p.size() == keys.size());
                // Each row is a whole completed clock: both workers' pushes of every clock
                // below it, nothing of the clock after.
                const auto c = p.min_clock();
                REQUIRE(c <= static_cast<std::uint64_t>(clocks));
                for (float x : p.value_span()) {
                    mismatches += x == 2.0f * static_cast<float>(c) ? 0 : 1;
                }
            }
            const auto p = kv.pull(all_keys, asio::use_future).get();
            REQUIRE(p.size() == n_keys);
            CHECK(p.min_clock() >= last_min); // clocks only move forward
            last_min = p.min_clock();
            ++pulls;
            if (progress.load() > clocks) {
                break; // detach in the middle of training
            }
        }
        CHECK(job.manager.view()->live_group("serve").size() == 1);
    } // detaches
    t0.join();
    t1.join();
    CHECK(mismatches == 0);
    CHECK(pulls > 1);
    CHECK(last_min > 0);
    CHECK(job.manager.view()->live_group("serve").empty());
    CHECK(job.manager.view()->failures().empty());

    // A reader attached after training ends sees the last clock, exactly.
    petrel::attachment late(job.reader_options("audit"), job.logs.logger());
    store kv(late.node());
    const auto p = kv.pull(all_keys, asio::use_future).get();
    CHECK(p.min_clock() == static_cast<std::uint64_t>(clocks));
    const auto v = p.value_span();
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 2.0f * clocks; }));
}

namespace {

/// What a request sent by a program of its own, over a transport with `opts`, to
/// `address` ends with.
std::error_code send_raw(io_threads& io, const petrel::transport_options& opts,
                         const std::string& address, wire::message m) {
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), opts), address, 5s);
    auto got = std::make_shared<std::promise<std::error_code>>();
    auto f = got->get_future();
    link->request(std::move(m), [got](std::error_code ec, wire::message&&) { got->set_value(ec); });
    const auto ready = f.wait_for(10s) == std::future_status::ready;
    link->close();
    return ready ? f.get() : make_error_code(petrel::errc::timed_out);
}

wire::message control_of(petrel::detail::control_body b) {
    return petrel::detail::make_control(b, nullptr);
}

} // namespace

TEST_CASE("attachment: a reader's credential reads the model, and a program holding it can "
          "change neither the model nor the job",
          "[scheduler][security]") {
    const std::string secret = "the live job's secret: 32 bytes.";
    training_job job(64, secret);
    std::atomic<int> progress{0};
    std::thread t0([&] { train(*job.workers[0], progress); });
    std::thread t1([&] { train(*job.workers[1], progress); });
    auto opts = job.reader_options();
    opts.secret = petrel::reader_credential(secret);
    opts.credential = petrel::access::read_only;
    {
        petrel::attachment reader(opts, job.logs.logger());
        store kv(reader.node());
        CHECK(kv.pull(all_keys, asio::use_future).get().size() == n_keys);

        // The same credential in a program that speaks the wire itself.
        const petrel::transport_options hostile{.log = job.logs.logger(),
                                                .secret = opts.secret,
                                                .credential = petrel::access::read_only};
        std::vector<std::uint64_t> keys(n_keys);
        for (std::uint64_t k = 0; k < n_keys; ++k) {
            keys[k] = k;
        }
        for (const auto& address : job.server_addresses) {
            auto poison = petrel::test::push_request<std::uint64_t>(
                keys, std::vector<float>(n_keys, std::numeric_limits<float>::quiet_NaN()));
            poison.header.worker = 0;
            CHECK(send_raw(job.io, hostile, address, std::move(poison)) ==
                  petrel::errc::not_permitted);
            wire::message leave_clock;
            leave_clock.header.kind = wire::message_kind::clock;
            leave_clock.header.worker = 1;
            leave_clock.header.flags = wire::flag_finish | wire::flag_all_tables;
            CHECK(send_raw(job.io, hostile, address, std::move(leave_clock)) ==
                  petrel::errc::not_permitted);
        }
        using petrel::detail::control_op;
        petrel::detail::control_body barrier;
        barrier.op = control_op::barrier;
        CHECK(send_raw(job.io, hostile, job.root, control_of(barrier)) ==
              petrel::errc::not_permitted);
        petrel::detail::control_body as_worker;
        as_worker.op = control_op::join;
        as_worker.role = petrel::node_role::worker;
        as_worker.rank = 7;
        CHECK(send_raw(job.io, hostile, job.root, control_of(as_worker)) ==
              petrel::errc::not_permitted);
        petrel::detail::control_body as_member = as_worker;
        as_member.role = petrel::node_role::reader;
        as_member.id = job.members[2]->id(); // a worker's node id: re-registering as it
        CHECK(send_raw(job.io, hostile, job.root, control_of(as_member)) ==
              petrel::errc::not_permitted);
        petrel::detail::control_body unreachable;
        unreachable.op = control_op::unreachable;
        unreachable.id = job.members[0]->id();
        CHECK(send_raw(job.io, hostile, job.root, control_of(unreachable)) ==
              petrel::errc::not_permitted);
        // Each node logs what it refused (a line a second at most).
        const auto logged = job.logs.all();
        CHECK_THAT(logged, Catch::Contains("a reader's credential reads only"));
        CHECK_THAT(logged, Catch::Contains("refused a control message from"));

        // Another job's reader credential is no credential here.
        auto stranger = hostile;
        stranger.secret = petrel::reader_credential("another job's secret, 32 bytes.");
        CHECK(send_raw(job.io, stranger, job.server_addresses[0],
                       petrel::test::push_request<std::uint64_t>({1}, {1.0f})) ==
              petrel::errc::auth_failed);
    }
    t0.join();
    t1.join();
    CHECK(job.manager.view()->failures().empty());
    // The model is exactly what training made of it.
    petrel::attachment late(opts, job.logs.logger());
    store kv(late.node());
    const auto p = kv.pull(all_keys, asio::use_future).get();
    CHECK(p.min_clock() == static_cast<std::uint64_t>(clocks));
    const auto v = p.value_span();
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 2.0f * clocks; }));
}

TEST_CASE("attachment: attaching to no job, or to the wrong one, is a clear error", "[scheduler]") {
    training_job job;
    auto wrong = job.reader_options();
    wrong.job_id = "other";
    try {
        petrel::attachment a(wrong, job.logs.logger());
        FAIL("attached to another job");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::job_mismatch);
        // It names the job asked for, and does not tell the running job's id.
        CHECK(std::string(e.what()).find("other") != std::string::npos);
        CHECK(std::string(e.what()).find("live") == std::string::npos);
    }
    auto training = job.reader_options(std::string(petrel::training_group));
    CHECK_THROWS_AS(petrel::attachment(training, job.logs.logger()), std::invalid_argument);

    // Nobody listens at this address.
    asio::io_context io;
    asio::ip::tcp::acceptor closed(io, {asio::ip::make_address("127.0.0.1"), 0});
    auto nobody = job.reader_options();
    nobody.root = "127.0.0.1:" + std::to_string(closed.local_endpoint().port());
    closed.close();
    nobody.startup_timeout = 300ms;
    try {
        petrel::attachment a(nobody, job.logs.logger());
        FAIL("attached to nothing");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::manager_unreachable);
    }
}

TEST_CASE("attachment: once every server left, a reader's pulls fail with job_finished, not "
          "node_failed or timed_out",
          "[scheduler]") {
    training_job job;
    auto options = job.reader_options();
    options.request_timeout = 20s; // what a pull that found no end would take
    petrel::attachment reader(options, job.logs.logger());
    store kv(reader.node());
    REQUIRE(kv.pull(all_keys, asio::use_future).get().size() == n_keys);

    // The job ends as a launched one does: its workers leave, then its servers, whose
    // processes are gone afterwards; the reader is still attached.
    for (int i : {2, 3, 0, 1}) {
        auto left = job.members[static_cast<std::size_t>(i)]->async_leave(asio::use_future);
        REQUIRE_FALSE(code_of(left));
    }
    for (auto& s : job.servers) {
        s->close();
    }
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (kv.view()->count(petrel::node_role::server, petrel::node_state::left) < 2 &&
           std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE(kv.view()->count(petrel::node_role::server, petrel::node_state::left) == 2);

    std::error_code ec;
    try {
        kv.pull(all_keys, asio::use_future).get();
    } catch (const std::system_error& e) {
        ec = e.code();
    }
    CHECK(ec == petrel::errc::job_finished);
    CHECK(job.manager.view()->failures().empty());
}

TEST_CASE("attachment: a job takes at most max_readers readers at once; one that detaches "
          "makes room",
          "[scheduler][security]") {
    training_job job(2);
    auto first = std::make_unique<petrel::attachment>(job.reader_options(), job.logs.logger());
    petrel::attachment second(job.reader_options("other"), job.logs.logger());
    try {
        petrel::attachment third(job.reader_options(), job.logs.logger());
        FAIL("a third reader attached");
    } catch (const std::system_error& e) {
        CHECK(e.code() == petrel::errc::job_full);
        CHECK_THAT(e.what(), Catch::Contains("max_readers"));
    }
    first.reset(); // detaches
    std::unique_ptr<petrel::attachment> third;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!third && std::chrono::steady_clock::now() < until) {
        try {
            third = std::make_unique<petrel::attachment>(job.reader_options(), job.logs.logger());
        } catch (const std::system_error& e) {
            REQUIRE(e.code() == petrel::errc::job_full); // until the manager saw it go
            std::this_thread::sleep_for(50ms);
        }
    }
    CHECK(third);
}

// The job a reader process attaches to (below). Without a launcher, the whole job in this
// process; under the PETREL_* launcher, each process its share. Two workers add 1 to
// every key once per clock, for about five seconds.
TEST_CASE("attachment: a job that readers attach to", "[scheduler][spmd_readable]") {
    petrel::config cfg;
    cfg.servers = 2;
    cfg.workers = 2;
    cfg.heartbeat_interval = 100ms;
    cfg.heartbeat_timeout = 1000ms;
    cfg.startup_timeout = 60000ms;
    std::atomic<int> wrong{0}; // Catch's checks are not for the workers' threads
    const int status = petrel::run(cfg, [&wrong](petrel::worker_node& w) {
        store kv(w);
        const xt::xtensor<float, 1> ones = xt::ones<float>({n_keys});
        for (int t = 0; t < 500; ++t) {
            kv.push(all_keys, ones, asio::use_future).get();
            kv.clock();
            std::this_thread::sleep_for(10ms);
        }
        // The last clock is complete before anyone leaves.
        kv.clock(asio::use_future).get();
        w.barrier(petrel::group::workers, asio::use_future).get();
        const auto p = kv.pull(all_keys, asio::use_future).get();
        const auto v = p.value_span();
        if (!std::all_of(v.begin(), v.end(), [](float x) { return x == 2.0f * 500; })) {
            ++wrong;
        }
    });
    CHECK(status == petrel::run_ok);
    CHECK(wrong == 0);
}

TEST_CASE("attachment: a reader process attaches to a job of four processes by its root "
          "address, and detaches without disturbing it",
          "[scheduler][process]") {
    const auto port = petrel::test::free_port();
    const auto started = std::chrono::steady_clock::now();
    auto procs = petrel::test::start_job("[spmd_readable]", 4, {}, {}, port);
    std::uint64_t last = 0;
    std::uint64_t mismatches = 0;
    int pulls = 0;
    log_capture reader_log;
    std::string timeline; // what the reader did when, for a failure's report
    const auto note = [&timeline, started](const std::string& what) {
        timeline += std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - started)
                                       .count()) +
                    " ms: " + what + "\n";
    };
    try {
        petrel::attachment reader({.root = "127.0.0.1:" + std::to_string(port),
                                   .job_id = "test-" + std::to_string(::getpid()),
                                   .group = "evaluation",
                                   .heartbeat_interval = 100ms,
                                   .heartbeat_timeout = 1000ms,
                                   .startup_timeout = 30000ms,
                                   .secret = petrel::test::job_secret()},
                                  reader_log.logger());
        note("attached");
        store kv(reader.node());
        const auto view = kv.view();
        const auto servers = view->of_role(petrel::node_role::server);
        if (servers.size() != 2) {
            throw std::runtime_error(std::to_string(servers.size()) + " servers in the view");
        }
        std::vector<std::vector<std::uint64_t>> by_server(2);
        for (std::uint64_t k = 0; k < n_keys; ++k) {
            by_server[view->ring.owner(k) == servers[0]->id ? 0 : 1].push_back(k);
        }
        for (; pulls < 40; ++pulls) {
            std::uint64_t low = std::numeric_limits<std::uint64_t>::max();
            for (const auto& keys : by_server) {
                const auto p = kv.pull(keys, asio::use_future).get();
                if (p.size() != keys.size()) {
                    throw std::runtime_error("a pull of " + std::to_string(keys.size()) +
                                             " keys returned " + std::to_string(p.size()));
                }
                const auto c = p.min_clock();
                for (float x : p.value_span()) {
                    mismatches += x == 2.0f * static_cast<float>(c) ? 0 : 1;
                }
                low = std::min(low, c);
            }
            CHECK(low >= last); // clocks only move forward
            last = low;
            std::this_thread::sleep_for(20ms);
        }
        note("pulled clock " + std::to_string(last) + " last");
        // Detaches here while the job trains on.
    } catch (const std::exception& e) {
        note(std::string("failed: ") + e.what());
        std::string outputs;
        const auto until = std::chrono::steady_clock::now() + 20s; // the job's end, if it comes
        for (auto& p : procs) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                until - std::chrono::steady_clock::now());
            (void)p->wait_for(std::max(left, std::chrono::milliseconds(0)));
            outputs += "--- a process of the job:\n" + p->output();
        }
        FAIL("after " << pulls << " pulls:\n"
                      << timeline << "--- the reader's log:\n"
                      << reader_log.all() << outputs);
    }
    CHECK(mismatches == 0);
    CHECK(last > 0);
    for (auto& p : procs) {
        REQUIRE(p->wait_for(120s));
        INFO(p->output());
        CHECK(p->exit_code() == 0);
    }
}
