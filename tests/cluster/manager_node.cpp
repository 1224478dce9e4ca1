#include <petrel/cluster/manager_node.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/text.hpp"
#include "support/tls.hpp"

#include <petrel/cluster/member.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::code_of;
using petrel::test::io_threads;
using petrel::test::log_capture;

namespace {

/// A manager on loopback and helpers to make members of its job. Declared in the order
/// that lets every handler finish before what it touches is destroyed.
struct manager_job {
    explicit manager_job(std::uint32_t servers, std::uint32_t workers,
                         std::chrono::milliseconds heartbeat_timeout = 2000ms,
                         std::chrono::milliseconds startup_timeout = 10000ms,
                         std::uint32_t max_servers = 0, std::uint32_t max_workers = 0)
        : manager_job({.job_id = "job-a",
                       .servers = servers,
                       .workers = workers,
                       .max_workers = max_workers,
                       .max_servers = max_servers,
                       .ring = {.partitions = 64},
                       .heartbeat_timeout = heartbeat_timeout,
                       .startup_timeout = startup_timeout}) {}

    explicit manager_job(petrel::manager_options o)
        : manager(petrel::tcp_transport(io.executor(), quiet()), std::move(o)),
          root(manager.listen("127.0.0.1:0")) {}

    log_capture logs;
    io_threads io{2};
    petrel::manager_node manager;
    std::string root;

    petrel::transport_options quiet() {
        petrel::transport_options o;
        o.log = logs.logger();
        return o;
    }

    /// A member of `role` and `rank` that joined the running job.
    std::shared_ptr<petrel::member> joined(petrel::node_role role, std::uint32_t rank) {
        auto m = make(role, rank);
        auto f = m->async_join(asio::use_future);
        REQUIRE_FALSE(code_of(f));
        return m;
    }

    /// Server rank 0 and workers ranks 1 and 2, joined (for a job of 1 server, 2 workers).
    std::array<std::shared_ptr<petrel::member>, 3> server_and_two_workers();

    /// A manager that takes this job (of 1 server, 2 workers) over when its nodes come.
    std::unique_ptr<petrel::manager_node> standby(std::chrono::milliseconds heartbeat_timeout,
                                                  std::uint32_t max_workers = 0) {
        return std::make_unique<petrel::manager_node>(
            petrel::tcp_transport(io.executor(), quiet()),
            petrel::manager_options{.job_id = "job-a",
                                    .servers = 1,
                                    .workers = 2,
                                    .max_workers = max_workers,
                                    .ring = {.partitions = 64},
                                    .heartbeat_timeout = heartbeat_timeout,
                                    .take_over = true});
    }

    /// A raw connection to the manager (or the one at `at`), its events recorded in `ev`.
    petrel::connection_ptr connect(petrel::tcp_transport& t, petrel::test::events& ev,
                                   const std::string& at = {}) {
        std::promise<petrel::connection_ptr> connected;
        t.async_connect(at.empty() ? root : at, ev.handlers(),
                        [&](std::error_code, petrel::connection_ptr c) { connected.set_value(c); });
        auto conn = connected.get_future().get();
        REQUIRE(conn);
        return conn;
    }

    std::shared_ptr<petrel::member> make(petrel::node_role role, std::uint32_t rank,
                                         std::string job_id = "job-a",
                                         std::chrono::milliseconds heartbeat = 50ms,
                                         std::chrono::milliseconds heartbeat_timeout = 2000ms,
                                         std::optional<petrel::declarations> declared = {}) {
        petrel::member_options o;
        if (role == petrel::node_role::reader) {
            o.group = "serve";
        }
        o.root = root;
        o.job_id = std::move(job_id);
        o.role = role;
        o.rank = rank;
        o.address = role == petrel::node_role::server ? "127.0.0.1:" + std::to_string(20000 + rank)
                                                      : std::string{};
        o.heartbeat_interval = heartbeat;
        o.heartbeat_timeout = heartbeat_timeout;
        o.startup_timeout = 5000ms;
        o.declared = std::move(declared);
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet()), o);
    }
};

/// The join request of worker `rank` of job "job-a", as a member would send it.
petrel::wire::message worker_join(std::uint32_t rank) {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::join;
    b.job_id = "job-a";
    b.role = petrel::node_role::worker;
    b.rank = rank;
    return petrel::detail::make_control(b);
}

/// Whether `pred` holds for `watcher`'s view within the test's timeout.
template <typename Pred>
bool view_becomes(const petrel::member& watcher, Pred pred) {
    const auto until = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (!pred(*watcher.view()) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(10ms);
    }
    return pred(*watcher.view());
}

/// Joins every member concurrently (the job forms once all registered).
void join_all(const std::vector<std::shared_ptr<petrel::member>>& members) {
    std::vector<std::future<void>> joins;
    for (const auto& m : members) {
        joins.push_back(m->async_join(asio::use_future));
    }
    for (auto& f : joins) {
        REQUIRE_FALSE(code_of(f));
    }
}

std::array<std::shared_ptr<petrel::member>, 3> manager_job::server_and_two_workers() {
    std::array<std::shared_ptr<petrel::member>, 3> m{make(petrel::node_role::server, 0),
                                                     make(petrel::node_role::worker, 1),
                                                     make(petrel::node_role::worker, 2)};
    join_all({m.begin(), m.end()});
    return m;
}

} // namespace

TEST_CASE("manager_node: a job forms once every node registered, ids follow roles and ranks",
          "[cluster][manager]") {
    manager_job j(2, 3);
    // Registered out of order: the ids still follow (role, rank).
    auto w2 = j.make(petrel::node_role::worker, 4);
    auto s1 = j.make(petrel::node_role::server, 1);
    auto w0 = j.make(petrel::node_role::worker, 2);
    auto s0 = j.make(petrel::node_role::server, 0);
    auto w1 = j.make(petrel::node_role::worker, 3);
    std::vector<std::shared_ptr<petrel::member>> all{s0, s1, w0, w1, w2};
    std::vector<std::future<void>> joins;
    for (std::size_t i = 0; i + 1 < all.size(); ++i) {
        joins.push_back(all[i]->async_join(asio::use_future));
    }
    // Nobody gets a view before the last node registered.
    CHECK(joins[0].wait_for(100ms) == std::future_status::timeout);
    CHECK(j.manager.view() == nullptr);
    joins.push_back(w2->async_join(asio::use_future));
    for (auto& f : joins) {
        CHECK_FALSE(code_of(f));
    }
    CHECK(s0->id() == 1);
    CHECK(s1->id() == 2);
    CHECK(w0->id() == 3);
    CHECK(w1->id() == 4);
    CHECK(w2->id() == 5);
    const auto v = j.manager.view();
    REQUIRE(v);
    CHECK(v->version == 1);
    CHECK(v->job_id == "job-a");
    CHECK(v->nodes.size() == 6);
    CHECK(v->find(0)->role == petrel::node_role::manager);
    CHECK(v->find(0)->address == j.root);
    CHECK(v->find(2)->address == "127.0.0.1:20001");
    CHECK(v->find(5)->index == 2);
    CHECK(v->ring.primaries() == std::vector<petrel::node_id>{1, 2});
    for (auto& m : all) {
        CHECK(*m->view() == *v);
    }
}

TEST_CASE("manager_node: barriers release a group once all its live members arrived",
          "[cluster][manager]") {
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    for (int round = 0; round < 3; ++round) {
        auto b0 = w0->async_barrier(petrel::group::workers, asio::use_future);
        CHECK(b0.wait_for(50ms) == std::future_status::timeout);
        auto b1 = w1->async_barrier(petrel::group::workers, asio::use_future);
        CHECK_FALSE(code_of(b0));
        CHECK_FALSE(code_of(b1));
    }
    // A group the node is not in is an error, not a hang.
    auto wrong = s->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(code_of(wrong) == petrel::errc::invalid_argument);

    // `all` spans servers and workers.
    auto a0 = w0->async_barrier(petrel::group::all, asio::use_future);
    auto a1 = w1->async_barrier(petrel::group::all, asio::use_future);
    CHECK(a0.wait_for(50ms) == std::future_status::timeout);
    auto a2 = s->async_barrier(petrel::group::all, asio::use_future);
    CHECK_FALSE(code_of(a0));
    CHECK_FALSE(code_of(a1));
    CHECK_FALSE(code_of(a2));

    // A node that left is not waited for; when all left, the job is finished.
    auto finished = j.manager.async_wait_finished(asio::use_future);
    auto l0 = w0->async_leave(asio::use_future);
    CHECK_FALSE(code_of(l0));
    auto alone = w1->async_barrier(petrel::group::workers, asio::use_future);
    CHECK_FALSE(code_of(alone));
    CHECK(finished.wait_for(50ms) == std::future_status::timeout);
    auto l1 = w1->async_leave(asio::use_future);
    auto l2 = s->async_leave(asio::use_future);
    CHECK_FALSE(code_of(l1));
    CHECK_FALSE(code_of(l2));
    CHECK_FALSE(code_of(finished));
    CHECK(j.manager.failure().empty());
}

