// Petrel: a member: its interface's calls; joining, views, heartbeats, calls to the manager
// and leaving.
#ifndef PETREL_CLUSTER_IMPL_MEMBER_IPP
#define PETREL_CLUSTER_IMPL_MEMBER_IPP

#include <petrel/cluster/detail/member_state.hpp>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

namespace petrel {

PETREL_DECL member::member(any_transport transport, member_options opts)
    : transport_(std::move(transport)),
      state_(std::make_shared<state>(transport_, std::move(opts))) {
    if (state_->opts.role == node_role::manager ||
        (state_->opts.role == node_role::server && state_->opts.address.empty())) {
        throw std::invalid_argument("petrel::member: a member is a server (with its "
                                    "address), a worker or a reader");
    }
    if (state_->opts.role == node_role::reader &&
        (state_->opts.group.empty() || state_->opts.group == training_group)) {
        throw std::invalid_argument("petrel::member: a reader names its read-only group "
                                    "(not '" +
                                    std::string(training_group) + "')");
    }
    if (state_->opts.role == node_role::worker && state_->opts.group != training_group) {
        throw std::invalid_argument("petrel::member: workers are in group '" +
                                    std::string(training_group) +
                                    "'; read-only groups are made of readers");
    }
    if (state_->opts.manager_grace.count() < 0) {
        throw std::invalid_argument("petrel::member: a negative manager grace");
    }
    if (state_->opts.heartbeat_interval.count() <= 0 ||
        state_->opts.heartbeat_timeout <= state_->opts.heartbeat_interval) {
        throw std::invalid_argument("petrel::member: the heartbeat timeout must exceed the "
                                    "heartbeat interval");
    }
    state_->link = state_->make_link(state_->opts.root);
}

PETREL_DECL member::~member() {
    close();
}

PETREL_DECL void member::start_join(done_fn done) {
    state_->join(std::move(done));
}

PETREL_DECL void member::start_barrier(group g, done_fn done) {
    detail::control_body b;
    b.op = detail::control_op::barrier;
    b.barrier_group = g;
    {
        std::lock_guard lock(state_->mutex);
        b.barrier_seq = ++state_->barriers_asked[static_cast<std::size_t>(g) - 1];
    }
    state_->call(b, detail::no_deadline, std::move(done));
}

PETREL_DECL void member::start_assign(data_set d,
                                      std::function<void(std::error_code, data_share)> done) {
    detail::control_body b;
    b.op = detail::control_op::assign;
    const std::string name = d.name;
    b.data = std::move(d);
    std::weak_ptr<state> weak = state_;
    state_->exchange(b, state_->opts.heartbeat_timeout,
                     [weak, done, name](std::error_code ec, wire::message&& m) mutable {
                         auto self = weak.lock();
                         if (!self) {
                             done(make_error_code(errc::shut_down), data_share{});
                             return;
                         }
                         auto v = ec ? nullptr : self->adopt_reply(m);
                         if (!ec && !v) {
                             ec = errc::malformed_header;
                         }
                         const node_id me = self->current_id();
                         auto share = v ? v->share(name, me) : std::nullopt;
                         if (!ec && !share) {
                             ec = errc::malformed_header;
                         }
                         done(ec, ec ? data_share{} : std::move(*share));
                     });
}

PETREL_DECL std::optional<data_share> member::share(std::string_view name) const {
    std::lock_guard lock(state_->mutex);
    if (!state_->view) {
        return std::nullopt;
    }
    return state_->view->share(name, state_->id);
}

PETREL_DECL void member::start_round(block_schedule s,
                                     std::function<void(std::error_code, round_assignment)> done) {
    detail::control_body b;
    b.op = detail::control_op::round;
    b.blocks = std::move(s);
    state_->exchange(b, detail::no_deadline, [done](std::error_code ec, wire::message&& m) mutable {
        auto body = ec ? std::nullopt : detail::read_control(m);
        if (!ec && (!body || !body->round)) {
            ec = errc::malformed_header;
        }
        done(ec, ec ? round_assignment{} : std::move(*body->round));
    });
}

PETREL_DECL void member::start_leave(done_fn done) {
    state_->leave(std::move(done));
}

PETREL_DECL void member::start_fail(std::string why, done_fn done) {
    auto text = detail::one_line(why);
    state_->leave(std::move(done), text.empty() ? "it failed (no reason given)" : std::move(text));
}

PETREL_DECL void member::start_retire(done_fn done) {
    state_->retire(std::move(done));
}

PETREL_DECL void member::start_ready(std::uint64_t version, done_fn done) {
    detail::control_body b;
    b.op = detail::control_op::ready;
    b.version = version;
    state_->call(b, state_->opts.heartbeat_timeout, std::move(done));
}

PETREL_DECL void member::start_report_unreachable(node_id server, std::string seen, done_fn done) {
    detail::control_body b;
    b.op = detail::control_op::unreachable;
    b.id = server;
    b.text = detail::one_line(seen); // (sent cut to `detail::max_text_bytes`)
    state_->send(b, state_->opts.heartbeat_timeout,
                 [done](std::error_code ec, wire::message&&) mutable { done(ec); });
}

PETREL_DECL node_id member::id() const {
    std::lock_guard lock(state_->mutex);
    return state_->id;
}

PETREL_DECL std::uint64_t member::server_secret() const {
    std::lock_guard lock(state_->mutex);
    return state_->secret;
}

PETREL_DECL node_key member::key() const {
    std::lock_guard lock(state_->mutex);
    return state_->key;
}

PETREL_DECL member::view_ptr member::view() const {
    std::lock_guard lock(state_->mutex);
    return state_->view;
}

PETREL_DECL std::size_t member::subscribe(view_callback cb) {
    std::lock_guard lock(state_->mutex);
    const std::size_t handle = ++state_->next_subscription;
    state_->subscribers.emplace(handle, std::move(cb));
    return handle;
}

PETREL_DECL std::size_t member::subscribe_failures(std::function<void()> cb) {
    std::lock_guard lock(state_->mutex);
    const std::size_t handle = ++state_->next_subscription;
    state_->failure_subscribers.emplace(handle, std::move(cb));
    return handle;
}

PETREL_DECL void member::unsubscribe(std::size_t handle) {
    std::lock_guard lock(state_->mutex);
    state_->subscribers.erase(handle);
    state_->failure_subscribers.erase(handle);
}

PETREL_DECL std::string member::failure() const {
    std::lock_guard lock(state_->mutex);
    std::string s = state_->view ? state_->view->failures() : std::string{};
    if (!state_->failure.empty()) {
        s += state_->failure + "\n";
    }
    return s;
}

PETREL_DECL const member_options& member::options() const noexcept {
    return state_->opts;
}

PETREL_DECL void member::close() {
    state_->close(make_error_code(errc::shut_down));
}

// ---- the state ---------------------------------------------------------------------

PETREL_DECL member::state::state(const any_transport& t, member_options o)
    : opts(std::move(o)), log(t.options().log), transport(t), timer(t.get_executor()) {}

PETREL_DECL std::shared_ptr<detail::request_link>
member::state::make_link(const std::string& address) {
    detail::request_link_options lo;
    if (opts.ranked_managers) {
        lo.peer_name = address == opts.root ? "rank-0" : "rank-1";
    }
    auto l = std::make_shared<detail::request_link>(transport, address, opts.heartbeat_timeout, lo);
    std::weak_ptr<state> weak = weak_from_this();
    l->on_notify([weak](wire::message&& m) {
        if (auto s = weak.lock()) {
            s->on_notify(std::move(m));
        }
    });
    return l;
}

PETREL_DECL std::shared_ptr<detail::request_link> member::state::current_link() const {
    std::lock_guard lock(mutex);
    return link;
}

PETREL_DECL std::string member::state::name() const {
    return "petrel " + std::string(to_string(opts.role)) +
           (id == no_node ? std::string(" (rank " + std::to_string(opts.rank) + ")")
                          : " " + std::to_string(id));
}

PETREL_DECL void member::state::report(log_level level, const std::string& text) {
    if (log) {
        log(level, name() + ": " + text);
    }
}

PETREL_DECL std::string member::state::reason(std::error_code ec, const wire::message& reply) {
    if (auto b = detail::read_control(reply); b && !b->text.empty()) {
        return b->text;
    }
    return ec.message();
}

// ---- join --------------------------------------------------------------------

PETREL_DECL detail::control_body member::state::join_body() const {
    detail::control_body b;
    b.op = detail::control_op::join;
    b.job_id = opts.job_id;
    b.role = opts.role;
    b.rank = opts.rank;
    b.local = opts.local;
    b.address = opts.address;
    b.worker_group = opts.group;
    b.declared = opts.declared;
    return b;
}

PETREL_DECL void member::state::join(done_fn done) {
    const auto deadline = clock::now() + opts.startup_timeout;
    attempt(std::move(done), deadline, false);
}

PETREL_DECL void member::state::attempt(done_fn done, clock::time_point deadline, bool reached) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0) {
        const auto ec = make_error_code(reached ? errc::timed_out : errc::manager_unreachable);
        remember(reached ? "the job did not form within " +
                               std::to_string(opts.startup_timeout.count()) + " ms"
                         : "the root " + opts.root + " did not answer within " +
                               std::to_string(opts.startup_timeout.count()) + " ms");
        done(ec);
        return;
    }
    const detail::control_body b = join_body();
    std::weak_ptr<state> weak = weak_from_this();
    current_link()->request(
        detail::make_control(b),
        [weak, done, deadline](std::error_code ec, wire::message&& m) mutable {
            auto self = weak.lock();
            if (!self) {
                done(make_error_code(errc::shut_down));
                return;
            }
            self->joined(ec, std::move(m), std::move(done), deadline);
        },
        left);
}

