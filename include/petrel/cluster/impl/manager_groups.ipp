// Petrel: a manager's work for groups of nodes: barriers, nodes that went, and the
// scheduler's data sets and block schedules.
#ifndef PETREL_CLUSTER_IMPL_MANAGER_GROUPS_IPP
#define PETREL_CLUSTER_IMPL_MANAGER_GROUPS_IPP

#include <petrel/cluster/detail/manager_state.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace petrel {

// ---- barriers ---------------------------------------------------------------------------

PETREL_DECL void manager_node::state::on_barrier(const connection_ptr& c,
                                                 const wire::message_header& h, group g,
                                                 std::uint64_t seq, std::vector<outgoing>& out) {
    auto it = by_conn.find(c.get());
    const node_info* n = (it != by_conn.end() && view) ? view->find(it->second) : nullptr;
    if (!n || n->state != node_state::alive) {
        out.push_back(
            {c, refusal(h, errc::invalid_argument, "a barrier needs a live member of the job")});
        return;
    }
    if (!in_group(n->role, g)) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  n->describe() + " is not in the barrier's group")});
        return;
    }
    auto& b = barriers[index_of(g)];
    if (const auto u = unnumbered.find(n->id);
        u != unnumbered.end() && (u->second & (1u << index_of(g))) != 0) {
        seq = 0; // it joined while this manager learnt what the group passed
    }
    if (auto why = failed_in(g); !why.empty()) {
        passed_to(b, seq); // failed for everyone who asks
        out.push_back({c, refusal(h, errc::node_failed, why)});
        return;
    }
    if (seq != 0 && seq <= b.passed) {
        // Released before: the release was lost with the manager that sent it.
        out.push_back({c, barrier_release(g, h)});
        return;
    }
    if (seq != 0 && seq - 1 > b.passed) { // beyond the next (never wraps around)
        if (!b.learning) {
            out.push_back(
                {c, refusal(h, errc::invalid_argument,
                            n->describe() + " asks for barrier " + std::to_string(seq) +
                                " of its group, which has passed " + std::to_string(b.passed))});
            return;
        }
        // It passed barrier seq - 1: the old manager released it, also for those still
        // waiting for it here.
        passed_to(b, seq - 1);
        std::erase_if(b.waiting, [&](const waiting_barrier& w) {
            if (w.seq == 0 || w.seq > b.passed) {
                return false;
            }
            out.push_back({w.conn, barrier_release(g, w.request)});
            if (const auto at = by_conn.find(w.conn.get()); at != by_conn.end()) {
                b.arrived.erase(at->second);
            }
            return true;
        });
    }
    if (!b.arrived.insert(n->id).second) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  n->describe() + " is already waiting at this barrier")});
        return;
    }
    b.waiting.push_back({c, h, seq});
    try_release(g, out);
}

PETREL_DECL wire::message
manager_node::state::barrier_release(group g, const wire::message_header& h) const {
    control_body body;
    body.op = control_op::barrier;
    body.barrier_group = g;
    body.version = view->version;
    return detail::make_control(body, &h);
}

PETREL_DECL void manager_node::state::passed_to(barrier_state& b, std::uint64_t seq) noexcept {
    b.passed = std::max(b.passed, seq);
}

PETREL_DECL std::string manager_node::state::failed_in(group g) const {
    std::string why;
    for (const auto& n : view->nodes) {
        if (n.state == node_state::failed && in_group(n.role, g) && !view->replaced(n)) {
            why += (why.empty() ? "" : "; ") + n.describe() + " failed: " + n.failure;
        }
    }
    return why;
}

PETREL_DECL void manager_node::state::try_release(group g, std::vector<outgoing>& out) {
    auto& b = barriers[index_of(g)];
    if (b.waiting.empty()) {
        return;
    }
    for (const auto& n : view->nodes) {
        if (n.state == node_state::alive && in_group(n.role, g) && b.arrived.count(n.id) == 0) {
            return;
        }
    }
    for (auto& w : b.waiting) {
        out.push_back({w.conn, barrier_release(g, w.request)});
        passed_to(b, w.seq);
    }
    b.waiting.clear();
    b.arrived.clear();
    b.learning = false;
}

PETREL_DECL std::size_t manager_node::state::index_of(group g) noexcept {
    return static_cast<std::size_t>(g) - 1;
}

// ---- nodes that went --------------------------------------------------------------------

PETREL_DECL bool manager_node::state::may_depart(const node_info& n) const {
    if (n.role == node_role::reader) {
        return n.state != node_state::alive;
    }
    if (n.role == node_role::manager || n.state == node_state::alive) {
        return false;
    }
    const auto formed = n.role == node_role::server ? opts.servers : opts.workers;
    const bool holds =
        view->ring.holds(n.id) || (!view->next_ring.empty() && view->next_ring.holds(n.id));
    return n.index >= formed && !holds && (n.state == node_state::left || view->replaced(n));
}

PETREL_DECL void manager_node::state::drop_departed(clock::time_point now,
                                                    std::vector<outgoing>& out) {
    if (view->version != gone_scanned) {
        for (const auto& n : view->nodes) {
            if (may_depart(n)) {
                departed.try_emplace(n.id, now);
            }
        }
        gone_scanned = view->version;
    }
    if (departed.empty()) {
        return;
    }
    // Ids and each role's indices count on from the highest in the view: those nodes stay.
    std::set<node_id> last{view->nodes.back().id};
    for (const auto r : {node_role::server, node_role::worker, node_role::reader}) {
        const node_info* top = nullptr;
        for (const auto& n : view->nodes) {
            top = n.role == r && (!top || n.index >= top->index) ? &n : top;
        }
        if (top) {
            last.insert(top->id);
        }
    }
    std::set<node_id> drop;
    for (auto it = departed.begin(); it != departed.end();) {
        const auto* n = view->find(it->first);
        if (!n) {
            it = departed.erase(it); // not in the view any more
            continue;
        }
        if (now - it->second >= opts.departed_grace && last.count(n->id) == 0 && may_depart(*n)) {
            drop.insert(n->id);
        }
        ++it;
    }
    if (drop.empty()) {
        return;
    }
    auto v = std::make_shared<membership_view>(*view);
    std::erase_if(v->nodes, [&](const node_info& n) { return drop.count(n.id) != 0; });
    ++v->version;
    view = v;
    gone_scanned = v->version;
    for (const auto id : drop) {
        departed.erase(id);
    }
    broadcast(out);
    report(log_level::info, std::to_string(drop.size()) +
                                " nodes that went are left out of the view from version " +
                                std::to_string(v->version));
}

PETREL_DECL std::uint32_t manager_node::state::next_index(node_role r) const {
    std::uint32_t next = 0;
    for (const auto& n : view->nodes) {
        if (n.role == r) {
            next = std::max(next, n.index + 1);
        }
    }
    return next;
}

// ---- the scheduler ----------------------------------------------------------------------

PETREL_DECL void manager_node::state::reschedule(membership_view& v, const std::string& g) {
    const auto live = v.live_group(g);
    for (auto& d : v.schedule.data) {
        if (d.set.group == g) {
            d.rebalance(live);
        }
    }
}

PETREL_DECL void manager_node::state::log_shares(const std::string& g) {
    for (const auto& d : view->schedule.data) {
        if (d.set.group != g) {
            continue;
        }
        // One pass over the chunks (not a share per member): examples or records
        // and chunks held by each owner.
        std::map<node_id, std::pair<std::uint64_t, std::uint32_t>> held;
        for (std::uint32_t c = 0; c < d.owners.size(); ++c) {
            const auto [b, e] = d.set.chunk(c);
            auto& h = held[d.owners[c]];
            h.first += e - b;
            ++h.second;
        }
        std::string text =
            "data set '" + d.set.name + "' (view " + std::to_string(view->version) + "):";
        for (const auto& [id, h] : held) {
            text += " node " + (id == no_node ? std::string("none") : std::to_string(id)) + " " +
                    std::to_string(h.first) + (d.set.files.empty() ? " examples" : " records") +
                    " in " + std::to_string(h.second) + " chunks;";
        }
        report(log_level::info, text);
    }
}

PETREL_DECL const node_info* manager_node::state::group_member(const connection_ptr& c) const {
    auto it = by_conn.find(c.get());
    const node_info* n = (it != by_conn.end() && view) ? view->find(it->second) : nullptr;
    if (!n || n->state != node_state::alive ||
        (n->role != node_role::worker && n->role != node_role::reader)) {
        return nullptr;
    }
    return n;
}

PETREL_DECL void manager_node::state::on_assign(const connection_ptr& c,
                                                const wire::message_header& h,
                                                std::optional<data_set> d,
                                                std::vector<outgoing>& out) {
    const node_info* n = group_member(c);
    if (!n) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "only a live worker or reader can define data sets")});
        return;
    }
    std::string why = d ? d->check() : "an assign request carries a data set";
    if (!why.empty()) {
        out.push_back({c, refusal(h, errc::invalid_argument, why)});
        return;
    }
    if (const auto* known = view->schedule.find(d->name)) {
        if (!(known->set == *d)) {
            out.push_back(
                {c, refusal(h, errc::invalid_argument,
                            "data set '" + d->name + "' is already defined differently")});
            return;
        }
    } else if (view->schedule.data.size() >= work_schedule::max_data_sets) {
        out.push_back(
            {c, refusal(h, errc::invalid_argument,
                        "a job holds at most " + std::to_string(work_schedule::max_data_sets) +
                            " data sets")});
        return;
    } else {
        auto v = std::make_shared<membership_view>(*view);
        data_assignment a;
        a.set = std::move(*d);
        a.rebalance(v->live_group(a.set.group));
        const std::string g = a.set.group;
        v->schedule.data.push_back(std::move(a));
        ++v->version;
        const node_id self = n->id; // n points into the view being replaced
        view = v;
        broadcast(out, self);
        log_shares(g);
    }
    control_body reply;
    reply.op = control_op::assign;
    reply.version = view->version;
    reply.view = *view;
    out.push_back({c, detail::make_control(reply, &h)});
}