TEST_CASE("manager_node: readers that went leave the view after departed_grace; ids and "
          "readers' indices never repeat",
          "[cluster][manager][security]") {
    manager_job j({.job_id = "job-a",
                   .servers = 1,
                   .workers = 2,
                   .ring = {.partitions = 64},
                   .heartbeat_timeout = 2000ms,
                   .departed_grace = 300ms});
    auto [s, w0, w1] = j.server_and_two_workers();
    auto reader = [&](std::uint32_t rank) { return j.joined(petrel::node_role::reader, rank); };
    auto eventually = [watcher = w0](auto pred) { return view_becomes(*watcher, pred); };
    auto r4 = reader(10);
    auto r5 = reader(11);
    auto r6 = reader(12);
    CHECK(r4->id() == 4);
    CHECK(r6->id() == 6);
    CHECK(r6->view()->find(6)->index == 2);
    auto left = r4->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(left));
    r5->close(); // fails: its connection is lost
    REQUIRE(eventually([](const petrel::membership_view& v) {
        return v.find(4) && v.find(4)->state == petrel::node_state::left && v.find(5) &&
               v.find(5)->state == petrel::node_state::failed;
    }));
    const auto gone_at = w0->view()->version;
    // After the grace period they are left out; the rest of the view is unchanged.
    REQUIRE(eventually([](const petrel::membership_view& v) { return !v.find(4) && !v.find(5); }));
    CHECK(w0->view()->version > gone_at);
    CHECK(w0->view()->nodes.size() == 5);
    CHECK(w0->view()->find(6)->state == petrel::node_state::alive);
    CHECK(*s->view() == *w0->view());
    CHECK_THAT(j.logs.all(), Catch::Contains("2 nodes that went are left out of the view"));
    // The highest id stays while it is the highest: the next reader counts on from it.
    auto gone = r6->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(gone));
    std::this_thread::sleep_for(600ms);
    REQUIRE(w0->view()->find(6));
    auto r7 = reader(13);
    CHECK(r7->id() == 7);
    CHECK(r7->view()->find(7)->index == 3);
    REQUIRE(eventually([](const petrel::membership_view& v) { return !v.find(6); }));
    CHECK(w0->view()->find(7)->state == petrel::node_state::alive);
    // The job goes on: barriers and the end are as before.
    auto b0 = w0->async_barrier(petrel::group::workers, asio::use_future);
    auto b1 = w1->async_barrier(petrel::group::workers, asio::use_future);
    CHECK_FALSE(code_of(b0));
    CHECK_FALSE(code_of(b1));
    r7->close();
}

TEST_CASE("manager_node: workers that joined the running job and went leave the view after "
          "departed_grace; those the job formed with stay",
          "[cluster][manager][security]") {
    manager_job j({.job_id = "job-a",
                   .servers = 1,
                   .workers = 2,
                   .max_workers = 4,
                   .drop_failed_workers = true,
                   .ring = {.partitions = 64},
                   .heartbeat_timeout = 2000ms,
                   .departed_grace = 300ms});
    auto [s, w0, w1] = j.server_and_two_workers();
    auto worker = [&](std::uint32_t rank) { return j.joined(petrel::node_role::worker, rank); };
    auto eventually = [watcher = w0](auto pred) { return view_becomes(*watcher, pred); };
    auto e4 = worker(3);
    auto e5 = worker(4);
    CHECK(e4->id() == 4);
    CHECK(e5->view()->find(5)->index == 3);
    // A worker that joined leaves, another fails (the job drops it): both go. A worker
    // the job formed with leaves too: it stays, its index is in every server's clocks.
    auto left = e4->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(left));
    e5->close();
    auto formed_left = w1->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(formed_left));
    auto e6 = worker(5); // the highest id and index: stays when it goes
    CHECK(e6->id() == 6);
    CHECK(e6->view()->find(6)->index == 4);
    REQUIRE(eventually([](const petrel::membership_view& v) {
        return v.find(5) && v.find(5)->state == petrel::node_state::failed;
    }));
    REQUIRE(eventually([](const petrel::membership_view& v) { return !v.find(4) && !v.find(5); }));
    const auto v = *w0->view();
    CHECK(v.find(3)->state == petrel::node_state::left);
    CHECK(v.nodes.size() == 5); // manager, server, the two formed workers, worker 6
    CHECK(*s->view() == v);
    auto last_left = e6->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(last_left));
    std::this_thread::sleep_for(600ms);
    REQUIRE(w0->view()->find(6));
    // Ids and indices count on from the highest: none repeats.
    auto e7 = worker(6);
    CHECK(e7->id() == 7);
    CHECK(e7->view()->find(7)->index == 5);
    REQUIRE(eventually([](const petrel::membership_view& v) { return !v.find(6); }));
    CHECK(w0->view()->find(3));
    {
        // Three workers in the view, of indices 0, 1 and 5: a worker counts by index.
        REQUIRE(eventually([&](const petrel::membership_view&) { return !e7->view()->find(6); }));
        petrel::worker_node w(petrel::tcp_transport(j.io.executor(), j.quiet()), e7);
        CHECK(w.view()->of_role(petrel::node_role::worker).size() == 3);
        CHECK(w.workers() == 6);
        CHECK(w.rank() == 5);
        CHECK(w.servers() == 1);
    }
    // The job goes on: the live workers pass a barrier.
    auto b0 = w0->async_barrier(petrel::group::workers, asio::use_future);
    auto b7 = e7->async_barrier(petrel::group::workers, asio::use_future);
    CHECK_FALSE(code_of(b0));
    CHECK_FALSE(code_of(b7));
    e7->close();
}

TEST_CASE("manager_node: a node of another job is refused", "[cluster][manager]") {
    manager_job j(1, 1);
    auto stale = j.make(petrel::node_role::worker, 1, "job-old");
    auto f = stale->async_join(asio::use_future);
    CHECK(code_of(f) == petrel::errc::job_mismatch);
    // The refusal names the job asked for, not this one: the id is not told to anyone.
    CHECK_THAT(stale->failure(), Catch::Contains("job-old") && !Catch::Contains("job-a"));
    CHECK_THAT(j.logs.all(), Catch::Contains("job-old"));
    CHECK(j.manager.view() == nullptr); // the stale node took no place in the job
}

TEST_CASE("manager_node: a job id a peer chose reaches the log escaped and cut",
          "[cluster][manager][security]") {
    manager_job j(1, 1);
    const std::string forged =
        "x'\npetrel error: job 'job-a' failed: worker 0 failed\x1b[2J" + std::string(300, 'y');
    auto hostile = j.make(petrel::node_role::worker, 1, forged);
    auto f = hostile->async_join(asio::use_future);
    CHECK(code_of(f) == petrel::errc::job_mismatch);
    const auto logs = j.logs.all();
    CHECK_THAT(logs, Catch::Contains("x'\\x0apetrel error: job 'job-a' failed: worker 0 "
                                     "failed\\x1b[2J"));
    CHECK_THAT(logs, Catch::Contains("...(" + std::to_string(forged.size()) + " bytes)"));
    CHECK(logs.find('\x1b') == std::string::npos);
    CHECK(logs.find(std::string(200, 'y')) == std::string::npos);
    CHECK(logs.find("\npetrel error") == std::string::npos);
    CHECK(hostile->failure().find('\x1b') == std::string::npos);
    CHECK(hostile->failure().find("\npetrel") == std::string::npos);
    CHECK(j.manager.view() == nullptr);
}

