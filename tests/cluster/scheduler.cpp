#include <petrel/cluster/scheduler.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"

#include <petrel/cluster/manager_node.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::code_of;
using petrel::test::io_threads;
using petrel::test::log_capture;

namespace {

/// How many times each example of `[0, n)` appears in `shares`.
std::vector<int> coverage(std::uint64_t n, const std::vector<petrel::data_share>& shares) {
    std::vector<int> seen(n, 0);
    for (const auto& s : shares) {
        std::uint64_t units = 0;
        for (const auto& r : s.ranges) {
            REQUIRE(r.path.empty());
            REQUIRE(r.begin < r.end);
            REQUIRE(r.end <= n);
            for (auto i = r.begin; i < r.end; ++i) {
                ++seen[i];
            }
            units += r.end - r.begin;
        }
        CHECK(units == s.units);
    }
    return seen;
}

bool exactly_once(const std::vector<int>& seen) {
    return std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; });
}

std::vector<petrel::data_share> shares_of(const petrel::data_assignment& a,
                                          const std::vector<petrel::node_id>& nodes) {
    std::vector<petrel::data_share> out;
    for (auto id : nodes) {
        out.push_back(a.share_of(id, 1));
    }
    return out;
}

/// Chunks that changed owner between two assignments.
std::size_t moved(const petrel::data_assignment& before, const petrel::data_assignment& after) {
    std::size_t n = 0;
    for (std::size_t c = 0; c < before.owners.size(); ++c) {
        n += before.owners[c] != after.owners[c] ? 1 : 0;
    }
    return n;
}

} // namespace

TEST_CASE("scheduler: shares of examples cover the data exactly once, balanced", "[scheduler]") {
    for (std::uint64_t examples : {1ull, 7ull, 1000ull, 60000ull}) {
        for (std::uint32_t workers : {1u, 2u, 3u, 5u}) {
            petrel::data_assignment a;
            a.set = {.name = "d", .examples = examples, .chunks = 64};
            REQUIRE(a.set.check().empty());
            std::vector<petrel::node_id> live;
            for (std::uint32_t w = 0; w < workers; ++w) {
                live.push_back(10 + 3 * w);
            }
            a.rebalance(live);
            const auto shares = shares_of(a, live);
            CHECK(exactly_once(coverage(examples, shares)));
            // Chunks differ by at most one between workers; first assignments are
            // contiguous, so each worker holds one range.
            std::uint64_t lo = examples, hi = 0;
            for (const auto& s : shares) {
                lo = std::min(lo, s.units);
                hi = std::max(hi, s.units);
                CHECK(s.ranges.size() <= 1);
            }
            // At most one chunk more, and chunks differ by at most one example.
            const std::uint64_t c = a.set.chunk_count();
            const auto chunk = (examples + c - 1) / c;
            CHECK(hi - lo <= chunk + (c + workers - 1) / workers);
        }
    }
}

TEST_CASE("scheduler: shares of files are whole records, cut at file boundaries", "[scheduler]") {
    petrel::data_assignment a;
    a.set = {.name = "f",
             .files = {{"/data/a.bin", 16 * 10}, {"/data/b.bin", 16 * 3}, {"/data/c.bin", 16 * 20}},
             .record_bytes = 16,
             .chunks = 7};
    REQUIRE(a.set.check().empty());
    REQUIRE(a.set.units() == 33);
    const std::vector<petrel::node_id> live{4, 5, 6};
    a.rebalance(live);
    std::map<std::string, std::vector<int>> bytes{{"/data/a.bin", std::vector<int>(160)},
                                                  {"/data/b.bin", std::vector<int>(48)},
                                                  {"/data/c.bin", std::vector<int>(320)}};
    std::uint64_t records = 0;
    for (const auto& s : shares_of(a, live)) {
        for (const auto& r : s.ranges) {
            REQUIRE(bytes.count(r.path) == 1);
            CHECK(r.begin % 16 == 0);
            CHECK(r.end % 16 == 0);
            REQUIRE(r.end <= bytes[r.path].size());
            for (auto i = r.begin; i < r.end; ++i) {
                ++bytes[r.path][i];
            }
        }
        records += s.units;
    }
    CHECK(records == 33);
    for (const auto& [path, seen] : bytes) {
        CHECK(exactly_once(seen));
    }
}

