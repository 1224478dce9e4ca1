// Petrel: the manager: its interface's calls, its messages, joins and forming the job.
#ifndef PETREL_CLUSTER_IMPL_MANAGER_NODE_IPP
#define PETREL_CLUSTER_IMPL_MANAGER_NODE_IPP

#include <petrel/cluster/detail/manager_state.hpp>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace petrel {

PETREL_DECL manager_node::manager_node(any_transport transport, manager_options opts)
    : transport_(std::move(transport)), state_(std::make_shared<state>(transport_)) {
    if (opts.servers == 0 || opts.workers == 0) {
        throw std::invalid_argument("petrel::manager_node: a job needs at least one server "
                                    "and one worker");
    }
    if (opts.ring.replicas >= opts.servers) {
        throw std::invalid_argument("petrel::manager_node: " + std::to_string(opts.ring.replicas) +
                                    " replicas need more servers than " +
                                    std::to_string(opts.servers));
    }
    {
        std::vector<node_id> ids(opts.ring.replicas + 1);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            ids[i] = static_cast<node_id>(i + 1);
        }
        ring::balanced(opts.ring, ids); // checks the ring options
    }
    if (std::uint64_t{opts.ring.partitions} * (opts.ring.replicas + 1) * sizeof(node_id) >
        wire::max_control_bytes / 2) {
        throw std::invalid_argument("petrel::manager_node: the ring's owner table would not "
                                    "fit in a membership view: use fewer partitions");
    }
    state_->opts = std::move(opts);
    state_->log = transport_.options().log;
}

PETREL_DECL manager_node::~manager_node() {
    close();
}

PETREL_DECL std::string manager_node::listen(std::string_view address) {
    std::weak_ptr<state> weak = state_;
    connection_handlers h;
    h.on_message = [weak](const connection_ptr& c, wire::message&& m) {
        if (auto s = weak.lock()) {
            s->on_message(c, std::move(m));
        }
    };
    h.on_close = [weak](const connection_ptr& c, std::error_code) {
        if (auto s = weak.lock()) {
            s->on_close(c);
        }
    };
    state_->start(); // joins are accepted from the first connection on
    std::string bound = transport_.listen(address, std::move(h));
    state_->set_address(bound);
    return bound;
}

PETREL_DECL std::shared_ptr<const membership_view> manager_node::view() const {
    std::lock_guard lock(state_->mutex);
    return state_->view;
}

PETREL_DECL void manager_node::start_wait_finished(std::function<void(std::error_code)> done) {
    state_->add_waiter(std::move(done));
}

PETREL_DECL std::vector<round_assignment> manager_node::rounds(std::string_view name) const {
    std::lock_guard lock(state_->mutex);
    auto it = state_->schedules.find(std::string(name));
    if (it == state_->schedules.end()) {
        return {};
    }
    return {it->second.history.begin(), it->second.history.end()};
}

PETREL_DECL std::string manager_node::failure() const {
    std::lock_guard lock(state_->mutex);
    return state_->failure;
}

PETREL_DECL void manager_node::close() {
    state_->shut_down();
    transport_.close();
}

// ---- the state --------------------------------------------------------------------------

PETREL_DECL manager_node::state::state(const any_transport& t)
    : transport(t), timer(t.get_executor()) {}

PETREL_DECL std::uint64_t manager_node::state::random_secret() {
    std::random_device rd;
    const std::uint64_t hi = rd();
    const std::uint64_t lo = rd();
    return ((hi << 32) | lo) | 1; // never 0 (no secret)
}

PETREL_DECL node_key manager_node::state::random_key() {
    return {random_secret(), random_secret()}; // never all zero (no key)
}

PETREL_DECL void manager_node::state::say_now(log_level level, const std::string& text) const {
    if (log) {
        log(level, "petrel manager: " + text);
    }
}

PETREL_DECL void manager_node::state::report(log_level level, const std::string& text) {
    notes.emplace_back(level, "petrel manager: " + text);
}

PETREL_DECL void manager_node::state::start() {
    {
        std::lock_guard lock(mutex);
        if (ph != phase::idle) {
            return;
        }
        ph = opts.take_over ? phase::standby : phase::registering;
        startup_deadline = clock::now() + opts.startup_timeout;
    }
    arm();
}

PETREL_DECL void manager_node::state::set_address(const std::string& bound) {
    std::lock_guard lock(mutex);
    address = bound;
}

PETREL_DECL void manager_node::state::add_waiter(std::function<void(std::error_code)> w) {
    std::unique_lock lock(mutex);
    if (ph == phase::finished) {
        auto ec = result;
        lock.unlock();
        w(ec);
        return;
    }
    waiters.push_back(std::move(w));
}