PETREL_DECL void member::state::joined(std::error_code ec, wire::message&& m, done_fn done,
                                       clock::time_point deadline) {
    const bool ours = ec.category() == error_category();
    const bool retry = ec && (!ours || ec == errc::connection_closed);
    if (retry) {
        // The root is not up yet (or went away while we waited): try again.
        auto t = std::make_shared<asio::steady_timer>(timer.get_executor());
        t->expires_after(std::chrono::milliseconds(100));
        std::weak_ptr<state> weak = weak_from_this();
        t->async_wait([weak, t, done = std::move(done), deadline](std::error_code) mutable {
            if (auto self = weak.lock(); self && !self->is_closed()) {
                self->attempt(std::move(done), deadline, false);
            } else {
                done(make_error_code(errc::shut_down));
            }
        });
        return;
    }
    if (ec) {
        auto body = detail::read_control(m);
        const bool not_petrel = ec == errc::bad_magic || ec == errc::header_too_large ||
                                ec == errc::frame_too_large || ec == errc::malformed_header ||
                                ec == errc::segment_size_mismatch || ec == errc::malformed_payload;
        const std::string why =
            body && !body->text.empty()
                ? body->text
                : (ec == errc::timed_out ? "the job did not form within " +
                                               std::to_string(opts.startup_timeout.count()) + " ms"
                   : not_petrel
                       ? "the root address " + opts.root +
                             " answered with bytes that are not Petrel's (" + ec.message() +
                             "): another program holds that port; give the job a free "
                             "root port (--root, PETREL_ROOT)"
                       : ec.message());
        remember("could not join: " + why);
        done(ec);
        return;
    }
    auto b = detail::read_control(m);
    const node_info* me = b && b->view && valid(*b->view) ? b->view->find(b->id) : nullptr;
    if (!me || me->role != opts.role || b->view->job_id != opts.job_id) {
        remember("the manager sent a malformed join reply");
        done(make_error_code(errc::malformed_header));
        return;
    }
    {
        std::lock_guard lock(mutex);
        id = b->id;
        secret = b->secret;
        key = b->key;
        barriers_asked = b->passed_barriers;
        if (!view || view->version < b->view->version) {
            view = std::make_shared<const membership_view>(std::move(*b->view));
        }
        heartbeating = !closed;
    }
    if (log) {
        report(log_level::info, "joined job '" + opts.job_id + "'");
    }
    schedule_heartbeat();
    done({});
}

