#include <petrel/cluster/member.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/process.hpp"

#include <petrel/cluster/manager_node.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using petrel::test::code_of;
using petrel::test::free_port;
using petrel::test::io_threads;
using petrel::test::log_capture;

namespace {

/// A member of job "job-m" at `root`: a worker, or a server when `server`.
petrel::member_options worker_at(std::string root, bool server = false) {
    petrel::member_options o;
    o.root = std::move(root);
    o.job_id = "job-m";
    o.role = server ? petrel::node_role::server : petrel::node_role::worker;
    o.address = server ? "127.0.0.1:1" : "";
    o.heartbeat_interval = 50ms;
    o.heartbeat_timeout = 400ms;
    o.startup_timeout = 5000ms;
    return o;
}

/// Job "job-m" of one server and one worker on loopback; `join` adds the worker (with
/// options `o`) and the server, and joins both.
struct small_job {
    small_job() {
        t.log = logs.logger();
        manager = std::make_unique<petrel::manager_node>(
            petrel::tcp_transport(io.executor(), t),
            petrel::manager_options{.job_id = "job-m", .servers = 1, .workers = 1});
        root = manager->listen("127.0.0.1:0");
    }

    void join(const petrel::member_options& o) {
        w = std::make_unique<petrel::member>(petrel::tcp_transport(io.executor(), t), o);
        s = std::make_unique<petrel::member>(petrel::tcp_transport(io.executor(), t),
                                             worker_at(root, true));
        auto fw = w->async_join(asio::use_future);
        auto fs = s->async_join(asio::use_future);
        REQUIRE_FALSE(code_of(fw));
        REQUIRE_FALSE(code_of(fs));
    }

    log_capture logs;
    io_threads io{2};
    petrel::transport_options t;
    std::unique_ptr<petrel::manager_node> manager;
    std::string root;
    std::unique_ptr<petrel::member> w;
    std::unique_ptr<petrel::member> s;
};

} // namespace

TEST_CASE("member: an unreachable root fails the join after the startup timeout",
          "[cluster][member]") {
    log_capture logs;
    io_threads io{1};
    petrel::transport_options t;
    t.log = logs.logger();
    auto o = worker_at("127.0.0.1:" + std::to_string(free_port()));
    o.startup_timeout = 400ms;
    petrel::member m(petrel::tcp_transport(io.executor(), t), o);
    const auto start = std::chrono::steady_clock::now();
    auto f = m.async_join(asio::use_future);
    CHECK(code_of(f) == petrel::errc::manager_unreachable);
    CHECK(std::chrono::steady_clock::now() - start >= 400ms);
    CHECK_THAT(m.failure(), Catch::Contains(o.root) && Catch::Contains("did not answer"));
    CHECK(m.id() == petrel::no_node);
}

TEST_CASE("member: a root port held by a program that does not speak Petrel is named as such",
          "[cluster][member]") {
    log_capture logs;
    io_threads io{1};
    // Something else listens at the root: it answers every connection with HTTP.
    asio::io_context other;
    asio::ip::tcp::acceptor acceptor(other, {asio::ip::make_address("127.0.0.1"), 0});
    const std::string root = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
    std::promise<void> done;
    auto finished = done.get_future();
    std::thread server([&] {
        asio::ip::tcp::socket s(other);
        std::error_code ec;
        acceptor.accept(s, ec);
        if (!ec) {
            const std::string reply(4096, 'x');
            asio::write(s, asio::buffer("HTTP/1.1 400 Bad Request\r\n" + reply), ec);
        }
        (void)finished.wait_for(10s); // keeps the connection until the test is done
    });
    petrel::transport_options t;
    t.log = logs.logger();
    auto o = worker_at(root);
    o.startup_timeout = 5000ms;
    petrel::member m(petrel::tcp_transport(io.executor(), t), o);
    auto f = m.async_join(asio::use_future);
    const bool ended = f.wait_for(8s) == std::future_status::ready;
    done.set_value();
    server.join();
    REQUIRE(ended);
    CHECK(code_of(f));
    CHECK_THAT(m.failure(), Catch::Contains("root address " + root) &&
                                Catch::Contains("not Petrel's") &&
                                Catch::Contains("another program holds that port"));
}