TEST_CASE("scheduler: bad data set definitions are named", "[scheduler]") {
    CHECK_FALSE(petrel::data_set{.name = "", .examples = 5}.check().empty());
    CHECK_FALSE(petrel::data_set{.name = "e"}.check().empty()); // empty
    CHECK_FALSE(petrel::data_set{.name = "x", .examples = 3, .files = {{"a", 8}}}.check().empty());
    CHECK(petrel::data_set{.name = "r", .files = {{"a", 10}}, .record_bytes = 4}.check().find(
              "whole number") != std::string::npos);
    CHECK_FALSE(
        petrel::data_set{.name = "z", .files = {{"a", 10}}, .record_bytes = 0}.check().empty());
    CHECK_FALSE(
        petrel::block_schedule{.name = "b", .begin = 0, .end = 3, .blocks = 4}.check().empty());
    CHECK(petrel::block_schedule{.name = "b", .begin = 0, .end = 4, .blocks = 4}.check().empty());
    petrel::data_set huge{.name = "h",
                          .files = std::vector<petrel::data_file>(4096, {"p", 1 << 20}),
                          .chunks = 60000};
    CHECK(huge.check().find("chunks times files") != std::string::npos);
}

TEST_CASE("scheduler: rebalancing moves only what it must", "[scheduler]") {
    petrel::data_assignment a;
    a.set = {.name = "d", .examples = 100000, .chunks = 120};
    a.rebalance({1, 2, 3, 4});
    SECTION("a worker leaves: only its chunks move, to the others") {
        auto before = a;
        a.rebalance({1, 2, 4});
        CHECK(moved(before, a) == 30);
        for (std::size_t c = 0; c < a.owners.size(); ++c) {
            if (before.owners[c] != 3) {
                CHECK(a.owners[c] == before.owners[c]);
            }
            CHECK(a.owners[c] != 3);
        }
        CHECK(exactly_once(coverage(100000, shares_of(a, {1, 2, 4}))));
        for (auto id : {1u, 2u, 4u}) {
            CHECK(std::count(a.owners.begin(), a.owners.end(), id) == 40);
        }
    }
    SECTION("a worker joins: it takes chunks from the others until all are balanced") {
        auto before = a;
        a.rebalance({1, 2, 3, 4, 9});
        CHECK(moved(before, a) == 24);
        CHECK(std::count(a.owners.begin(), a.owners.end(), 9u) == 24);
        for (std::size_t c = 0; c < a.owners.size(); ++c) {
            CHECK((a.owners[c] == before.owners[c] || a.owners[c] == 9));
        }
        CHECK(exactly_once(coverage(100000, shares_of(a, {1, 2, 3, 4, 9}))));
    }
    SECTION("nobody left: nothing is owned; a worker that comes back gets everything") {
        a.rebalance({});
        CHECK(std::all_of(a.owners.begin(), a.owners.end(),
                          [](petrel::node_id o) { return o == petrel::no_node; }));
        a.rebalance({7});
        CHECK(exactly_once(coverage(100000, shares_of(a, {7}))));
    }
}

TEST_CASE("scheduler: model-parallel rounds never give one block to two workers", "[scheduler]") {
    for (std::uint32_t blocks : {1u, 2u, 3u, 4u, 7u}) {
        for (std::size_t n : {1u, 2u, 3u, 4u, 6u}) {
            std::vector<petrel::node_id> who;
            for (std::size_t i = 0; i < n; ++i) {
                who.push_back(static_cast<petrel::node_id>(5 + i));
            }
            const std::size_t sweep = std::max<std::size_t>(n, blocks);
            std::map<petrel::node_id, std::set<std::uint32_t>> seen;
            for (std::uint64_t r = 0; r < sweep; ++r) {
                const auto a = petrel::round_assignment::rotate(blocks, r, who);
                REQUIRE(a.size() == n);
                std::set<std::uint32_t> used;
                std::size_t busy = 0;
                for (const auto& [id, b] : a) {
                    if (b == petrel::no_block) {
                        continue;
                    }
                    CHECK(b < blocks);
                    CHECK(used.insert(b).second); // no block twice in a round
                    CHECK(seen[id].insert(b).second);
                    ++busy;
                }
                CHECK(busy == std::min<std::size_t>(n, blocks)); // nobody idles needlessly
            }
            for (auto id : who) {
                CHECK(seen[id].size() == blocks); // every worker met every block once
            }
        }
    }
    const petrel::block_schedule s{.name = "h", .begin = 10, .end = 33, .blocks = 4};
    std::uint64_t next = 10;
    for (std::uint32_t b = 0; b < 4; ++b) {
        const auto k = s.block(b);
        CHECK(k.begin == next);
        CHECK(k.size() >= 5);
        next = k.end;
    }
    CHECK(next == 33);
}

