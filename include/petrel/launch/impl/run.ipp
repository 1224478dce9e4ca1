// Petrel: petrel::run: a process's share of a job, its nodes started, joined and stopped.
#ifndef PETREL_LAUNCH_IMPL_RUN_IPP
#define PETREL_LAUNCH_IMPL_RUN_IPP

#include <petrel/launch/run.hpp>

#include <petrel/cluster/manager_node.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/core/log.hpp>
#include <petrel/launch/config.hpp>
#include <petrel/launch/detail/apply_limits.hpp>
#include <petrel/launch/detail/tls_check.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/server_agent.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/detail/address.hpp>
#include <petrel/transport/detail/handshake.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_future.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstddef>
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
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace petrel {

namespace detail {

/// The clock of each table checkpoint in `dir` (`table-<id>/manifest.json`); the tables
/// whose manifest cannot be read are left out.
[[nodiscard]] PETREL_DECL std::map<std::uint32_t, clock_type>
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

/// The port of "host:port" (the settings' addresses, checked when they were resolved,
/// and addresses a listener reported).
[[nodiscard]] PETREL_DECL std::uint16_t port_of(const std::string& address) {
    const auto hp = parse_host_port(address);
    if (!hp) {
        throw std::invalid_argument("petrel: no port in the address \"" + address + "\"");
    }
    return hp->port;
}

[[nodiscard]] PETREL_DECL std::size_t server_split_threads(std::uint32_t threads,
                                                           std::uint32_t servers) noexcept {
    return std::max<std::size_t>(1, threads / std::max<std::uint32_t>(1, servers));
}

/// How long `run` lets the writes of its closed nodes finish before it stops its threads.
inline constexpr std::chrono::milliseconds run_drain_limit{2000};

/// The outcome of a future, as an error code.
[[nodiscard]] PETREL_DECL std::error_code error_of(std::future<void>& f) {
    try {
        f.get();
        return {};
    } catch (const std::system_error& e) {
        return e.code();
    }
}

/// SIGTERM to a process that hosts only servers (what `kill`, Kubernetes and most
/// schedulers send before they stop a process): its servers leave one at a time
/// (`server_agent::async_retire`), each once it may: it follows the view in which the
/// previous one left and its last copy down its chain is acknowledged
/// (`server_agent::async_settle`, waited for up to `patience`), and every table it holds
/// keeps a copy elsewhere or the ring has no replicas (`server_node::hand_over_blocker`).
/// With replicas a server's partitions move to them; without, it hands them over first,
/// within `hand_over`. A server the manager let go is `retired`, and its member closes
/// `linger` later (the new view reaches the workers meanwhile), which ends its wait at
/// the final barrier. One that may not leave, or that the manager refused (its keys have
/// no other live copy, for example the last server), says why and keeps serving, and a
/// later SIGTERM asks again. Stops listening, and ends its waits, when destroyed.
class leave_on_sigterm {
public:
    leave_on_sigterm(asio::io_context& io, std::vector<std::shared_ptr<server_agent>> agents,
                     std::chrono::milliseconds patience, std::chrono::milliseconds hand_over,
                     std::chrono::milliseconds linger,
                     std::function<void(log_level, const std::string&)> say)
        : signals_(io, SIGTERM), control_(std::make_shared<control>()) {
        auto& c = *control_;
        c.agents = std::move(agents);
        c.patience = patience;
        c.hand_over = hand_over;
        c.linger = linger;
        c.say = std::move(say);
        c.signals = &signals_;
        c.retired.assign(c.agents.size(), false);
        std::lock_guard lock(c.mutex);
        arm(control_);
    }
    leave_on_sigterm(const leave_on_sigterm&) = delete;
    leave_on_sigterm& operator=(const leave_on_sigterm&) = delete;
    ~leave_on_sigterm() {
        {
            std::lock_guard lock(control_->mutex);
            control_->stopped = true; // a handler still queued touches only `control`
            control_->signals = nullptr;
            std::error_code ec;
            signals_.cancel(ec);
        }
        for (auto& a : control_->agents) {
            a->cancel(); // nothing left to hand over: the process is ending
        }
    }

    /// Whether the manager let server `i` (of the agents given) leave.
    [[nodiscard]] bool retired(std::size_t i) const {
        std::lock_guard lock(control_->mutex);
        return i < control_->retired.size() && control_->retired[i];
    }

private:
    /// What the signal handler and the servers' waits share.
    struct control {
        std::mutex mutex;
        bool stopped = false;
        std::uint64_t asked = 0;    // SIGTERMs received
        std::uint64_t done = 0;     // SIGTERMs the pass under way (or the last) answers
        bool leaving = false;       // a pass over the servers is under way
        std::uint64_t moved_at = 0; // the view in which the last of these servers left
        asio::signal_set* signals = nullptr;
        std::vector<bool> retired;
        std::vector<std::shared_ptr<server_agent>> agents;
        std::chrono::milliseconds patience{};
        std::chrono::milliseconds hand_over{};
        std::chrono::milliseconds linger{};
        std::function<void(log_level, const std::string&)> say;
    };

    /// Waits for the next SIGTERM. Called with the control's mutex held.
    static void arm(const std::shared_ptr<control>& c) {
        c->signals->async_wait([c](std::error_code ec, int) {
            if (ec) {
                return;
            }
            bool start = false;
            {
                std::lock_guard lock(c->mutex);
                if (c->stopped) {
                    return;
                }
                ++c->asked;
                arm(c);
                if (!c->leaving) {
                    c->leaving = true;
                    c->done = c->asked;
                    start = true;
                }
            }
            if (start) {
                next(c, 0);
            }
        });
    }

    /// Lets the first server from the `i`-th on that has not left yet leave; after the
    /// last, starts again if another SIGTERM came meanwhile.
    static void next(const std::shared_ptr<control>& c, std::size_t i) {
        std::uint64_t after = 0;
        {
            std::lock_guard lock(c->mutex);
            for (;;) {
                while (i < c->agents.size() && c->retired[i]) {
                    ++i;
                }
                if (c->stopped || (i == c->agents.size() && c->done == c->asked)) {
                    c->leaving = false;
                    return;
                }
                if (i < c->agents.size()) {
                    break;
                }
                c->done = c->asked;
                i = 0;
            }
            after = c->moved_at;
        }
        c->agents[i]->async_settle(after, c->patience, [c, i](std::error_code) {
            // Settled or not (any other reason not to leave stays): it may leave now?
            leave(c, i);
        });
        started(c, i);
    }

    /// A wait of agent `i` started: ended at once if the destructor ran meanwhile (it
    /// sets `stopped` before it ends the agents' waits, so one of the two ends it).
    static void started(const std::shared_ptr<control>& c, std::size_t i) {
        bool stopped = false;
        {
            std::lock_guard lock(c->mutex);
            stopped = c->stopped;
        }
        if (stopped) {
            c->agents[i]->cancel();
        }
    }

    static void leave(const std::shared_ptr<control>& c, std::size_t i) {
        {
            std::lock_guard lock(c->mutex);
            if (c->stopped) {
                c->leaving = false;
                return;
            }
        }
        auto& agent = *c->agents[i];
        const auto id = std::to_string(agent.membership().id());
        if (const auto blocker = agent.server().hand_over_blocker(); !blocker.empty()) {
            c->say(log_level::warning, "petrel: SIGTERM: server " + id +
                                           " cannot leave: " + blocker + "; it keeps serving");
            next(c, i + 1);
            return;
        }
        c->say(log_level::info,
               "petrel: SIGTERM: server " + id + " hands its keys over and leaves");
        agent.async_retire(c->hand_over, [c, i, id](std::error_code ec) {
            // Refused: the member logged why, and the server keeps serving.
            if (ec == errc::timed_out) {
                c->say(log_level::warning, "petrel: SIGTERM: server " + id +
                                               " did not hand its keys over in time; it keeps "
                                               "serving");
            }
            if (!ec) {
                auto& m = c->agents[i]->membership();
                const auto v = m.view();
                {
                    std::lock_guard lock(c->mutex);
                    c->retired[i] = true;
                    c->moved_at = v ? v->version : c->moved_at;
                }
                auto linger = std::make_shared<asio::steady_timer>(m.get_executor());
                linger->expires_after(c->linger);
                linger->async_wait([linger, a = c->agents[i]](std::error_code) {
                    a->membership().close(); // ends its wait at the final barrier
                });
            }
            next(c, i + 1);
        });
        started(c, i);
    }

    asio::signal_set signals_;
    std::shared_ptr<control> control_;
};

/// A secret for a job whose nodes all run in this process: 32 random bytes, as hex.
[[nodiscard]] PETREL_DECL std::string random_secret() {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (const auto b : auth_hello::fresh().nonce) {
        out += digits[std::to_integer<unsigned>(b) >> 4];
        out += digits[std::to_integer<unsigned>(b) & 0xF];
    }
    return out;
}

[[nodiscard]] PETREL_DECL std::string wildcard_bind_warning(const settings& s) {
    if (s.launch.kind == launcher_kind::embedded || !config_is_wildcard(s.bind)) {
        return {};
    }
    return "petrel: listening on every interface (" + (s.bind.empty() ? "*" : s.bind) +
           "): any host that reaches this process's ports reaches the job; set --bind "
           "(PETREL_BIND) to the interface the job's hosts share";
}

[[nodiscard]] PETREL_DECL std::string secret_refusal(const settings& s) {
    if (s.launch.kind == launcher_kind::embedded || !s.secret.empty() || s.insecure) {
        return {};
    }
    return "petrel: this job has no secret, so any process that reaches its ports could join "
           "it and change the model: give every process the same --secret-file "
           "(PETREL_SECRET_FILE) or PETREL_SECRET, or --insecure (PETREL_INSECURE=1) where "
           "every host that can reach the job is trusted";
}

} // namespace detail

PETREL_DECL int run(const settings& s, const worker_function& fn, logger log) {
    if (auto refusal = detail::secret_refusal(s); !refusal.empty()) {
        if (log) {
            log(log_level::error, refusal);
        }
        return run_config_error;
    }
    // Before any thread starts (making a secret may throw).
    transport_options topts;
    topts.log = log;
    topts.secret = s.secret;
    topts.tls = s.tls;
    detail::apply_limits(s.limits, topts);
    try {
        detail::check_tls(s);
    } catch (const std::system_error& e) {
        if (log) {
            log(log_level::error, e.what());
        }
        return run_config_error;
    }
    if (topts.secret.empty() && s.launch.kind == launcher_kind::embedded) {
        topts.secret = detail::random_secret(); // every node of the job is in this process
    }
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> io_threads;
    std::mutex io_mutex;
    std::condition_variable io_returned;
    std::size_t io_running = s.threads;
    for (std::uint32_t i = 0; i < s.threads; ++i) {
        io_threads.emplace_back([&] {
            io.run();
            std::lock_guard lock(io_mutex);
            --io_running;
            io_returned.notify_all();
        });
    }
    auto say = [&](log_level level, const std::string& text) {
        if (log) {
            log(level, text);
        }
    };
    for (const auto& line : s.overridden) {
        say(log_level::warning, "petrel: " + line); // nothing given is dropped unsaid
    }
    if (auto advice = detail::wildcard_bind_warning(s); !advice.empty()) {
        say(log_level::warning, advice);
    }
    if (topts.secret.empty()) {
        say(log_level::warning,
            "petrel: running without a secret (--insecure): any process that reaches this "
            "job's ports can join it and read or change the model");
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
            manager_options job_manager{.job_id = s.job_id,
                                        .servers = s.servers,
                                        .workers = s.workers,
                                        .max_workers = s.max_workers,
                                        .max_servers = s.max_servers,
                                        .drop_failed_workers =
                                            s.worker_failure == worker_failure::drop,
                                        .ring = {.replicas = s.replicas},
                                        .heartbeat_timeout = s.heartbeat_timeout,
                                        .startup_timeout = s.startup_timeout};
            detail::apply_limits(s.limits, job_manager);
            job_manager.ranked_certificates = s.tls_ranks;
            if (s.managers_here > 0) {
                auto mo = job_manager;
                mo.take_over = s.join == node_role::manager; // restarted at the root
                manager =
                    std::make_unique<manager_node>(tcp_transport(io.get_executor(), topts), mo);
                const auto bound =
                    manager->listen(detail::format_host_port(s.bind, detail::port_of(s.root)));
                if (detail::port_of(s.root) == 0) {
                    root = detail::format_host_port(s.advertise, detail::port_of(bound));
                }
            }
            if (s.standby_here) {
                auto mo = job_manager;
                mo.take_over = true;
                standby =
                    std::make_unique<manager_node>(tcp_transport(io.get_executor(), topts), mo);
                (void)standby->listen(detail::format_host_port(s.bind, detail::port_of(s.standby)));
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
                o.ranked_managers = s.tls_ranks;
                o.declared = declared;
                return std::make_shared<member>(tcp_transport(io.get_executor(), topts), o);
            };
            for (std::uint32_t i = 0; i < s.servers_here; ++i) {
                server_options so;
                so.workers = s.workers;
                so.functions = s.functions;
                so.tables = s.tables;
                so.replication_timeout = std::min(s.request_timeout / 2, 2 * s.heartbeat_timeout);
                so.split_threads = detail::server_split_threads(s.threads, s.servers_here);
                so.checkpoint_root = s.checkpoint_root;
                detail::apply_limits(s.limits, so);
                auto server =
                    std::make_shared<server_node>(tcp_transport(io.get_executor(), topts), so);
                const auto bound = server->listen(detail::format_host_port(s.bind, 0));
                members.push_back(
                    make_member(node_role::server, i,
                                detail::format_host_port(s.advertise, detail::port_of(bound))));
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
                if (auto ec = detail::error_of(joins[i])) {
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

        // Servers follow the view through their agents: a worker that left or failed no
        // longer holds anybody back in the tables' clocks, a worker that joined is served,
        // and updates are replicated along the live chains.
        std::vector<std::shared_ptr<server_agent>> agents;
        if (status == run_ok) {
            for (std::size_t i = 0; i < servers.size(); ++i) {
                agents.push_back(std::make_shared<server_agent>(members[i], servers[i]));
            }
        }

        // A process that hosts only servers hands their keys over and leaves on SIGTERM:
        // a server the manager let go stops once the new view had a heartbeat's time to
        // reach the workers, without the final barrier, and the process ends with success.
        std::optional<detail::leave_on_sigterm> sigterm;
        if (status == run_ok && !servers.empty() && !manager && s.workers_here == 0) {
            sigterm.emplace(io, agents, 2 * s.heartbeat_timeout, s.startup_timeout,
                            s.heartbeat_interval,
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
                        auto took = agents[i]->async_take_over(s.startup_timeout, asio::use_future);
                        if (const auto ec = detail::error_of(took)) {
                            failed(ec == errc::timed_out
                                       ? "server " + std::to_string(m->id()) +
                                             " joined but was not given its keys within " +
                                             std::to_string(s.startup_timeout.count()) + " ms"
                                   : m->failure().empty() ? ec.message()
                                                          : m->failure());
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
                        if (auto ec = detail::error_of(ready)) {
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
                            w.set_checkpoint_root(s.checkpoint_root);
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
                        (void)detail::error_of(reported);
                        return;
                    }
                    // (A server that leaves on SIGTERM ends this wait: its member closes.)
                    auto done = m->async_barrier(group::all, asio::use_future);
                    const auto barrier = detail::error_of(done);
                    if (sigterm && sigterm->retired(i)) {
                        say(log_level::info, "petrel: server " + std::to_string(m->id()) +
                                                 " left the job; its keys moved to their replicas");
                        return; // it left: no final barrier, no leave
                    }
                    if (const auto ec = barrier) {
                        failed(m->failure().empty() ? "final barrier: " + ec.message()
                                                    : m->failure());
                        results[i] = run_failed;
                    }
                    auto left = m->async_leave(asio::use_future);
                    if (auto ec = detail::error_of(left); ec && results[i] == run_ok) {
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
            if (auto ec = detail::error_of(finished); ec && ec != errc::shut_down) {
                failed(m->failure().empty() ? ec.message() : m->failure());
                status = run_failed;
            }
        }
        agents.clear(); // (no view reaches a server from now on)
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
    {
        // What the nodes sent before they closed leaves first (the last node's leave is
        // answered just before the manager finishes; under TLS a connection's write loop
        // writes what is queued before its socket closes): once nothing is left to do the
        // threads return. A wait that does not end is cut short.
        std::unique_lock lock(io_mutex);
        io_returned.wait_for(lock, detail::run_drain_limit, [&] { return io_running == 0; });
    }
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

PETREL_DECL int run(const config& cfg, int argc, const char* const* argv, const worker_function& fn,
                    logger log) {
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

PETREL_DECL int run(const config& cfg, const worker_function& fn, logger log) {
    return run(cfg, 0, nullptr, fn, std::move(log));
}

} // namespace petrel

#endif // PETREL_LAUNCH_IMPL_RUN_IPP
