// Petrel: the manager: rendezvous, membership view, barriers and heartbeats.
#pragma once

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/declarations.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/async_result.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace petrel {

struct manager_options {
    /// Nodes must present this id to join: a node left over from another job is refused.
    std::string job_id = "petrel";
    /// How many servers and workers the job has; the view is made once all registered.
    std::uint32_t servers = 1;
    std::uint32_t workers = 1;
    /// Workers may join the running job while fewer than this many are live (0: never,
    /// the job keeps the workers it formed with). A late worker takes the next worker
    /// index and the scheduler gives it a share of every data set of its group.
    std::uint32_t max_workers = 0;
    /// Servers may join the running job while fewer than this many are live (0: never).
    /// A joining server gets the next server index and a planned share of the ring
    /// (`ring::joined`, in the view's `next_ring`); the primaries copy it the partitions
    /// that move to it, then their updates, and once it reports its copies complete
    /// (`member::async_ready`) the next view makes it their primary.
    std::uint32_t max_servers = 0;
    /// A worker that fails (its heartbeats stop, its connection drops, or it reports a
    /// failure: its training function threw, `member::async_fail`) is dropped, as if
    /// it had left: its share of each data set goes to the other workers of its group,
    /// the tables' clocks and barriers stop waiting for it, and the job goes on without
    /// the updates it had not pushed. The paper's choice for workers, where losing a
    /// little of the data rarely matters. By default a failed worker fails the job. The
    /// policy is the job's, in its view: a manager that takes the job over keeps it.
    bool drop_failed_workers = false;
    /// How keys are placed on the servers.
    ring_options ring{};
    /// A node not heard from for this long is declared failed.
    std::chrono::milliseconds heartbeat_timeout{2000};
    /// Every node must have registered by then, or the job fails to start.
    std::chrono::milliseconds startup_timeout{30000};
    /// A node reports that a server refuses its connections or does not answer
    /// (`member::async_report_unreachable`): the manager connects to the server's address
    /// itself, and declares the server failed if that connection is refused or not made
    /// within this time.
    std::chrono::milliseconds probe_timeout{1000};
    /// This manager takes over a running job whose manager was lost, rather than form
    /// one: a standby started beside the job, or a manager restarted at the root. Nodes
    /// that lost their manager register again with it, each with its id and the view it
    /// holds (`member_options::standby`, `member_options::manager_grace`). It takes the
    /// newest of those views once every live node of it has come back, or
    /// `heartbeat_timeout` after the first came with a majority of them (readers aside);
    /// the others are declared failed, as on a missed heartbeat. Without a majority
    /// within four heartbeat timeouts it sends them away: the job's manager may still be
    /// alive. Block schedules start again from their first round; barriers, data sets and
    /// joins are asked for again by the nodes.
    bool take_over = false;
};

/// The manager of a job: nodes register with it at the root address; once every server
/// and worker has, it assigns node ids (servers, then workers, each ordered by process
/// rank), places keys on the servers with a `ring`, and sends every node the first
/// membership view. Afterwards it keeps the view current: a node that leaves, stops
/// sending heartbeats within `heartbeat_timeout`, loses its connection, or reports that
/// it failed (`member::async_fail`, with its reason) gets a new state in a new view
/// version, sent to every live node. So does a server that a node cannot reach
/// (`member::async_report_unreachable`) and the manager cannot either. It also runs barriers over
/// groups of nodes; a barrier that waits on a failed node fails with `errc::node_failed`, naming
/// the node and why it failed.
///
/// It is also the job's scheduler. Data sets defined by workers (`member::async_assign`)
/// are cut into chunks and divided among the live workers of their group; every change
/// of a group (a worker joins, leaves or fails) rebalances them in the next view, which
/// every node receives, and the manager logs each node's new share. Block schedules
/// (`member::async_round`) hand out disjoint key blocks per round for model parallelism.
/// Readers (workers of read-only groups) may attach to the running job and detach at
/// any time: they are in the view but in no barrier, and a reader that dies fails
/// nothing but itself.
///
/// Every process of a job must declare the same tables and remote functions. A node
/// sends its process's declarations when it joins (`member_options::declared`); the
/// first node that does sets the job's, and a later node whose declarations differ is
/// refused with `errc::declaration_mismatch` and a text that names the first table and
/// field (or remote function) that differ, with both values. A node that sends no
/// declarations is not compared (and sets nothing). A job that then does not form says
/// so in its startup failure.
///
/// @par Example
/// @code
/// petrel::manager_node manager(petrel::tcp_transport(io.get_executor()),
///                              {.job_id = "job-7", .servers = 2, .workers = 4});
/// std::string root = manager.listen("0.0.0.0:9000");
/// manager.async_wait_finished([](std::error_code ec) { /* every node left or failed */ });
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread.
class manager_node {
public:
    manager_node(any_transport transport, manager_options opts)
        : transport_(std::move(transport)), state_(std::make_shared<state>(transport_)) {
        if (opts.servers == 0 || opts.workers == 0) {
            throw std::invalid_argument("petrel::manager_node: a job needs at least one server "
                                        "and one worker");
        }
        if (opts.ring.replicas >= opts.servers) {
            throw std::invalid_argument(
                "petrel::manager_node: " + std::to_string(opts.ring.replicas) +
                " replicas need more servers than " + std::to_string(opts.servers));
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

    manager_node(const manager_node&) = delete;
    manager_node& operator=(const manager_node&) = delete;
    ~manager_node() { close(); }

    /// Accepts nodes at `address` ("host:port"; port 0 picks one) and starts the startup
    /// deadline; returns the address to give them (the root). @throws std::system_error
    std::string listen(std::string_view address) {
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

    /// The current view; null until every node has registered.
    [[nodiscard]] std::shared_ptr<const membership_view> view() const {
        std::lock_guard lock(state_->mutex);
        return state_->view;
    }

    /// Completes once the job is over: every node has left (success) or some failed
    /// (`errc::node_failed`), or not all registered in time (`errc::timed_out`), or the
    /// manager was closed (`errc::shut_down`). Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_wait_finished(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                auto done = detail::once_function<std::error_code>(std::move(handler),
                                                                   transport_.get_executor());
                state_->add_waiter(std::move(done));
            },
            token);
    }

    /// The rounds of block schedule `name` handed out so far (the newest 256), oldest
    /// first; empty for an unknown schedule.
    [[nodiscard]] std::vector<round_assignment> rounds(std::string_view name) const {
        std::lock_guard lock(state_->mutex);
        auto it = state_->schedules.find(std::string(name));
        if (it == state_->schedules.end()) {
            return {};
        }
        return {it->second.history.begin(), it->second.history.end()};
    }

    /// What made the job fail, one line per failed node; empty otherwise.
    [[nodiscard]] std::string failure() const {
        std::lock_guard lock(state_->mutex);
        return state_->failure;
    }

    /// Stops serving; waiters complete with `errc::shut_down`. Idempotent.
    void close() {
        state_->shut_down();
        transport_.close();
    }

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    using clock = std::chrono::steady_clock;
    using control_body = detail::control_body;
    using control_op = detail::control_op;

    /// A message to send once the lock is released.
    struct outgoing {
        connection_ptr conn;
        wire::message message;
    };

    struct joining {
        connection_ptr conn;
        wire::message_header request;
        control_body body;
    };

    struct member {
        connection_ptr conn;
        clock::time_point last_seen;
    };

    struct waiting_barrier {
        connection_ptr conn;
        wire::message_header request;
    };

    struct barrier_state {
        std::vector<waiting_barrier> waiting;
        std::set<node_id> arrived;
    };

    /// A block schedule: its rounds so far and the workers waiting for the next one.
    struct schedule_state {
        block_schedule def;
        std::uint64_t next = 0; // the round being gathered
        std::map<node_id, waiting_barrier> waiting;
        std::deque<round_assignment> history;
    };

    enum class phase { idle, registering, standby, running, finished };

    struct state : std::enable_shared_from_this<state> {
        explicit state(const any_transport& t) : transport(t), timer(t.get_executor()) {}

        any_transport transport; // shares the manager's: for connecting to a server's address
        manager_options opts;
        logger log;
        mutable std::mutex mutex;
        asio::steady_timer timer;
        phase ph = phase::idle;
        std::string address;
        // Given to the servers only: marks the updates they send each other.
        std::uint64_t secret = random_secret();
        clock::time_point startup_deadline;
        std::vector<joining> joins;
        std::shared_ptr<const membership_view> view;
        std::map<node_id, member> members; // live nodes
        std::map<const connection*, node_id> by_conn;
        // Servers joining the running job, in join order; those whose copies are complete
        // under the planned placement; and the view version that placement was made at.
        std::vector<node_id> entering;
        std::set<node_id> ready;
        std::uint64_t planned_at = 0;
        // The server handing its partitions over to the others before it leaves (a ring
        // without replicas), from the view that plans it until it has left.
        node_id handing = no_node;
        // Servers that left with `retire`, by connection: asked again (their first answer
        // was lost or late), they get the same answer.
        std::map<const connection*, node_id> retired;
        std::array<barrier_state, 3> barriers;
        std::vector<joining> early_readers; // readers that came before the job formed
        // Taking a job over: the nodes that came back with their views, the newest of
        // those, when the first came, the servers' secret; joins of new nodes wait.
        std::map<node_id, joining> returning;
        std::shared_ptr<const membership_view> newest;
        clock::time_point first_return{};
        std::uint64_t returned_secret = 0;
        std::vector<joining> held_joins;
        // The job's declarations (tables, remote functions): those of the first node that
        // joined with some; and the first refusal for a difference, for a startup failure.
        std::optional<declarations> declared;
        std::string declaration_refused;
        std::map<std::string, schedule_state> schedules;
        // Servers reported unreachable whose addresses the manager is trying.
        std::set<node_id> probing;
        std::vector<std::function<void(std::error_code)>> waiters;
        std::error_code result;
        std::string failure;
        std::vector<std::pair<log_level, std::string>> notes; // written by flush()

        static std::uint64_t random_secret() {
            std::random_device rd;
            const std::uint64_t hi = rd();
            const std::uint64_t lo = rd();
            return ((hi << 32) | lo) | 1; // never 0 (no secret)
        }

        /// Logs at once: only where no lock is held.
        void say_now(log_level level, const std::string& text) const {
            if (log) {
                log(level, "petrel manager: " + text);
            }
        }

        /// Queues a log line; flush() writes it once the lock is released, so that a
        /// logger may call back into the manager.
        void report(log_level level, const std::string& text) {
            notes.emplace_back(level, "petrel manager: " + text);
        }

        void start() {
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

        void set_address(const std::string& bound) {
            std::lock_guard lock(mutex);
            address = bound;
        }

        void add_waiter(std::function<void(std::error_code)> w) {
            std::unique_lock lock(mutex);
            if (ph == phase::finished) {
                auto ec = result;
                lock.unlock();
                w(ec);
                return;
            }
            waiters.push_back(std::move(w));
        }

        void shut_down() {
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

        // ---- messages ------------------------------------------------------------

        void on_message(const connection_ptr& c, wire::message&& m) {
            if (m.header.kind != wire::message_kind::control) {
                say_now(log_level::warning, "closing connection with " + c->remote_address() +
                                                ": the manager only takes control messages");
                c->close();
                return;
            }
            auto body = detail::read_control(m);
            if (!body) {
                say_now(log_level::warning, "closing connection with " + c->remote_address() +
                                                ": malformed control message");
                c->close();
                return;
            }
            std::vector<outgoing> out;
            std::vector<std::function<void(std::error_code)>> done;
            {
                std::lock_guard lock(mutex);
                if (auto it = by_conn.find(c.get()); it != by_conn.end()) {
                    if (auto mem = members.find(it->second); mem != members.end()) {
                        mem->second.last_seen = clock::now();
                    }
                }
                switch (body->op) {
                case control_op::join:
                    on_join(c, m.header, std::move(*body), out, done);
                    break;
                case control_op::heartbeat:
                    on_heartbeat(c, m.header, out);
                    break;
                case control_op::barrier:
                    on_barrier(c, m.header, body->barrier_group, out);
                    break;
                case control_op::leave:
                    on_leave(c, m.header, body->text, out, done);
                    break;
                case control_op::retire:
                    on_retire(c, m.header, out, done);
                    break;
                case control_op::ready:
                    on_ready(c, m.header, body->version, out);
                    break;
                case control_op::assign:
                    on_assign(c, m.header, std::move(body->data), out);
                    break;
                case control_op::round:
                    on_round(c, m.header, std::move(body->blocks), out);
                    break;
                case control_op::unreachable:
                    on_unreachable(c, m.header, body->id, body->text, out);
                    break;
                case control_op::view:
                    out.push_back(
                        {c, refusal(m.header, errc::bad_message_kind, "nodes do not send views")});
                    break;
                }
            }
            flush(out, done);
        }

        void on_close(const connection_ptr& c) {
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

        static wire::message refusal(const wire::message_header& request, errc e,
                                     std::string text) {
            control_body b;
            b.text = std::move(text);
            return detail::make_control(b, &request, make_error_code(e));
        }

        void on_join(const connection_ptr& c, const wire::message_header& h, control_body b,
                     std::vector<outgoing>& out,
                     std::vector<std::function<void(std::error_code)>>& done) {
            if (b.job_id != opts.job_id) {
                report(log_level::warning, c->remote_address() + " asked to join job '" + b.job_id +
                                               "'; this is job '" + opts.job_id + "': refused");
                out.push_back({c, refusal(h, errc::job_mismatch,
                                          "the manager at " + address + " runs job '" +
                                              opts.job_id + "', not '" + b.job_id + "'")});
                return;
            }
            if (b.declared) {
                if (!declared) {
                    declared = b.declared;
                } else if (auto why = first_difference(*b.declared, *declared); !why.empty()) {
                    const std::string who = std::string(to_string(b.role)) + " rank " +
                                            std::to_string(b.rank) + " index " +
                                            std::to_string(b.local) + " at " + c->remote_address();
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
            if (b.role == node_role::manager ||
                (b.role == node_role::server && b.address.empty())) {
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
            const std::uint32_t expected =
                b.role == node_role::server ? opts.servers : opts.workers;
            const auto same_role = std::count_if(joins.begin(), joins.end(), [&](const joining& j) {
                return j.body.role == b.role;
            });
            if (ph != phase::registering || static_cast<std::uint32_t>(same_role) >= expected) {
                out.push_back({c, refusal(h, errc::job_full,
                                          "job '" + opts.job_id + "' already has its " +
                                              std::to_string(expected) + " " +
                                              std::string(to_string(b.role)) + "s")});
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

        // ---- taking a job over ----------------------------------------------------------

        /// A node that lost its manager registers again with its id and view: with a
        /// manager taking the job over, it counts towards the takeover; with the job's
        /// own manager, a node that is still live gets its registration moved to this
        /// connection, and one declared failed is told so (it may rejoin as a new node).
        void on_return(const connection_ptr& c, const wire::message_header& h, control_body b,
                       std::vector<outgoing>& out,
                       std::vector<std::function<void(std::error_code)>>& done) {
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
                out.push_back({c, refusal(h, errc::node_failed,
                                          me->describe() + " is not live in its own view")});
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
                out.push_back(
                    {it->second.conn, refusal(it->second.request, errc::timed_out,
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
            try_take_over(out, done);
        }

        wire::message return_reply(const wire::message_header& h, node_id id,
                                   node_role role) const {
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

        /// Takes the job over once every live node of the newest view came back, or a
        /// heartbeat timeout after the first with a majority; gives up on those that came
        /// after four without one.
        void try_take_over(std::vector<outgoing>& out,
                           std::vector<std::function<void(std::error_code)>>& done) {
            if (ph != phase::standby || returning.empty() || !newest) {
                return;
            }
            std::size_t voters = 0;
            std::size_t back = 0;
            bool all = true;
            for (const auto& n : newest->nodes) {
                if (n.role == node_role::manager || n.state != node_state::alive) {
                    continue;
                }
                const bool here = returning.count(n.id) != 0;
                all = all && here;
                if (n.role != node_role::reader) {
                    ++voters;
                    back += here ? 1 : 0;
                }
            }
            const auto since = clock::now() - first_return;
            if (all || (since >= opts.heartbeat_timeout && 2 * back > voters)) {
                take_over(out, done);
                return;
            }
            if (since >= 4 * opts.heartbeat_timeout) {
                const std::string why = "only " + std::to_string(back) + " of the " +
                                        std::to_string(voters) + " live nodes of job '" +
                                        opts.job_id + "' came here: its manager may still be alive";
                report(log_level::warning, "did not take the job over: " + why);
                for (const auto& [id, r] : returning) {
                    out.push_back({r.conn, refusal(r.request, errc::timed_out, why)});
                }
                returning.clear();
                newest.reset();
                returned_secret = 0;
            }
        }

        void take_over(std::vector<outgoing>& out,
                       std::vector<std::function<void(std::error_code)>>& done) {
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
            ph = phase::running;
            const auto now = clock::now();
            std::vector<node_id> absent;
            std::size_t back = 0;
            for (const auto& n : v->nodes) {
                if (n.role == node_role::manager || n.state != node_state::alive) {
                    continue;
                }
                auto it = returning.find(n.id);
                if (it == returning.end()) {
                    absent.push_back(n.id);
                    continue;
                }
                members[n.id] = {it->second.conn, now};
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
                    if (entering.empty() && n.role == node_role::server &&
                        n.state == node_state::alive && v->ring.holds(n.id) &&
                        !v->next_ring.holds(n.id)) {
                        handing = n.id;
                        planned_at = v->version;
                    }
                }
            }
            report(log_level::warning, "took job '" + opts.job_id +
                                           "' over from its lost manager: " + std::to_string(back) +
                                           " nodes came back (view " + std::to_string(v->version) +
                                           ")");
            returning.clear();
            newest.reset();
            for (const auto id : absent) {
                if (view->find(id)->state == node_state::alive) {
                    fail_node(id, "it did not come back to the manager that took the job over", out,
                              done);
                }
            }
            auto waiting = std::move(held_joins);
            held_joins.clear();
            for (auto& j : waiting) {
                on_join(j.conn, j.request, std::move(j.body), out, done);
            }
            check_finished(done);
        }

        /// Everyone is here: number the nodes, place the keys, answer every join.
        void form_job(std::vector<outgoing>& out) {
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
                members[id] = {j.conn, now};
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
                if (joins[i].body.role == node_role::server) {
                    b.secret = secret;
                }
                out.push_back({joins[i].conn, detail::make_control(b, &joins[i].request)});
            }
            report(log_level::info, "job '" + opts.job_id +
                                        "' formed: " + std::to_string(opts.servers) + " servers, " +
                                        std::to_string(opts.workers) + " workers");
            joins.clear();
            auto early = std::move(early_readers);
            early_readers.clear();
            for (auto& r : early) {
                admit(r.conn, r.request, std::move(r.body), out);
            }
        }

        [[nodiscard]] std::size_t live_count(node_role r) const {
            return view ? view->count(r, node_state::alive) : 0;
        }

        /// A worker or reader joins the running job: a new id, a new view (with the data
        /// of its group rebalanced), and the answer to its join.
        void admit(const connection_ptr& c, const wire::message_header& h, control_body b,
                   std::vector<outgoing>& out) {
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
            const bool server = b.role == node_role::server;
            const std::string g = server                        ? std::string{}
                                  : b.role == node_role::reader ? b.worker_group
                                                                : std::string(training_group);
            v->nodes.push_back({id,
                                b.role,
                                node_state::alive,
                                server ? b.address : std::string{},
                                b.rank,
                                index,
                                {},
                                g});
            ++v->version;
            members[id] = {c, clock::now()};
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

        [[nodiscard]] bool is_joining(node_id id) const {
            return std::find(entering.begin(), entering.end(), id) != entering.end();
        }

        /// Plans the placement that gives the joining servers their share
        /// (`membership_view::next_ring`) in view `v`, or none when nobody joins (or they
        /// cannot be placed). A changed plan waits for new reports from every joiner.
        void plan_joins(membership_view& v) {
            std::erase_if(entering, [&](node_id id) {
                const auto* n = v.find(id);
                return !n || n->state != node_state::alive;
            });
            if (handing != no_node) {
                return; // joiners wait until the server handing its partitions over left
            }
            std::vector<node_id> live;
            for (const auto& n : v.nodes) {
                if (n.role == node_role::server && n.state == node_state::alive &&
                    v.ring.holds(n.id)) {
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

        /// A joining server's copies are complete under view `version`: once every joining
        /// server's are, the planned placement becomes the ring.
        void on_ready(const connection_ptr& c, const wire::message_header& h, std::uint64_t version,
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

        /// The server handing its partitions over copied them all to their new owners
        /// under view `version`: the next view makes those their primaries. The server
        /// then sends them its last updates and the end of its ownership, and asks to
        /// leave again (`on_retire`).
        void handed_over(const connection_ptr& c, const wire::message_header& h,
                         std::uint64_t version, std::vector<outgoing>& out) {
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

        /// Server `n` asks to leave and its partitions have no other copy, in a ring
        /// without replicas: the view plans their hand-over to the servers `live`
        /// (`ring::handed_over`, in `next_ring`), and the server is told to copy them
        /// (`errc::in_progress`). Asked again before it has, the same answer; one server
        /// at a time, and not while servers join.
        void plan_hand_over(const connection_ptr& c, const wire::message_header& h,
                            const node_info& n, const std::vector<node_id>& live,
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
                out.push_back(
                    {c, refusal(h, errc::invalid_argument, who + " cannot leave yet: " + why)});
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

        // ---- the scheduler -----------------------------------------------------------

        /// Rebalances the data sets of group `g` over its live members in view `v`.
        static void reschedule(membership_view& v, const std::string& g) {
            const auto live = v.live_group(g);
            for (auto& d : v.schedule.data) {
                if (d.set.group == g) {
                    d.rebalance(live);
                }
            }
        }

        /// Logs the share of every live member of `g` in each data set of `g`.
        void log_shares(const std::string& g) {
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
                    text += " node " + (id == no_node ? std::string("none") : std::to_string(id)) +
                            " " + std::to_string(h.first) +
                            (d.set.files.empty() ? " examples" : " records") + " in " +
                            std::to_string(h.second) + " chunks;";
                }
                report(log_level::info, text);
            }
        }

        /// The live member on `c` of a worker group, or nullptr.
        const node_info* group_member(const connection_ptr& c) const {
            auto it = by_conn.find(c.get());
            const node_info* n = (it != by_conn.end() && view) ? view->find(it->second) : nullptr;
            if (!n || n->state != node_state::alive ||
                (n->role != node_role::worker && n->role != node_role::reader)) {
                return nullptr;
            }
            return n;
        }

        void on_assign(const connection_ptr& c, const wire::message_header& h,
                       std::optional<data_set> d, std::vector<outgoing>& out) {
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
                                "a job holds at most " +
                                    std::to_string(work_schedule::max_data_sets) + " data sets")});
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

        void on_round(const connection_ptr& c, const wire::message_header& h,
                      std::optional<block_schedule> def, std::vector<outgoing>& out) {
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
                    out.push_back({c, refusal(h, errc::invalid_argument,
                                              "a job holds at most " +
                                                  std::to_string(work_schedule::max_data_sets) +
                                                  " block schedules")});
                    return;
                }
                it = schedules.emplace(def->name, schedule_state{}).first;
                it->second.def = *def;
            } else if (!(it->second.def == *def)) {
                out.push_back({c, refusal(h, errc::invalid_argument,
                                          "block schedule '" + def->name +
                                              "' is already defined differently")});
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
                out.push_back(
                    {c, refusal(h, errc::invalid_argument,
                                n->describe() + " is already waiting for round " +
                                    std::to_string(st.next) + " of '" + def->name + "'")});
                return;
            }
            try_release_round(st, out);
        }

        wire::message round_reply(const wire::message_header& h, round_assignment r) const {
            control_body b;
            b.op = control_op::round;
            b.version = view->version;
            b.round = std::move(r);
            return detail::make_control(b, &h);
        }

        /// Starts the next round once every live member of the schedule's group asked.
        void try_release_round(schedule_state& st, std::vector<outgoing>& out) {
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

        /// A group changed: its data sets are rebalanced (done by the caller on the new
        /// view), its shares logged and its rounds no longer wait for departed members.
        void group_changed(const std::string& g, std::vector<outgoing>& out) {
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

        void on_heartbeat(const connection_ptr& c, const wire::message_header& h,
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
                    out.push_back(
                        {c, refusal(h, errc::node_failed,
                                    n->describe() + " was declared failed: " + n->failure)});
                    return;
                }
            }
            control_body b;
            b.op = control_op::heartbeat;
            b.version = view ? view->version : 0;
            out.push_back({c, detail::make_control(b, &h)});
        }

        void on_barrier(const connection_ptr& c, const wire::message_header& h, group g,
                        std::vector<outgoing>& out) {
            auto it = by_conn.find(c.get());
            const node_info* n = (it != by_conn.end() && view) ? view->find(it->second) : nullptr;
            if (!n || n->state != node_state::alive) {
                out.push_back({c, refusal(h, errc::invalid_argument,
                                          "a barrier needs a live member of the job")});
                return;
            }
            if (!in_group(n->role, g)) {
                out.push_back({c, refusal(h, errc::invalid_argument,
                                          n->describe() + " is not in the barrier's group")});
                return;
            }
            if (auto why = failed_in(g); !why.empty()) {
                out.push_back({c, refusal(h, errc::node_failed, why)});
                return;
            }
            auto& b = barriers[index_of(g)];
            if (!b.arrived.insert(n->id).second) {
                out.push_back({c, refusal(h, errc::invalid_argument,
                                          n->describe() + " is already waiting at this barrier")});
                return;
            }
            b.waiting.push_back({c, h});
            try_release(g, out);
        }

        /// A node is done and leaves; with `failure`, it failed (its training function
        /// threw, say) and is declared failed with that reason, as on a missed heartbeat.
        void on_leave(const connection_ptr& c, const wire::message_header& h,
                      const std::string& failure, std::vector<outgoing>& out,
                      std::vector<std::function<void(std::error_code)>>& done) {
            auto it = by_conn.find(c.get());
            if (it == by_conn.end() || members.count(it->second) == 0) {
                out.push_back({c, refusal(h, errc::invalid_argument,
                                          "only a live member of the job can leave it")});
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

        /// A server leaves gracefully: its partitions move to their replicas as on a
        /// failure (`ring::failover`), but only when every one of them has another live
        /// copy; otherwise it is refused and the server stays.
        void on_retire(const connection_ptr& c, const wire::message_header& h,
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
            const node_info* n = it == by_conn.end() || members.count(it->second) == 0
                                     ? nullptr
                                     : view->find(it->second);
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
                out.push_back(
                    {c, refusal(h, errc::invalid_argument,
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
            report(log_level::info,
                   view->find(id)->describe() +
                       (handed ? " left; it had handed its key partitions over"
                               : " left; its key ranges moved to their replicas (" +
                                     std::to_string(v->ring.options().replicas) +
                                     " copies besides each primary)"));
            for (auto bg : {group::all, group::servers, group::workers}) {
                try_release(bg, out);
            }
            check_finished(done);
        }

        // ---- servers that nodes cannot reach -----------------------------------------

        /// A node cannot connect to `server` (`seen`: what it saw): answered at once; the
        /// manager then tries the server's address itself (`probe`), once at a time.
        void on_unreachable(const connection_ptr& c, const wire::message_header& h, node_id server,
                            const std::string& seen, std::vector<outgoing>& out) {
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
            asio::post(timer.get_executor(),
                       [weak = weak_from_this(), server, address = n->address, who] {
                           if (auto s = weak.lock()) {
                               s->probe(server, address, who);
                           }
                       });
        }

        /// Connects to `address` of `server`, and closes the connection once made; a
        /// refusal, or no connection within `probe_timeout`, fails the server. Called
        /// without the lock.
        void probe(node_id server, const std::string& address, const std::string& who) {
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

        void probed(node_id server, const std::string& address, const std::string& who,
                    std::error_code ec) {
            std::vector<outgoing> out;
            std::vector<std::function<void(std::error_code)>> done;
            {
                std::lock_guard lock(mutex);
                probing.erase(server);
                if (ph != phase::running || members.count(server) == 0) {
                    return; // it failed or left meanwhile, or the job is over
                }
                if (!ec) {
                    report(log_level::warning, "the manager connected to " + address + ", which " +
                                                   who +
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

        // ---- failures, barriers, the end ------------------------------------------

        void fail_node(node_id id, const std::string& why, std::vector<outgoing>& out,
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
                    out.push_back({w.conn, refusal(w.request, errc::node_failed,
                                                   described + " failed: " + why)});
                }
                b.waiting.clear();
                b.arrived.clear();
            }
            check_finished(done);
        }

        /// Moves the partitions of failed server `id` to their replicas in `v` (see
        /// `ring::failover`); says what happened, for the log.
        std::string fail_over(membership_view& v, node_id id) {
            std::vector<node_id> live;
            for (const auto& n : v.nodes) {
                if (n.role == node_role::server && n.state == node_state::alive &&
                    !is_joining(n.id)) {
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

        /// Every failed node of group `g`, described; empty when none failed.
        [[nodiscard]] std::string failed_in(group g) const {
            std::string why;
            for (const auto& n : view->nodes) {
                if (n.state == node_state::failed && in_group(n.role, g) && !view->replaced(n)) {
                    why += (why.empty() ? "" : "; ") + n.describe() + " failed: " + n.failure;
                }
            }
            return why;
        }

        void try_release(group g, std::vector<outgoing>& out) {
            auto& b = barriers[index_of(g)];
            if (b.waiting.empty()) {
                return;
            }
            for (const auto& n : view->nodes) {
                if (n.state == node_state::alive && in_group(n.role, g) &&
                    b.arrived.count(n.id) == 0) {
                    return;
                }
            }
            control_body body;
            body.op = control_op::barrier;
            body.barrier_group = g;
            body.version = view->version;
            for (auto& w : b.waiting) {
                out.push_back({w.conn, detail::make_control(body, &w.request)});
            }
            b.waiting.clear();
            b.arrived.clear();
        }

        /// Sends the view to every live node but `skip` (which gets it in its answer).
        void broadcast(std::vector<outgoing>& out, node_id skip = no_node) {
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

        void check_finished(std::vector<std::function<void(std::error_code)>>& done) {
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

        void finish(std::error_code ec, std::vector<std::function<void(std::error_code)>>& done) {
            ph = phase::finished;
            result = ec;
            done.swap(waiters);
            timer.cancel();
        }

        void flush(std::vector<outgoing>& out,
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

        static std::size_t index_of(group g) noexcept { return static_cast<std::size_t>(g) - 1; }

        // ---- the clock -------------------------------------------------------------

        void arm() {
            const auto tick = std::clamp<clock::duration>(opts.heartbeat_timeout / 8,
                                                          std::chrono::milliseconds(5),
                                                          std::chrono::milliseconds(250));
            timer.expires_after(tick);
            std::weak_ptr<state> weak = weak_from_this();
            timer.async_wait([weak](std::error_code ec) {
                if (auto s = weak.lock(); s && !ec) {
                    s->on_tick();
                }
            });
        }

        void on_tick() {
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
                    const std::string why = "no heartbeat for " +
                                            std::to_string(opts.heartbeat_timeout.count()) + " ms";
                    for (auto id : silent) {
                        if (members.count(id) != 0) {
                            fail_node(id, why, out, done);
                        }
                    }
                }
                if (ph != phase::finished) {
                    arm();
                }
            }
            flush(out, done);
        }

        void startup_failed(std::vector<outgoing>& out,
                            std::vector<std::function<void(std::error_code)>>& done) {
            std::uint32_t servers = 0;
            for (const auto& j : joins) {
                servers += j.body.role == node_role::server ? 1 : 0;
            }
            const auto workers = static_cast<std::uint32_t>(joins.size()) - servers;
            failure = "only " + std::to_string(servers) + " of " + std::to_string(opts.servers) +
                      " servers and " + std::to_string(workers) + " of " +
                      std::to_string(opts.workers) + " workers registered within " +
                      std::to_string(opts.startup_timeout.count()) + " ms";
            if (!declaration_refused.empty()) {
                failure += " (" + declaration_refused + ")";
            }
            report(log_level::error, "job '" + opts.job_id + "' did not start: " + failure);
            for (const auto& j : joins) {
                out.push_back({j.conn, refusal(j.request, errc::timed_out,
                                               "the job did not start: " + failure)});
            }
            for (const auto& r : early_readers) {
                out.push_back({r.conn, refusal(r.request, errc::timed_out,
                                               "the job did not start: " + failure)});
            }
            joins.clear();
            early_readers.clear();
            finish(make_error_code(errc::timed_out), done);
        }
    };

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel
