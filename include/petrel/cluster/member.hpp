// Petrel: a node's membership of a job: joining, the view, heartbeats, barriers.
#pragma once

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/declarations.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>

#include <asio/async_result.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace petrel {

struct member_options {
    /// The manager's address ("host:port").
    std::string root{};
    /// Must equal the manager's job id, or the join is refused with `errc::job_mismatch`.
    std::string job_id = "petrel";
    node_role role = node_role::worker;
    /// The worker group: `training_group` for workers; a reader names its read-only group
    /// (anything else), which the scheduler divides data sets over.
    std::string group = std::string(training_group);
    /// Where peers reach this node: required for a server (its listening address).
    std::string address{};
    /// The rank of this process and the node's index within it: node ids follow them.
    std::uint32_t rank = 0;
    std::uint32_t local = 0;
    /// A heartbeat goes to the manager this often...
    std::chrono::milliseconds heartbeat_interval{200};
    /// ... and a manager that does not answer one within this long is lost.
    std::chrono::milliseconds heartbeat_timeout{2000};
    /// How long `async_join` keeps trying to reach the root and waits for the others.
    std::chrono::milliseconds startup_timeout{30000};
    /// Other addresses where a manager may take the job over when the one at `root` is
    /// lost: standby managers (`manager_options::take_over`).
    std::vector<std::string> standby{};
    /// How long a node that lost its manager keeps looking for one (a manager restarted
    /// at the root, or a standby) before its waits end with `errc::manager_unreachable`.
    /// Meanwhile it keeps its id and view, so pushes and pulls go on; calls to the
    /// manager (barriers, data sets, rounds, leaving) wait and are sent to the manager
    /// that takes over. 0: no looking, a lost manager ends every wait at once.
    std::chrono::milliseconds manager_grace{30000};
    /// What this node's process declares: its tables and remote functions (`petrel::run`
    /// sets them from `config::tables` and `config::functions`). The manager compares
    /// them with the job's, those of the first node that joined with declarations, and
    /// refuses a node whose declarations differ with `errc::declaration_mismatch`, naming
    /// the first table and field (or function) that differ. A node without declarations
    /// (none given) is not compared.
    std::optional<petrel::declarations> declared{};
};

/// One node's membership of a job: it registers with the manager at the root address,
/// receives its node id and the membership view, sends heartbeats, follows every new
/// view, and takes part in barriers.
///
/// Failures end waits rather than hang them: a barrier over a group with a failed node
/// completes with `errc::node_failed`. A manager that stops answering heartbeats is
/// looked for again, at the root and at the standby addresses, for
/// `member_options::manager_grace`: the node registers again with its id and view with
/// the manager that takes the job over, and its calls to the manager resume there.
/// When none answers in time every wait ends with `errc::manager_unreachable`; a manager
/// that declared this node failed ends them with `errc::node_failed`. `failure()` then
/// says which node failed and why, for the log.
///
/// @par Example
/// @code
/// petrel::member m(petrel::tcp_transport(io.get_executor()),
///                  {.root = "10.0.0.1:9000", .job_id = "job-7", .role =
///                  petrel::node_role::worker});
/// m.async_join(asio::use_future).get();            // waits until every node registered
/// auto view = m.view();                             // ids, addresses, the ring
/// m.async_barrier(petrel::group::workers, asio::use_future).get();
/// m.async_leave(asio::use_future).get();
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread. View callbacks run on the
/// transport's executor.
class member {
public:
    using view_ptr = std::shared_ptr<const membership_view>;
    using view_callback = std::function<void(const view_ptr&)>;

    member(any_transport transport, member_options opts)
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

    member(const member&) = delete;
    member& operator=(const member&) = delete;
    ~member() { close(); }