PETREL_DECL void manager_node::state::on_round(const connection_ptr& c,
                                               const wire::message_header& h,
                                               std::optional<block_schedule> def,
                                               std::vector<outgoing>& out) {
    const node_info* n = group_member(c);
    if (!n) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "only a live worker or reader takes part in rounds")});
        return;
    }
    std::string why = def ? def->check() : "a round request carries its block schedule";
    if (why.empty() && def->group != n->group) {
        why = n->describe() + " is not in group '" + def->group + "' of block schedule '" +
              def->name + "'";
    }
    if (!why.empty()) {
        out.push_back({c, refusal(h, errc::invalid_argument, why)});
        return;
    }
    auto it = schedules.find(def->name);
    if (it == schedules.end()) {
        if (schedules.size() >= work_schedule::max_data_sets) {
            out.push_back(
                {c, refusal(h, errc::invalid_argument,
                            "a job holds at most " + std::to_string(work_schedule::max_data_sets) +
                                " block schedules")});
            return;
        }
        it = schedules.emplace(def->name, schedule_state{}).first;
        it->second.def = *def;
    } else if (!(it->second.def == *def)) {
        out.push_back(
            {c, refusal(h, errc::invalid_argument,
                        "block schedule '" + def->name + "' is already defined differently")});
        return;
    }
    auto& st = it->second;
    if (st.next >= st.def.rounds) {
        round_assignment done;
        done.schedule = st.def.name;
        done.round = st.def.rounds;
        done.finished = true;
        done.version = view->version;
        done.self = n->id;
        out.push_back({c, round_reply(h, std::move(done))});
        return;
    }
    if (!st.waiting.emplace(n->id, waiting_barrier{c, h}).second) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  n->describe() + " is already waiting for round " +
                                      std::to_string(st.next) + " of '" + def->name + "'")});
        return;
    }
    try_release_round(st, out);
}

PETREL_DECL wire::message manager_node::state::round_reply(const wire::message_header& h,
                                                           round_assignment r) const {
    control_body b;
    b.op = control_op::round;
    b.version = view->version;
    b.round = std::move(r);
    return detail::make_control(b, &h);
}

PETREL_DECL void manager_node::state::try_release_round(schedule_state& st,
                                                        std::vector<outgoing>& out) {
    if (st.waiting.empty() || st.next >= st.def.rounds) {
        return;
    }
    const auto live = view->live_group(st.def.group);
    for (auto id : live) {
        if (st.waiting.count(id) == 0) {
            return;
        }
    }
    round_assignment r;
    r.schedule = st.def.name;
    r.round = st.next++;
    r.version = view->version;
    r.blocks = round_assignment::rotate(st.def.blocks, r.round, live);
    std::string text = "round " + std::to_string(r.round) + " of '" + st.def.name + "':";
    for (const auto& [id, b] : r.blocks) {
        text += " node " + std::to_string(id) + " → " +
                (b == no_block ? std::string("none") : "block " + std::to_string(b)) + ";";
    }
    report(log_level::info, text);
    for (auto& [id, w] : st.waiting) {
        if (std::binary_search(live.begin(), live.end(), id)) {
            auto mine = r;
            mine.self = id;
            out.push_back({w.conn, round_reply(w.request, std::move(mine))});
        }
    }
    st.waiting.clear();
    st.history.push_back(std::move(r));
    if (st.history.size() > 256) {
        st.history.pop_front();
    }
}

PETREL_DECL void manager_node::state::group_changed(const std::string& g,
                                                    std::vector<outgoing>& out) {
    log_shares(g);
    for (auto& [name, st] : schedules) {
        if (st.def.group == g) {
            std::erase_if(st.waiting, [&](const auto& w) {
                const auto* n = view->find(w.first);
                return !n || n->state != node_state::alive;
            });
            try_release_round(st, out);
        }
    }
}

} // namespace petrel

#endif // PETREL_CLUSTER_IMPL_MANAGER_GROUPS_IPP
