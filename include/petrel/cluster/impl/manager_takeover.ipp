// Petrel: a manager taking a running job over from its lost manager: the nodes that register
// again with their views and keys, the view it takes, and the refusals it logs.
#ifndef PETREL_CLUSTER_IMPL_MANAGER_TAKEOVER_IPP
#define PETREL_CLUSTER_IMPL_MANAGER_TAKEOVER_IPP

#include <petrel/cluster/detail/manager_state.hpp>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace petrel {

// ---- taking a job over ------------------------------------------------------------------

PETREL_DECL void manager_node::state::on_return(const connection_ptr& c,
                                                const wire::message_header& h, control_body b,
                                                std::vector<outgoing>& out) {
    const membership_view* held = b.view ? &*b.view : nullptr;
    const node_info* me = held ? held->find(b.id) : nullptr;
    bool placed = held && !held->ring.empty() &&
                  held->version < std::numeric_limits<std::uint64_t>::max() / 2;
    if (placed) {
        for (const auto owner : held->ring.owner_table()) {
            const auto* n = held->find(owner);
            placed = placed && n && n->role == node_role::server;
        }
    }
    if (!placed || held->job_id != opts.job_id || !me || me->role != b.role ||
        me->role == node_role::manager ||
        (b.role == node_role::server && (me->address != b.address || b.secret == 0))) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "a node registers again with its id and the view it "
                                  "holds, which names it")});
        return;
    }
    // The rank a node registers as: from this manager's own view once it has one, else
    // from the view the node holds (checked again against the newest when proposing).
    const bool has_view = view && (ph == phase::running || ph == phase::confirming);
    const node_info* ranked = has_view ? view->find(b.id) : me;
    if (ranked && (ranked->role == node_role::server || ranked->role == node_role::worker) &&
        !rank_shown(c, h, ranked->rank, out)) {
        return;
    }
    if (ph == phase::confirming) {
        confirming_return(c, h, b, out);
        return;
    }
    if (ph == phase::running) {
        const node_info* n = view->find(b.id);
        const bool live = n && n->state == node_state::alive && n->role == b.role &&
                          members.count(b.id) != 0 &&
                          (b.role != node_role::server || b.secret == secret);
        if (!live) {
            out.push_back({c, refusal(h, errc::node_failed,
                                      (n ? n->describe() : "node " + std::to_string(b.id)) +
                                          " is no live member of job '" + opts.job_id +
                                          "' any more: it may join again as a new node")});
            return;
        }
        auto& mem = members[b.id];
        if (!same_key(b.key, mem.key)) {
            // Another holder of the job's secret: it may not take the node's place.
            refuse_logged(c, h, "a registration", key_needed(b.id), out);
            return;
        }
        // What it waited for on its old connection it asks for again on this one.
        for (auto& bar : barriers) {
            if (bar.arrived.erase(b.id) != 0) {
                std::erase_if(bar.waiting,
                              [&](const waiting_barrier& w) { return w.conn == mem.conn; });
            }
        }
        for (auto& [name, st] : schedules) {
            if (auto w = st.waiting.find(b.id);
                w != st.waiting.end() && w->second.conn == mem.conn) {
                st.waiting.erase(w);
            }
        }
        by_conn.erase(mem.conn.get());
        mem = {c, clock::now()};
        by_conn[c.get()] = b.id;
        out.push_back({c, return_reply(h, b.id, b.role)});
        return;
    }
    if (ph == phase::registering) {
        out.push_back({c, refusal(h, errc::timed_out,
                                  "the manager at " + address +
                                      " forms a new job: it takes no running job over")});
        return;
    }
    if (ph != phase::standby) {
        out.push_back({c, refusal(h, errc::shut_down, "the job is over")});
        return;
    }
    if (me->state != node_state::alive) {
        out.push_back(
            {c, refusal(h, errc::node_failed, me->describe() + " is not live in its own view")});
        return;
    }
    // This manager never gave the node its key: the first key it comes back with is the
    // node's, and a registration with another is refused.
    if (auto it = returning.find(b.id);
        b.key == node_key{} || (it != returning.end() && !same_key(b.key, it->second.body.key))) {
        refuse_logged(c, h, "a registration", key_needed(b.id), out);
        return;
    }
    if (b.role == node_role::server) {
        if (returned_secret != 0 && b.secret != returned_secret) {
            out.push_back({c, refusal(h, errc::invalid_argument,
                                      "servers of job '" + opts.job_id +
                                          "' came back with different secrets")});
            return;
        }
        returned_secret = b.secret;
    }
    if (auto it = returning.find(b.id); it != returning.end()) {
        out.push_back({it->second.conn, refusal(it->second.request, errc::timed_out,
                                                "replaced by a later registration of the node")});
    }
    if (returning.empty()) {
        first_return = clock::now();
    }
    if (!newest || newest->version < held->version) {
        newest = std::make_shared<const membership_view>(*held);
    }
    const node_id id = b.id;
    returning[id] = {c, h, std::move(b)};
    try_take_over(out);
}