    /// Registers with the manager and completes once every node of the job has: with no
    /// error and this node's id and view set, or with `errc::job_mismatch`, `errc::job_full`,
    /// `errc::declaration_mismatch` (its tables or remote functions differ from the job's:
    /// `failure()` names the first difference), `errc::timed_out` (the job did not form
    /// in time) or `errc::manager_unreachable` (the root never answered within the startup
    /// timeout). Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_join(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                state_->join(detail::once_function<std::error_code>(std::move(handler),
                                                                    transport_.get_executor()));
            },
            token);
    }

    /// Waits until every live node of `g` has called it; completes with
    /// `errc::node_failed` if a node of `g` failed. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_barrier(group g, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this, g](auto handler) {
                detail::control_body b;
                b.op = detail::control_op::barrier;
                b.barrier_group = g;
                state_->call(b, detail::no_deadline,
                             detail::once_function<std::error_code>(std::move(handler),
                                                                    transport_.get_executor()));
            },
            token);
    }

    /// Defines data set `d` with the job's scheduler (or finds it, defined the same way by
    /// another worker) and completes with this node's share under the resulting view:
    /// `void(std::error_code, data_share)`. Later shares (after workers join, leave or
    /// fail) come with later views: see `share`. A different definition under the same
    /// name fails with `errc::invalid_argument`.
    template <typename CompletionToken>
    auto async_assign(data_set d, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code, data_share)>(
            [this](auto handler, data_set d) {
                auto done = detail::once_function<std::error_code, data_share>(
                    std::move(handler), transport_.get_executor());
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
            },
            token, std::move(d));
    }

    /// This node's share of data set `name` under the newest view; nothing when the data
    /// set is not defined.
    [[nodiscard]] std::optional<data_share> share(std::string_view name) const {
        std::lock_guard lock(state_->mutex);
        if (!state_->view) {
            return std::nullopt;
        }
        return state_->view->share(name, state_->id);
    }

    /// Waits until every live member of the schedule's group has asked for the next round
    /// of block schedule `s` (defined by the first request; the others must define it
    /// the same way), then completes with that round: `void(std::error_code,
    /// round_assignment)`. Once `s.rounds` rounds have been handed out it completes at
    /// once with `finished` set. Call it again only after finishing the round's work.
    template <typename CompletionToken>
    auto async_round(block_schedule s, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code, round_assignment)>(
            [this](auto handler, block_schedule s) {
                auto done = detail::once_function<std::error_code, round_assignment>(
                    std::move(handler), transport_.get_executor());
                detail::control_body b;
                b.op = detail::control_op::round;
                b.blocks = std::move(s);
                state_->exchange(b, detail::no_deadline,
                                 [done](std::error_code ec, wire::message&& m) mutable {
                                     auto body = ec ? std::nullopt : detail::read_control(m);
                                     if (!ec && (!body || !body->round)) {
                                         ec = errc::malformed_header;
                                     }
                                     done(ec, ec ? round_assignment{} : std::move(*body->round));
                                 });
            },
            token, std::move(s));
    }

    /// Tells the manager this node is done (nobody waits for it afterwards) and stops the
    /// heartbeats. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_leave(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                state_->leave(detail::once_function<std::error_code>(std::move(handler),
                                                                     transport_.get_executor()));
            },
            token);
    }

    /// Tells the manager this node failed, and why, and leaves (stopping the heartbeats):
    /// `petrel::run` calls it for a worker whose training function threw, instead of the
    /// final barrier. The manager declares the node failed with `why` as the reason (on
    /// one line, at most 4096 bytes), as it does a node whose heartbeats stopped: a
    /// barrier over its groups, waiting or later, fails with `errc::node_failed` naming
    /// it and why, and the job fails (`manager_node::async_wait_finished`), unless the job
    /// survives the node (a worker of a job that drops failed workers,
    /// `manager_options::drop_failed_workers`). Completes once the manager recorded it.
    /// Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_fail(std::string why, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler, std::string why) {
                auto text = detail::one_line(why);
                state_->leave(detail::once_function<std::error_code>(std::move(handler),
                                                                     transport_.get_executor()),
                              text.empty() ? "it failed (no reason given)" : std::move(text));
            },
            token, std::move(why));
    }

    /// A server leaves the running job gracefully: the manager moves its key ranges to
    /// their replicas (as when a server fails, but without waiting for a heartbeat and
    /// without failing anything), restores the copies of each range on the live servers,
    /// and answers once the new view is out; this node then stops its heartbeats, and
    /// its server may close (`server_node::close`): workers send what it had not answered
    /// to the new owners. The manager refuses (`errc::invalid_argument`, the reason
    /// logged here) when some of the server's ranges have no other live copy, for
    /// example with no replicas; the node then stays in the job. Only for servers.
    /// Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_retire(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                state_->retire(detail::once_function<std::error_code>(std::move(handler),
                                                                      transport_.get_executor()));
            },
            token);
    }

    /// A server that joined the running job (`manager_options::max_servers`) tells the
    /// manager that every primary whose partitions move to it has copied them to it
    /// under view `version` (`server_node::join_ready`). Once every joining server has,
    /// the manager makes the view that gives them their partitions. A report for a view
    /// older than the last change of the planned placement is ignored (report again
    /// after the next view). Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_ready(std::uint64_t version, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this, version](auto handler) {
                detail::control_body b;
                b.op = detail::control_op::ready;
                b.version = version;
                state_->call(b, state_->opts.heartbeat_timeout,
                             detail::once_function<std::error_code>(std::move(handler),
                                                                    transport_.get_executor()));
            },
            token);
    }

    /// Tells the manager that server `server` refuses this node's connections or does
    /// not answer (`seen`: what this node saw, for the manager's log). The manager tries
    /// the server's address itself (`manager_options::probe_timeout`) and, if it cannot
    /// connect either, declares the server failed: its key ranges move to their replicas,
    /// as when its heartbeats stop. If the manager can connect, the server stays in the
    /// job and the manager logs that this node cannot reach it. `kv_store` calls it once
    /// per server whose link gave up connecting. Completes once the manager recorded
    /// the report. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_report_unreachable(node_id server, std::string seen, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this, server](auto handler, std::string seen) {
                detail::control_body b;
                b.op = detail::control_op::unreachable;
                b.id = server;
                b.text = detail::one_line(seen); // (sent cut to `detail::max_text_bytes`)
                auto done = detail::once_function<std::error_code>(std::move(handler),
                                                                   transport_.get_executor());
                state_->send(b, state_->opts.heartbeat_timeout,
                             [done](std::error_code ec, wire::message&&) mutable { done(ec); });
            },
            token, std::move(seen));
    }

    /// This node's id; `no_node` before the join completed.
    [[nodiscard]] node_id id() const {
        std::lock_guard lock(state_->mutex);
        return state_->id;
    }

    /// A server's secret from the manager, which marks the updates the job's servers send
    /// each other (see `replication_plan::secret`); 0 for other roles and before the join.
    [[nodiscard]] std::uint64_t server_secret() const {
        std::lock_guard lock(state_->mutex);
        return state_->secret;
    }

    /// The newest view; null before the join completed.
    [[nodiscard]] view_ptr view() const {
        std::lock_guard lock(state_->mutex);
        return state_->view;
    }

    /// Calls `cb` with every later view; returns a handle for `unsubscribe`.
    std::size_t subscribe(view_callback cb) {
        std::lock_guard lock(state_->mutex);
        const std::size_t handle = ++state_->next_subscription;
        state_->subscribers.emplace(handle, std::move(cb));
        return handle;
    }

    /// Calls `cb` (with no lock of this node held) whenever `failure()` gained a line: a
    /// refusal by the manager, a lost manager. Failed nodes come with views (`subscribe`).
    /// Returns a handle for `unsubscribe`.
    std::size_t subscribe_failures(std::function<void()> cb) {
        std::lock_guard lock(state_->mutex);
        const std::size_t handle = ++state_->next_subscription;
        state_->failure_subscribers.emplace(handle, std::move(cb));
        return handle;
    }

    /// Ends a subscription of `subscribe` or `subscribe_failures`.
    void unsubscribe(std::size_t handle) {
        std::lock_guard lock(state_->mutex);
        state_->subscribers.erase(handle);
        state_->failure_subscribers.erase(handle);
    }

    /// What went wrong, for a log: failed nodes of the view, a refusal by the manager, or
    /// a lost manager. Empty when nothing did.
    [[nodiscard]] std::string failure() const {
        std::lock_guard lock(state_->mutex);
        std::string s = state_->view ? state_->view->failures() : std::string{};
        if (!state_->failure.empty()) {
            s += state_->failure + "\n";
        }
        return s;
    }

    [[nodiscard]] const member_options& options() const noexcept { return state_->opts; }
    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

    /// Stops heartbeats and ends every wait with `errc::shut_down`. Idempotent.
    void close() { state_->close(make_error_code(errc::shut_down)); }