TEST_CASE("manager_node: a node beyond the job's size is refused", "[cluster][manager]") {
    manager_job j(1, 1);
    join_all({j.make(petrel::node_role::server, 0), j.make(petrel::node_role::worker, 1)});
    auto extra = j.make(petrel::node_role::worker, 2);
    auto fe = extra->async_join(asio::use_future);
    CHECK(code_of(fe) == petrel::errc::job_full);
}

TEST_CASE("manager_node: a job that does not form in time fails every waiting node",
          "[cluster][manager]") {
    manager_job j(1, 2, 2000ms, 300ms);
    auto s = j.make(petrel::node_role::server, 0);
    auto w = j.make(petrel::node_role::worker, 1);
    auto finished = j.manager.async_wait_finished(asio::use_future);
    auto fs = s->async_join(asio::use_future);
    auto fw = w->async_join(asio::use_future);
    CHECK(code_of(fs) == petrel::errc::timed_out);
    CHECK(code_of(fw) == petrel::errc::timed_out);
    CHECK(code_of(finished) == petrel::errc::timed_out);
    CHECK_THAT(j.manager.failure(), Catch::Contains("1 of 2 workers"));
    CHECK_THAT(w->failure(), Catch::Contains("1 of 2 workers"));
}

TEST_CASE("manager_node: a lost node is declared failed, and waits on it end with an error",
          "[cluster][manager]") {
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    std::promise<std::shared_ptr<const petrel::membership_view>> seen;
    auto seen_f = seen.get_future();
    std::atomic<bool> once{false};
    w0->subscribe([&](const petrel::member::view_ptr& v) {
        if (!once.exchange(true)) {
            seen.set_value(v);
        }
    });
    auto finished = j.manager.async_wait_finished(asio::use_future);
    auto waiting = w0->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    w1->close(); // gone without leaving, as a killed process
    CHECK(code_of(waiting) == petrel::errc::node_failed);
    CHECK_THAT(w0->failure(), Catch::Contains("worker 3") && Catch::Contains("lost"));
    REQUIRE(seen_f.wait_for(petrel::test::timeout) == std::future_status::ready);
    const auto v = seen_f.get();
    CHECK(v->version == 2);
    CHECK(v->find(3)->state == petrel::node_state::failed);
    // Later barriers over a group with a failed node fail at once; other groups work.
    auto again = w0->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(code_of(again) == petrel::errc::node_failed);
    auto servers = s->async_barrier(petrel::group::servers, asio::use_future);
    CHECK_FALSE(code_of(servers));
    auto l0 = w0->async_leave(asio::use_future);
    auto l1 = s->async_leave(asio::use_future);
    CHECK_FALSE(code_of(l0));
    CHECK_FALSE(code_of(l1));
    CHECK(code_of(finished) == petrel::errc::node_failed);
    CHECK_THAT(j.manager.failure(), Catch::Contains("worker 3"));
}

TEST_CASE("manager_node: a silent node is declared failed within the heartbeat timeout",
          "[cluster][manager]") {
    petrel::test::events ev; // outlives the io threads of the job
    manager_job j(1, 1, 300ms);
    auto s = j.make(petrel::node_role::server, 0, "job-a", 50ms, 300ms);
    auto fs = s->async_join(asio::use_future);
    // A worker that registers by hand and then never sends a heartbeat: connected but
    // silent, as a stopped process.
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto conn = j.connect(t, ev);
    conn->send(worker_join(1));
    REQUIRE_FALSE(code_of(fs));
    const auto formed = std::chrono::steady_clock::now();

    std::promise<void> failed;
    std::atomic<bool> once{false};
    s->subscribe([&](const petrel::member::view_ptr& v) {
        if (v->find(2)->state == petrel::node_state::failed && !once.exchange(true)) {
            failed.set_value();
        }
    });
    REQUIRE(failed.get_future().wait_for(petrel::test::timeout) == std::future_status::ready);
    const auto took = std::chrono::steady_clock::now() - formed;
    CHECK(took >= 300ms);
    CHECK(took < 2000ms);
    CHECK_THAT(s->failure(), Catch::Contains("no heartbeat for 300 ms"));
    t.close();
}

TEST_CASE("manager_node: data messages are refused", "[cluster][manager]") {
    petrel::test::events ev; // outlives the io threads of the job
    manager_job j(1, 1);
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto conn = j.connect(t, ev);
    petrel::wire::message m;
    m.header.kind = petrel::wire::message_kind::pull;
    conn->send(std::move(m));
    REQUIRE(ev.closed.get_future().wait_for(petrel::test::timeout) == std::future_status::ready);
    CHECK_THAT(j.logs.all(), Catch::Contains("only takes control messages"));
    t.close();
}