PETREL_DECL void manager_node::state::shut_down() {
    std::vector<std::function<void(std::error_code)>> ws;
    {
        std::lock_guard lock(mutex);
        if (ph != phase::finished) {
            ph = phase::finished;
            result = make_error_code(errc::shut_down);
        }
        ws.swap(waiters);
        timer.cancel();
    }
    for (auto& w : ws) {
        w(result);
    }
}

// ---- messages ---------------------------------------------------------------------------

PETREL_DECL void manager_node::state::on_message(const connection_ptr& c, wire::message&& m) {
    if (m.header.kind != wire::message_kind::control) {
        say_now(log_level::warning, "closing connection with " + c->remote_address() +
                                        ": the manager only takes control messages");
        c->close();
        return;
    }
    auto body = detail::read_control(m);
    if (!body) {
        say_now(log_level::warning,
                "closing connection with " + c->remote_address() + ": malformed control message");
        c->close();
        return;
    }
    std::vector<outgoing> out;
    std::vector<std::function<void(std::error_code)>> done;
    {
        std::lock_guard lock(mutex);
        if (c->peer_access() == access::read_only && !detail::read_only_may_send(*body)) {
            refuse_logged(c, m.header, "a control message",
                          "a reader's credential joins as a new reader, sends heartbeats and "
                          "leaves; nothing else",
                          out);
        } else {
            dispatch(c, m.header, std::move(*body), out, done);
        }
    }
    flush(out, done);
}

PETREL_DECL void
manager_node::state::dispatch(const connection_ptr& c, const wire::message_header& h,
                              control_body b, std::vector<outgoing>& out,
                              std::vector<std::function<void(std::error_code)>>& done) {
    if (auto it = by_conn.find(c.get()); it != by_conn.end()) {
        if (auto mem = members.find(it->second); mem != members.end()) {
            mem->second.last_seen = clock::now();
        }
    }
    if (ph == phase::confirming) {
        const bool held = hold_unconfirmed(c, h, b);
        try_confirm(out, done); // handles what it held once confirmed
        if (held) {
            return;
        }
    }
    switch (b.op) {
    case control_op::join:
        on_join(c, h, std::move(b), out);
        break;
    case control_op::heartbeat:
        on_heartbeat(c, h, out);
        break;
    case control_op::barrier:
        on_barrier(c, h, b.barrier_group, b.barrier_seq, out);
        break;
    case control_op::leave:
        on_leave(c, h, b.text, out, done);
        break;
    case control_op::retire:
        on_retire(c, h, out, done);
        break;
    case control_op::ready:
        on_ready(c, h, b.version, out);
        break;
    case control_op::assign:
        on_assign(c, h, std::move(b.data), out);
        break;
    case control_op::round:
        on_round(c, h, std::move(b.blocks), out);
        break;
    case control_op::unreachable:
        on_unreachable(c, h, b.id, b.text, out);
        break;
    case control_op::view:
        out.push_back({c, refusal(h, errc::bad_message_kind, "nodes do not send views")});
        break;
    }
}

PETREL_DECL void manager_node::state::on_close(const connection_ptr& c) {
    std::vector<outgoing> out;
    std::vector<std::function<void(std::error_code)>> done;
    {
        std::lock_guard lock(mutex);
        std::erase_if(joins, [&](const joining& j) { return j.conn == c; });
        std::erase_if(early_readers, [&](const joining& j) { return j.conn == c; });
        std::erase_if(held_joins, [&](const joining& j) { return j.conn == c; });
        std::erase_if(returning, [&](const auto& r) { return r.second.conn == c; });
        std::erase_if(unconfirmed, [&](const joining& r) { return r.conn == c; });
        retired.erase(c.get());
        auto it = by_conn.find(c.get());
        if (it == by_conn.end() || ph == phase::finished) {
            return; // unknown, or the manager itself is shutting down
        }
        const node_id id = it->second;
        by_conn.erase(it);
        if (ph == phase::confirming) {
            // It confirms nothing now; if the takeover is confirmed, it has not come back.
            members.erase(id);
            confirmed.erase(id);
            return;
        }
        if (members.count(id) != 0) {
            fail_node(id, "its connection to the manager was lost", out, done);
        }
    }
    flush(out, done);
}

PETREL_DECL wire::message manager_node::state::refusal(const wire::message_header& request, errc e,
                                                       std::string text) {
    control_body b;
    b.text = std::move(text);
    return detail::make_control(b, &request, make_error_code(e));
}

// ---- joins and forming the job ----------------------------------------------------------

PETREL_DECL void manager_node::state::on_join(const connection_ptr& c,
                                              const wire::message_header& h, control_body b,
                                              std::vector<outgoing>& out) {
    if (b.job_id != opts.job_id) {
        // The refusal does not name this job: the id is not told to whoever asks.
        const auto asked = printable(b.job_id, detail::max_logged_id_bytes);
        report(log_level::warning,
               c->remote_address() + " asked to join job '" + asked + "': refused");
        out.push_back(
            {c, refusal(h, errc::job_mismatch,
                        "the manager at " + address + " does not run job '" + asked + "'")});
        return;
    }
    if (b.id == no_node && (b.role == node_role::server || b.role == node_role::worker) &&
        !rank_shown(c, h, b.rank, out)) {
        return;
    }
    if (b.declared) {
        if (!declared) {
            declared = b.declared;
        } else if (auto why = first_difference(*b.declared, *declared); !why.empty()) {
            const std::string who = std::string(to_string(b.role)) + " rank " +
                                    std::to_string(b.rank) + " index " + std::to_string(b.local) +
                                    " at " + c->remote_address();
            report(log_level::error, who + " refused: " + why);
            if (declaration_refused.empty()) {
                declaration_refused = who + " was refused: " + why;
            }
            out.push_back({c, refusal(h, errc::declaration_mismatch, why)});
            return;
        }
    }
    if (b.id != no_node) {
        on_return(c, h, std::move(b), out);
        return;
    }
    if (ph == phase::standby) {
        if (held_joins.size() >= detail::max_view_nodes) {
            out.push_back({c, refusal(h, errc::job_full,
                                      "this manager holds no more joins until it "
                                      "takes the job over")});
            return;
        }
        held_joins.push_back({c, h, std::move(b)}); // once the job is taken over
        return;
    }
    if (b.role == node_role::manager || (b.role == node_role::server && b.address.empty())) {
        out.push_back({c, refusal(h, errc::invalid_argument,
                                  "a joining node must be a server (with an address), "
                                  "a worker or a reader")});
        return;
    }
    if (b.role == node_role::reader) {
        if (b.worker_group.empty() || b.worker_group == training_group ||
            b.worker_group.size() > 256) {
            out.push_back({c, refusal(h, errc::invalid_argument,
                                      "a reader names its read-only group (1 to 256 "
                                      "bytes, not '" +
                                          std::string(training_group) + "')")});
            return;
        }
        if (live_count(node_role::reader) + early_readers.size() >= opts.max_readers) {
            out.push_back({c, refusal(h, errc::job_full,
                                      "the job has " + std::to_string(opts.max_readers) +
                                          " readers attached (manager_options::max_readers)")});
            return;
        }
        if (ph == phase::running) {
            admit(c, h, std::move(b), out);
        } else if (ph == phase::registering) {
            early_readers.push_back({c, h, std::move(b)});
        } else {
            out.push_back({c, refusal(h, errc::shut_down, "the job is over")});
        }
        return;
    }
    if (b.role == node_role::worker && ph == phase::running &&
        live_count(node_role::worker) < opts.max_workers) {
        admit(c, h, std::move(b), out);
        return;
    }
    if (b.role == node_role::server && ph == phase::running &&
        live_count(node_role::server) < opts.max_servers) {
        admit(c, h, std::move(b), out);
        return;
    }
    // A node that registers again (its first connection dropped and it retried
    // before the manager saw the drop) replaces its earlier registration.
    for (auto& j : joins) {
        if (j.conn == c) {
            out.push_back(
                {c, refusal(h, errc::invalid_argument, "a connection registers one node")});
            return;
        }
    }
    for (auto& j : joins) {
        if (j.body.role == b.role && j.body.rank == b.rank && j.body.local == b.local) {
            out.push_back({j.conn, refusal(j.request, errc::invalid_argument,
                                           "replaced by a later registration of " +
                                               std::string(to_string(b.role)) + " rank " +
                                               std::to_string(b.rank) + " index " +
                                               std::to_string(b.local))});
            j = {c, h, std::move(b)};
            return;
        }
    }
    const std::uint32_t expected = b.role == node_role::server ? opts.servers : opts.workers;
    const auto same_role = std::count_if(joins.begin(), joins.end(),
                                         [&](const joining& j) { return j.body.role == b.role; });
    if (ph != phase::registering || static_cast<std::uint32_t>(same_role) >= expected) {
        out.push_back(
            {c, refusal(h, errc::job_full,
                        "job '" + opts.job_id + "' already has its " + std::to_string(expected) +
                            " " + std::string(to_string(b.role)) + "s")});
        return;
    }
    joins.push_back({c, h, std::move(b)});
    const auto servers = std::count_if(joins.begin(), joins.end(), [](const joining& j) {
        return j.body.role == node_role::server;
    });
    if (static_cast<std::uint32_t>(servers) == opts.servers &&
        joins.size() == std::size_t{opts.servers} + opts.workers) {
        form_job(out);
    }
}

