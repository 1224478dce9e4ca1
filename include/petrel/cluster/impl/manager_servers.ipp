// Petrel: a manager's servers joining and leaving the running job: the planned placement,
// hand-overs, retiring, failing over, and servers that nodes cannot reach.
#ifndef PETREL_CLUSTER_IMPL_MANAGER_SERVERS_IPP
#define PETREL_CLUSTER_IMPL_MANAGER_SERVERS_IPP

#include <petrel/cluster/detail/manager_state.hpp>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

namespace petrel {

// ---- servers joining and leaving the running job ----------------------------------------

PETREL_DECL bool manager_node::state::is_joining(node_id id) const {
    return std::find(entering.begin(), entering.end(), id) != entering.end();
}

PETREL_DECL void manager_node::state::plan_joins(membership_view& v) {
    std::erase_if(entering, [&](node_id id) {
        const auto* n = v.find(id);
        return !n || n->state != node_state::alive;
    });
    if (handing != no_node) {
        return; // joiners wait until the server handing its partitions over left
    }
    std::vector<node_id> live;
    for (const auto& n : v.nodes) {
        if (n.role == node_role::server && n.state == node_state::alive && v.ring.holds(n.id)) {
            live.push_back(n.id);
        }
    }
    ring next;
    if (!entering.empty() && !v.ring.empty()) {
        try {
            next = v.ring.joined(live, entering);
        } catch (const std::invalid_argument& e) {
            report(log_level::error, std::string("servers cannot join: ") + e.what());
        }
    }
    if (!next.empty()) {
        // More servers than partitions: a joiner given none never reports ready;
        // it takes no part in the plan (and gives up on its own).
        std::erase_if(entering, [&](node_id id) {
            for (std::uint32_t p = 0; p < next.options().partitions; ++p) {
                if (next.owners(p)[0] == id) {
                    return false;
                }
            }
            report(log_level::warning, v.find(id)->describe() +
                                           " gets no key partitions: the ring has too "
                                           "few for every server");
            return true;
        });
        if (entering.empty()) {
            next = ring{};
        }
    }
    if (!(next == v.next_ring)) {
        v.next_ring = std::move(next);
        planned_at = v.version;
        ready.clear();
    }
}

PETREL_DECL void manager_node::state::on_ready(const connection_ptr& c,
                                               const wire::message_header& h, std::uint64_t version,
                                               std::vector<outgoing>& out) {
    auto it = by_conn.find(c.get());
    const node_id id = it == by_conn.end() ? no_node : it->second;
    if (id != no_node && id == handing) {
        handed_over(c, h, version, out);
        return;
    }
    if (std::find(entering.begin(), entering.end(), id) == entering.end()) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "only a server joining the running job, or one "
                                  "handing its partitions over, reports its copies")});
        return;
    }
    if (version >= planned_at && !view->next_ring.empty() && handing == no_node) {
        ready.insert(id); // (under a hand-over plan the joiners' copies wait)
    }
    control_body b;
    b.op = control_op::ready;
    b.version = view->version;
    out.push_back({c, detail::make_control(b, &h)});
    const bool all =
        !entering.empty() && std::all_of(entering.begin(), entering.end(),
                                         [&](node_id j) { return ready.count(j) != 0; });
    if (!all) {
        return;
    }
    auto v = std::make_shared<membership_view>(*view);
    v->ring = std::move(v->next_ring);
    v->next_ring = ring{};
    ++v->version;
    std::string who;
    for (const auto j : entering) {
        who += (who.empty() ? "" : ", ") + v->find(j)->describe();
    }
    entering.clear();
    ready.clear();
    view = v;
    broadcast(out);
    report(log_level::info, who + " took over its share of the key partitions");
}

PETREL_DECL void manager_node::state::handed_over(const connection_ptr& c,
                                                  const wire::message_header& h,
                                                  std::uint64_t version,
                                                  std::vector<outgoing>& out) {
    control_body b;
    b.op = control_op::ready;
    b.version = view->version;
    out.push_back({c, detail::make_control(b, &h)});
    if (version < planned_at || view->next_ring.empty()) {
        return; // an older plan's copies, or the switch was made already
    }
    auto v = std::make_shared<membership_view>(*view);
    v->ring = std::move(v->next_ring);
    v->next_ring = ring{};
    ++v->version;
    view = v;
    broadcast(out);
    report(log_level::info, view->find(handing)->describe() +
                                " copied its key partitions to the other servers, "
                                "which now hold them");
}