PETREL_DECL bool member::state::valid(const membership_view& v) {
    if (v.ring.empty()) {
        return false;
    }
    for (auto owner : v.ring.owner_table()) {
        const auto* n = v.find(owner);
        if (!n || n->role != node_role::server) {
            return false;
        }
    }
    return true;
}

// ---- views ---------------------------------------------------------------------

PETREL_DECL void member::state::on_notify(wire::message&& m) {
    auto b = detail::read_control(m);
    if (!b || b->op != detail::control_op::view || !b->view || !valid(*b->view) ||
        b->view->job_id != opts.job_id) {
        report(log_level::warning, "ignored a malformed message from the manager");
        return;
    }
    adopt(std::move(*b->view));
}

PETREL_DECL void member::state::adopt(membership_view&& incoming) {
    std::vector<view_callback> cbs;
    view_ptr v;
    {
        std::lock_guard lock(mutex);
        if (view && view->version >= incoming.version) {
            return;
        }
        v = std::make_shared<const membership_view>(std::move(incoming));
        view = v;
        for (const auto& [h, cb] : subscribers) {
            cbs.push_back(cb);
        }
    }
    for (auto& cb : cbs) {
        cb(v);
    }
}

PETREL_DECL member::view_ptr member::state::adopt_reply(const wire::message& m) {
    auto b = detail::read_control(m);
    if (!b || !b->view || !valid(*b->view) || b->view->job_id != opts.job_id) {
        return nullptr;
    }
    adopt(std::move(*b->view));
    std::lock_guard lock(mutex);
    return view;
}

