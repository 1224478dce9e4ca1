// Petrel: one SPMD binary, whatever starts it: `petrel::run`.
#pragma once

#include <petrel/cluster/manager_node.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/core/log.hpp>
#include <petrel/launch/config.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/use_future.hpp>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace petrel {

/// The training code of one worker; `petrel::run` calls it once per worker it hosts, each
/// on its own thread. Throwing fails the worker, and the job with it: every process of
/// the job ends with `run_failed`, naming the worker and the exception's message (unless
/// the job drops failed workers, `worker_failure::drop`: then only this process does).
using worker_function = std::function<void(worker_node&)>;

/// What `run` returns.
enum run_status : int {
    run_ok = 0,           ///< every node of this process finished and left
    run_failed = 1,       ///< a node failed, a worker threw, or the job did not form
    run_config_error = 2, ///< the configuration was refused (the message says why)
};

namespace detail {

/// The clock of each table checkpoint in `dir` (`table-<id>/manifest.json`); the tables
/// whose manifest cannot be read are left out.
[[nodiscard]] inline std::map<std::uint32_t, clock_type>
checkpoint_clocks(const std::filesystem::path& dir) {
    std::map<std::uint32_t, clock_type> clocks;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.starts_with("table-")) {
            continue;
        }
        try {
            const auto m = detail::read_manifest(it->path());
            clocks[m.table_id] = m.clock;
        } catch (const std::exception&) {
            // the servers' restore reports it
        }
    }
    return clocks;
}

/// Joins the address of a host (IPv6 in brackets) and a port.
[[nodiscard]] inline std::string host_port(const std::string& host, std::uint16_t port) {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

[[nodiscard]] inline std::uint16_t port_of(const std::string& address) {
    const auto colon = address.rfind(':');
    return static_cast<std::uint16_t>(std::stoul(address.substr(colon + 1)));
}

/// The outcome of a future, as an error code.
[[nodiscard]] inline std::error_code outcome(std::future<void>& f) {
    try {
        f.get();
        return {};
    } catch (const std::system_error& e) {
        return e.code();
    }
}

} // namespace detail

[[nodiscard]] inline std::error_code retire_server(member& m, const server_node& server,
                                                   std::chrono::milliseconds patience,
                                                   std::function<bool()> stop = {});

namespace detail {

/// SIGTERM to a process that hosts only servers (what `kill`, Kubernetes and most
/// schedulers send before they stop a process): its servers leave one at a time
/// (`retire_server`), each once it may (`server_node::hand_over_blocker`: its last copy
/// down its chain is acknowledged, every table it holds keeps a copy elsewhere or the
/// ring has no replicas). With replicas a server's partitions move to them; without,
/// it hands them over first, within `hand_over`. A server the manager let go is
/// `retired`; one that may not leave, or that the manager refused (its keys have no
/// other live copy, for example the last server), says why and keeps serving, and a
/// later SIGTERM asks again. Stops listening when destroyed.
class leave_on_sigterm {
public:
    leave_on_sigterm(asio::io_context& io, std::vector<std::shared_ptr<member>> members,
                     std::vector<std::shared_ptr<server_node>> servers,
                     std::chrono::milliseconds patience, std::chrono::milliseconds hand_over,
                     std::function<void(log_level, const std::string&)> say)
        : signals_(io, SIGTERM), members_(std::move(members)), servers_(std::move(servers)),
          patience_(patience), hand_over_(hand_over), say_(std::move(say)),
          control_(std::make_shared<control>()) {
        control_->signals = &signals_;
        control_->retired.assign(servers_.size(), false);
        {
            std::lock_guard lock(control_->mutex);
            arm(control_);
        }
        thread_ = std::thread([this] { leave_when_asked(); });
    }
    leave_on_sigterm(const leave_on_sigterm&) = delete;
    leave_on_sigterm& operator=(const leave_on_sigterm&) = delete;
    ~leave_on_sigterm() {
        {
            std::lock_guard lock(control_->mutex);
            control_->stopped = true; // a handler still queued touches only `control`
            std::error_code ec;
            signals_.cancel(ec);
        }
        control_->wake.notify_all();
        thread_.join();
    }

