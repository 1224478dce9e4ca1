// Petrel: the manager: its interface's calls; joins and forming the job, heartbeats,
// leaving, failures, the end of the job and the clock.
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
    switch (b.op) {
    case control_op::join:
        on_join(c, h, std::move(b), out, done);
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
        retired.erase(c.get());
        auto it = by_conn.find(c.get());
        if (it == by_conn.end() || ph == phase::finished) {
            return; // unknown, or the manager itself is shutting down
        }
        const node_id id = it->second;
        by_conn.erase(it);
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

PETREL_DECL void
manager_node::state::on_join(const connection_ptr& c, const wire::message_header& h, control_body b,
                             std::vector<outgoing>& out,
                             std::vector<std::function<void(std::error_code)>>& done) {
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
        on_return(c, h, std::move(b), out, done);
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
    std::uint32_t index = 0;
    for (const auto& n : v->nodes) {
        index += n.role == b.role ? 1 : 0;
    }
    if (b.role == node_role::reader) {
        index = next_reader_index(); // readers that went may have left the view
    }
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
    std::error_code ec;
    {
        std::lock_guard lock(mutex);
        lines.swap(notes);
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
            try_take_over(out, done);
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
            drop_gone_readers(now, out);
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

#include <petrel/cluster/impl/manager_groups.ipp>
#include <petrel/cluster/impl/manager_servers.ipp>
#include <petrel/cluster/impl/manager_takeover.ipp>

#endif // PETREL_CLUSTER_IMPL_MANAGER_NODE_IPP
