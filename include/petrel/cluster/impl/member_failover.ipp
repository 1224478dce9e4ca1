// Petrel: a member that lost its manager: looking for one that takes the job over,
// registering again there, and the calls to the manager parked meanwhile.
#ifndef PETREL_CLUSTER_IMPL_MEMBER_FAILOVER_IPP
#define PETREL_CLUSTER_IMPL_MEMBER_FAILOVER_IPP

#include <petrel/cluster/detail/member_state.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace petrel {

PETREL_DECL void member::state::lost(errc e, const std::string& why) {
    std::vector<parked_request> waiting;
    std::shared_ptr<detail::request_link> l;
    {
        std::lock_guard lock(mutex);
        if (closed || (!heartbeating && !orphaned)) {
            return;
        }
        heartbeating = false;
        orphaned = false;
        waiting.swap(parked);
        l = link;
    }
    // Closed before anyone hears of the loss: a call made on hearing it fails with `e`
    // rather than trying the link again.
    l->close(make_error_code(e));
    remember(why);
    report(log_level::error, why);
    for (auto& p : waiting) {
        p.done(make_error_code(e), wire::message{});
    }
}

PETREL_DECL void member::state::orphan(const std::string& why) {
    std::vector<parked_request> stranded;
    std::string failed_job;
    {
        std::lock_guard lock(mutex);
        if (closed || orphaned) {
            return;
        }
        if (!heartbeating) {
            // It left (or is leaving) meanwhile: nobody will send what waits.
            stranded.swap(parked);
        } else {
            failed_job = view ? view->failures() : std::string{};
            if (opts.manager_grace.count() > 0 && id != no_node && failed_job.empty()) {
                orphaned = true;
                heartbeating = false;
                timer.cancel();
                orphan_deadline = clock::now() + opts.manager_grace;
            }
        }
    }
    for (auto& p : stranded) {
        p.done(make_error_code(errc::connection_closed), wire::message{});
    }
    if (!stranded.empty()) {
        return;
    }
    if (!is_orphaned()) {
        // No looking: none asked for, or the job has failed already (its manager
        // stops once its own nodes are done).
        lost(errc::manager_unreachable,
             failed_job.empty() ? why : why + "; the job had failed: " + failed_job);
        return;
    }
    report(log_level::warning,
           why +
               "; pushes and pulls go on while this node looks for a manager that "
               "takes the job over (for up to " +
               std::to_string(opts.manager_grace.count()) + " ms)");
    rejoin(0);
}

PETREL_DECL bool member::state::is_orphaned() const {
    std::lock_guard lock(mutex);
    return orphaned;
}

PETREL_DECL std::vector<std::string> member::state::manager_addresses() const {
    std::vector<std::string> out{opts.root};
    for (const auto& a : opts.standby) {
        if (!a.empty() && std::find(out.begin(), out.end(), a) == out.end()) {
            out.push_back(a);
        }
    }
    return out;
}

PETREL_DECL void member::state::rejoin(std::size_t attempt) {
    detail::control_body b;
    std::string address;
    std::chrono::milliseconds left{};
    {
        std::lock_guard lock(mutex);
        if (closed || !orphaned) {
            return;
        }
        left =
            std::chrono::duration_cast<std::chrono::milliseconds>(orphan_deadline - clock::now());
        if (left.count() > 0) {
            const auto all = manager_addresses();
            address = all[attempt % all.size()];
            b = join_body();
            b.id = id;
            b.secret = secret;
            b.key = key;
            b.version = view ? view->version : 0;
            if (view) {
                b.view = *view;
            }
        }
    }
    if (left.count() <= 0) {
        lost(errc::manager_unreachable, "no manager took job '" + opts.job_id + "' over within " +
                                            std::to_string(opts.manager_grace.count()) +
                                            " ms of losing the one at " + opts.root);
        return;
    }
    auto l = make_link(address);
    {
        std::lock_guard lock(mutex);
        if (closed) {
            return;
        }
        rejoining = l; // the link holds the callback below, which names it weakly
    }
    std::weak_ptr<state> weak = weak_from_this();
    std::weak_ptr<detail::request_link> weak_link = l;
    l->request(
        detail::make_control(b),
        [weak, weak_link, attempt](std::error_code ec, wire::message&& m) {
            auto self = weak.lock();
            auto l = weak_link.lock();
            if (!self || !l) {
                if (l) {
                    l->close();
                }
                return;
            }
            self->done_rejoining(l);
            if (!ec) {
                self->rejoined(l, std::move(m));
                return;
            }
            l->close();
            if (ec == errc::node_failed || ec == errc::job_mismatch ||
                ec == errc::invalid_argument) {
                self->lost(errc::node_failed, "the manager at " + l->address() +
                                                  " refused this node: " + reason(ec, m));
                return;
            }
            // Not there (yet), or no majority of the job reached it: try the next.
            auto t = std::make_shared<asio::steady_timer>(self->timer.get_executor());
            t->expires_after(std::chrono::milliseconds(100));
            t->async_wait([weak, t, attempt](std::error_code) {
                if (auto s = weak.lock()) {
                    s->rejoin(attempt + 1);
                }
            });
        },
        std::min(left, 5 * opts.heartbeat_timeout));
}

