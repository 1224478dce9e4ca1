#include <petrel/launch/server_agent.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/members.hpp"

#include <petrel/cluster/manager_node.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::code_of;

namespace {

/// How the operation of future `f` ended (see `code_of`).
std::error_code end_of(std::future<void> f) {
    return code_of(f);
}

/// A job in one process over loopback TCP: a manager, servers each held by an agent, and
/// one worker's membership (no training: the agents are what is tested).
struct agent_job {
    petrel::test::io_threads io{2};
    petrel::test::log_capture logs;
    std::unique_ptr<petrel::manager_node> manager;
    std::string root;
    std::vector<std::shared_ptr<petrel::server_node>> servers;
    std::vector<std::shared_ptr<petrel::member>> members; // the servers', in order
    std::shared_ptr<petrel::member> worker;
    std::vector<std::shared_ptr<petrel::server_agent>> agents;

    std::shared_ptr<petrel::member> member_of(petrel::node_role role, std::uint32_t rank,
                                              std::string address) {
        petrel::transport_options t;
        t.log = logs.logger();
        return std::make_shared<petrel::member>(
            petrel::tcp_transport(io.executor(), t),
            petrel::test::member_options_of(root, "agents", role, rank, std::move(address)));
    }

    /// A server and its member, not joined yet.
    std::size_t add_server() {
        petrel::transport_options t;
        t.log = logs.logger();
        servers.push_back(std::make_shared<petrel::server_node>(
            petrel::tcp_transport(io.executor(), t),
            petrel::server_options{.workers = 1, .replication_timeout = 5s}));
        members.push_back(member_of(petrel::node_role::server,
                                    static_cast<std::uint32_t>(members.size()),
                                    servers.back()->listen("127.0.0.1:0")));
        return servers.size() - 1;
    }

    agent_job(std::uint32_t n, std::uint32_t replicas, std::uint32_t max_servers = 0) {
        petrel::transport_options t;
        t.log = logs.logger();
        manager = std::make_unique<petrel::manager_node>(
            petrel::tcp_transport(io.executor(), t),
            petrel::manager_options{
                .job_id = "agents",
                .servers = n,
                .workers = 1,
                .max_servers = max_servers,
                .ring = {.partitions = 16, .stripe_keys = 4, .replicas = replicas},
                .heartbeat_timeout = 1000ms,
                .startup_timeout = 20000ms});
        root = manager->listen("127.0.0.1:0");
        for (std::uint32_t i = 0; i < n; ++i) {
            add_server();
        }
        worker = member_of(petrel::node_role::worker, n, {});
        std::vector<std::future<void>> joins;
        joins.push_back(worker->async_join(asio::use_future));
        for (auto& m : members) {
            joins.push_back(m->async_join(asio::use_future));
        }
        for (auto& j : joins) {
            j.get();
        }
        for (std::uint32_t i = 0; i < n; ++i) {
            agents.push_back(std::make_shared<petrel::server_agent>(members[i], servers[i]));
        }
    }

    agent_job(const agent_job&) = delete;
    agent_job& operator=(const agent_job&) = delete;

    ~agent_job() {
        agents.clear();
        for (auto& m : members) {
            m->close();
        }
        worker->close();
        for (auto& s : servers) {
            s->close();
        }
        manager->close();
        io.stop();
    }
};

} // namespace

TEST_CASE("server_agent: refuses a member that is missing, not a server's, or not joined",
          "[cluster][launch]") {
    agent_job job(1, 0);
    CHECK_THROWS_AS(petrel::server_agent(nullptr, job.servers[0]), std::invalid_argument);
    CHECK_THROWS_AS(petrel::server_agent(job.members[0], nullptr), std::invalid_argument);
    CHECK_THROWS_AS(petrel::server_agent(job.worker, job.servers[0]),
                    std::invalid_argument); // the worker's
    const auto extra = job.add_server();
    CHECK_THROWS_AS(petrel::server_agent(job.members[extra], job.servers[extra]),
                    std::invalid_argument); // not joined
}

TEST_CASE("server_agent: the server follows the member's views from the agent's construction",
          "[cluster][launch]") {
    agent_job job(2, 1);
    const auto v = job.members[0]->view();
    CHECK(job.servers[0]->plan_version() != 0); // it follows a view already
    // Settled at once: it follows this view, and nothing is copied down its chain.
    CHECK_FALSE(end_of(job.agents[0]->async_settle(v->version, 20s, asio::use_future)));
}