TEST_CASE("manager_node: a node that registers again replaces its earlier registration",
          "[cluster][manager]") {
    petrel::test::events ev; // outlives the io threads of the job
    manager_job j(1, 1);
    // The first registration of worker rank 1 came over a connection that then went
    // quiet (as one that dropped before the manager noticed)...
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto conn = j.connect(t, ev);
    conn->send(worker_join(1));
    std::this_thread::sleep_for(300ms); // the manager reads it before the retry below
    // ... and the node retried: the retry replaces it, and the replaced registration is
    // told so rather than left waiting.
    auto w = j.make(petrel::node_role::worker, 1);
    auto fw = w->async_join(asio::use_future);
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (ev.message_count() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE(ev.message_count() == 1);
    {
        std::lock_guard lock(ev.mutex);
        CHECK(ev.messages[0].header.kind == petrel::wire::message_kind::control_reply);
        CHECK(ev.messages[0].header.status ==
              static_cast<std::uint32_t>(petrel::errc::invalid_argument));
    }
    // The job forms with the retry.
    auto s = j.make(petrel::node_role::server, 0);
    auto fs = s->async_join(asio::use_future);
    CHECK_FALSE(code_of(fw));
    CHECK_FALSE(code_of(fs));
    CHECK(w->id() == 2);
    t.close();
}

namespace {

/// The registration again of node `id` of job "job-a" (a worker of rank `rank`), holding
/// view `v` and showing `key`, as a member that lost its manager sends it.
petrel::wire::message worker_return(petrel::node_id id, std::uint32_t rank,
                                    const petrel::membership_view& v, petrel::node_key key) {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::join;
    b.job_id = "job-a";
    b.role = petrel::node_role::worker;
    b.rank = rank;
    b.id = id;
    b.version = v.version;
    b.view = v;
    b.key = key;
    return petrel::detail::make_control(b);
}

/// Waits until `ev` holds a control reply to request `id` (at most `within`); its status,
/// or none.
std::optional<std::uint32_t> reply_to(petrel::test::events& ev, std::uint64_t id,
                                      std::chrono::milliseconds within = petrel::test::timeout) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
        {
            std::lock_guard lock(ev.mutex);
            for (const auto& m : ev.messages) {
                if (m.header.kind == petrel::wire::message_kind::control_reply &&
                    m.header.request_id == id) {
                    return m.header.status;
                }
            }
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(10ms);
    }
}

/// Barrier `seq` of group `g`, as request `id`.
petrel::wire::message numbered_barrier(petrel::group g, std::uint64_t seq, std::uint64_t id) {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::barrier;
    b.barrier_group = g;
    b.barrier_seq = seq;
    auto m = petrel::detail::make_control(b);
    m.header.request_id = id;
    return m;
}

/// Waits until `ev` holds `n` messages; returns the status of the last.
std::uint32_t status_of_message(petrel::test::events& ev, std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (ev.message_count() < n && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE(ev.message_count() == n);
    std::lock_guard lock(ev.mutex);
    CHECK(ev.messages[n - 1].header.kind == petrel::wire::message_kind::control_reply);
    return ev.messages[n - 1].header.status;
}

/// The registration again of server node 1 (rank 0) of job "job-a", holding view `v`,
/// with the servers' `secret` and its `key`, as request 1.
petrel::wire::message server_return(const petrel::membership_view& v, std::uint64_t secret,
                                    petrel::node_key key) {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::join;
    b.job_id = "job-a";
    b.role = petrel::node_role::server;
    b.id = 1;
    b.address = v.find(1)->address;
    b.secret = secret;
    b.key = key;
    b.version = v.version;
    b.view = v;
    auto m = petrel::detail::make_control(b);
    m.header.request_id = 1;
    return m;
}

/// A heartbeat, as request `id`.
petrel::wire::message heartbeat(std::uint64_t id) {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::heartbeat;
    auto m = petrel::detail::make_control(b);
    m.header.request_id = id;
    return m;
}

} // namespace

TEST_CASE("manager_node: a hand-over without replicas is planned once, and servers that join "
          "meanwhile wait for it",
          "[cluster][manager]") {
    manager_job j(2, 1, 2000ms, 10000ms, 3);
    std::vector<std::shared_ptr<petrel::member>> m{j.make(petrel::node_role::server, 0),
                                                   j.make(petrel::node_role::server, 1),
                                                   j.make(petrel::node_role::worker, 2)};
    join_all(m);
    auto retire = [&] {
        auto f = m[0]->async_retire(asio::use_future);
        return code_of(f);
    };
    REQUIRE(retire() == petrel::errc::in_progress); // no replica: a hand-over is planned
    const auto planned = m[0]->view();
    REQUIRE(planned);
    CHECK(planned->ring.holds(m[0]->id()));
    CHECK_FALSE(planned->next_ring.empty());
    CHECK_FALSE(planned->next_ring.holds(m[0]->id()));
    // A server joins while it runs: it waits, and the leaving server asking again gets
    // the same plan (not a refusal because servers are joining).
    auto late = j.make(petrel::node_role::server, 3);
    auto joined = late->async_join(asio::use_future);
    REQUIRE_FALSE(code_of(joined));
    CHECK(retire() == petrel::errc::in_progress);
    const auto now = m[0]->view();
    REQUIRE(now);
    CHECK_FALSE(now->next_ring.holds(late->id()));
    CHECK(now->next_ring == planned->next_ring);
    // The joiner's report does not count toward the hand-over's plan.
    auto early = late->async_ready(now->version, asio::use_future);
    (void)code_of(early);
    CHECK(retire() == petrel::errc::in_progress); // answered after any view it caused
    CHECK(m[0]->view()->ring == planned->ring);
}

TEST_CASE("manager_node: a manager that loses its job takes over the running job again",
          "[cluster][manager][fault]") {
    log_capture logs;
    io_threads io{2};
    auto quiet = [&] {
        petrel::transport_options o;
        o.log = logs.logger();
        return o;
    };
    const petrel::manager_options opts{.job_id = "job-a",
                                       .servers = 2,
                                       .workers = 2,
                                       .ring = {.partitions = 64, .replicas = 1},
                                       .heartbeat_timeout = 600ms,
                                       .startup_timeout = 10000ms};
    auto first =
        std::make_unique<petrel::manager_node>(petrel::tcp_transport(io.executor(), quiet()), opts);
    const auto root = first->listen("127.0.0.1:0");
    auto next_opts = opts;
    next_opts.take_over = true;
    std::unique_ptr<petrel::manager_node> next;
    std::string next_address;
    const bool standby = GENERATE(true, false);
    INFO((standby ? "a standby at its own address" : "a manager restarted at the root"));
    if (standby) {
        next = std::make_unique<petrel::manager_node>(petrel::tcp_transport(io.executor(), quiet()),
                                                      next_opts);
        next_address = next->listen("127.0.0.1:0");
        CHECK_FALSE(next->view()); // it waits: nobody lost the manager
    }
    std::vector<std::shared_ptr<petrel::member>> m;
    for (std::uint32_t r = 0; r < 4; ++r) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "job-a";
        o.role = r < 2 ? petrel::node_role::server : petrel::node_role::worker;
        o.rank = r;
        o.address = r < 2 ? "127.0.0.1:" + std::to_string(20000 + r) : std::string{};
        o.heartbeat_interval = 50ms;
        o.heartbeat_timeout = 600ms;
        o.startup_timeout = 5000ms;
        o.manager_grace = 10000ms;
        if (standby) {
            o.standby = {next_address};
        }
        m.push_back(
            std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet()), o));
    }
    join_all(m);
    const auto before = m[2]->view();
    const auto secret = m[0]->server_secret();
    REQUIRE(secret != 0);

    // A worker waits at a barrier when the manager is lost: its wait carries on.
    auto waiting = m[2]->async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    first->close();
    CHECK(waiting.wait_for(800ms) == std::future_status::timeout);
    if (!standby) {
        next = std::make_unique<petrel::manager_node>(petrel::tcp_transport(io.executor(), quiet()),
                                                      next_opts);
        CHECK(next->listen(root) == root);
        next_address = root;
    }
    // Every node comes back with its id; the barrier completes at the new manager.
    std::vector<std::future<void>> rest;
    for (std::size_t i : {0, 1, 3}) {
        rest.push_back(m[i]->async_barrier(petrel::group::all, asio::use_future));
    }
    CHECK_FALSE(code_of(waiting));
    for (auto& f : rest) {
        CHECK_FALSE(code_of(f));
    }
    REQUIRE(next->view());
    CHECK(next->view()->version > before->version);
    CHECK(next->view()->find(0)->address == next_address);
    for (std::size_t i = 0; i < m.size(); ++i) {
        CHECK(m[i]->id() == before->nodes[i + 1].id);
        CHECK(m[i]->view()->version >= next->view()->version);
        CHECK(m[i]->failure().empty());
    }
    CHECK(m[1]->server_secret() == secret);
    CHECK_THAT(logs.all(), Catch::Contains("took job 'job-a' over"));

    // Membership changes work again: a server lost now is declared failed there, and its
    // keys move to their replicas.
    m[0]->close();
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (m[2]->view()->find(1)->state != petrel::node_state::failed &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    CHECK(m[2]->view()->find(1)->state == petrel::node_state::failed);
    CHECK_FALSE(m[2]->view()->ring.holds(1));
    auto finished = next->async_wait_finished(asio::use_future);
    for (std::size_t i = 1; i < m.size(); ++i) {
        auto left = m[i]->async_leave(asio::use_future);
        CHECK_FALSE(code_of(left));
    }
    CHECK_FALSE(code_of(finished)); // the failed server's keys lived on
    next->close();
}

TEST_CASE("manager_node: a manager that took a job over releases a node whose barrier release "
          "was lost, and never counts a node's next barrier in the one before",
          "[cluster][manager][fault]") {
    petrel::test::events ev_server; // outlive the io threads of the job
    petrel::test::events ev_first;
    petrel::test::events ev_second;
    petrel::test::events ev_late;
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    const auto v = *w0->view();
    auto next = j.standby(2000ms, 3);
    const auto at = next->listen("127.0.0.1:0");
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    // Every node of the view comes back: the standby takes the job over at once.
    auto server = j.connect(t, ev_server, at);
    auto first = j.connect(t, ev_first, at);
    auto second = j.connect(t, ev_second, at);
    server->send(server_return(v, s->server_secret(), s->key()));
    auto back = [](petrel::wire::message m) {
        m.header.request_id = 1;
        return m;
    };
    first->send(back(worker_return(2, 1, v, w0->key())));
    second->send(back(worker_return(3, 2, v, w1->key())));
    REQUIRE(reply_to(ev_server, 1) == 0u);
    REQUIRE(reply_to(ev_first, 1) == 0u);
    REQUIRE(reply_to(ev_second, 1) == 0u);
    REQUIRE(next->view());
    // Two of them confirm it, as members do with their next heartbeat.
    server->send(heartbeat(2));
    first->send(heartbeat(2));
    REQUIRE(reply_to(ev_server, 2) == 0u);
    REQUIRE(reply_to(ev_first, 2) == 0u);
    // A worker joins before the new manager learnt what the groups passed: it numbers its
    // barriers from a guess (none passed), so they are gathered as unnumbered.
    auto late = j.connect(t, ev_late, at);
    auto join = worker_join(3);
    join.header.request_id = 1;
    late->send(std::move(join));
    REQUIRE(reply_to(ev_late, 1) == 0u);

    // The old manager released the workers' barrier 3, but the first worker's release was
    // lost with it: that worker asks for barrier 3 again, and waits, until the second
    // worker asks for barrier 4, which it could only do once barrier 3 was released.
    first->send(numbered_barrier(petrel::group::workers, 3, 10));
    CHECK_FALSE(reply_to(ev_first, 10, 300ms));
    second->send(numbered_barrier(petrel::group::workers, 4, 20));
    CHECK(reply_to(ev_first, 10) == 0u);
    // The second worker waits at barrier 4 for the first, not with the first's barrier 3;
    // the late worker's first barrier is barrier 4 too.
    CHECK_FALSE(reply_to(ev_second, 20, 300ms));
    late->send(numbered_barrier(petrel::group::workers, 1, 40));
    CHECK_FALSE(reply_to(ev_late, 40, 300ms));
    first->send(numbered_barrier(petrel::group::workers, 4, 11));
    CHECK(reply_to(ev_first, 11) == 0u);
    CHECK(reply_to(ev_second, 20) == 0u);
    CHECK(reply_to(ev_late, 40) == 0u);
    // Learnt: a barrier the group passed is released at once; one beyond the next is
    // refused rather than counted.
    first->send(numbered_barrier(petrel::group::workers, 2, 12));
    CHECK(reply_to(ev_first, 12) == 0u);
    second->send(numbered_barrier(petrel::group::workers, 9, 21));
    CHECK(reply_to(ev_second, 21) == static_cast<std::uint32_t>(petrel::errc::invalid_argument));
    // Each group counts its own: the first barrier of `all` the nodes ask for here.
    first->send(numbered_barrier(petrel::group::all, 1, 13));
    second->send(numbered_barrier(petrel::group::all, 1, 22));
    CHECK_FALSE(reply_to(ev_first, 13, 200ms));
    server->send(numbered_barrier(petrel::group::all, 1, 30));
    CHECK_FALSE(reply_to(ev_first, 13, 200ms));
    late->send(numbered_barrier(petrel::group::all, 1, 41));
    CHECK(reply_to(ev_first, 13) == 0u);
    CHECK(reply_to(ev_second, 22) == 0u);
    CHECK(reply_to(ev_server, 30) == 0u);
    CHECK(reply_to(ev_late, 41) == 0u);
    late->close();
    server->close();
    first->close();
    second->close();
    next->close();
}