TEST_CASE("scheduler: the schedule travels in the view and survives a round trip", "[scheduler]") {
    petrel::membership_view v;
    v.job_id = "j";
    v.version = 3;
    v.nodes.push_back(
        {0, petrel::node_role::manager, petrel::node_state::alive, "h:1", 0, 0, {}, {}});
    v.nodes.push_back(
        {1, petrel::node_role::reader, petrel::node_state::alive, {}, 0, 0, {}, "serve"});
    petrel::data_assignment a;
    a.set = {.name = "f", .group = "serve", .files = {{"x", 64}}, .record_bytes = 8};
    a.rebalance({1});
    v.schedule.data.push_back(a);
    std::stringstream ss;
    {
        cereal::BinaryOutputArchive out(ss);
        out(v);
    }
    petrel::membership_view back;
    {
        cereal::BinaryInputArchive in(ss);
        in(back);
    }
    CHECK(back == v);
    CHECK(back.share("f", 1)->units == 8);
    CHECK_FALSE(back.share("g", 1));
    CHECK(back.live_group("serve") == std::vector<petrel::node_id>{1});
    CHECK(back.failures().empty());
}

namespace {

/// A manager that lets workers come and go, and members of its job.
struct elastic_job {
    explicit elastic_job(std::uint32_t workers, std::uint32_t max_workers)
        : manager(petrel::tcp_transport(io.executor(), quiet()), {.job_id = "sched",
                                                                  .servers = 1,
                                                                  .workers = workers,
                                                                  .max_workers = max_workers,
                                                                  .ring = {.partitions = 16},
                                                                  .heartbeat_timeout = 2000ms,
                                                                  .startup_timeout = 10000ms}),
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

    std::shared_ptr<petrel::member> make(petrel::node_role role, std::uint32_t rank,
                                         std::string group = std::string(petrel::training_group)) {
        petrel::member_options o;
        o.root = root;
        o.job_id = "sched";
        o.role = role;
        o.group = std::move(group);
        o.rank = rank;
        o.address = role == petrel::node_role::server ? "127.0.0.1:1" : std::string{};
        o.heartbeat_interval = 50ms;
        o.heartbeat_timeout = 2000ms;
        o.startup_timeout = 5000ms;
        return std::make_shared<petrel::member>(petrel::tcp_transport(io.executor(), quiet()), o);
    }

    /// A server and `n` workers, joined.
    std::vector<std::shared_ptr<petrel::member>> start(std::uint32_t n) {
        std::vector<std::shared_ptr<petrel::member>> m{make(petrel::node_role::server, 0)};
        for (std::uint32_t i = 0; i < n; ++i) {
            m.push_back(make(petrel::node_role::worker, i + 1));
        }
        std::vector<std::future<void>> joins;
        for (auto& x : m) {
            joins.push_back(x->async_join(asio::use_future));
        }
        for (auto& f : joins) {
            REQUIRE_FALSE(code_of(f));
        }
        return m;
    }
};

/// Waits until `m` holds a view of at least `version`.
void wait_view(petrel::member& m, std::uint64_t version) {
    for (int i = 0; i < 500 && m.view()->version < version; ++i) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE(m.view()->version >= version);
}

} // namespace