    /// Whether the manager let server `i` (of the ones given) leave.
    [[nodiscard]] bool retired(std::size_t i) const {
        std::lock_guard lock(control_->mutex);
        return i < control_->retired.size() && control_->retired[i];
    }

private:
    /// What the signal handler and the leaving thread share.
    struct control {
        std::mutex mutex;
        std::condition_variable wake;
        bool stopped = false;
        std::uint64_t asked = 0; // SIGTERMs received
        asio::signal_set* signals = nullptr;
        std::vector<bool> retired;
    };

    /// Waits for the next SIGTERM. Called with the control's mutex held.
    static void arm(const std::shared_ptr<control>& c) {
        c->signals->async_wait([c](std::error_code ec, int) {
            if (ec) {
                return;
            }
            std::lock_guard lock(c->mutex);
            if (c->stopped) {
                return;
            }
            ++c->asked;
            arm(c);
            c->wake.notify_all();
        });
    }

    void leave_when_asked() {
        auto& c = *control_;
        std::uint64_t done = 0;
        std::uint64_t moved_at = 0; // the view in which the last of these servers left
        std::unique_lock lock(c.mutex);
        for (;;) {
            c.wake.wait(lock, [&] { return c.stopped || c.asked != done; });
            if (c.stopped) {
                return;
            }
            done = c.asked;
            for (std::size_t i = 0; i < servers_.size() && !c.stopped; ++i) {
                if (c.retired[i]) {
                    continue;
                }
                const auto id = std::to_string(members_[i]->id());
                // It follows the view in which the previous one left (it may have taken
                // over keys and started copying them), and a copy down its chain still in
                // flight ends soon: wait for both (up to `patience_`); any other reason
                // not to leave stays.
                const auto until = std::chrono::steady_clock::now() + patience_;
                while ((servers_[i]->plan_version() < moved_at || !servers_[i]->chain_whole()) &&
                       !c.stopped && std::chrono::steady_clock::now() < until) {
                    c.wake.wait_for(lock, std::chrono::milliseconds(50));
                }
                const std::string blocker = servers_[i]->hand_over_blocker();
                if (c.stopped) {
                    return;
                }
                lock.unlock();
                if (!blocker.empty()) {
                    say_(log_level::warning, "petrel: SIGTERM: server " + id + " cannot leave: " +
                                                 blocker + "; it keeps serving");
                    lock.lock();
                    continue;
                }
                say_(log_level::info,
                     "petrel: SIGTERM: server " + id + " hands its keys over and leaves");
                // Refused: the member logs why, and the server keeps serving.
                const auto ec =
                    retire_server(*members_[i], *servers_[i], hand_over_, [c = control_] {
                        std::lock_guard stop_lock(c->mutex);
                        return c->stopped; // the process is ending: nothing left to hand over
                    });
                if (ec == errc::timed_out) {
                    say_(log_level::warning, "petrel: SIGTERM: server " + id +
                                                 " did not hand its keys over in time; it "
                                                 "keeps serving");
                }
                const bool ok = !ec;
                if (ok) {
                    moved_at = members_[i]->view()->version;
                }
                lock.lock();
                c.retired[i] = ok;
            }
        }
    }

    asio::signal_set signals_;
    std::vector<std::shared_ptr<member>> members_;
    std::vector<std::shared_ptr<server_node>> servers_;
    std::chrono::milliseconds patience_;
    std::chrono::milliseconds hand_over_; // for a hand-over without replicas
    std::function<void(log_level, const std::string&)> say_;
    std::shared_ptr<control> control_;
    std::thread thread_;
};

} // namespace detail