PETREL_DECL void manager_node::state::plan_hand_over(const connection_ptr& c,
                                                     const wire::message_header& h,
                                                     const node_info& n,
                                                     const std::vector<node_id>& live,
                                                     std::vector<outgoing>& out) {
    // `n` lives in the view, which a new plan replaces: described while it holds.
    const auto who = n.describe();
    std::string why;
    if (handing != no_node && handing != n.id) {
        why = view->find(handing)->describe() +
              " is handing its partitions over; ask again once it has left";
    } else if (handing != n.id && !entering.empty()) {
        // (Joiners wait for a hand-over already planned, not it for them.)
        why = "servers are joining the job; ask again once they hold their partitions";
    }
    ring next;
    if (why.empty() && handing != n.id) {
        std::vector<node_id> holders; // servers on the ring (not a joiner given none)
        std::copy_if(live.begin(), live.end(), std::back_inserter(holders),
                     [&](node_id s) { return view->ring.holds(s); });
        try {
            next = view->ring.handed_over(n.id, holders);
        } catch (const std::invalid_argument& e) {
            why = e.what();
        }
    }
    if (!why.empty()) {
        out.push_back({c, refusal(h, errc::invalid_argument, who + " cannot leave yet: " + why)});
        return;
    }
    if (handing != n.id) {
        handing = n.id;
        auto v = std::make_shared<membership_view>(*view);
        v->next_ring = std::move(next);
        ++v->version;
        planned_at = v->version;
        ready.clear();
        view = v;
        broadcast(out);
        report(log_level::info, who + " hands its key partitions over to the other servers "
                                      "before it leaves (no replica holds them)");
    }
    out.push_back({c, refusal(h, errc::in_progress,
                              who + " hands its key partitions over first: it "
                                    "copies them, reports it "
                                    "(member::async_ready) and asks again")});
}

PETREL_DECL void
manager_node::state::on_retire(const connection_ptr& c, const wire::message_header& h,
                               std::vector<outgoing>& out,
                               std::vector<std::function<void(std::error_code)>>& done) {
    if (const auto r = retired.find(c.get()); r != retired.end()) {
        control_body b; // it left already: the same answer, with the newest view
        b.op = control_op::retire;
        b.version = view->version;
        b.view = *view;
        out.push_back({c, detail::make_control(b, &h)});
        return;
    }
    auto it = by_conn.find(c.get());
    const node_info* n =
        it == by_conn.end() || members.count(it->second) == 0 ? nullptr : view->find(it->second);
    if (!n || n->role != node_role::server) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "only a live server of the job can hand its keys "
                                  "over and leave")});
        return;
    }
    const node_id id = n->id;
    std::vector<node_id> live;
    for (const auto& m : view->nodes) {
        if (m.role == node_role::server && m.state == node_state::alive && m.id != id &&
            !is_joining(m.id)) {
            live.push_back(m.id);
        }
    }
    auto f = view->ring.failover(live);
    // The partitions its leave would lose (others lost before are not its doing).
    std::size_t would_lose = 0;
    for (const auto p : f.lost) {
        const auto o = view->ring.owners(p);
        would_lose += std::find(o.begin(), o.end(), id) != o.end() ? 1 : 0;
    }
    if (!live.empty() && would_lose != 0 && view->ring.options().replicas == 0) {
        plan_hand_over(c, h, *n, live, out);
        return;
    }
    if (live.empty() || would_lose != 0) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  n->describe() + " cannot leave: " +
                                      std::to_string(live.empty() ? view->ring.options().partitions
                                                                  : would_lose) +
                                      " of its key partitions have no other live copy (replicas: " +
                                      std::to_string(view->ring.options().replicas) +
                                      "); they would be lost")});
        return;
    }
    members.erase(id);
    by_conn.erase(it);
    retired[c.get()] = id;
    auto v = std::make_shared<membership_view>(*view);
    for (auto& m : v->nodes) {
        if (m.id == id) {
            m.state = node_state::left;
        }
    }
    ++v->version;
    v->ring = std::move(f.ring);
    const bool handed = handing == id; // its partitions went to the others before
    if (handed) {
        handing = no_node;
    }
    plan_joins(*v);
    view = v;
    control_body b;
    b.op = control_op::retire;
    b.version = v->version;
    b.view = *v; // the server learns it holds no keys any more
    out.push_back({c, detail::make_control(b, &h)});
    broadcast(out);
    report(log_level::info, view->find(id)->describe() +
                                (handed ? " left; it had handed its key partitions over"
                                        : " left; its key ranges moved to their replicas (" +
                                              std::to_string(v->ring.options().replicas) +
                                              " copies besides each primary)"));
    for (auto bg : {group::all, group::servers, group::workers}) {
        try_release(bg, out);
    }
    check_finished(done);
}