PETREL_DECL void manager_node::state::confirming_return(const connection_ptr& c,
                                                        const wire::message_header& h,
                                                        const control_body& b,
                                                        std::vector<outgoing>& out) {
    const node_info* n = view->find(b.id);
    if (!n || n->state != node_state::alive || n->role != b.role ||
        (b.role == node_role::server && b.secret != secret)) {
        out.push_back(
            {c, refusal(h, errc::node_failed,
                        "node " + std::to_string(b.id) + " is not live in the job's newest view")});
        return;
    }
    // As at a standby: the first key a node comes back with is its own.
    auto it = members.find(b.id);
    if (b.key == node_key{} || (it != members.end() && !same_key(b.key, it->second.key))) {
        refuse_logged(c, h, "a registration", key_needed(b.id), out);
        return;
    }
    if (it != members.end()) {
        by_conn.erase(it->second.conn.get());
    }
    members[b.id] = {c, clock::now(), b.key};
    by_conn[c.get()] = b.id;
    out.push_back({c, return_reply(h, b.id, b.role)});
}

PETREL_DECL void manager_node::state::refuse_logged(const connection_ptr& c,
                                                    const wire::message_header& h,
                                                    std::string_view what, const std::string& why,
                                                    std::vector<outgoing>& out) {
    const auto line = refused_requests.line(
        "refused " + std::string(what) + " from " + c->remote_address() + ": " + why, clock::now());
    if (!line.empty()) {
        report(log_level::warning, line);
    }
    out.push_back({c, refusal(h, errc::not_permitted, why)});
}

PETREL_DECL bool manager_node::state::rank_shown(const connection_ptr& c,
                                                 const wire::message_header& h, std::uint32_t rank,
                                                 std::vector<outgoing>& out) {
    if (!opts.ranked_certificates) {
        return true;
    }
    const auto name = c->peer_name();
    const auto shown = certificate_rank(name);
    if (shown == rank) {
        return true;
    }
    refuse_logged(c, h, "a registration",
                  "a server or worker registers only as the rank its TLS certificate names (" +
                      (shown ? "rank " + std::to_string(*shown)
                             : "none: '" + printable(name, detail::max_logged_id_bytes) + "'") +
                      "), not as rank " + std::to_string(rank),
                  out);
    return false;
}

PETREL_DECL std::string manager_node::state::key_needed(node_id id) {
    return "node " + std::to_string(id) +
           " registers again only with the key it was given when it joined";
}

PETREL_DECL wire::message manager_node::state::return_reply(const wire::message_header& h,
                                                            node_id id, node_role role) const {
    control_body r;
    r.op = control_op::join;
    r.id = id;
    r.version = view->version;
    r.view = *view;
    if (role == node_role::server) {
        r.secret = secret;
    }
    return detail::make_control(r, &h);
}