private:
    using clock = std::chrono::steady_clock;
    using done_fn = std::function<void(std::error_code)>;

    struct state : std::enable_shared_from_this<state> {
        state(const any_transport& t, member_options o)
            : opts(std::move(o)), log(t.options().log), transport(t), timer(t.get_executor()) {}

        /// A control request waiting for the manager that takes the job over.
        struct parked_request {
            detail::control_body body;
            std::chrono::milliseconds timeout;
            detail::reply_callback done;
        };

        member_options opts;
        logger log;
        any_transport transport;
        std::shared_ptr<detail::request_link> link; // to the manager; replaced on a rejoin
        // The link a registration with a manager that may have taken over waits on (see
        // rejoin()); closed with the node.
        std::shared_ptr<detail::request_link> rejoining;
        mutable std::mutex mutex;
        asio::steady_timer timer;
        node_id id = no_node;
        std::uint64_t secret = 0;
        view_ptr view;
        std::map<std::size_t, view_callback> subscribers;
        std::map<std::size_t, std::function<void()>> failure_subscribers;
        std::size_t next_subscription = 0;
        std::string failure;
        bool heartbeating = false;
        bool closed = false;
        // The manager was lost: until `orphan_deadline` the node looks for one (see
        // rejoin()), and calls to the manager wait in `parked`. `epoch` counts the
        // managers this node was registered with: a late answer on an older link is
        // ignored.
        bool orphaned = false;
        clock::time_point orphan_deadline{};
        std::vector<parked_request> parked;
        std::uint64_t epoch = 0;

        /// A link to a manager at `address`, whose notifications (views) come here.
        std::shared_ptr<detail::request_link> make_link(const std::string& address) {
            auto l =
                std::make_shared<detail::request_link>(transport, address, opts.heartbeat_timeout);
            std::weak_ptr<state> weak = weak_from_this();
            l->on_notify([weak](wire::message&& m) {
                if (auto s = weak.lock()) {
                    s->on_notify(std::move(m));
                }
            });
            return l;
        }

        std::shared_ptr<detail::request_link> current_link() const {
            std::lock_guard lock(mutex);
            return link;
        }

        [[nodiscard]] std::string name() const {
            return "petrel " + std::string(to_string(opts.role)) +
                   (id == no_node ? std::string(" (rank " + std::to_string(opts.rank) + ")")
                                  : " " + std::to_string(id));
        }

        void report(log_level level, const std::string& text) {
            if (log) {
                log(level, name() + ": " + text);
            }
        }

        /// The text a failed reply carries, or the error's message.
        static std::string reason(std::error_code ec, const wire::message& reply) {
            if (auto b = detail::read_control(reply); b && !b->text.empty()) {
                return b->text;
            }
            return ec.message();
        }

        // ---- join --------------------------------------------------------------------

        /// What this node says about itself when it registers.
        [[nodiscard]] detail::control_body join_body() const {
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

        void join(done_fn done) {
            const auto deadline = clock::now() + opts.startup_timeout;
            attempt(std::move(done), deadline, false);
        }

        void attempt(done_fn done, clock::time_point deadline, bool reached) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
            if (left.count() <= 0) {
                const auto ec =
                    make_error_code(reached ? errc::timed_out : errc::manager_unreachable);
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

        void joined(std::error_code ec, wire::message&& m, done_fn done,
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
                const bool not_petrel =
                    ec == errc::bad_magic || ec == errc::header_too_large ||
                    ec == errc::frame_too_large || ec == errc::malformed_header ||
                    ec == errc::segment_size_mismatch || ec == errc::malformed_payload;
                const std::string why =
                    body && !body->text.empty()
                        ? body->text
                        : (ec == errc::timed_out
                               ? "the job did not form within " +
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

        /// A view is usable when it has a ring and every ring owner is one of its servers.
        static bool valid(const membership_view& v) {
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

        void on_notify(wire::message&& m) {
            auto b = detail::read_control(m);
            if (!b || b->op != detail::control_op::view || !b->view || !valid(*b->view) ||
                b->view->job_id != opts.job_id) {
                report(log_level::warning, "ignored a malformed message from the manager");
                return;
            }
            adopt(std::move(*b->view));
        }

        /// Takes `v` if it is newer than the view held, and tells the subscribers.
        void adopt(membership_view&& incoming) {
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

        /// Adopts the view a reply carries; returns the newest view, or null when the
        /// reply carries no valid view.
        view_ptr adopt_reply(const wire::message& m) {
            auto b = detail::read_control(m);
            if (!b || !b->view || !valid(*b->view) || b->view->job_id != opts.job_id) {
                return nullptr;
            }
            adopt(std::move(*b->view));
            std::lock_guard lock(mutex);
            return view;
        }

        node_id current_id() const {
            std::lock_guard lock(mutex);
            return id;
        }

        // ---- heartbeats ------------------------------------------------------------------

        void schedule_heartbeat() {
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

        void beat() {
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
            l->request(detail::make_control(b),
                       [weak, at, l](std::error_code ec, wire::message&& m) {
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
                               self->orphan("the manager at " + l->address() +
                                            " stopped answering heartbeats (" + ec.message() + ")");
                           }
                       });
        }

        std::uint64_t epoch_now() const {
            std::lock_guard lock(mutex);
            return epoch;
        }

        /// The manager is gone for good (or declared this node failed): every wait ends.
        void lost(errc e, const std::string& why) {
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
            remember(why);
            report(log_level::error, why);
            l->close(make_error_code(e));
            for (auto& p : waiting) {
                p.done(make_error_code(e), wire::message{});
            }
        }

        // ---- a lost manager ------------------------------------------------------------

        /// The manager stopped answering: look for one that takes the job over, for the
        /// grace time (none: the manager is lost at once). Pushes and pulls do not need
        /// the manager and go on meanwhile.
        void orphan(const std::string& why) {
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

        bool is_orphaned() const {
            std::lock_guard lock(mutex);
            return orphaned;
        }

        /// Where a manager may be: the root, then each standby address.
        std::vector<std::string> manager_addresses() const {
            std::vector<std::string> out{opts.root};
            for (const auto& a : opts.standby) {
                if (!a.empty() && std::find(out.begin(), out.end(), a) == out.end()) {
                    out.push_back(a);
                }
            }
            return out;
        }

        /// Registers again, with this node's id and view, at the `attempt`-th address (in
        /// turn): a manager that took the job over answers once it has its view.
        void rejoin(std::size_t attempt) {
            detail::control_body b;
            std::string address;
            std::chrono::milliseconds left{};
            {
                std::lock_guard lock(mutex);
                if (closed || !orphaned) {
                    return;
                }
                left = std::chrono::duration_cast<std::chrono::milliseconds>(orphan_deadline -
                                                                             clock::now());
                if (left.count() > 0) {
                    const auto all = manager_addresses();
                    address = all[attempt % all.size()];
                    b = join_body();
                    b.id = id;
                    b.secret = secret;
                    b.version = view ? view->version : 0;
                    if (view) {
                        b.view = *view;
                    }
                }
            }
            if (left.count() <= 0) {
                lost(errc::manager_unreachable, "no manager took job '" + opts.job_id +
                                                    "' over within " +
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

        /// The registration on `l` was answered (or failed): the node no longer keeps it.
        void done_rejoining(const std::shared_ptr<detail::request_link>& l) {
            std::lock_guard lock(mutex);
            if (rejoining == l) {
                rejoining.reset();
            }
        }

        /// A manager took this node back: follow it, and send it what waited.
        void rejoined(const std::shared_ptr<detail::request_link>& l, wire::message&& m) {
            auto b = detail::read_control(m);
            const node_info* me = b && b->view && valid(*b->view) ? b->view->find(b->id) : nullptr;
            if (!me || b->id != current_id() || me->role != opts.role ||
                b->view->job_id != opts.job_id) {
                l->close();
                lost(errc::malformed_header, "the manager at " + l->address() +
                                                 " sent a malformed answer to a registration");
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

        /// Sends a control request to the manager; when the manager is lost it waits for
        /// the one that takes the job over (within the grace time) and goes there.
        void send(detail::control_body b, std::chrono::milliseconds timeout,
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
                        if ((ec == errc::shut_down || ec == errc::timed_out) &&
                            !self->is_closed() && moved_on) {
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

        /// The connection to the manager dropped under a request: keep it for the
        /// manager that takes over, if this node looks for one. Returns whether it did.
        bool park(detail::control_body& b, std::chrono::milliseconds timeout,
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

        // ---- barrier and leave --------------------------------------------------------------

        /// Sends a request and hands its reply on; a failure's text is remembered.
        void exchange(const detail::control_body& b, std::chrono::milliseconds timeout,
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

        void call(const detail::control_body& b, std::chrono::milliseconds timeout, done_fn done) {
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

        /// Leaves; with `failure`, as a failed node (see `async_fail`).
        void leave(done_fn done, std::string failure = {}) {
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

        void retire(done_fn done) {
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
                             self->report(log_level::warning,
                                          "could not leave the job: " + reason(ec, m));
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

        void remember(const std::string& why) {
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

        bool is_closed() const {
            std::lock_guard lock(mutex);
            return closed;
        }

        void close(std::error_code ec) {
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
    };

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel
