// Petrel: a server agent: the views followed, and its waits decided on each event.
#ifndef PETREL_LAUNCH_IMPL_SERVER_AGENT_IPP
#define PETREL_LAUNCH_IMPL_SERVER_AGENT_IPP

#include <petrel/launch/server_agent.hpp>

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace petrel {

PETREL_DECL replication_plan replication_plan_of(const membership_view& v) {
    replication_plan plan;
    plan.version = v.version;
    if (v.ring.empty()) {
        return plan;
    }
    auto live = [&v](node_id id) -> const node_info* {
        const auto* n = v.find(id);
        return n && n->role == node_role::server && n->state == node_state::alive ? n : nullptr;
    };
    plan.partition_of = [r = v.ring](std::uint64_t key) { return r.partition_of(key); };
    plan.stripe_keys = v.ring.options().stripe_keys;
    for (std::uint32_t p = 0; p < v.ring.options().partitions; ++p) {
        const auto owners = v.ring.owners(p);
        plan.primaries.push_back(owners[0]);
        const auto* primary = live(owners[0]);
        if (!primary || plan.chains.count(primary->id) != 0) {
            continue;
        }
        auto& chain = plan.chains[primary->id];
        for (const auto id : owners) {
            if (const auto* n = live(id)) {
                chain.push_back({n->id, n->address});
            }
        }
    }
    if (!v.next_ring.empty() && v.next_ring.options().partitions == v.ring.options().partitions) {
        std::set<node_id> learners;
        for (std::uint32_t p = 0; p < v.next_ring.options().partitions; ++p) {
            const node_id next = v.next_ring.owners(p)[0];
            plan.next_primaries.push_back(next);
            if (const auto* n = live(next);
                n && !v.ring.holds(next) && learners.insert(next).second) {
                plan.learners.push_back({n->id, n->address});
            }
        }
    }
    // A live server on no owner list that joins with no share, or that handed its
    // partitions over and sends the end of its ownership before it leaves: a peer still.
    for (const auto& n : v.nodes) {
        if (n.role == node_role::server && n.state == node_state::alive && !v.ring.holds(n.id) &&
            (v.next_ring.empty() || !v.next_ring.holds(n.id))) {
            plan.learners.push_back({n.id, n.address});
        }
    }
    return plan;
}

PETREL_DECL void follow_view(server_node& server, const membership_view& v, std::uint64_t secret) {
    for (const auto* n : v.of_role(node_role::worker)) {
        if (n->state == node_state::alive) {
            server.admit_worker(n->index);
        } else {
            server.depart_worker(n->index);
        }
    }
    auto plan = replication_plan_of(v);
    plan.secret = secret;
    server.replicate(std::move(plan));
}

/// The agent's waits and what they asked of the manager. Every event (a view, a failure,
/// a change of the server's copies, an answer, a deadline) calls `step`, which decides
/// under `mutex` what each wait does next and acts after releasing it. Lock order:
/// `mutex`, then the member's and the server's own locks (neither calls back into the
/// agent while holding them: the member calls its subscribers after its lock, the server
/// posts its watchers).
struct server_agent::state : std::enable_shared_from_this<state> {
    state(std::shared_ptr<member> mm, std::shared_ptr<server_node> ss)
        : m(std::move(mm)), server(std::move(ss)), timer(server->get_executor()) {}

    using done_fn = std::function<void(std::error_code)>;

    /// One kind of wait: its operation, its completion, and a generation that tells the
    /// answers to a wait ended since from the answers to this one.
    template <typename Op>
    struct slot {
        std::optional<Op> op;
        done_fn done;
        std::uint64_t generation = 0;
    };

    /// What a decision asks for, done after the lock is released.
    struct actions {
        std::vector<std::pair<done_fn, std::error_code>> finished;
        struct report {
            detail_wait who;
            std::uint64_t generation;
            std::uint64_t version;
        };
        std::vector<report> ready;
        std::optional<std::uint64_t> retire; // ask, for the retire wait of this generation
    };

    std::shared_ptr<member> m;
    std::shared_ptr<server_node> server;
    std::mutex mutex;
    asio::steady_timer timer;
    std::optional<detail::agent_clock::time_point> armed; // when the timer wakes `step`
    bool stopped = false;
    slot<detail::take_over_op> take;
    slot<detail::settle_op> settle;
    slot<detail::retire_op> retire;

    detail::agent_observation observe() const {
        detail::agent_observation o;
        o.self = m->id();
        o.view = m->view();
        o.failed = !m->failure().empty();
        o.plan_version = server->plan_version();
        o.chain_whole = server->chain_whole();
        o.join_ready = server->join_ready();
        o.hand_over_ready = server->hand_over_ready();
        o.handing_over = server->handing_over();
        o.now = detail::agent_clock::now();
        return o;
    }

    template <typename Op>
    static void apply(slot<Op>& s, detail_wait who, const detail::agent_step& d, actions& a) {
        if (d.finish) {
            a.finished.emplace_back(std::move(s.done), *d.finish);
            s.op.reset();
            s.done = nullptr;
            return;
        }
        if (d.ready != 0) {
            a.ready.push_back({who, s.generation, d.ready});
        }
        if (d.retire) {
            a.retire = s.generation;
        }
    }

    /// Decides every wait from what it observes now; the timer wakes it at the earliest
    /// deadline. Under the lock.
    void decide(actions& a) {
        if (stopped || (!take.op && !settle.op && !retire.op)) {
            if (armed) {
                timer.cancel();
                armed.reset();
            }
            return;
        }
        const auto o = observe();
        if (take.op) {
            apply(take, detail_wait::take_over, take.op->decide(o), a);
        }
        if (settle.op) {
            apply(settle, detail_wait::settle, settle.op->decide(o), a);
        }
        if (retire.op) {
            apply(retire, detail_wait::retire, retire.op->decide(o), a);
        }
        std::optional<detail::agent_clock::time_point> wake;
        auto sooner = [&wake](detail::agent_clock::time_point t) {
            wake = wake ? std::min(*wake, t) : t;
        };
        if (take.op) {
            sooner(take.op->deadline());
        }
        if (settle.op) {
            sooner(settle.op->deadline());
        }
        if (retire.op && retire.op->deadline()) {
            sooner(*retire.op->deadline());
        }
        if (wake == armed) {
            return;
        }
        armed = wake;
        if (!wake) {
            timer.cancel();
            return;
        }
        timer.expires_at(*wake); // (cancels the wait for the previous deadline)
        std::weak_ptr<state> weak = weak_from_this();
        timer.async_wait([weak](std::error_code ec) {
            if (auto s = weak.lock(); s && !ec) {
                {
                    std::lock_guard lock(s->mutex);
                    s->armed.reset();
                }
                s->step();
            }
        });
    }

    /// Does what the decisions asked for. No lock held.
    void act(actions& a) {
        for (auto& [done, ec] : a.finished) {
            done(ec);
        }
        std::weak_ptr<state> weak = weak_from_this();
        for (const auto& r : a.ready) {
            m->async_ready(r.version, [weak, r](std::error_code ec) {
                if (auto s = weak.lock()) {
                    s->answered_ready(r.who, r.generation, r.version, ec);
                }
            });
        }
        if (a.retire) {
            m->async_retire([weak, generation = *a.retire](std::error_code ec) {
                if (auto s = weak.lock()) {
                    s->asked(generation, ec);
                }
            });
        }
    }

    void step() {
        actions a;
        {
            std::lock_guard lock(mutex);
            decide(a);
        }
        act(a);
    }

    void answered_ready(detail_wait who, std::uint64_t generation, std::uint64_t version,
                        std::error_code ec) {
        actions a;
        {
            std::lock_guard lock(mutex);
            if (stopped) {
                return;
            }
            if (who == detail_wait::take_over && take.op && take.generation == generation) {
                apply(take, who, take.op->answered_ready(version, ec), a);
            } else if (who == detail_wait::retire && retire.op && retire.generation == generation) {
                apply(retire, who, retire.op->answered_ready(version, ec, observe()), a);
            }
            decide(a);
        }
        act(a);
    }

    void asked(std::uint64_t generation, std::error_code ec) {
        actions a;
        {
            std::lock_guard lock(mutex);
            if (stopped) {
                return;
            }
            if (retire.op && retire.generation == generation) {
                apply(retire, detail_wait::retire, retire.op->asked(ec, observe()), a);
            }
            decide(a);
        }
        act(a);
    }

    /// Ends every wait with `ec`; with `stop`, for good.
    void end(std::error_code ec, bool stop) {
        actions a;
        {
            std::lock_guard lock(mutex);
            stopped = stopped || stop;
            auto finish = [&](auto& s) {
                if (s.op) {
                    a.finished.emplace_back(std::move(s.done), ec);
                    s.op.reset();
                    s.done = nullptr;
                }
            };
            finish(take);
            finish(settle);
            finish(retire);
            timer.cancel();
            armed.reset();
        }
        for (auto& [done, e] : a.finished) {
            done(e);
        }
    }
};

PETREL_DECL server_agent::server_agent(std::shared_ptr<member> m,
                                       std::shared_ptr<server_node> server)
    : member_(std::move(m)), server_(std::move(server)) {
    if (!member_ || !server_) {
        throw std::invalid_argument("petrel::server_agent: a member and a server are needed");
    }
    const auto view = member_->view();
    if (member_->options().role != node_role::server || !view || member_->id() == no_node) {
        throw std::invalid_argument(
            "petrel::server_agent: the member must be a server's, and have joined its job "
            "(member::async_join)");
    }
    server_->set_node_id(member_->id());
    state_ = std::make_shared<state>(member_, server_);
    std::weak_ptr<state> weak = state_;
    const auto secret = member_->server_secret();
    // Each view goes to the server before the waits look at it.
    view_subscription_ = member_->subscribe([weak, secret](const member::view_ptr& v) {
        if (auto s = weak.lock()) {
            follow_view(*s->server, *v, secret);
            s->step();
        }
    });
    failure_subscription_ = member_->subscribe_failures([weak] {
        if (auto s = weak.lock()) {
            s->step();
        }
    });
    watch_ = server_->watch([weak] {
        if (auto s = weak.lock()) {
            s->step();
        }
    });
    follow_view(*server_, *view, secret);
}

PETREL_DECL server_agent::~server_agent() {
    member_->unsubscribe(view_subscription_);
    member_->unsubscribe(failure_subscription_);
    server_->unwatch(watch_);
    state_->end(make_error_code(errc::shut_down), true);
}

PETREL_DECL void server_agent::cancel() {
    state_->end(make_error_code(errc::shut_down), false);
}

PETREL_DECL void server_agent::start(detail_wait what, std::chrono::milliseconds patience,
                                     std::uint64_t view,
                                     std::function<void(std::error_code)> done) {
    auto& s = *state_;
    state::actions a;
    {
        std::lock_guard lock(s.mutex);
        const bool busy = (what == detail_wait::take_over && s.take.op) ||
                          (what == detail_wait::settle && s.settle.op) ||
                          (what == detail_wait::retire && s.retire.op);
        if (busy || s.stopped) {
            a.finished.emplace_back(
                std::move(done), make_error_code(s.stopped ? errc::shut_down : errc::in_progress));
        } else {
            const auto until = detail::agent_clock::now() + patience;
            switch (what) {
            case detail_wait::take_over:
                s.take.op.emplace(until);
                s.take.done = std::move(done);
                ++s.take.generation;
                break;
            case detail_wait::settle:
                s.settle.op.emplace(view, until);
                s.settle.done = std::move(done);
                ++s.settle.generation;
                break;
            case detail_wait::retire:
                s.retire.op.emplace(patience);
                s.retire.done = std::move(done);
                ++s.retire.generation;
                state::apply(s.retire, what, s.retire.op->start(s.observe()), a);
                break;
            }
            s.decide(a);
        }
    }
    s.act(a);
}

} // namespace petrel

#endif // PETREL_LAUNCH_IMPL_SERVER_AGENT_IPP