namespace detail {

/// A server that joined a running job: reports each plan under which its copies are
/// complete (`member::async_ready`) until the ring makes it the primary of its share.
/// Empty, or why it did not within `patience`.
inline std::string take_over(member& m, const server_node& server,
                             std::chrono::milliseconds patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    std::uint64_t reported = 0;
    while (true) {
        if (const auto v = m.view(); v && v->ring.holds(m.id())) {
            return {};
        }
        if (!m.failure().empty()) {
            return m.failure();
        }
        if (std::chrono::steady_clock::now() >= until) {
            return "server " + std::to_string(m.id()) +
                   " joined but was not given its keys within " + std::to_string(patience.count()) +
                   " ms";
        }
        if (const auto ready = server.join_ready(); ready != 0 && ready != reported) {
            auto answer = m.async_ready(ready, asio::use_future);
            if (!outcome(answer)) {
                reported = ready;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

} // namespace detail

/// The chains along which the servers of view `v` replicate (see
/// `server_node::replicate`): for each live server that is the primary of some partition,
/// the live servers of that partition's owner list, primary first. The ring gives every
/// partition of one primary the same successors. While servers join, also the primaries
/// of the ring their copies are made for, and where the joining servers listen.
[[nodiscard]] inline replication_plan replication_plan_of(const membership_view& v) {
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

/// Server `server`, of member `m`, leaves the running job gracefully
/// (`member::async_retire`). With replicas its partitions move to them at once. In a
/// ring without replicas the manager plans their hand-over (`errc::in_progress`): the
/// server copies them to their new owners and reports it (`member::async_ready`, from
/// `server_node::hand_over_ready`), the manager makes the new owners their primaries,
/// the server sends them its last updates and the end of its ownership, and then asks
/// to leave again. Blocks; completes with the manager's refusal (the server stays in the
/// job), `errc::timed_out` when the hand-over did not end within `patience`, or
/// `errc::shut_down` once `stop` (asked every 10 ms, when given) returns true. A plan
/// given up on stays with the manager until the server leaves or fails. Close the server
/// once it returns success.
[[nodiscard]] inline std::error_code retire_server(member& m, const server_node& server,
                                                   std::chrono::milliseconds patience,
                                                   std::function<bool()> stop) {
    auto ask = [&m] {
        std::error_code ec;
        for (int attempt = 0; attempt < 3; ++attempt) {
            // Not answered in time: asked again (a server that left already gets the
            // same answer as the first time).
            auto left = m.async_retire(asio::use_future);
            ec = detail::outcome(left);
            if (ec != errc::timed_out) {
                break;
            }
        }
        return ec;
    };
    auto asked_at = m.view() ? m.view()->version : 0;
    auto ec = ask();
    if (ec != errc::in_progress) {
        return ec;
    }
    const auto until = std::chrono::steady_clock::now() + patience;
    std::uint64_t reported = 0;
    while (std::chrono::steady_clock::now() < until) {
        if (!m.failure().empty()) {
            return make_error_code(errc::node_failed);
        }
        if (stop && stop()) {
            return make_error_code(errc::shut_down);
        }
        const auto v = m.view();
        if (v && !v->ring.holds(m.id()) && server.plan_version() >= v->version &&
            !server.handing_over()) {
            ec = ask(); // its partitions are the others' and its last updates reached them
            if (ec != errc::in_progress) {
                return ec;
            }
        } else if (v && v->ring.holds(m.id()) && v->next_ring.empty() && v->version > asked_at) {
            // A view since the answer plans nothing: the plan was dropped (a server failed
            // or left), or not made yet. Asked again once per such view.
            asked_at = v->version;
            ec = ask();
            if (ec != errc::in_progress) {
                return ec;
            }
            reported = 0;
        } else if (const auto ready = server.hand_over_ready(); ready != 0 && ready != reported) {
            auto answer = m.async_ready(ready, asio::use_future);
            if (const auto e = detail::outcome(answer); !e) {
                reported = ready;
            } else if (e == errc::invalid_argument) {
                ec = ask(); // the plan was lost (a failure, a new manager): planned anew
                if (ec != errc::in_progress) {
                    return ec;
                }
                reported = 0;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return make_error_code(errc::timed_out);
}

/// Brings server `server` in line with view `v` of its job: workers that left or failed
/// hold nobody back in the tables' clocks (`server_node::depart_worker`), workers that
/// joined the running job are served from the current clock (`server_node::admit_worker`),
/// and updates are replicated along the view's live chains, marked with the job's
/// server secret `secret` (`member::server_secret`). `run` calls it with every view a
/// server's member receives; call it the same way when assembling a job by hand.
inline void follow_view(server_node& server, const membership_view& v, std::uint64_t secret) {
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

/// Runs this process's share of a job with resolved settings: hosts the manager, servers
/// and workers that `s` assigns to this process (every node when no launcher started
/// it), joins the job, calls `fn` for each worker, then waits at a final barrier of all
/// nodes so that no server stops while a worker still needs it, and leaves. A worker
/// whose `fn` threw does not wait: it tells the manager it failed, and why
/// (`member::async_fail`), which fails the others' final barrier.
///
/// Returns `run_ok`, or `run_failed` after logging one line that says what failed (the
/// first failure; any others on the lines after it): a node of the job that died, or
/// whose training function threw, in this process or another (named, with the reason
/// the manager gave), a job that did not form within the startup timeout, a root that
/// could not be reached, or a node refused because this process declares other tables or
/// remote functions than the job's (the first difference named).
inline int run(const settings& s, const worker_function& fn, logger log = stderr_logger()) {
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> io_threads;
    for (std::uint32_t i = 0; i < s.threads; ++i) {
        io_threads.emplace_back([&io] { io.run(); });
    }
    transport_options topts;
    topts.log = log;
    auto say = [&](log_level level, const std::string& text) {
        if (log) {
            log(level, text);
        }
    };
    for (const auto& line : s.overridden) {
        say(log_level::warning, "petrel: " + line); // nothing given is dropped unsaid
    }
    std::mutex failures_mutex;
    std::string failures; // one line per distinct failure, for the final report
    auto failed = [&](const std::string& text) {
        std::lock_guard lock(failures_mutex);
        for (std::size_t at = 0; at < text.size();) {
            auto end = text.find('\n', at);
            if (end == std::string::npos) {
                end = text.size();
            }
            const std::string line = text.substr(at, end - at);
            if (!line.empty() && failures.find(line) == std::string::npos) {
                failures += line + "\n";
            }
            at = end + 1;
        }
    };

    int status = run_ok;
    {
        std::unique_ptr<manager_node> manager;
        std::unique_ptr<manager_node> standby; // takes the job over if the manager is lost
        std::vector<std::shared_ptr<server_node>> servers;
        std::vector<std::shared_ptr<member>> members; // servers first, then workers
        std::string root = s.root;
        try {
            const manager_options job_manager{.job_id = s.job_id,
                                              .servers = s.servers,
                                              .workers = s.workers,
                                              .max_workers = s.max_workers,
                                              .max_servers = s.max_servers,
                                              .drop_failed_workers =
                                                  s.worker_failure == worker_failure::drop,
                                              .ring = {.replicas = s.replicas},
                                              .heartbeat_timeout = s.heartbeat_timeout,
                                              .startup_timeout = s.startup_timeout};
            if (s.managers_here > 0) {
                auto mo = job_manager;
                mo.take_over = s.join == node_role::manager; // restarted at the root
                manager =
                    std::make_unique<manager_node>(tcp_transport(io.get_executor(), topts), mo);
                const auto bound =
                    manager->listen(detail::host_port(s.bind, detail::port_of(s.root)));
                if (detail::port_of(s.root) == 0) {
                    root = detail::host_port(s.advertise, detail::port_of(bound));
                }
            }
            if (s.standby_here) {
                auto mo = job_manager;
                mo.take_over = true;
                standby =
                    std::make_unique<manager_node>(tcp_transport(io.get_executor(), topts), mo);
                (void)standby->listen(detail::host_port(s.bind, detail::port_of(s.standby)));
            }
            // What this process declares: the manager refuses nodes that declare otherwise.
            declarations declared = s.tables ? s.tables->describe() : declarations{};
            if (s.functions) {
                declared.functions = s.functions->names();
            }
            auto make_member = [&](node_role role, std::uint32_t local, std::string address) {
                member_options o;
                o.root = root;
                o.job_id = s.job_id;
                o.role = role;
                o.address = std::move(address);
                o.rank = s.launch.rank;
                o.local = local;
                o.heartbeat_interval = s.heartbeat_interval;
                o.heartbeat_timeout = s.heartbeat_timeout;
                o.startup_timeout = s.startup_timeout;
                if (!s.standby.empty()) {
                    o.standby = {s.standby};
                }
                o.manager_grace = s.manager_grace;
                o.declared = declared;
                return std::make_shared<member>(tcp_transport(io.get_executor(), topts), o);
            };
            for (std::uint32_t i = 0; i < s.servers_here; ++i) {
                server_options so;
                so.workers = s.workers;
                so.functions = s.functions;
                so.tables = s.tables;
                so.replication_timeout = std::min(s.request_timeout / 2, 2 * s.heartbeat_timeout);
                auto server =
                    std::make_shared<server_node>(tcp_transport(io.get_executor(), topts), so);
                const auto bound = server->listen(detail::host_port(s.bind, 0));
                members.push_back(make_member(
                    node_role::server, i, detail::host_port(s.advertise, detail::port_of(bound))));
                servers.push_back(std::move(server));
            }
            for (std::uint32_t i = 0; i < s.workers_here; ++i) {
                members.push_back(make_member(node_role::worker, i, {}));
            }
        } catch (const std::exception& e) {
            say(log_level::error, std::string("petrel: could not start: ") + e.what());
            status = run_failed;
            if (manager) {
                manager->close(); // nothing to wait for: this process cannot take part
            }
            if (standby) {
                standby->close();
            }
        }

        // Join: every node of the job registers; the manager answers once all have.
        if (status == run_ok) {
            std::vector<std::future<void>> joins;
            for (auto& m : members) {
                joins.push_back(m->async_join(asio::use_future));
            }
            for (std::size_t i = 0; i < joins.size(); ++i) {
                if (auto ec = detail::outcome(joins[i])) {
                    failed(members[i]->failure().empty() ? ec.message() : members[i]->failure());
                    status = run_failed;
                }
            }
        }

        // Servers learn their ids (they name checkpoint shards) and, when asked, load a
        // checkpoint, each keeping the keys the ring gives it; workers start after all
        // have (the barrier below).
        if (status == run_ok) {
            for (std::size_t i = 0; i < servers.size(); ++i) {
                const node_id self = members[i]->id();
                servers[i]->set_node_id(self);
                if (s.restore.empty() || s.join) {
                    continue; // a server that joins gets its rows from their primaries
                }
                try {
                    const auto v = members[i]->view();
                    servers[i]->restore(s.restore, [v, self](std::uint32_t, std::uint64_t key) {
                        return v->ring.owner(key) == self;
                    });
                } catch (const std::exception& e) {
                    failed("server " + std::to_string(self) + ": restoring " + s.restore + ": " +
                           e.what());
                    status = run_failed;
                }
            }
        }

        // A restored job goes on from each table's checkpoint clock: its workers' clocks
        // start there (the servers' did in `restore`). A rank that cannot read the
        // checkpoint learns the clocks from the servers' first replies instead.
        std::map<std::uint32_t, clock_type> resume_at;
        if (status == run_ok && !s.restore.empty() && !s.join && s.workers_here > 0) {
            resume_at = detail::checkpoint_clocks(s.restore);
        }

        // Servers follow the view: a worker that left or failed no longer holds anybody
        // back in the tables' clocks, a worker that joined is served, and updates are
        // replicated along the live chains.
        std::vector<std::size_t> subscriptions;
        if (status == run_ok) {
            for (std::size_t i = 0; i < servers.size(); ++i) {
                // A view may still arrive while the server goes away: hold it weakly.
                std::weak_ptr<server_node> weak = servers[i];
                auto follow = [weak,
                               secret = members[i]->server_secret()](const member::view_ptr& v) {
                    if (const auto server = weak.lock()) {
                        follow_view(*server, *v, secret);
                    }
                };
                subscriptions.push_back(members[i]->subscribe(follow));
                follow(members[i]->view());
            }
        }

        // A process that hosts only servers hands their keys over and leaves on SIGTERM:
        // a server the manager let go stops once the new view had a heartbeat's time to
        // reach the workers, without the final barrier, and the process ends with success.
        std::optional<detail::leave_on_sigterm> sigterm;
        if (status == run_ok && !servers.empty() && !manager && s.workers_here == 0) {
            sigterm.emplace(io, members, servers, 2 * s.heartbeat_timeout, s.startup_timeout,
                            [&](log_level level, const std::string& text) { say(level, text); });
        }

        // Work: each worker runs the training code on its own thread, then every node
        // meets at the final barrier, then leaves.
        if (status == run_ok) {
            std::vector<std::thread> threads;
            std::vector<int> results(members.size(), run_ok);
            for (std::size_t i = 0; i < members.size(); ++i) {
                threads.emplace_back([&, i] {
                    auto& m = members[i];
                    bool is_worker = m->options().role == node_role::worker;
                    if (s.join && !is_worker && i < servers.size()) {
                        // Reports its copies complete until the ring gives it its keys.
                        if (auto why = detail::take_over(*m, *servers[i], s.startup_timeout);
                            !why.empty()) {
                            failed(why);
                            results[i] = run_failed;
                        } else {
                            say(log_level::info, "petrel: server " + std::to_string(m->id()) +
                                                     " joined the running job and took over "
                                                     "its share of the keys");
                        }
                    }
                    if (!s.restore.empty() && !s.join) {
                        // Every server has loaded the checkpoint once all nodes are here.
                        auto ready = m->async_barrier(group::all, asio::use_future);
                        if (auto ec = detail::outcome(ready)) {
                            failed(m->failure().empty() ? "restore barrier: " + ec.message()
                                                        : m->failure());
                            results[i] = run_failed;
                            is_worker = false;
                        }
                    }
                    std::string threw; // why the training function failed
                    if (is_worker) {
                        try {
                            worker_node w(tcp_transport(io.get_executor(), topts), m,
                                          s.request_timeout);
                            w.set_restored_from(s.restore);
                            if (s.tables) {
                                s.tables->for_each([&w](const table_registry::entry& e) {
                                    w.declare(e.id, {e.spec.width, e.key_type, e.value_type,
                                                     e.spec.dense});
                                });
                            }
                            for (const auto& [table, start] : resume_at) {
                                w.resume_at(table, start);
                            }
                            struct finisher {
                                worker_node& w;
                                std::chrono::milliseconds timeout;
                                // Leaves the tables' clocks however fn ends, so that the
                                // other workers do not wait for this one.
                                ~finisher() { (void)w.finish(timeout); }
                            } finish{w, std::min(s.request_timeout, 2 * s.heartbeat_timeout)};
                            fn(w);
                        } catch (const std::exception& e) {
                            threw = detail::one_line(std::string("the training function failed: ") +
                                                     e.what());
                        } catch (...) {
                            threw = "the training function threw";
                        }
                    }
                    if (!threw.empty()) {
                        // A failure the job had already (a server died under a push, say)
                        // is the cause: named first.
                        failed(m->failure());
                        const auto v = m->view();
                        const auto* me = v ? v->find(m->id()) : nullptr;
                        failed((me ? me->describe() : "worker " + std::to_string(m->id())) +
                               " failed: " + threw);
                        results[i] = run_failed;
                        // Instead of the final barrier: the manager declares this worker
                        // failed, with the reason, so the other nodes stop waiting for it
                        // and the job fails, in every process (unless the job drops failed
                        // workers: then it goes on without this one).
                        auto reported = m->async_fail(threw, asio::use_future);
                        (void)detail::outcome(reported);
                        return;
                    }
                    auto done = m->async_barrier(group::all, asio::use_future);
                    if (sigterm) {
                        while (done.wait_for(std::chrono::milliseconds(50)) !=
                               std::future_status::ready) {
                            if (sigterm->retired(i)) {
                                std::this_thread::sleep_for(s.heartbeat_interval);
                                m->close(); // ends the wait at the barrier
                                break;
                            }
                        }
                    }
                    if (sigterm && sigterm->retired(i)) {
                        (void)detail::outcome(done);
                        say(log_level::info, "petrel: server " + std::to_string(m->id()) +
                                                 " left the job; its keys moved to their replicas");
                        return; // it left: no final barrier, no leave
                    }
                    if (auto ec = detail::outcome(done)) {
                        failed(m->failure().empty() ? "final barrier: " + ec.message()
                                                    : m->failure());
                        results[i] = run_failed;
                    }
                    auto left = m->async_leave(asio::use_future);
                    if (auto ec = detail::outcome(left); ec && results[i] == run_ok) {
                        failed(m->failure().empty() ? "leaving: " + ec.message() : m->failure());
                        results[i] = run_failed;
                    }
                });
            }
            for (std::size_t i = 0; i < threads.size(); ++i) {
                threads[i].join();
                if (results[i] != run_ok) {
                    status = run_failed;
                }
            }
            sigterm.reset();
            for (std::size_t i = 0; i < servers.size(); ++i) {
                if (const auto lost = servers[i]->data_lost(); !lost.empty()) {
                    failed("server " + std::to_string(members[i]->id()) +
                           " lost the keys of failed " + lost +
                           ": more servers failed at once than the tables have replicas");
                    status = run_failed;
                }
            }
        }

        // The manager stays until every node of the job has left or failed; so does a
        // standby that took the job over (one that did not is no longer needed).
        if (standby && !standby->view()) {
            standby->close();
        }
        for (auto* m : {manager.get(), standby.get()}) {
            if (!m) {
                continue;
            }
            auto finished = m->async_wait_finished(asio::use_future);
            if (status != run_ok &&
                finished.wait_for(s.heartbeat_timeout * 2) != std::future_status::ready) {
                // Our own nodes failed to start or finish: do not wait for the others.
                m->close();
            }
            if (auto ec = detail::outcome(finished); ec && ec != errc::shut_down) {
                failed(m->failure().empty() ? ec.message() : m->failure());
                status = run_failed;
            }
        }
        for (std::size_t i = 0; i < subscriptions.size(); ++i) {
            members[i]->unsubscribe(subscriptions[i]);
        }
        for (auto& m : members) {
            m->close();
        }
        for (auto& sv : servers) {
            sv->close();
        }
        if (manager) {
            manager->close();
        }
        if (standby) {
            standby->close();
        }
    }
    work.reset();
    io.stop();
    for (auto& t : io_threads) {
        t.join();
    }
    if (status != run_ok) {
        // One line that says why: the first failure; the others, if any, on the lines after.
        std::string text =
            "petrel: job '" + s.job_id + "' failed (rank " + std::to_string(s.launch.rank) + ")";
        if (!failures.empty()) {
            text += ": " + failures.substr(0, failures.size() - 1); // less the last line break
        }
        say(log_level::error, text);
    }
    return status;
}

/// Resolves the configuration from `cfg`, the command line and the environment (a field
/// `cfg` sets is fixed: another value on the command line or in the environment is
/// refused; the command line wins over the environment, logged; see `petrel::resolve`),
/// then runs this process's share of the job.
/// `--help` prints the options and returns `run_ok`; a refused configuration prints why
/// and returns `run_config_error`.
///
/// @par Example
/// @code
/// int main(int argc, char** argv) {
///     return petrel::run({.servers = 2}, argc, argv, [](petrel::worker_node& w) {
///         petrel::kv_store<std::uint64_t, float> kv(w);
///         // ... push gradients, pull weights ...
///     });
/// }
/// @endcode
/// With no launcher this runs the whole job in this process over loopback TCP; under
/// `mpirun`, `srun`, a Kubernetes indexed job or `PETREL_RANK`/`PETREL_SIZE` each process
/// hosts its share and meets the others at `PETREL_ROOT`.
inline int run(const config& cfg, int argc, const char* const* argv, const worker_function& fn,
               logger log = stderr_logger()) {
    settings s;
    try {
        s = resolve(cfg, argc, argv);
    } catch (const config_error& e) {
        std::fprintf(stderr, "%s\n(see --help)\n", e.what());
        return run_config_error;
    }
    if (s.help) {
        const std::string text = usage(argc > 0 && argv[0] ? argv[0] : "program");
        std::fprintf(stdout, "%s", text.c_str());
        return run_ok;
    }
    return run(s, fn, std::move(log));
}

/// As above, without a command line (configuration from `cfg` and the environment).
inline int run(const config& cfg, const worker_function& fn, logger log = stderr_logger()) {
    return run(cfg, 0, nullptr, fn, std::move(log));
}

} // namespace petrel
