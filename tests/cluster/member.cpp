#include <petrel/cluster/member.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/process.hpp"

#include <petrel/cluster/manager_node.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
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
}

TEST_CASE("member: a lost manager ends every wait with an error", "[cluster][member]") {
    log_capture logs;
    io_threads io{2};
    petrel::transport_options t;
    t.log = logs.logger();
    auto manager = std::make_unique<petrel::manager_node>(
        petrel::tcp_transport(io.executor(), t),
        petrel::manager_options{.job_id = "job-m", .servers = 1, .workers = 1});
    const auto root = manager->listen("127.0.0.1:0");
    petrel::member w(petrel::tcp_transport(io.executor(), t), worker_at(root));
    petrel::member s(petrel::tcp_transport(io.executor(), t), worker_at(root, true));
    auto fw = w.async_join(asio::use_future);
    auto fs = s.async_join(asio::use_future);
    REQUIRE_FALSE(code_of(fw));
    REQUIRE_FALSE(code_of(fs));
    auto waiting = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    manager->close();
    const auto ec = code_of(waiting);
    INFO(ec.message());
    CHECK((ec == petrel::errc::connection_closed || ec == petrel::errc::manager_unreachable));
    // The heartbeats notice too, and later calls fail at once.
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (w.failure().find("stopped answering") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
    }
    CHECK_THAT(w.failure(), Catch::Contains("stopped answering"));
    auto later = w.async_barrier(petrel::group::all, asio::use_future);
    CHECK(code_of(later) == petrel::errc::manager_unreachable);
}

TEST_CASE("member: bad options are refused at construction", "[cluster][member]") {
    io_threads io{1};
    auto o = worker_at("127.0.0.1:1", true);
    o.address.clear(); // a server needs its address
    CHECK_THROWS_AS(petrel::member(petrel::tcp_transport(io.executor()), o), std::invalid_argument);
    o = worker_at("127.0.0.1:1");
    o.heartbeat_timeout = o.heartbeat_interval;
    CHECK_THROWS_AS(petrel::member(petrel::tcp_transport(io.executor()), o), std::invalid_argument);
}