TEST_CASE("scheduler: the manager divides a data set, and rebalances when workers leave and "
          "join",
          "[scheduler]") {
    elastic_job j(3, 4);
    auto m = j.start(3);
    const petrel::data_set d{.name = "train", .examples = 10000, .chunks = 60};
    std::vector<std::future<petrel::data_share>> asked;
    for (std::size_t i = 1; i < m.size(); ++i) {
        asked.push_back(m[i]->async_assign(d, asio::use_future));
    }
    std::vector<petrel::data_share> shares;
    for (auto& f : asked) {
        shares.push_back(f.get());
        CHECK(shares.back().units >= 3300);
        CHECK(shares.back().units <= 3400);
    }
    CHECK(exactly_once(coverage(10000, shares)));

    // A different definition under the same name is refused, and so is nonsense.
    auto other = d;
    other.examples = 5;
    auto refused = m[1]->async_assign(other, asio::use_future);
    CHECK_THROWS_AS(refused.get(), std::system_error);
    CHECK(m[1]->failure().find("defined differently") != std::string::npos);
    auto empty = m[1]->async_assign(petrel::data_set{.name = "e"}, asio::use_future);
    CHECK_THROWS_AS(empty.get(), std::system_error);

    // Worker 2 leaves: the others hold everything between them; it came from worker 2 only.
    const auto before = j.manager.view();
    m[2]->async_leave(asio::use_future).get();
    const auto after_leave = j.manager.view();
    REQUIRE(after_leave->version > before->version);
    wait_view(*m[1], after_leave->version);
    wait_view(*m[3], after_leave->version);
    std::vector<petrel::data_share> now{*m[1]->share("train"), *m[3]->share("train")};
    CHECK(now[0].version == after_leave->version);
    CHECK(exactly_once(coverage(10000, now)));
    CHECK(moved(*before->schedule.find("train"), *after_leave->schedule.find("train")) == 20);

    // A new worker joins the running job: it gets a share, taken from the others.
    auto late = j.make(petrel::node_role::worker, 9);
    auto joined = late->async_join(asio::use_future);
    REQUIRE_FALSE(code_of(joined));
    const auto after_join = j.manager.view();
    CHECK(late->view()->find(late->id())->index == 3);
    wait_view(*m[1], after_join->version);
    wait_view(*m[3], after_join->version);
    now = {*m[1]->share("train"), *m[3]->share("train"), *late->share("train")};
    CHECK(exactly_once(coverage(10000, now)));
    CHECK(now[2].units >= 3300);
    // The schedule is logged.
    CHECK(j.logs.all().find("data set 'train'") != std::string::npos);

    // The job is at most 4 workers: with 3 live, one more may come, then no more.
    auto fourth = j.make(petrel::node_role::worker, 10);
    auto j4 = fourth->async_join(asio::use_future);
    REQUIRE_FALSE(code_of(j4));
    auto fifth = j.make(petrel::node_role::worker, 11);
    auto j5 = fifth->async_join(asio::use_future);
    CHECK(code_of(j5) == petrel::errc::job_full);
}

TEST_CASE("scheduler: rounds start once every live worker asked, and go on without one that "
          "left",
          "[scheduler]") {
    elastic_job j(3, 3);
    auto m = j.start(3);
    const petrel::block_schedule s{
        .name = "cols", .table_id = 1, .begin = 0, .end = 3000, .blocks = 3, .rounds = 5};
    auto round_of_all = [&](std::vector<std::shared_ptr<petrel::member>> who) {
        std::vector<std::future<petrel::round_assignment>> f;
        for (auto& w : who) {
            f.push_back(w->async_round(s, asio::use_future));
        }
        std::vector<petrel::round_assignment> out;
        for (auto& x : f) {
            out.push_back(x.get());
        }
        return out;
    };
    // One worker alone does not start a round.
    auto early = m[1]->async_round(s, asio::use_future);
    CHECK(early.wait_for(150ms) == std::future_status::timeout);
    std::vector<std::future<petrel::round_assignment>> rest;
    rest.push_back(m[2]->async_round(s, asio::use_future));
    rest.push_back(m[3]->async_round(s, asio::use_future));
    std::vector<petrel::round_assignment> r0{early.get(), rest[0].get(), rest[1].get()};
    std::set<std::uint32_t> blocks;
    for (const auto& a : r0) {
        CHECK(a.round == 0);
        CHECK_FALSE(a.finished);
        CHECK(a.blocks == r0[0].blocks); // everyone sees the whole round
        CHECK(blocks.insert(a.block()).second);
    }
    // Asking twice for one round is refused.
    auto once = m[1]->async_round(s, asio::use_future);
    auto twice = m[1]->async_round(s, asio::use_future);
    CHECK_THROWS_AS(twice.get(), std::system_error);
    auto r1_rest = round_of_all({m[2], m[3]});
    const auto r1 = once.get();
    CHECK(r1.round == 1);
    CHECK(r1_rest[0].round == 1);
    CHECK(r1.block() != r0[0].block()); // rotated

    // Worker 3 leaves: the next round goes on with two, on different blocks.
    m[3]->async_leave(asio::use_future).get();
    for (int round = 2; round < 5; ++round) {
        auto r = round_of_all({m[1], m[2]});
        CHECK(r[0].round == static_cast<std::uint64_t>(round));
        CHECK(r[0].blocks.size() == 2);
        CHECK(r[0].block() != r[1].block());
    }
    auto done = round_of_all({m[1], m[2]});
    CHECK(done[0].finished);
    CHECK(done[0].round == 5);
    // The history is readable, and was logged.
    const auto history = j.manager.rounds("cols");
    REQUIRE(history.size() == 5);
    for (std::size_t i = 0; i < history.size(); ++i) {
        CHECK(history[i].round == i);
    }
    CHECK(history[4].blocks.size() == 2);
    CHECK(j.logs.all().find("round 4 of 'cols'") != std::string::npos);

    // A definition that does not match is refused.
    auto other = s;
    other.blocks = 2;
    auto mismatch = m[1]->async_round(other, asio::use_future);
    CHECK_THROWS_AS(mismatch.get(), std::system_error);
}

