#include <petrel/client/detail/server_links.hpp>

#include "support/cluster.hpp"

#include <petrel/cluster/ring.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::node_id;
using petrel::test::io_threads;
using petrel::test::log_capture;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

namespace {

/// A view of servers `ids` (those in `failed` failed), version `version`, keys on `owners`.
std::shared_ptr<const petrel::membership_view> view_of(std::uint64_t version,
                                                       const std::vector<node_id>& ids,
                                                       const std::vector<node_id>& failed,
                                                       const std::vector<node_id>& owners) {
    petrel::membership_view v;
    v.version = version;
    for (const auto id : ids) {
        const bool down = std::find(failed.begin(), failed.end(), id) != failed.end();
        v.nodes.push_back({id,
                           petrel::node_role::server,
                           down ? petrel::node_state::failed : petrel::node_state::alive,
                           "127.0.0.1:1",
                           0,
                           id - 1,
                           down ? "it stopped answering" : "",
                           {}});
    }
    petrel::ring_options o;
    o.partitions = 8;
    v.ring = petrel::ring::balanced(o, owners);
    return std::make_shared<const petrel::membership_view>(std::move(v));
}

struct links_client {
    io_threads io{1};
    log_capture log;
    std::shared_ptr<detail::resender> resends;
    std::shared_ptr<detail::server_links> links;

    explicit links_client(bool key_caching) {
        auto pipe = std::make_shared<detail::send_pipeline>();
        pipe->pool = std::make_shared<petrel::buffer_pool>();
        resends = std::make_shared<detail::resender>(io.executor(), pipe,
                                                     std::make_shared<detail::worker_clock>(),
                                                     detail::resender_options{});
        links = std::make_shared<detail::server_links>(
            petrel::tcp_transport(io.executor(), {.log = log.logger()}),
            detail::server_links_options{7, 10s, key_caching, 1 << 20}, log.logger(), resends);
    }
    ~links_client() { links->close(); }
    links_client(const links_client&) = delete;
    links_client& operator=(const links_client&) = delete;
};

/// How a request sent on `link` ends (at once when the link is closed).
std::error_code ask(detail::request_link& link) {
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    wire::message m;
    m.header.kind = wire::message_kind::clock;
    link.request(std::move(m),
                 [done](std::error_code ec, wire::message&&) { done->set_value(ec); });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
}

} // namespace

TEST_CASE("server_links: each newer view gives the resender a route table; links and key "
          "caches are kept per server",
          "[client][server_links]") {
    links_client c(true);
    c.links->adopt(view_of(2, {1, 2}, {}, {1, 2}));
    const auto first = c.resends->table();
    REQUIRE(first);
    CHECK(first->view->version == 2);
    REQUIRE(first->slots() == 2);
    CHECK(first->servers == std::vector<node_id>{1, 2});
    CHECK(first->links[0] != first->links[1]);
    REQUIRE(first->caches[0]);
    CHECK(first->caches[0] != first->caches[1]);
    for (std::uint32_t p = 0; p < 8; ++p) {
        CHECK(first->servers[first->partition_slot[p]] == first->view->ring.owners(p)[0]);
    }

    // The same version or an older one changes nothing.
    c.links->adopt(view_of(2, {1, 2, 3}, {}, {1, 2, 3}));
    c.links->adopt(view_of(1, {1}, {}, {1}));
    CHECK(c.resends->table() == first);

    // A server joins: the others keep their links and caches.
    c.links->adopt(view_of(3, {1, 2, 3}, {}, {1, 2, 3}));
    const auto second = c.resends->table();
    REQUIRE(second->slots() == 3);
    CHECK(second->links[0] == first->links[0]);
    CHECK(second->links[1] == first->links[1]);
    CHECK(second->caches[1] == first->caches[1]);
    CHECK(c.log.size() == 0);
}

TEST_CASE("server_links: a server the view declares failed has its link closed with node_failed, "
          "logged once",
          "[client][server_links]") {
    links_client c(false);
    c.links->adopt(view_of(1, {1, 2}, {}, {1, 2}));
    const auto before = c.resends->table();
    CHECK_FALSE(before->caches[0]); // no key caching
    c.links->adopt(view_of(2, {1, 2}, {2}, {1, 2}));
    const auto after = c.resends->table();
    CHECK(after->links[1]->closed());
    CHECK(ask(*after->links[1]) == errc::node_failed);
    CHECK_FALSE(after->links[0]->closed());
    const auto text = c.log.all();
    INFO(text);
    CHECK(text.find("petrel worker 7: ") != std::string::npos);
    CHECK(text.find("failed: it stopped answering; its requests fail with node_failed") !=
          std::string::npos);
    // A later view that still says so logs nothing more.
    c.links->adopt(view_of(3, {1, 2}, {2}, {1, 2}));
    CHECK(c.log.size() == 1);
    // Keys moved off a failed server: its requests go to the servers that took them.
    c.links->adopt(view_of(4, {1, 2, 3}, {2, 3}, {1}));
    CHECK(c.log.all().find("its requests go to the servers that took over its keys") !=
          std::string::npos);
}

TEST_CASE("server_links: a server the view no longer names has its link closed and forgotten",
          "[client][server_links]") {
    links_client c(true);
    c.links->adopt(view_of(1, {1, 2, 3}, {}, {1, 2, 3}));
    const auto before = c.resends->table();
    const auto third = before->links[2];
    // Server 3 went and was left out of the view: its link is closed (no error to log).
    c.links->adopt(view_of(2, {1, 2}, {}, {1, 2}));
    const auto after = c.resends->table();
    REQUIRE(after->slots() == 2);
    CHECK(after->links[0] == before->links[0]);
    CHECK(after->links[1] == before->links[1]);
    CHECK(third->closed());
    CHECK_FALSE(after->links[0]->closed());
    CHECK(c.log.size() == 0);
    // Named again, it would get a new link and a new key cache.
    c.links->adopt(view_of(3, {1, 2, 3}, {}, {1, 2, 3}));
    const auto again = c.resends->table();
    REQUIRE(again->slots() == 3);
    CHECK(again->links[2] != third);
    CHECK_FALSE(again->links[2]->closed());
    CHECK(again->caches[2] != before->caches[2]);
}

TEST_CASE("server_links: once closed, every link is closed, also those of later views",
          "[client][server_links]") {
    links_client c(false);
    c.links->adopt(view_of(1, {1}, {}, {1}));
    c.links->close();
    CHECK(c.resends->table()->links[0]->closed());
    CHECK(ask(*c.resends->table()->links[0]) == errc::shut_down);
    c.links->adopt(view_of(2, {1, 2}, {}, {1, 2}));
    const auto t = c.resends->table();
    REQUIRE(t->slots() == 2);
    CHECK(t->links[1]->closed());
    CHECK(ask(*t->links[1]) == errc::node_failed);
}