TEST_CASE("manager_node: members number their barriers; a worker that joins a running job "
          "numbers on from the barriers its groups passed",
          "[cluster][manager]") {
    petrel::test::events ev; // outlives the io threads of the job
    manager_job j(1, 2, 2000ms, 10000ms, 0, 4);
    auto [s, w0, w1] = j.server_and_two_workers();
    for (int round = 0; round < 2; ++round) {
        auto b0 = w0->async_barrier(petrel::group::workers, asio::use_future);
        auto b1 = w1->async_barrier(petrel::group::workers, asio::use_future);
        CHECK_FALSE(code_of(b0));
        CHECK_FALSE(code_of(b1));
    }
    // A worker joins the running job: its first barrier is the group's third.
    auto late = j.make(petrel::node_role::worker, 3);
    auto joined = late->async_join(asio::use_future);
    REQUIRE_FALSE(code_of(joined));
    auto b0 = w0->async_barrier(petrel::group::workers, asio::use_future);
    auto b1 = w1->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(b0.wait_for(100ms) == std::future_status::timeout);
    auto b2 = late->async_barrier(petrel::group::workers, asio::use_future);
    CHECK_FALSE(code_of(b0));
    CHECK_FALSE(code_of(b1));
    CHECK_FALSE(code_of(b2));
    // At the job's own manager, a number beyond the next barrier is refused, not counted.
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto conn = j.connect(t, ev);
    auto join = worker_join(4);
    join.header.request_id = 1;
    conn->send(std::move(join));
    REQUIRE(reply_to(ev, 1) == 0u);
    conn->send(numbered_barrier(petrel::group::workers, 5, 2));
    CHECK(reply_to(ev, 2) == static_cast<std::uint32_t>(petrel::errc::invalid_argument));
    conn->send(numbered_barrier(petrel::group::workers, ~std::uint64_t{0}, 4));
    CHECK(reply_to(ev, 4) == static_cast<std::uint32_t>(petrel::errc::invalid_argument));
    conn->send(numbered_barrier(petrel::group::workers, 3, 3)); // passed: released at once
    CHECK(reply_to(ev, 3) == 0u);
    conn->close();
}