PETREL_DECL std::string manager_node::state::fail_over(membership_view& v, node_id id) {
    std::vector<node_id> live;
    for (const auto& n : v.nodes) {
        if (n.role == node_role::server && n.state == node_state::alive && !is_joining(n.id)) {
            live.push_back(n.id);
        }
    }
    auto f = v.ring.failover(live);
    v.ring = std::move(f.ring);
    if (f.lost.empty()) {
        return "; its key ranges moved to their replicas (" +
               std::to_string(v.ring.options().replicas) + " copies besides each primary)";
    }
    return "; " + std::to_string(f.lost.size()) + " of " +
           std::to_string(v.ring.options().partitions) +
           " key partitions had no other live copy (replicas: " +
           std::to_string(opts.ring.replicas) +
           ") and are lost: requests for their keys fail with node_failed naming server " +
           std::to_string(id);
}

// ---- servers that nodes cannot reach ----------------------------------------------------

PETREL_DECL void manager_node::state::on_unreachable(const connection_ptr& c,
                                                     const wire::message_header& h, node_id server,
                                                     const std::string& seen,
                                                     std::vector<outgoing>& out) {
    const auto by = by_conn.find(c.get());
    if (by == by_conn.end() || members.count(by->second) == 0) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "only a node of the job reports unreachable servers")});
        return;
    }
    control_body b;
    b.op = control_op::unreachable;
    b.version = view ? view->version : 0;
    out.push_back({c, detail::make_control(b, &h)});
    const auto* n = ph == phase::running && view ? view->find(server) : nullptr;
    const auto* from = view ? view->find(by->second) : nullptr;
    if (n == nullptr || n->role != node_role::server || members.count(server) == 0 ||
        !probing.insert(server).second) {
        return; // not a live server (any more), or already being tried
    }
    const std::string who = from ? from->describe() : "node " + std::to_string(by->second);
    report(log_level::warning, who + " cannot connect to " + n->describe() + " (" +
                                   detail::one_line(seen) +
                                   "): the manager tries its address itself");
    asio::post(timer.get_executor(), [weak = weak_from_this(), server, address = n->address, who] {
        if (auto s = weak.lock()) {
            s->probe(server, address, who);
        }
    });
}

PETREL_DECL void manager_node::state::probe(node_id server, const std::string& address,
                                            const std::string& who) {
    struct attempt {
        explicit attempt(const asio::any_io_executor& ex) : timer(ex) {}
        std::atomic<bool> settled{false};
        asio::steady_timer timer;
    };
    auto a = std::make_shared<attempt>(timer.get_executor());
    std::weak_ptr<state> weak = weak_from_this();
    auto settle = [weak, a, server, address, who](std::error_code ec) {
        if (a->settled.exchange(true)) {
            return;
        }
        a->timer.cancel();
        if (auto s = weak.lock()) {
            s->probed(server, address, who, ec);
        }
    };
    a->timer.expires_after(opts.probe_timeout);
    a->timer.async_wait([settle](std::error_code ec) {
        if (!ec) {
            settle(make_error_code(errc::timed_out));
        }
    });
    transport.async_connect(address, connection_handlers{},
                            [settle](std::error_code ec, connection_ptr conn) {
                                if (conn) {
                                    conn->close();
                                }
                                settle(ec);
                            });
}

PETREL_DECL void manager_node::state::probed(node_id server, const std::string& address,
                                             const std::string& who, std::error_code ec) {
    std::vector<outgoing> out;
    std::vector<std::function<void(std::error_code)>> done;
    {
        std::lock_guard lock(mutex);
        probing.erase(server);
        if (ph != phase::running || members.count(server) == 0) {
            return; // it failed or left meanwhile, or the job is over
        }
        if (!ec) {
            report(log_level::warning, "the manager connected to " + address + ", which " + who +
                                           " cannot reach: the server stays in the job");
        } else {
            fail_node(server,
                      "its address " + address +
                          " refuses connections or does not "
                          "answer (" +
                          ec.message() + "): " + who +
                          " could not connect to it, nor could the manager",
                      out, done);
        }
    }
    flush(out, done);
}

} // namespace petrel

#endif // PETREL_CLUSTER_IMPL_MANAGER_SERVERS_IPP