PETREL_DECL void manager_node::state::form_job(std::vector<outgoing>& out) {
    std::stable_sort(joins.begin(), joins.end(), [](const joining& a, const joining& b) {
        return std::tuple(a.body.role, a.body.rank, a.body.local) <
               std::tuple(b.body.role, b.body.rank, b.body.local);
    });
    auto v = std::make_shared<membership_view>();
    v->job_id = opts.job_id;
    v->version = 1;
    v->nodes.push_back({0, node_role::manager, node_state::alive, address, 0, 0, {}, {}});
    std::vector<node_id> servers;
    std::uint32_t index[2] = {0, 0};
    const auto now = clock::now();
    for (std::size_t i = 0; i < joins.size(); ++i) {
        const auto& j = joins[i];
        const auto id = static_cast<node_id>(i + 1);
        const bool server = j.body.role == node_role::server;
        v->nodes.push_back({id,
                            j.body.role,
                            node_state::alive,
                            server ? j.body.address : std::string{},
                            j.body.rank,
                            index[server ? 0 : 1]++,
                            {},
                            server ? std::string{} : std::string(training_group)});
        if (server) {
            servers.push_back(id);
        }
        members[id] = {j.conn, now, random_key()};
        by_conn[j.conn.get()] = id;
    }
    v->ring = ring::balanced(opts.ring, servers);
    v->drop_failed_workers = opts.drop_failed_workers;
    view = v;
    ph = phase::running;
    for (std::size_t i = 0; i < joins.size(); ++i) {
        control_body b;
        b.op = control_op::join;
        b.id = static_cast<node_id>(i + 1);
        b.version = v->version;
        b.view = *v;
        b.key = members[b.id].key; // only this node is sent its key
        if (joins[i].body.role == node_role::server) {
            b.secret = secret;
        }
        out.push_back({joins[i].conn, detail::make_control(b, &joins[i].request)});
    }
    report(log_level::info, "job '" + opts.job_id + "' formed: " + std::to_string(opts.servers) +
                                " servers, " + std::to_string(opts.workers) + " workers");
    joins.clear();
    auto early = std::move(early_readers);
    early_readers.clear();
    for (auto& r : early) {
        admit(r.conn, r.request, std::move(r.body), out);
    }
}

PETREL_DECL std::size_t manager_node::state::live_count(node_role r) const {
    return view ? view->count(r, node_state::alive) : 0;
}

PETREL_DECL void manager_node::state::admit(const connection_ptr& c, const wire::message_header& h,
                                            control_body b, std::vector<outgoing>& out) {
    for (const auto& [id, mem] : members) {
        if (mem.conn == c) {
            out.push_back(
                {c, refusal(h, errc::invalid_argument, "a connection registers one node")});
            return;
        }
    }
    if (view->nodes.size() >= detail::max_view_nodes) {
        out.push_back({c, refusal(h, errc::job_full, "the view holds no more nodes")});
        return;
    }
    auto v = std::make_shared<membership_view>(*view);
    const node_id id = v->nodes.back().id + 1;
    const std::uint32_t index = next_index(b.role);
    const bool server = b.role == node_role::server;
    const std::string g = server                        ? std::string{}
                          : b.role == node_role::reader ? b.worker_group
                                                        : std::string(training_group);
    v->nodes.push_back(
        {id, b.role, node_state::alive, server ? b.address : std::string{}, b.rank, index, {}, g});
    ++v->version;
    members[id] = {c, clock::now(), random_key()};
    by_conn[c.get()] = id;
    if (server) {
        entering.push_back(id);
        plan_joins(*v);
    } else {
        reschedule(*v, g);
    }
    view = v;
    control_body reply;
    reply.op = control_op::join;
    reply.id = id;
    reply.version = v->version;
    reply.view = *v;
    reply.key = members[id].key; // only this node is sent its key
    std::uint8_t guessed = 0;
    for (std::size_t g = 0; g < barriers.size(); ++g) {
        reply.passed_barriers[g] = barriers[g].passed; // it numbers its barriers on from them
        guessed |= barriers[g].learning ? std::uint8_t(1u << g) : std::uint8_t{0};
    }
    if (guessed != 0 && b.role != node_role::reader) {
        unnumbered[id] = guessed;
    }
    if (server) {
        reply.secret = secret;
    }
    out.push_back({c, detail::make_control(reply, &h)});
    report(log_level::info,
           v->find(id)->describe() +
               (b.role == node_role::reader ? " attached to the running job"
                : server ? " joined the running job; its partitions are being copied to it"
                         : " joined the running job"));
    broadcast(out, id);
    if (!server) {
        log_shares(g);
    }
}

} // namespace petrel

#include <petrel/cluster/impl/manager_groups.ipp>
#include <petrel/cluster/impl/manager_liveness.ipp>
#include <petrel/cluster/impl/manager_servers.ipp>
#include <petrel/cluster/impl/manager_takeover.ipp>

#endif // PETREL_CLUSTER_IMPL_MANAGER_NODE_IPP