TEST_CASE("server_agent: one wait of a kind at a time; cancel and the agent's end end the waits",
          "[cluster][launch]") {
    agent_job job(2, 1);
    // A view that does not come: the wait stays.
    auto far = job.agents[0]->async_settle(1000, 60s, asio::use_future);
    CHECK(far.wait_for(100ms) == std::future_status::timeout);
    CHECK(end_of(job.agents[0]->async_settle(1000, 60s, asio::use_future)) ==
          petrel::errc::in_progress);
    job.agents[0]->cancel();
    CHECK(code_of(far) == petrel::errc::shut_down);
    // It takes new waits after a cancel; its patience ends them too.
    CHECK(end_of(job.agents[0]->async_settle(1000, 50ms, asio::use_future)) ==
          petrel::errc::timed_out);
    auto pending = job.agents[1]->async_settle(1000, 60s, asio::use_future);
    job.agents[1].reset();
    CHECK(code_of(pending) == petrel::errc::shut_down);
}

TEST_CASE("server_agent: a server with replicas leaves at once; the last server may not leave",
          "[cluster][launch]") {
    {
        agent_job job(3, 1);
        CHECK_FALSE(end_of(job.agents[1]->async_retire(20s, asio::use_future)));
        const auto v = job.members[1]->view(); // (the answer carries the new view)
        CHECK(v->find(job.members[1]->id())->state == petrel::node_state::left);
        CHECK_FALSE(v->ring.holds(job.members[1]->id()));
        // The other servers follow the view in which it left.
        CHECK_FALSE(end_of(job.agents[0]->async_settle(v->version, 20s, asio::use_future)));
        CHECK_FALSE(end_of(job.agents[2]->async_settle(v->version, 20s, asio::use_future)));
    }
    {
        agent_job job(1, 0);
        // Its keys have nowhere to go: the manager refuses, and the server stays.
        const auto ec = end_of(job.agents[0]->async_retire(20s, asio::use_future));
        CHECK(ec);
        CHECK(job.members[0]->view()->ring.holds(job.members[0]->id()));
        CHECK_THAT(job.logs.all(), Catch::Contains("could not leave the job"));
    }
}

TEST_CASE("server_agent: without replicas a server hands its partitions over, then leaves",
          "[cluster][launch]") {
    agent_job job(3, 0);
    CHECK_FALSE(end_of(job.agents[2]->async_retire(20s, asio::use_future)));
    const auto v = job.members[2]->view(); // (the answer carries the new view)
    CHECK(v->find(job.members[2]->id())->state == petrel::node_state::left);
    CHECK_FALSE(v->ring.holds(job.members[2]->id()));
    CHECK(v->next_ring.empty());
    CHECK_THAT(job.logs.all(), Catch::Contains("copied its key partitions to the other servers"));
}

TEST_CASE("server_agent: a server that joins the running job takes its share over",
          "[cluster][launch]") {
    agent_job job(2, 1, 3);
    const auto i = job.add_server();
    job.members[i]->async_join(asio::use_future).get();
    job.agents.push_back(std::make_shared<petrel::server_agent>(job.members[i], job.servers[i]));
    INFO(job.members[i]->failure());
    CHECK_FALSE(end_of(job.agents.back()->async_take_over(20s, asio::use_future)));
    CHECK(job.members[i]->view()->ring.holds(job.members[i]->id()));
    // The others follow that view too.
    const auto version = job.members[i]->view()->version;
    CHECK_FALSE(end_of(job.agents[0]->async_settle(version, 20s, asio::use_future)));
    CHECK(job.members[0]->view()->ring.holds(job.members[i]->id()));
}

TEST_CASE("replication: a view's chains are its live servers' owner lists", "[launch]") {
    petrel::membership_view v;
    v.version = 7;
    for (std::uint32_t i = 1; i <= 3; ++i) {
        v.nodes.push_back({i,
                           petrel::node_role::server,
                           petrel::node_state::alive,
                           "127.0.0.1:" + std::to_string(4000 + i),
                           0,
                           i - 1,
                           {},
                           {}});
    }
    v.ring = petrel::ring::balanced({.partitions = 16, .replicas = 2},
                                    std::vector<petrel::node_id>{1, 2, 3});
    auto plan = petrel::replication_plan_of(v);
    CHECK(plan.version == 7);
    REQUIRE(plan.chains.size() == 3);
    const auto ids = [](const std::vector<petrel::replication_plan::peer>& c) {
        std::vector<std::uint32_t> out;
        for (const auto& p : c) {
            out.push_back(p.id);
        }
        return out;
    };
    CHECK(ids(plan.chains[1]) == std::vector<std::uint32_t>{1, 2, 3});
    CHECK(ids(plan.chains[2]) == std::vector<std::uint32_t>{2, 3, 1});
    CHECK(plan.chains[3].front().address == "127.0.0.1:4003");
    // A failed server leaves every chain; it is nobody's replica and no primary.
    v.nodes[1].state = petrel::node_state::failed;
    plan = petrel::replication_plan_of(v);
    CHECK(plan.chains.count(2) == 0);
    CHECK(ids(plan.chains[1]) == std::vector<std::uint32_t>{1, 3});
    CHECK(ids(plan.chains[3]) == std::vector<std::uint32_t>{3, 1});
}