PETREL_DECL void manager_node::state::try_take_over(std::vector<outgoing>& out) {
    if (ph != phase::standby || returning.empty() || !newest) {
        return;
    }
    std::size_t count = 0;
    std::size_t back = 0;
    bool all = true;
    for (const auto& n : newest->nodes) {
        if (n.role == node_role::manager || n.state != node_state::alive) {
            continue;
        }
        const bool here = returning.count(n.id) != 0;
        all = all && here;
        if (n.role != node_role::reader) {
            ++count;
            back += here ? 1 : 0;
        }
    }
    const auto since = clock::now() - first_return;
    if (all || (since >= opts.heartbeat_timeout && 2 * back > count)) {
        propose(out);
        return;
    }
    if (since >= 4 * opts.heartbeat_timeout) {
        const std::string why = "only " + std::to_string(back) + " of the " +
                                std::to_string(count) + " live nodes of job '" + opts.job_id +
                                "' came here: its manager may still be alive";
        report(log_level::warning, "did not take the job over: " + why);
        for (const auto& [id, r] : returning) {
            out.push_back({r.conn, refusal(r.request, errc::timed_out, why)});
        }
        returning.clear();
        newest.reset();
        returned_secret = 0;
    }
}

PETREL_DECL void manager_node::state::propose(std::vector<outgoing>& out) {
    auto v = std::make_shared<membership_view>(*newest);
    ++v->version;
    for (auto& n : v->nodes) {
        if (n.role == node_role::manager) {
            n.address = address;
            n.state = node_state::alive;
        }
    }
    if (returned_secret != 0) {
        secret = returned_secret;
    }
    view = v;
    ph = phase::confirming;
    confirm_deadline = clock::now() + opts.heartbeat_timeout;
    confirmed.clear();
    voters = 0;
    const auto now = clock::now();
    std::size_t back = 0;
    for (const auto& n : v->nodes) {
        if (n.role == node_role::manager || n.state != node_state::alive) {
            continue;
        }
        voters += n.role != node_role::reader ? 1 : 0;
        auto it = returning.find(n.id);
        if (it == returning.end()) {
            continue;
        }
        if (n.role != node_role::reader &&
            !rank_shown(it->second.conn, it->second.request, n.rank, out)) {
            returning.erase(it); // its certificate names another rank than the newest view
            continue;
        }
        members[n.id] = {it->second.conn, now, it->second.body.key};
        by_conn[it->second.conn.get()] = n.id;
        out.push_back({it->second.conn, return_reply(it->second.request, n.id, n.role)});
        ++back;
    }
    for (const auto& [id, r] : returning) {
        if (members.count(id) == 0) {
            out.push_back({r.conn, refusal(r.request, errc::node_failed,
                                           "node " + std::to_string(id) +
                                               " is not live in the job's newest view")});
        }
    }
    report(log_level::info, "answered the " + std::to_string(back) + " nodes of job '" +
                                opts.job_id + "' that came back (view " +
                                std::to_string(v->version) +
                                "): it takes the job over once a majority of its " +
                                std::to_string(voters) + " live servers and workers confirm");
    returning.clear();
    newest.reset();
}

PETREL_DECL bool manager_node::state::hold_unconfirmed(const connection_ptr& c,
                                                       const wire::message_header& h,
                                                       control_body& b) {
    if (auto it = by_conn.find(c.get()); it != by_conn.end()) {
        const auto* n = view->find(it->second);
        if (n && n->role != node_role::reader) {
            confirmed.insert(it->second);
        }
    }
    if (b.op == control_op::heartbeat || (b.op == control_op::join && b.id != no_node)) {
        return false; // answered now; a node coming back meanwhile is taken in
    }
    unconfirmed.push_back({c, h, std::move(b)});
    return true;
}