TEST_CASE("manager_node: nodes that do not come back to a manager that takes over fail; "
          "without a majority it takes nothing over",
          "[cluster][manager][fault]") {
    petrel::test::events ev; // outlives the io threads of the job
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    const auto v = *w0->view();
    auto standby = j.standby(200ms);
    auto& next = *standby;
    const auto at = next.listen("127.0.0.1:0");
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto conn = j.connect(t, ev, at);

    // One node of three comes back (its manager is alive for the others): sent away.
    // Meanwhile registrations as it with another key, or none, are refused at once.
    const auto start = std::chrono::steady_clock::now();
    conn->send(worker_return(3, 2, v, w1->key()));
    const auto not_permitted = static_cast<std::uint32_t>(petrel::errc::not_permitted);
    conn->send(worker_return(3, 2, v, {w1->key()[0], w1->key()[1] ^ 1}));
    CHECK(status_of_message(ev, 1) == not_permitted);
    conn->send(worker_return(3, 2, v, {}));
    CHECK(status_of_message(ev, 2) == not_permitted);
    CHECK(status_of_message(ev, 3) == static_cast<std::uint32_t>(petrel::errc::timed_out));
    CHECK(std::chrono::steady_clock::now() - start >= 800ms);
    CHECK_FALSE(next.view());
    CHECK_THAT(j.logs.all(), Catch::Contains("its manager may still be alive"));
    CHECK_THAT(j.logs.all(),
               Catch::Contains("registers again only with the key it was given when it joined"));

    // A registration that does not name its node in its view is refused.
    auto stranger = v;
    stranger.nodes.pop_back();
    conn->send(worker_return(3, 2, stranger, w1->key()));
    CHECK(status_of_message(ev, 4) == static_cast<std::uint32_t>(petrel::errc::invalid_argument));

    // The job's own manager moves a live node that registers again to its new
    // connection, where it asks again for what it waited for.
    auto first_wait = w0->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(first_wait.wait_for(100ms) == std::future_status::timeout);
    std::promise<petrel::connection_ptr> again;
    t.async_connect(j.root, ev.handlers(),
                    [&](std::error_code, petrel::connection_ptr c) { again.set_value(c); });
    auto moved = again.get_future().get();
    REQUIRE(moved);
    // Without the node's own key, a holder of the job's secret cannot take its place.
    moved->send(worker_return(2, 1, v, w1->key()));
    CHECK(status_of_message(ev, 5) == not_permitted);
    CHECK(first_wait.wait_for(0ms) == std::future_status::timeout);
    moved->send(worker_return(2, 1, v, w0->key()));
    CHECK(status_of_message(ev, 6) == 0);
    auto other = w1->async_barrier(petrel::group::workers, asio::use_future);
    CHECK(other.wait_for(300ms) == std::future_status::timeout); // worker 2 has not asked
    petrel::detail::control_body bar;
    bar.op = petrel::detail::control_op::barrier;
    bar.barrier_group = petrel::group::workers;
    moved->send(petrel::detail::make_control(bar));
    CHECK(status_of_message(ev, 7) == 0);
    CHECK_FALSE(code_of(other));
    // The job's own manager tells a node it declared failed that it may only join anew.
    w1->close();
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (w0->view()->find(3)->state != petrel::node_state::failed &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    std::promise<petrel::connection_ptr> to_root;
    t.async_connect(j.root, ev.handlers(),
                    [&](std::error_code, petrel::connection_ptr c) { to_root.set_value(c); });
    auto root_conn = to_root.get_future().get();
    REQUIRE(root_conn);
    const auto before = ev.message_count(); // views the moved node was sent come too
    root_conn->send(worker_return(3, 2, v, w1->key()));
    std::uint32_t refused = 0;
    const auto until = std::chrono::steady_clock::now() + petrel::test::timeout;
    while (refused == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(10ms);
        std::lock_guard lock(ev.mutex);
        for (std::size_t i = before; i < ev.messages.size(); ++i) {
            if (ev.messages[i].header.kind == petrel::wire::message_kind::control_reply) {
                refused = ev.messages[i].header.status;
            }
        }
    }
    CHECK(refused == static_cast<std::uint32_t>(petrel::errc::node_failed));
    t.close();
    next.close();
}

TEST_CASE("manager_node: with ranked certificates a server or worker joins, and registers "
          "again, only as the rank its certificate names",
          "[cluster][manager][security][tls]") {
    petrel::test::events ev; // outlives the io threads
    log_capture logs;
    io_threads io{2};
    auto transport = [&](const std::string& certificate) {
        petrel::transport_options o;
        o.log = logs.logger();
        o.tls = petrel::test::tls_of(certificate);
        return petrel::tcp_transport(io.executor(), o);
    };
    petrel::manager_node manager(transport("node"), {.job_id = "job-a",
                                                     .servers = 1,
                                                     .workers = 2,
                                                     .ring = {.partitions = 64},
                                                     .startup_timeout = 10000ms,
                                                     .ranked_certificates = true});
    const auto root = manager.listen("127.0.0.1:0");
    auto make = [&](petrel::node_role role, std::uint32_t rank, const std::string& certificate) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "job-a";
        o.role = role;
        o.rank = rank;
        o.address = role == petrel::node_role::server ? "127.0.0.1:20000" : std::string{};
        o.heartbeat_interval = 50ms;
        o.startup_timeout = 5000ms;
        return std::make_shared<petrel::member>(transport(certificate), o);
    };
    // Rank 2's role with rank 1's certificate, or with one that names no rank: refused.
    for (const auto* certificate : {"rank-1", "node"}) {
        INFO(certificate);
        auto impostor = make(petrel::node_role::worker, 2, certificate);
        auto f = impostor->async_join(asio::use_future);
        CHECK(code_of(f) == petrel::errc::not_permitted);
        std::this_thread::sleep_for(1100ms); // refusals are logged a line a second at most
    }
    CHECK_THAT(logs.all(), Catch::Contains("registers only as the rank its TLS certificate "
                                           "names (rank 1), not as rank 2"));
    CHECK_THAT(logs.all(), Catch::Contains("(none: 'petrel test node'), not as rank 2"));
    // Each rank with its own certificate: the job forms.
    auto s = make(petrel::node_role::server, 0, "rank-0");
    auto w1 = make(petrel::node_role::worker, 1, "rank-1");
    auto w2 = make(petrel::node_role::worker, 2, "rank-2");
    join_all({s, w1, w2});
    const auto v = *w2->view();
    // Rank 1's process cannot register again as rank 2's node, even with its key.
    auto t = transport("rank-1");
    std::promise<petrel::connection_ptr> connected;
    t.async_connect(root, ev.handlers(),
                    [&](std::error_code, petrel::connection_ptr c) { connected.set_value(c); });
    auto conn = connected.get_future().get();
    REQUIRE(conn);
    auto again = worker_return(w2->id(), 2, v, w2->key());
    again.header.request_id = 1;
    conn->send(std::move(again));
    CHECK(reply_to(ev, 1) == static_cast<std::uint32_t>(petrel::errc::not_permitted));
    // Nor with a view it made up, in which that node has rank 1: the manager's own counts.
    auto forged = v;
    for (auto& n : forged.nodes) {
        n.rank = n.id == w2->id() ? 1 : n.rank;
    }
    auto made_up = worker_return(w2->id(), 1, forged, w2->key());
    made_up.header.request_id = 2;
    conn->send(std::move(made_up));
    CHECK(reply_to(ev, 2) == static_cast<std::uint32_t>(petrel::errc::not_permitted));
    // The job goes on.
    auto b1 = w1->async_barrier(petrel::group::workers, asio::use_future);
    auto b2 = w2->async_barrier(petrel::group::workers, asio::use_future);
    CHECK_FALSE(code_of(b1));
    CHECK_FALSE(code_of(b2));
    // A node that asks for ranked managers sends nothing to a root whose certificate is
    // not rank 0's (this manager shows "petrel test node").
    std::this_thread::sleep_for(1100ms); // the manager's refusal lines, a second apart
    const auto lines = logs.size();
    petrel::member_options careful;
    careful.root = root;
    careful.job_id = "job-a";
    careful.role = petrel::node_role::reader;
    careful.group = "serve";
    careful.startup_timeout = 5000ms;
    careful.ranked_managers = true;
    auto reader = std::make_shared<petrel::member>(transport("rank-2"), careful);
    auto refused = reader->async_join(asio::use_future);
    CHECK(code_of(refused) == petrel::errc::not_permitted);
    CHECK_THAT(logs.all(), Catch::Contains("shows the certificate of 'petrel test node', not of "
                                           "'rank-0'"));
    CHECK(manager.view()->count(petrel::node_role::reader, petrel::node_state::alive) == 0);
    CHECK(logs.size() == lines + 1); // that line only: the manager heard nothing
    t.close();
    manager.close();
}

TEST_CASE("manager_node: a node that comes back while a takeover waits for confirmation is "
          "taken in, not declared failed",
          "[cluster][manager][fault]") {
    petrel::test::events ev_server; // outlive the io threads of the job
    petrel::test::events ev_first;
    petrel::test::events ev_second;
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    const auto v = *w0->view();
    auto next = j.standby(500ms);
    const auto at = next->listen("127.0.0.1:0");
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    auto server = j.connect(t, ev_server, at);
    auto first = j.connect(t, ev_first, at);
    server->send(server_return(v, s->server_secret(), s->key()));
    auto m = worker_return(2, 1, v, w0->key());
    m.header.request_id = 1;
    first->send(std::move(m));
    // Two of three after the heartbeat timeout: answered, not yet confirmed.
    REQUIRE(reply_to(ev_server, 1) == 0u);
    REQUIRE(reply_to(ev_first, 1) == 0u);
    // The third comes back now: answered too (without its key, or with another than the
    // one it first showed, refused).
    auto second = j.connect(t, ev_second, at);
    auto keyless = worker_return(3, 2, v, {});
    keyless.header.request_id = 1;
    second->send(std::move(keyless));
    CHECK(reply_to(ev_second, 1) == static_cast<std::uint32_t>(petrel::errc::not_permitted));
    auto late = worker_return(3, 2, v, w1->key());
    late.header.request_id = 2;
    second->send(std::move(late));
    CHECK(reply_to(ev_second, 2) == 0u);
    // Confirmed by two: all three are live members.
    server->send(heartbeat(2));
    first->send(heartbeat(2));
    REQUIRE(reply_to(ev_first, 2) == 0u);
    second->send(heartbeat(3));
    CHECK(reply_to(ev_second, 3) == 0u);
    REQUIRE(next->view());
    for (const petrel::node_id id : {1, 2, 3}) {
        INFO(id);
        CHECK(next->view()->find(id)->state == petrel::node_state::alive);
    }
    CHECK_THAT(j.logs.all(), Catch::Contains("took job 'job-a' over"));
    t.close();
    next->close();
}