TEST_CASE("member: a root that comes up late is joined", "[cluster][member]") {
    log_capture logs;
    io_threads io{2};
    petrel::transport_options t;
    t.log = logs.logger();
    const std::string root = "127.0.0.1:" + std::to_string(free_port());
    petrel::member w(petrel::tcp_transport(io.executor(), t), worker_at(root));
    petrel::member s(petrel::tcp_transport(io.executor(), t), worker_at(root, true));
    auto fw = w.async_join(asio::use_future);
    auto fs = s.async_join(asio::use_future);
    std::this_thread::sleep_for(300ms); // both are retrying
    petrel::manager_node manager(petrel::tcp_transport(io.executor(), t),
                                 {.job_id = "job-m", .servers = 1, .workers = 1});
    CHECK(manager.listen(root) == root);
    CHECK_FALSE(code_of(fw));
    CHECK_FALSE(code_of(fs));
    CHECK(w.id() == 2);
    CHECK(s.id() == 1);
    // Each was given a key of its own.
    CHECK(w.key() != petrel::node_key{});
    CHECK(s.key() != petrel::node_key{});
    CHECK(w.key() != s.key());
}

TEST_CASE("member: a lost manager ends every wait with an error", "[cluster][member]") {
    small_job job;
    auto o = worker_at(job.root);
    o.manager_grace = 0ms; // no looking for another manager
    job.join(o);
    auto& w = *job.w;
    auto& manager = job.manager;
    // Told of each failure as it is recorded, with no lock of the member held.
    std::mutex mutex;
    std::condition_variable told;
    std::string heard;
    const auto watching = w.subscribe_failures([&] {
        const auto now = w.failure();
        std::lock_guard lock(mutex);
        heard = now;
        told.notify_all();
    });
    auto waiting = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    manager->close();
    const auto ec = code_of(waiting);
    INFO(ec.message());
    CHECK((ec == petrel::errc::connection_closed || ec == petrel::errc::manager_unreachable));
    // The heartbeats notice too, and later calls fail at once.
    {
        std::unique_lock lock(mutex);
        CHECK(told.wait_for(lock, petrel::test::timeout,
                            [&] { return heard.find("stopped answering") != std::string::npos; }));
    }
    w.unsubscribe(watching);
    CHECK_THAT(w.failure(), Catch::Contains("stopped answering"));
    auto later = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(code_of(later) == petrel::errc::manager_unreachable);
}

TEST_CASE("member: a node that lost its manager looks for one for the grace time, then every "
          "wait ends",
          "[cluster][member]") {
    small_job job;
    auto o = worker_at(job.root);
    o.manager_grace = 1500ms;
    o.standby = {"127.0.0.1:" + std::to_string(free_port())}; // nobody there either
    job.join(o);
    auto& w = *job.w;
    auto& manager = job.manager;
    auto waiting = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    const auto lost_at = std::chrono::steady_clock::now();
    manager->close();
    // The wait, and a later call, are kept for a manager that takes the job over...
    CHECK(waiting.wait_for(700ms) == std::future_status::timeout);
    auto later = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(later.wait_for(100ms) == std::future_status::timeout);
    CHECK(w.view()); // the view stays: pushes and pulls go on
    CHECK(w.id() == 2);
    // ... and end when none came within the grace time.
    CHECK(code_of(waiting) == petrel::errc::manager_unreachable);
    CHECK(code_of(later) == petrel::errc::manager_unreachable);
    CHECK(std::chrono::steady_clock::now() - lost_at >= 1500ms);
    CHECK_THAT(w.failure(), Catch::Contains("no manager took job 'job-m' over"));
    CHECK_THAT(job.logs.all(), Catch::Contains("looks for a manager"));
    auto after = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(code_of(after) == petrel::errc::manager_unreachable);
}