PETREL_DECL void
manager_node::state::try_confirm(std::vector<outgoing>& out,
                                 std::vector<std::function<void(std::error_code)>>& done) {
    if (ph != phase::confirming) {
        return;
    }
    if (2 * confirmed.size() > voters) {
        take_over(out, done);
    } else if (clock::now() >= confirm_deadline) {
        step_down(out, done);
    }
}

PETREL_DECL void
manager_node::state::take_over(std::vector<outgoing>& out,
                               std::vector<std::function<void(std::error_code)>>& done) {
    ph = phase::running;
    for (auto& bar : barriers) {
        bar = {};
        bar.learning = true; // which barriers the old manager released, the nodes say
    }
    const auto v = view;
    std::vector<node_id> absent;
    for (const auto& n : v->nodes) {
        if (n.role != node_role::manager && n.state == node_state::alive &&
            members.count(n.id) == 0) {
            absent.push_back(n.id);
        }
    }
    // Servers that were joining when the manager was lost report their copies
    // again; their plan is the one in the view.
    entering.clear();
    ready.clear();
    planned_at = 0;
    handing = no_node;
    if (!v->next_ring.empty()) {
        for (const auto& n : v->nodes) {
            if (n.role == node_role::server && n.state == node_state::alive &&
                v->next_ring.holds(n.id) && !v->ring.holds(n.id)) {
                entering.push_back(n.id);
            }
        }
        // Or a server was handing its partitions over: it reports its copies again.
        for (const auto& n : v->nodes) {
            if (entering.empty() && n.role == node_role::server && n.state == node_state::alive &&
                v->ring.holds(n.id) && !v->next_ring.holds(n.id)) {
                handing = n.id;
                planned_at = v->version;
            }
        }
    }
    report(log_level::warning, "took job '" + opts.job_id + "' over from its lost manager: " +
                                   std::to_string(members.size()) + " nodes came back, " +
                                   std::to_string(confirmed.size()) + " of " +
                                   std::to_string(voters) + " live servers and workers " +
                                   "confirmed (view " + std::to_string(v->version) + ")");
    confirmed.clear();
    for (const auto id : absent) {
        if (view->find(id)->state == node_state::alive) {
            fail_node(id, "it did not come back to the manager that took the job over", out, done);
        }
    }
    auto waiting = std::move(held_joins);
    held_joins.clear();
    for (auto& j : waiting) {
        on_join(j.conn, j.request, std::move(j.body), out);
    }
    auto requests = std::move(unconfirmed);
    unconfirmed.clear();
    for (auto& r : requests) {
        dispatch(r.conn, r.request, std::move(r.body), out, done);
    }
    check_finished(done);
}

PETREL_DECL void
manager_node::state::step_down(std::vector<outgoing>& out,
                               std::vector<std::function<void(std::error_code)>>& done) {
    report(log_level::warning,
           "did not take job '" + opts.job_id + "' over: only " + std::to_string(confirmed.size()) +
               " of its " + std::to_string(voters) + " live servers and workers confirmed within " +
               std::to_string(opts.heartbeat_timeout.count()) +
               " ms (another manager may have taken it over); the nodes it answered look again");
    for (const auto& [id, mem] : members) {
        closing.push_back(mem.conn);
    }
    members.clear();
    by_conn.clear();
    confirmed.clear();
    view.reset();
    returned_secret = 0;
    barriers = {};
    unnumbered.clear();
    ph = phase::standby;
    // What others asked meanwhile waits as at a standby; the answered nodes' requests go
    // with their connections.
    auto requests = std::move(unconfirmed);
    unconfirmed.clear();
    for (auto& r : requests) {
        const bool answered = std::find(closing.begin(), closing.end(), r.conn) != closing.end();
        if (!answered) {
            dispatch(r.conn, r.request, std::move(r.body), out, done);
        }
    }
}

} // namespace petrel

#endif // PETREL_CLUSTER_IMPL_MANAGER_TAKEOVER_IPP