TEST_CASE("manager_node: two standbys never both take a job over: a node counted by both "
          "confirms one, and the other gives the job back",
          "[cluster][manager][fault]") {
    petrel::test::events ev_a2; // outlive the io threads of the job
    petrel::test::events ev_a3;
    petrel::test::events ev_b3;
    petrel::test::events ev_b1;
    manager_job j({.job_id = "job-a",
                   .servers = 1,
                   .workers = 2,
                   .drop_failed_workers = true, // so that a worker failing at B leaves the job on
                   .ring = {.partitions = 64}});
    auto [s, w0, w1] = j.server_and_two_workers();
    const auto v = *w0->view();
    auto a = j.standby(1000ms);
    auto b = j.standby(1000ms);
    const auto at_a = a->listen("127.0.0.1:0");
    const auto at_b = b->listen("127.0.0.1:0");
    auto t = petrel::tcp_transport(j.io.executor(), j.quiet());
    // Node 2 comes back to A; node 3 to A and then, its connection there lost on its side
    // only, to B, where the server (node 1) comes back too: each standby holds two of the
    // job's three live servers and workers, a majority.
    auto a2 = j.connect(t, ev_a2, at_a);
    auto a3 = j.connect(t, ev_a3, at_a);
    auto b3 = j.connect(t, ev_b3, at_b);
    auto b1 = j.connect(t, ev_b1, at_b);
    auto first = [](petrel::wire::message m) {
        m.header.request_id = 1;
        return m;
    };
    a2->send(first(worker_return(2, 1, v, w0->key())));
    a3->send(first(worker_return(3, 2, v, w1->key())));
    b3->send(first(worker_return(3, 2, v, w1->key())));
    b1->send(server_return(v, s->server_secret(), s->key()));
    // Each answers the nodes it holds after the heartbeat timeout ...
    REQUIRE(reply_to(ev_a2, 1) == 0u);
    REQUIRE(reply_to(ev_a3, 1) == 0u);
    REQUIRE(reply_to(ev_b3, 1) == 0u);
    REQUIRE(reply_to(ev_b1, 1) == 0u);
    // ... and takes the job over only once a majority speaks on the connections it
    // answered. Node 3 follows B only (a node has one manager): its barrier waits there
    // while B is not confirmed.
    b3->send(numbered_barrier(petrel::group::workers, 1, 10));
    CHECK_FALSE(reply_to(ev_b3, 10, 100ms));
    a2->send(heartbeat(2));
    CHECK(reply_to(ev_a2, 2) == 0u);
    b1->send(heartbeat(2));
    // B is confirmed by nodes 1 and 3: node 2 did not come back to it and fails there,
    // so node 3, the only live worker, passes its barrier.
    CHECK(reply_to(ev_b1, 2) == 0u);
    CHECK(reply_to(ev_b3, 10) == 0u);
    REQUIRE(b->view());
    CHECK(b->view()->find(0)->address == at_b);
    CHECK(b->view()->find(2)->state == petrel::node_state::failed);
    CHECK(b->view()->find(3)->state == petrel::node_state::alive);
    // A has node 2 only: within its heartbeat timeout it gives the job back and closes
    // the connections it answered, so that their nodes look for a manager again.
    const auto deadline = std::chrono::steady_clock::now() + petrel::test::timeout;
    while ((ev_a2.close_count() == 0 || ev_a3.close_count() == 0) &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    CHECK(ev_a2.close_count() == 1);
    CHECK(ev_a3.close_count() == 1);
    CHECK_FALSE(a->view());
    CHECK(ev_b3.close_count() == 0);
    CHECK(ev_b1.close_count() == 0);
    const auto logs = j.logs.all();
    CHECK(petrel::test::count_of(logs, "took job 'job-a' over") == 1);
    CHECK_THAT(logs, Catch::Contains("did not take job 'job-a' over: only 1 of its 3 live "
                                     "servers and workers confirmed"));
    // A waits as a standby again: a heartbeat on a connection it does not hold (as a
    // node's link makes one again) is refused, so the node looks for a manager again;
    // a node coming back to it is held, not answered.
    auto again = j.connect(t, ev_a2, at_a);
    again->send(heartbeat(4));
    CHECK(reply_to(ev_a2, 4) == static_cast<std::uint32_t>(petrel::errc::timed_out));
    auto m = worker_return(2, 1, v, w0->key());
    m.header.request_id = 3;
    again->send(std::move(m));
    CHECK_FALSE(reply_to(ev_a2, 3, 300ms));
    t.close();
    a->close();
    b->close();
}

namespace {

/// What a process declares: table 0 with update rule `rule` and width `width`, table 1
/// dense, and the remote function "norm".
template <typename Rule>
petrel::declarations declaring(Rule rule, std::uint32_t width = 16) {
    petrel::table_registry tables;
    tables.add<std::uint64_t, float>(0, {.width = width}, rule);
    tables.add<std::uint32_t, float>(1, {.dense = petrel::key_range<std::uint64_t>{0, 1000}});
    petrel::function_registry functions;
    functions.add<petrel::no_args, double>("norm",
                                           [](const auto&, const petrel::no_args&) { return 0.0; });
    auto d = tables.describe();
    d.functions = functions.names();
    return d;
}

} // namespace

TEST_CASE("manager_node: declarations travel in the join message, bounded", "[cluster][manager]") {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::join;
    b.job_id = "job-a";
    const auto none = petrel::detail::read_control(petrel::detail::make_control(b));
    REQUIRE(none);
    CHECK_FALSE(none->declared.has_value());
    b.declared = declaring(petrel::adagrad{});
    const auto back = petrel::detail::read_control(petrel::detail::make_control(b));
    REQUIRE(back);
    REQUIRE(back->declared.has_value());
    CHECK(*back->declared == *b.declared);
    b.declared = petrel::declarations{};
    const auto empty = petrel::detail::read_control(petrel::detail::make_control(b));
    REQUIRE(empty);
    CHECK(empty->declared == petrel::declarations{});
    // More fields than a decoder takes: the body does not decode.
    b.declared = petrel::declarations{{{0, {}}}, {}};
    b.declared->tables[0].fields.resize(petrel::declarations::max_fields + 1);
    CHECK_FALSE(petrel::detail::read_control(petrel::detail::make_control(b)).has_value());
}

TEST_CASE("manager_node: a node declaring other tables or functions is refused, naming the "
          "difference; nodes declaring the same are accepted",
          "[cluster][manager]") {
    manager_job j(1, 1, 2000ms, 10000ms, /*max_servers*/ 4);
    const auto mine = declaring(petrel::adagrad{.eta = 0.05});
    auto make = [&](petrel::node_role role, std::uint32_t rank,
                    std::optional<petrel::declarations> d) {
        return j.make(role, rank, "job-a", 50ms, 2000ms, std::move(d));
    };
    const std::vector<std::shared_ptr<petrel::member>> first{
        make(petrel::node_role::server, 0, mine), make(petrel::node_role::worker, 1, mine)};
    join_all(first);
    const auto formed = j.manager.view();
    REQUIRE(formed);

    // Servers joining the running job: one whose update rule differs...
    auto sgd = make(petrel::node_role::server, 2, declaring(petrel::sgd{}));
    auto f = sgd->async_join(asio::use_future);
    CHECK(code_of(f) == petrel::errc::declaration_mismatch);
    CHECK_THAT(sgd->failure(),
               Catch::Contains("table 0: update rule is sgd{eta=0.01,l1=0,l2=0} on this node "
                               "but adagrad{eta=0.05,epsilon=1e-08,initial_accumulator=0} on "
                               "the job's other nodes"));
    CHECK_THAT(j.logs.all(), Catch::Contains("server rank 2") && Catch::Contains("refused") &&
                                 Catch::Contains("table 0: update rule"));
    // ... one whose width differs ...
    auto wide = make(petrel::node_role::server, 3, declaring(petrel::adagrad{.eta = 0.05}, 32));
    auto fw = wide->async_join(asio::use_future);
    CHECK(code_of(fw) == petrel::errc::declaration_mismatch);
    CHECK_THAT(
        wide->failure(),
        Catch::Contains("table 0: width is 32 on this node but 16 on the job's other nodes"));
    // ... and one without the remote function.
    auto no_function = mine;
    no_function.functions.clear();
    auto bare = make(petrel::node_role::server, 4, no_function);
    auto fb = bare->async_join(asio::use_future);
    CHECK(code_of(fb) == petrel::errc::declaration_mismatch);
    CHECK_THAT(bare->failure(), Catch::Contains("remote function 'norm' is registered on the "
                                                "job's other nodes but not on this node"));
    CHECK(j.manager.view()->version == formed->version); // nobody was added

    // A server declaring the same joins; so does one that declares nothing (not compared).
    auto same = make(petrel::node_role::server, 5, mine);
    auto fs = same->async_join(asio::use_future);
    CHECK_FALSE(code_of(fs));
    auto undeclared = make(petrel::node_role::server, 6, std::nullopt);
    auto fu = undeclared->async_join(asio::use_future);
    CHECK_FALSE(code_of(fu));
}

TEST_CASE("manager_node: a job that does not form after refusing a node for its declarations "
          "says why",
          "[cluster][manager]") {
    manager_job j(1, 1, 2000ms, 500ms);
    auto s = j.make(petrel::node_role::server, 0, "job-a", 50ms, 2000ms, declaring(petrel::sum{}));
    auto w =
        j.make(petrel::node_role::worker, 1, "job-a", 50ms, 2000ms, declaring(petrel::sum{}, 32));
    auto fs = s->async_join(asio::use_future);
    auto fw = w->async_join(asio::use_future);
    // Whichever registered first set the job's declarations; the other was refused.
    const auto es = code_of(fs);
    const auto ew = code_of(fw);
    const bool server_refused = es == petrel::errc::declaration_mismatch;
    CHECK((server_refused ? ew : es) == petrel::errc::timed_out);
    CHECK((server_refused ? es : ew) == petrel::errc::declaration_mismatch);
    const auto& refused = server_refused ? s : w;
    const auto& waited = server_refused ? w : s;
    CHECK_THAT(refused->failure(), Catch::Contains("table 0: width is"));
    CHECK_THAT(waited->failure(), Catch::Contains("did not start") &&
                                      Catch::Contains("was refused: table 0: width is"));
    CHECK_THAT(j.manager.failure(), Catch::Contains("was refused: table 0: width is"));
}

TEST_CASE("manager_node: a node that leaves reporting a failure fails the others' barriers, "
          "naming it and why",
          "[cluster][manager]") {
    manager_job j(1, 2);
    auto [s, w0, w1] = j.server_and_two_workers();
    auto finished = j.manager.async_wait_finished(asio::use_future);
    auto waiting = s->async_barrier(petrel::group::all, asio::use_future);
    auto waiting_too = w0->async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    // Worker 3's training function threw: it says so instead of arriving at the barrier.
    auto reported = w1->async_fail(
        "the training function failed: width 4 expected\n3 values given\n", asio::use_future);
    CHECK_FALSE(code_of(reported));
    const std::string reason = "the training function failed: width 4 expected; 3 values given";
    const std::string why = "worker 3 (worker #1, rank 2) failed: " + reason;
    CHECK(code_of(waiting) == petrel::errc::node_failed);
    CHECK(code_of(waiting_too) == petrel::errc::node_failed);
    CHECK_THAT(s->failure(), Catch::Contains(why));
    CHECK_THAT(w0->failure(), Catch::Contains(why));
    // In the view, on one line, as any failure; barriers over its groups fail at once.
    const auto v = j.manager.view();
    REQUIRE(v);
    CHECK(v->find(3)->state == petrel::node_state::failed);
    CHECK(v->find(3)->failure == reason);
    auto again = s->async_barrier(petrel::group::all, asio::use_future);
    CHECK(code_of(again) == petrel::errc::node_failed);
    auto servers = s->async_barrier(petrel::group::servers, asio::use_future);
    CHECK_FALSE(code_of(servers));
    // The others leave; the job is over, and failed for that reason.
    CHECK(finished.wait_for(50ms) == std::future_status::timeout);
    auto l0 = w0->async_leave(asio::use_future);
    auto l1 = s->async_leave(asio::use_future);
    CHECK_FALSE(code_of(l0));
    CHECK_FALSE(code_of(l1));
    CHECK(code_of(finished) == petrel::errc::node_failed);
    CHECK_THAT(j.manager.failure(), Catch::Contains(why));
    CHECK_THAT(j.logs.all(), Catch::Contains(why));
}

TEST_CASE("manager_node: a server that a node cannot reach is failed if the manager cannot "
          "reach it either, and kept otherwise",
          "[cluster][manager]") {
    log_capture logs;
    io_threads io{2};
    petrel::transport_options quiet;
    quiet.log = logs.logger();
    petrel::manager_node manager(petrel::tcp_transport(io.executor(), quiet),
                                 {.job_id = "job-u",
                                  .servers = 2,
                                  .workers = 1,
                                  .ring = {.partitions = 64, .replicas = 1},
                                  .probe_timeout = 500ms});
    const auto root = manager.listen("127.0.0.1:0");
    // Server 1's address accepts connections; server 2's refuses them (its port was
    // bound, then released).
    asio::ip::tcp::acceptor open(io.executor(), {asio::ip::make_address("127.0.0.1"), 0});
    const auto reachable = "127.0.0.1:" + std::to_string(open.local_endpoint().port());
    std::string refusing;
    {
        asio::ip::tcp::acceptor gone(io.executor(), {asio::ip::make_address("127.0.0.1"), 0});
        refusing = "127.0.0.1:" + std::to_string(gone.local_endpoint().port());
    }
    auto make = [&](petrel::node_role role, std::uint32_t rank, std::string address) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "job-u";
        o.role = role;
        o.rank = rank;
        o.address = std::move(address);
        o.heartbeat_interval = 50ms;
        o.startup_timeout = 5000ms;
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet), o);
    };
    auto s1 = make(petrel::node_role::server, 0, reachable);
    auto s2 = make(petrel::node_role::server, 1, refusing);
    auto w = make(petrel::node_role::worker, 2, {});
    join_all({s1, s2, w});
    const auto first = manager.view();
    REQUIRE(first);
    const auto wait_for_version = [&](std::uint64_t version) {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (manager.view()->version < version && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(10ms);
        }
        return manager.view();
    };

    // A report about a node that is not a server, and one about a server the manager
    // reaches: answered, and nothing changes.
    auto about_worker = w->async_report_unreachable(3, "no such server", asio::use_future);
    CHECK_FALSE(code_of(about_worker));
    auto about_s1 = w->async_report_unreachable(1, "server 1 refuses", asio::use_future);
    CHECK_FALSE(code_of(about_s1));
    const auto kept = [&] {
        return logs.all().find("the manager connected to " + reachable) != std::string::npos;
    };
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!kept() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(10ms);
    }
    INFO(logs.all());
    CHECK(kept());
    CHECK(manager.view()->version == first->version);
    CHECK(manager.view()->find(1)->state == petrel::node_state::alive);

    // Server 2's address refuses the manager too: it is failed, its ranges moved to their
    // replicas, and the reason names its address and who could not reach it.
    const auto at = std::chrono::steady_clock::now();
    auto about_s2 = w->async_report_unreachable(2, "server 2 refuses", asio::use_future);
    CHECK_FALSE(code_of(about_s2));
    const auto v = wait_for_version(first->version + 1);
    CHECK(std::chrono::steady_clock::now() - at < 2s);
    REQUIRE(v->version == first->version + 1);
    CHECK(v->find(2)->state == petrel::node_state::failed);
    CHECK_THAT(v->find(2)->failure,
               Catch::Contains("its address " + refusing + " refuses connections") &&
                   Catch::Contains("worker 3 (worker #0, rank 2) could not connect to it, "
                                   "nor could the manager"));
    CHECK(v->find(1)->state == petrel::node_state::alive);
    for (std::uint32_t p = 0; p < 64; ++p) {
        CHECK(v->ring.owners(p).front() == 1);
    }
    CHECK_THAT(logs.all(), Catch::Contains("key ranges moved to their replicas"));
    w->close();
    s1->close();
    s2->close();
}