TEST_CASE("member: calls waiting at a manager that stopped answering go to the standby that "
          "took over",
          "[cluster][member][fault]") {
    log_capture logs;
    io_threads io{2};
    io_threads frozen_io{1}; // the first manager's own thread, blocked below
    petrel::transport_options t;
    t.log = logs.logger();
    petrel::manager_options mo{
        .job_id = "job-m", .servers = 1, .workers = 1, .heartbeat_timeout = 400ms};
    petrel::manager_node first(petrel::tcp_transport(frozen_io.executor(), t), mo);
    const auto root = first.listen("127.0.0.1:0");
    mo.take_over = true;
    petrel::manager_node standby(petrel::tcp_transport(io.executor(), t), mo);
    const auto standby_at = standby.listen("127.0.0.1:0");
    auto wo = worker_at(root);
    auto so = worker_at(root, true);
    for (auto* o : {&wo, &so}) {
        o->standby = {standby_at};
        o->manager_grace = 10s;
    }
    petrel::member w(petrel::tcp_transport(io.executor(), t), wo);
    petrel::member s(petrel::tcp_transport(io.executor(), t), so);
    auto fw = w.async_join(asio::use_future);
    auto fs = s.async_join(asio::use_future);
    REQUIRE_FALSE(code_of(fw));
    REQUIRE_FALSE(code_of(fs));
    // The manager hangs (as a stopped process): its connections stay open.
    std::promise<void> release;
    auto released = release.get_future().share();
    asio::post(frozen_io.executor(), [released] { released.wait(); });
    auto wb = w.async_barrier(petrel::group::all, asio::use_future);
    auto sb = s.async_barrier(petrel::group::all, asio::use_future);
    CHECK(wb.wait_for(200ms) == std::future_status::timeout);
    // The heartbeats time out; both come back at the standby, which takes over, and
    // the barrier they were waiting at completes there.
    CHECK_FALSE(code_of(wb));
    CHECK_FALSE(code_of(sb));
    REQUIRE(standby.view());
    CHECK(w.view()->find(0)->address == standby_at);
    CHECK(w.failure().empty());
    CHECK(s.failure().empty());
    release.set_value();
    first.close();
    // The standby runs the job now: leaving ends it.
    auto finished = standby.async_wait_finished(asio::use_future);
    auto lw = w.async_leave(asio::use_future);
    auto ls = s.async_leave(asio::use_future);
    CHECK_FALSE(code_of(lw));
    CHECK_FALSE(code_of(ls));
    CHECK_FALSE(code_of(finished));
}

TEST_CASE("member: bad options are refused at construction", "[cluster][member]") {
    io_threads io{1};
    auto o = worker_at("127.0.0.1:1", true);
    o.address.clear(); // a server needs its address
    CHECK_THROWS_AS(petrel::member(petrel::tcp_transport(io.executor()), o), std::invalid_argument);
    o = worker_at("127.0.0.1:1");
    o.heartbeat_timeout = o.heartbeat_interval;
    CHECK_THROWS_AS(petrel::member(petrel::tcp_transport(io.executor()), o), std::invalid_argument);
    o = worker_at("127.0.0.1:1");
    o.manager_grace = -1ms;
    CHECK_THROWS_AS(petrel::member(petrel::tcp_transport(io.executor()), o), std::invalid_argument);
}

TEST_CASE("member: a node that reports its failure leaves, stops its heartbeats, and the others' "
          "waits end naming it",
          "[cluster][member]") {
    small_job job;
    job.join(worker_at(job.root));
    auto& w = *job.w;
    auto& s = *job.s;
    auto finished = job.manager->async_wait_finished(asio::use_future);
    auto waiting = s.async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    auto reported = w.async_fail("", asio::use_future); // no reason: it failed all the same
    CHECK_FALSE(code_of(reported));
    CHECK(code_of(waiting) == petrel::errc::node_failed);
    CHECK_THAT(s.failure(), Catch::Contains("worker 2") &&
                                Catch::Contains("failed: it failed (no reason given)"));
    // Its heartbeats stopped with the answer: none reaches the manager, which would refuse
    // it (a failed node), and its heartbeat timeout passes without a word from it.
    std::this_thread::sleep_for(500ms);
    CHECK_THAT(job.logs.all(),
               !Catch::Contains("not a live member") && !Catch::Contains("was declared failed"));
    auto left = s.async_leave(asio::use_future);
    CHECK_FALSE(code_of(left));
    CHECK(code_of(finished) == petrel::errc::node_failed);
}
