#include <petrel/server/detail/replicator.hpp>

#include "support/cluster.hpp"

#include <catch2/catch.hpp>

#include <petrel/transport/inproc_transport.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
namespace wire = petrel::wire;
using petrel::replication_plan;

namespace {

/// A peer that records the updates it receives and acknowledges them (or refuses them
/// with `status`).
struct recording_peer {
    std::mutex mutex;
    std::vector<wire::message_header> seen;
    std::uint32_t status = 0;

    petrel::connection_handlers handlers() {
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr& c, wire::message&& m) {
            std::uint32_t st = 0;
            {
                std::lock_guard lock(mutex);
                seen.push_back(m.header);
                st = status;
            }
            auto reply = wire::make_reply(m.header, wire::message_kind::push_reply);
            reply.header.status = st;
            c->send(std::move(reply));
        };
        return h;
    }
};

std::error_code forward_and_wait(petrel::detail::replicator& r, const replication_plan::peer& next,
                                 std::uint32_t origin, petrel::detail::push_kind kind) {
    wire::message m;
    m.header.table_id = 4;
    m.header.kind = wire::message_kind::push; // a worker's push, as the server applied it
    m.header.key_list_id = 12345;             // its key list: not for the next server
    m.header.update_id = 777;                 // kept on a replica update only
    std::promise<std::error_code> done;
    auto f = done.get_future();
    r.forward(next, origin, std::move(m), kind,
              [&done](std::error_code ec) { done.set_value(ec); });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
}

} // namespace

TEST_CASE("replicator: links to a plan's servers and stamps the updates it forwards", "[server]") {
    petrel::test::io_threads io(2);
    petrel::inproc_hub hub;
    petrel::any_transport peer_side = petrel::inproc_transport(io.executor(), hub);
    petrel::any_transport server_side = petrel::inproc_transport(io.executor(), hub);
    recording_peer peer;
    const auto address = peer_side.listen("replica", peer.handlers());

    replication_plan plan;
    plan.version = 3;
    plan.secret = 99;
    plan.chains[1] = {{1, "primary"}, {2, address}};
    petrel::test::log_capture log;
    petrel::detail::replicator r(io.executor(), log.logger(), 5s);
    CHECK(r.follow(plan, 1, server_side).empty());
    CHECK(r.linked(2));
    CHECK_FALSE(r.linked(1)); // never to itself

    CHECK_FALSE(forward_and_wait(r, plan.chains[1][1], 1, petrel::detail::push_kind::clock_rows));
    {
        std::lock_guard lock(peer.mutex);
        REQUIRE(peer.seen.size() == 1);
        const auto& h = peer.seen[0];
        CHECK(h.kind == wire::message_kind::row_transfer);
        CHECK(petrel::detail::push_kind_of(h) == petrel::detail::push_kind::clock_rows);
        CHECK(h.sender == 1);
        CHECK(h.receiver == 1); // the chain's primary
        CHECK(h.view == 3);
        CHECK(h.secret == 99);
        CHECK(h.key_list_id == 0);
        CHECK(h.update_id == 0);
        CHECK(h.table_id == 4);
    }
    r.rename(5);
    CHECK_FALSE(forward_and_wait(r, plan.chains[1][1], 1, petrel::detail::push_kind::copy_end));
    {
        std::lock_guard lock(peer.mutex);
        REQUIRE(peer.seen.size() == 2);
        CHECK(peer.seen[1].sender == 5);
        CHECK(peer.seen[1].kind == wire::message_kind::row_transfer);
        CHECK(petrel::detail::push_kind_of(peer.seen[1]) == petrel::detail::push_kind::copy_end);
    }
    CHECK_FALSE(
        forward_and_wait(r, plan.chains[1][1], 1, petrel::detail::push_kind::replica_update));
    {
        std::lock_guard lock(peer.mutex);
        REQUIRE(peer.seen.size() == 3);
        CHECK(peer.seen[2].kind == wire::message_kind::replica_update);
        CHECK(peer.seen[2].update_id == 777); // applied once, however often it is resent
        CHECK(peer.seen[2].secret == 99);
    }

    // A refusal reaches the caller, and is logged.
    {
        std::lock_guard lock(peer.mutex);
        peer.status = static_cast<std::uint32_t>(petrel::errc::stale_view);
    }
    CHECK(forward_and_wait(r, plan.chains[1][1], 1, petrel::detail::push_kind::replica_update) ==
          petrel::errc::stale_view);
    CHECK(log.all().find("server 2 did not apply a replica update of table 4 (") !=
          std::string::npos);
    CHECK(forward_and_wait(r, plan.chains[1][1], 1, petrel::detail::push_kind::clock_rows) ==
          petrel::errc::stale_view);
    CHECK(log.all().find("server 2 did not apply the rows of a clock of table 4 (") !=
          std::string::npos);

    // A server with no link: node_failed, and nothing sent.
    CHECK(forward_and_wait(r, {9, "nowhere"}, 1, petrel::detail::push_kind::replica_update) ==
          petrel::errc::node_failed);
    CHECK(log.all().find("no link to server 9") != std::string::npos);

    // A plan without server 2: its link is handed back to be closed.
    replication_plan alone;
    alone.version = 4;
    alone.chains[1] = {{1, "primary"}};
    const auto gone = r.follow(alone, 1, server_side);
    CHECK(gone.size() == 1);
    CHECK_FALSE(r.linked(2));
    for (const auto& l : gone) {
        l->close();
    }
    {
        std::lock_guard lock(peer.mutex);
        CHECK(peer.seen.size() == 5);
    }
    server_side.close();
    peer_side.close();
}