TEST_CASE("manager_node: a job that drops failed workers goes on without a worker that "
          "reported its failure",
          "[cluster][manager]") {
    log_capture logs;
    io_threads io{2};
    petrel::transport_options quiet;
    quiet.log = logs.logger();
    petrel::manager_node manager(petrel::tcp_transport(io.executor(), quiet),
                                 {.job_id = "job-d",
                                  .servers = 1,
                                  .workers = 2,
                                  .drop_failed_workers = true,
                                  .ring = {.partitions = 64}});
    const auto root = manager.listen("127.0.0.1:0");
    auto make = [&](petrel::node_role role, std::uint32_t rank) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "job-d";
        o.role = role;
        o.rank = rank;
        o.address = role == petrel::node_role::server ? "127.0.0.1:20000" : std::string{};
        o.heartbeat_interval = 50ms;
        o.startup_timeout = 5000ms;
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet), o);
    };
    auto s = make(petrel::node_role::server, 0);
    auto w0 = make(petrel::node_role::worker, 1);
    auto w1 = make(petrel::node_role::worker, 2);
    join_all({s, w0, w1});
    auto finished = manager.async_wait_finished(asio::use_future);
    auto waiting = s->async_barrier(petrel::group::all, asio::use_future);
    auto waiting_too = w0->async_barrier(petrel::group::all, asio::use_future);
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    auto reported = w1->async_fail("the training function failed: diverged", asio::use_future);
    CHECK_FALSE(code_of(reported));
    // Dropped: nobody waits for it, and the job ends with success; the log names it.
    CHECK_FALSE(code_of(waiting));
    CHECK_FALSE(code_of(waiting_too));
    auto l0 = w0->async_leave(asio::use_future);
    auto l1 = s->async_leave(asio::use_future);
    CHECK_FALSE(code_of(l0));
    CHECK_FALSE(code_of(l1));
    CHECK_FALSE(code_of(finished));
    CHECK(manager.failure().empty());
    CHECK_THAT(logs.all(), Catch::Contains("worker 3 (worker #1, rank 2) failed: the training "
                                           "function failed: diverged"));
}