PETREL_DECL void member::state::done_rejoining(const std::shared_ptr<detail::request_link>& l) {
    std::lock_guard lock(mutex);
    if (rejoining == l) {
        rejoining.reset();
    }
}

PETREL_DECL void member::state::rejoined(const std::shared_ptr<detail::request_link>& l,
                                         wire::message&& m) {
    auto b = detail::read_control(m);
    const node_info* me = b && b->view && valid(*b->view) ? b->view->find(b->id) : nullptr;
    if (!me || b->id != current_id() || me->role != opts.role || b->view->job_id != opts.job_id) {
        l->close();
        lost(errc::malformed_header,
             "the manager at " + l->address() + " sent a malformed answer to a registration");
        return;
    }
    std::vector<parked_request> waiting;
    std::shared_ptr<detail::request_link> old;
    {
        std::lock_guard lock(mutex);
        if (closed || !orphaned) {
            l->close();
            return;
        }
        old = link;
        link = l;
        ++epoch;
        orphaned = false;
        heartbeating = true;
        waiting.swap(parked);
    }
    old->close();
    const auto version = b->view->version;
    adopt(std::move(*b->view));
    report(log_level::info, "registered again with the manager at " + l->address() +
                                ", which took job '" + opts.job_id + "' over (view " +
                                std::to_string(version) + ")");
    schedule_heartbeat();
    for (auto& p : waiting) {
        send(std::move(p.body), p.timeout, std::move(p.done));
    }
}

PETREL_DECL void member::state::send(detail::control_body b, std::chrono::milliseconds timeout,
                                     detail::reply_callback done) {
    std::shared_ptr<detail::request_link> l;
    {
        std::lock_guard lock(mutex);
        if (orphaned && !closed) {
            parked.push_back({std::move(b), timeout, std::move(done)});
            return;
        }
        l = link;
    }
    auto m = detail::make_control(b);
    std::weak_ptr<state> weak = weak_from_this();
    l->request(
        std::move(m),
        [weak, l, b = std::move(b), timeout,
         done = std::move(done)](std::error_code ec, wire::message&& reply) mutable {
            if (auto self = weak.lock()) {
                const bool moved_on = self->current_link() != l || self->is_orphaned();
                if ((ec == errc::shut_down || ec == errc::timed_out) && !self->is_closed() &&
                    moved_on) {
                    // Still waiting at a manager this node has left behind (one
                    // that stopped answering): ask the one that took over.
                    self->send(std::move(b), timeout, std::move(done));
                    return;
                }
                if (ec == errc::connection_closed && self->park(b, timeout, done)) {
                    return;
                }
            }
            done(ec, std::move(reply));
        },
        timeout);
}

PETREL_DECL bool member::state::park(detail::control_body& b, std::chrono::milliseconds timeout,
                                     detail::reply_callback& done) {
    {
        std::lock_guard lock(mutex);
        if (closed || opts.manager_grace.count() == 0 || id == no_node ||
            (!orphaned && !heartbeating)) {
            return false;
        }
        parked.push_back({std::move(b), timeout, std::move(done)});
        if (orphaned) {
            return true;
        }
    }
    orphan("the connection to the manager at " + opts.root + " was lost");
    return true;
}

} // namespace petrel

#endif // PETREL_CLUSTER_IMPL_MEMBER_FAILOVER_IPP