PETREL_DECL node_id member::state::current_id() const {
    std::lock_guard lock(mutex);
    return id;
}

// ---- heartbeats ------------------------------------------------------------------

PETREL_DECL void member::state::schedule_heartbeat() {
    std::lock_guard lock(mutex);
    if (!heartbeating) {
        return;
    }
    timer.expires_after(opts.heartbeat_interval);
    std::weak_ptr<state> weak = weak_from_this();
    timer.async_wait([weak](std::error_code ec) {
        if (auto self = weak.lock(); self && !ec) {
            self->beat();
        }
    });
}

PETREL_DECL void member::state::beat() {
    std::shared_ptr<detail::request_link> l;
    std::uint64_t at = 0;
    {
        std::lock_guard lock(mutex);
        if (!heartbeating) {
            return;
        }
        l = link;
        at = epoch;
    }
    detail::control_body b;
    b.op = detail::control_op::heartbeat;
    std::weak_ptr<state> weak = weak_from_this();
    l->request(detail::make_control(b), [weak, at, l](std::error_code ec, wire::message&& m) {
        auto self = weak.lock();
        if (!self || self->epoch_now() != at) {
            return; // an answer from a manager this node no longer follows
        }
        if (!ec) {
            self->schedule_heartbeat();
            return;
        }
        if (ec == errc::shut_down && self->is_closed()) {
            return;
        }
        if (ec == errc::node_failed) {
            self->lost(errc::node_failed, reason(ec, m));
        } else {
            self->orphan("the manager at " + l->address() + " stopped answering heartbeats (" +
                         ec.message() + ")");
        }
    });
}