TEST_CASE("scheduler: readers attach to a running job, get their own group's share, and "
          "detach without disturbing it",
          "[scheduler]") {
    elastic_job j(2, 0);
    auto m = j.start(2);
    const auto formed = j.manager.view()->version;
    auto r1 = j.make(petrel::node_role::reader, 5, "serve");
    auto r2 = j.make(petrel::node_role::reader, 6, "serve");
    auto a1 = r1->async_join(asio::use_future);
    auto a2 = r2->async_join(asio::use_future);
    REQUIRE_FALSE(code_of(a1));
    REQUIRE_FALSE(code_of(a2));
    const auto v = j.manager.view();
    CHECK(v->find(r1->id())->role == petrel::node_role::reader);
    CHECK(v->live_group("serve").size() == 2);
    CHECK(v->live_group(std::string(petrel::training_group)).size() == 2);

    // Readers are in no barrier: the workers' barrier does not wait for them.
    auto b1 = m[1]->async_barrier(petrel::group::all, asio::use_future);
    auto b2 = m[2]->async_barrier(petrel::group::all, asio::use_future);
    auto b0 = m[0]->async_barrier(petrel::group::all, asio::use_future);
    CHECK_FALSE(code_of(b0));
    CHECK_FALSE(code_of(b1));
    CHECK_FALSE(code_of(b2));
    auto rb = r1->async_barrier(petrel::group::all, asio::use_future);
    CHECK(code_of(rb) == petrel::errc::invalid_argument);

    // A data set of the reader group is divided among the readers only.
    const petrel::data_set test_set{.name = "test", .group = "serve", .examples = 500};
    auto s1 = r1->async_assign(test_set, asio::use_future).get();
    auto s2 = r2->async_assign(test_set, asio::use_future).get();
    CHECK(exactly_once(coverage(500, {s1, s2})));
    wait_view(*m[1], j.manager.view()->version);
    CHECK(m[1]->share("test")->units == 0);

    // A reader that dies fails nothing: the job's failures stay empty.
    r2->close();
    for (int i = 0; i < 500 && j.manager.view()->live_group("serve").size() != 1; ++i) {
        std::this_thread::sleep_for(10ms);
    }
    REQUIRE(j.manager.view()->live_group("serve").size() == 1);
    CHECK(j.manager.view()->failures().empty());
    wait_view(*r1, j.manager.view()->version);
    CHECK(r1->share("test")->units == 500); // the survivor holds it all
    // Detaching is a leave; the job goes on and finishes when its workers and servers do.
    auto detached = r1->async_leave(asio::use_future);
    REQUIRE_FALSE(code_of(detached));
    auto finished = j.manager.async_wait_finished(asio::use_future);
    for (auto& x : m) {
        x->async_leave(asio::use_future).get();
    }
    CHECK_FALSE(code_of(finished));
    CHECK(j.manager.view()->version > formed);

    // A reader must name a read-only group other than the training group.
    CHECK_THROWS_AS(j.make(petrel::node_role::reader, 7, std::string(petrel::training_group)),
                    std::invalid_argument);
    CHECK_THROWS_AS(j.make(petrel::node_role::worker, 7, "serve"), std::invalid_argument);
}
