// Test support: a client's route tables over real links, without a job.
#pragma once

#include "support/cluster.hpp"

#include <petrel/client/detail/router.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/key.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/tcp_transport.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace petrel::test {

/// A client's clock request for every key, without clock or flags.
inline wire::message tick_template() {
    wire::message m;
    m.header.kind = wire::message_kind::clock;
    m.header.range_begin = 0;
    m.header.range_end = key_space_end<std::uint64_t>;
    return m;
}

/// Links to the servers of a job (server i + 1 at `addresses[i]`), and the route table of a
/// view in which `alive` servers are alive (the others failed) and the ring places keys on
/// `owners`.
struct job {
    io_threads& io;
    std::vector<std::shared_ptr<petrel::detail::request_link>> links;

    job(io_threads& i, const std::vector<std::string>& addresses) : io(i) {
        for (const auto& a : addresses) {
            links.push_back(std::make_shared<petrel::detail::request_link>(
                petrel::tcp_transport(io.executor()), a, std::chrono::seconds(10)));
        }
    }
    ~job() {
        for (auto& l : links) {
            l->close();
        }
    }
    job(const job&) = delete;
    job& operator=(const job&) = delete;

    std::shared_ptr<const petrel::detail::route_table>
    view(std::uint64_t version, const std::vector<node_id>& servers,
         const std::vector<node_id>& alive, const std::vector<node_id>& owners) const {
        petrel::membership_view v;
        v.version = version;
        for (const auto id : servers) {
            const bool up = std::find(alive.begin(), alive.end(), id) != alive.end();
            v.nodes.push_back({id,
                               petrel::node_role::server,
                               up ? petrel::node_state::alive : petrel::node_state::failed,
                               "",
                               0,
                               id - 1,
                               {},
                               {}});
        }
        petrel::ring_options o;
        o.partitions = 4;
        v.ring = petrel::ring::balanced(o, owners);
        auto t = std::make_shared<petrel::detail::route_table>();
        t->view = std::make_shared<const petrel::membership_view>(std::move(v));
        for (const auto id : servers) {
            t->links.push_back(links.at(id - 1));
            t->caches.push_back(nullptr);
            t->servers.push_back(id);
        }
        for (std::uint32_t p = 0; p < o.partitions; ++p) {
            const auto owner = t->view->ring.owners(p)[0];
            t->partition_slot.push_back(static_cast<std::uint32_t>(
                std::find(servers.begin(), servers.end(), owner) - servers.begin()));
        }
        return t;
    }
};

} // namespace petrel::test