PETREL_DECL std::uint64_t member::state::epoch_now() const {
    std::lock_guard lock(mutex);
    return epoch;
}

// ---- barrier and leave --------------------------------------------------------------

PETREL_DECL void
member::state::exchange(const detail::control_body& b, std::chrono::milliseconds timeout,
                        std::function<void(std::error_code, wire::message&&)> done) {
    std::weak_ptr<state> weak = weak_from_this();
    send(b, timeout, [weak, done = std::move(done)](std::error_code ec, wire::message&& m) {
        if (ec && ec != errc::shut_down) {
            if (auto self = weak.lock()) {
                self->remember(reason(ec, m));
            }
        }
        done(ec, std::move(m));
    });
}

PETREL_DECL void member::state::call(const detail::control_body& b,
                                     std::chrono::milliseconds timeout, done_fn done) {
    std::weak_ptr<state> weak = weak_from_this();
    send(b, timeout, [weak, done = std::move(done)](std::error_code ec, wire::message&& m) {
        if (ec && ec != errc::shut_down) {
            if (auto self = weak.lock()) {
                self->remember(reason(ec, m));
            }
        }
        done(ec);
    });
}

PETREL_DECL void member::state::leave(done_fn done, std::string failure) {
    detail::control_body b;
    b.op = detail::control_op::leave;
    b.text = std::move(failure);
    std::weak_ptr<state> weak = weak_from_this();
    call(b, opts.heartbeat_timeout, [weak, done = std::move(done)](std::error_code ec) {
        if (auto self = weak.lock()) {
            std::lock_guard lock(self->mutex);
            self->heartbeating = false;
            self->timer.cancel();
        }
        done(ec);
    });
}

PETREL_DECL void member::state::retire(done_fn done) {
    detail::control_body b;
    b.op = detail::control_op::retire;
    std::weak_ptr<state> weak = weak_from_this();
    send(b, opts.heartbeat_timeout,
         [weak, done = std::move(done)](std::error_code ec, wire::message&& m) {
             if (auto self = weak.lock()) {
                 if (ec == errc::in_progress) {
                     // A server without replicas hands its partitions over first.
                     self->report(log_level::info, reason(ec, m));
                 } else if (ec) {
                     // Refused or not answered: the node stays in the job.
                     self->report(log_level::warning, "could not leave the job: " + reason(ec, m));
                 } else {
                     {
                         std::lock_guard lock(self->mutex);
                         self->heartbeating = false;
                         self->timer.cancel();
                     }
                     (void)self->adopt_reply(m);
                 }
             }
             done(ec);
         });
}

PETREL_DECL void member::state::remember(const std::string& why) {
    std::vector<std::function<void()>> cbs;
    {
        std::lock_guard lock(mutex);
        if (failure.find(why) != std::string::npos) {
            return;
        }
        failure += (failure.empty() ? "" : "\n") + why;
        for (const auto& [h, cb] : failure_subscribers) {
            cbs.push_back(cb);
        }
    }
    for (auto& cb : cbs) {
        cb();
    }
}

PETREL_DECL bool member::state::is_closed() const {
    std::lock_guard lock(mutex);
    return closed;
}

PETREL_DECL void member::state::close(std::error_code ec) {
    std::vector<parked_request> waiting;
    std::shared_ptr<detail::request_link> l;
    std::shared_ptr<detail::request_link> registering;
    {
        std::lock_guard lock(mutex);
        if (closed) {
            return;
        }
        closed = true;
        heartbeating = false;
        orphaned = false;
        timer.cancel();
        waiting.swap(parked);
        l = link;
        registering.swap(rejoining);
    }
    l->close(ec);
    if (registering) {
        registering->close(ec);
    }
    for (auto& p : waiting) {
        p.done(ec, wire::message{});
    }
}

} // namespace petrel

#include <petrel/cluster/impl/member_failover.ipp>

#endif // PETREL_CLUSTER_IMPL_MEMBER_IPP
