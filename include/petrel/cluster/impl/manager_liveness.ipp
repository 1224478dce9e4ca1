// Petrel: a manager keeping its job's view current: heartbeats, leaving, failures, the end
// of the job, and the clock that finds silent nodes.
#ifndef PETREL_CLUSTER_IMPL_MANAGER_LIVENESS_IPP
#define PETREL_CLUSTER_IMPL_MANAGER_LIVENESS_IPP

#include <petrel/cluster/detail/manager_state.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace petrel {

// ---- heartbeats and leaving -------------------------------------------------------------

PETREL_DECL void manager_node::state::on_heartbeat(const connection_ptr& c,
                                                   const wire::message_header& h,
                                                   std::vector<outgoing>& out) {
    auto it = by_conn.find(c.get());
    if (it == by_conn.end() && ph == phase::running) {
        // Its first connection dropped, so the node was declared failed: say so,
        // rather than let it carry on unaware.
        out.push_back({c, refusal(h, errc::node_failed,
                                  "not a live member of job '" + opts.job_id +
                                      "': its connection to the manager was lost")});
        return;
    }
    if (it == by_conn.end() && (ph == phase::standby || ph == phase::confirming)) {
        // A node this manager does not hold (it gave a proposed takeover back and closed
        // the node's connection, which the node's link made again): it looks again.
        out.push_back(
            {c, refusal(h, errc::timed_out,
                        "the manager at " + address + " does not run job '" + opts.job_id +
                            "': register again with the one that took it over")});
        return;
    }
    if (it != by_conn.end() && view) {
        const auto* n = view->find(it->second);
        if (n && n->state == node_state::failed) {
            out.push_back({c, refusal(h, errc::node_failed,
                                      n->describe() + " was declared failed: " + n->failure)});
            return;
        }
    }
    control_body b;
    b.op = control_op::heartbeat;
    b.version = view ? view->version : 0;
    out.push_back({c, detail::make_control(b, &h)});
}

PETREL_DECL void
manager_node::state::on_leave(const connection_ptr& c, const wire::message_header& h,
                              const std::string& failure, std::vector<outgoing>& out,
                              std::vector<std::function<void(std::error_code)>>& done) {
    auto it = by_conn.find(c.get());
    if (it == by_conn.end() || members.count(it->second) == 0) {
        out.push_back(
            {c, refusal(h, errc::invalid_argument, "only a live member of the job can leave it")});
        return;
    }
    const node_id id = it->second;
    if (!failure.empty()) {
        by_conn.erase(it);
        fail_node(id, detail::one_line(failure), out, done);
        control_body b;
        b.op = control_op::leave;
        b.version = view->version; // the view that says it failed
        out.push_back({c, detail::make_control(b, &h)});
        return;
    }
    members.erase(id);
    by_conn.erase(it);
    auto v = std::make_shared<membership_view>(*view);
    std::string g;
    for (auto& n : v->nodes) {
        if (n.id == id) {
            n.state = node_state::left;
            g = n.group;
        }
    }
    ++v->version;
    if (!g.empty()) {
        reschedule(*v, g);
    }
    if (handing != no_node && (id == handing || v->next_ring.holds(id))) {
        handing = no_node; // the plan no longer holds: the server may ask again
        v->next_ring = ring{};
        plan_joins(*v);
    } else if (is_joining(id)) {
        plan_joins(*v);
    }
    view = v;
    control_body b;
    b.op = control_op::leave;
    b.version = v->version;
    out.push_back({c, detail::make_control(b, &h)});
    broadcast(out);
    for (auto bg : {group::all, group::servers, group::workers}) {
        try_release(bg, out);
    }
    if (!g.empty()) {
        report(log_level::info, view->find(id)->describe() + " left");
        group_changed(g, out);
    }
    check_finished(done);
}

// ---- failures, the end ------------------------------------------------------------------

PETREL_DECL void
manager_node::state::fail_node(node_id id, const std::string& why, std::vector<outgoing>& out,
                               std::vector<std::function<void(std::error_code)>>& done) {
    members.erase(id);
    auto v = std::make_shared<membership_view>(*view);
    std::string described;
    std::string g;
    node_role role = node_role::worker;
    for (auto& n : v->nodes) {
        if (n.id == id) {
            n.state = node_state::failed;
            n.failure = why;
            described = n.describe();
            role = n.role;
            g = n.group;
        }
    }
    ++v->version;
    if (!g.empty()) {
        reschedule(*v, g);
    }
    std::string failover;
    if (role == node_role::server && handing != no_node) {
        handing = no_node; // the plan no longer holds: the server may ask again
        v->next_ring = ring{};
    }
    if (role == node_role::server && !v->ring.empty()) {
        failover = fail_over(*v, id);
    }
    if (role == node_role::server) {
        plan_joins(*v);
    }
    view = v;
    report(role == node_role::reader ? log_level::warning : log_level::error,
           described + " failed: " + why + failover);
    broadcast(out);
    if (!g.empty()) {
        group_changed(g, out);
    }
    const bool replaced = view->replaced(*view->find(id));
    for (auto bg : {group::all, group::servers, group::workers}) {
        if (!in_group(role, bg)) {
            continue;
        }
        if (replaced) {
            try_release(bg, out); // its keys live on: the others need not wait for it
            continue;
        }
        auto& b = barriers[index_of(bg)];
        for (auto& w : b.waiting) {
            out.push_back(
                {w.conn, refusal(w.request, errc::node_failed, described + " failed: " + why)});
            passed_to(b, w.seq);
        }
        b.waiting.clear();
        b.arrived.clear();
    }
    check_finished(done);
}

PETREL_DECL void manager_node::state::broadcast(std::vector<outgoing>& out, node_id skip) {
    control_body b;
    b.op = control_op::view;
    b.version = view->version;
    b.view = *view;
    auto m = detail::make_control(b);
    for (const auto& [id, mem] : members) {
        if (id != skip) {
            out.push_back({mem.conn, m});
        }
    }
}

PETREL_DECL void
manager_node::state::check_finished(std::vector<std::function<void(std::error_code)>>& done) {
    if (ph != phase::running) {
        return;
    }
    for (const auto& [id, mem] : members) {
        if (const auto* n = view->find(id); n && n->role != node_role::reader) {
            return; // readers do not keep a job alive
        }
    }
    failure = view->failures();
    finish(failure.empty() ? std::error_code{} : make_error_code(errc::node_failed), done);
}

PETREL_DECL void
manager_node::state::finish(std::error_code ec,
                            std::vector<std::function<void(std::error_code)>>& done) {
    ph = phase::finished;
    result = ec;
    done.swap(waiters);
    timer.cancel();
}

PETREL_DECL void
manager_node::state::flush(std::vector<outgoing>& out,
                           std::vector<std::function<void(std::error_code)>>& done) {
    std::vector<std::pair<log_level, std::string>> lines;
    std::vector<connection_ptr> to_close;
    std::error_code ec;
    {
        std::lock_guard lock(mutex);
        lines.swap(notes);
        to_close.swap(closing);
        ec = result;
    }
    for (const auto& [level, text] : lines) {
        if (log) {
            log(level, text);
        }
    }
    for (auto& o : out) {
        o.conn->send(std::move(o.message));
    }
    for (const auto& c : to_close) {
        c->close();
    }
    for (auto& d : done) {
        d(ec);
    }
}

// ---- the clock --------------------------------------------------------------------------

PETREL_DECL void manager_node::state::arm() {
    const auto tick = std::clamp<clock::duration>(
        opts.heartbeat_timeout / 8, std::chrono::milliseconds(5), std::chrono::milliseconds(250));
    timer.expires_after(tick);
    std::weak_ptr<state> weak = weak_from_this();
    timer.async_wait([weak](std::error_code ec) {
        if (auto s = weak.lock(); s && !ec) {
            s->on_tick();
        }
    });
}

PETREL_DECL void manager_node::state::on_tick() {
    std::vector<outgoing> out;
    std::vector<std::function<void(std::error_code)>> done;
    {
        std::lock_guard lock(mutex);
        const auto now = clock::now();
        if (ph == phase::registering && now >= startup_deadline) {
            startup_failed(out, done);
        } else if (ph == phase::standby) {
            try_take_over(out);
        } else if (ph == phase::confirming) {
            try_confirm(out, done);
        } else if (ph == phase::running) {
            std::vector<node_id> silent;
            for (const auto& [id, mem] : members) {
                if (now - mem.last_seen > opts.heartbeat_timeout) {
                    silent.push_back(id);
                }
            }
            const std::string why =
                "no heartbeat for " + std::to_string(opts.heartbeat_timeout.count()) + " ms";
            for (auto id : silent) {
                if (members.count(id) != 0) {
                    fail_node(id, why, out, done);
                }
            }
            drop_departed(now, out);
        }
        if (ph != phase::finished) {
            arm();
        }
    }
    flush(out, done);
}

PETREL_DECL void
manager_node::state::startup_failed(std::vector<outgoing>& out,
                                    std::vector<std::function<void(std::error_code)>>& done) {
    std::uint32_t servers = 0;
    for (const auto& j : joins) {
        servers += j.body.role == node_role::server ? 1 : 0;
    }
    const auto workers = static_cast<std::uint32_t>(joins.size()) - servers;
    failure = "only " + std::to_string(servers) + " of " + std::to_string(opts.servers) +
              " servers and " + std::to_string(workers) + " of " + std::to_string(opts.workers) +
              " workers registered within " + std::to_string(opts.startup_timeout.count()) + " ms";
    if (!declaration_refused.empty()) {
        failure += " (" + declaration_refused + ")";
    }
    report(log_level::error, "job '" + opts.job_id + "' did not start: " + failure);
    for (const auto& j : joins) {
        out.push_back(
            {j.conn, refusal(j.request, errc::timed_out, "the job did not start: " + failure)});
    }
    for (const auto& r : early_readers) {
        out.push_back(
            {r.conn, refusal(r.request, errc::timed_out, "the job did not start: " + failure)});
    }
    joins.clear();
    early_readers.clear();
    finish(make_error_code(errc::timed_out), done);
}

} // namespace petrel

#endif // PETREL_CLUSTER_IMPL_MANAGER_LIVENESS_IPP
