// Petrel: a node's membership of a job: joining, the view, heartbeats, barriers.
#pragma once

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/declarations.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
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
    /// Ranked certificates (`manager_options::ranked_certificates`): the manager at the
    /// root must show rank 0's TLS certificate (common name `rank-0`) and one at a
    /// standby address rank 1's (where `petrel::run` starts it); a manager that shows
    /// another is sent nothing, not even this node's registration (its calls fail with
    /// `errc::not_permitted`, and a node looking for a manager tries the next address).
    bool ranked_managers = false;
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

    PETREL_DECL member(any_transport transport, member_options opts);

    member(const member&) = delete;
    member& operator=(const member&) = delete;
    PETREL_DECL ~member();

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
                start_join(detail::once_function<std::error_code>(std::move(handler),
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
                start_barrier(g, detail::once_function<std::error_code>(std::move(handler),
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
                start_assign(std::move(d), detail::once_function<std::error_code, data_share>(
                                               std::move(handler), transport_.get_executor()));
            },
            token, std::move(d));
    }

    /// This node's share of data set `name` under the newest view; nothing when the data
    /// set is not defined.
    [[nodiscard]] PETREL_DECL std::optional<data_share> share(std::string_view name) const;

    /// Waits until every live member of the schedule's group has asked for the next round
    /// of block schedule `s` (defined by the first request; the others must define it
    /// the same way), then completes with that round: `void(std::error_code,
    /// round_assignment)`. Once `s.rounds` rounds have been handed out it completes at
    /// once with `finished` set. Call it again only after finishing the round's work.
    template <typename CompletionToken>
    auto async_round(block_schedule s, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code, round_assignment)>(
            [this](auto handler, block_schedule s) {
                start_round(std::move(s), detail::once_function<std::error_code, round_assignment>(
                                              std::move(handler), transport_.get_executor()));
            },
            token, std::move(s));
    }

    /// Tells the manager this node is done (nobody waits for it afterwards) and stops the
    /// heartbeats. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_leave(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                start_leave(detail::once_function<std::error_code>(std::move(handler),
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
                start_fail(std::move(why), detail::once_function<std::error_code>(
                                               std::move(handler), transport_.get_executor()));
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
                start_retire(detail::once_function<std::error_code>(std::move(handler),
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
                start_ready(version, detail::once_function<std::error_code>(
                                         std::move(handler), transport_.get_executor()));
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
                start_report_unreachable(server, std::move(seen),
                                         detail::once_function<std::error_code>(
                                             std::move(handler), transport_.get_executor()));
            },
            token, std::move(seen));
    }

    /// This node's id; `no_node` before the join completed.
    [[nodiscard]] PETREL_DECL node_id id() const;

    /// A server's secret from the manager, which marks the updates the job's servers send
    /// each other (see `replication_plan::secret`); 0 for other roles and before the join.
    [[nodiscard]] PETREL_DECL std::uint64_t server_secret() const;

    /// This node's own key from the manager (see `node_key`), which it shows when it
    /// registers again; none before the join. Give it to no other process.
    [[nodiscard]] PETREL_DECL node_key key() const;

    /// The newest view; null before the join completed.
    [[nodiscard]] PETREL_DECL view_ptr view() const;

    /// Calls `cb` with every later view; returns a handle for `unsubscribe`.
    PETREL_DECL std::size_t subscribe(view_callback cb);

    /// Calls `cb` (with no lock of this node held) whenever `failure()` gained a line: a
    /// refusal by the manager, a lost manager. Failed nodes come with views (`subscribe`).
    /// Returns a handle for `unsubscribe`.
    PETREL_DECL std::size_t subscribe_failures(std::function<void()> cb);

    /// Ends a subscription of `subscribe` or `subscribe_failures`.
    PETREL_DECL void unsubscribe(std::size_t handle);

    /// What went wrong, for a log: failed nodes of the view, a refusal by the manager, or
    /// a lost manager. Empty when nothing did.
    [[nodiscard]] PETREL_DECL std::string failure() const;

    [[nodiscard]] PETREL_DECL const member_options& options() const noexcept;
    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

    /// Stops heartbeats and ends every wait with `errc::shut_down`. Idempotent.
    PETREL_DECL void close();

private:
    using clock = std::chrono::steady_clock;
    using done_fn = std::function<void(std::error_code)>;

    struct state;

    // The bodies of the initiating functions above, each with its completion handler as
    // a function (`detail::once_function`).
    PETREL_DECL void start_join(done_fn done);
    PETREL_DECL void start_barrier(group g, done_fn done);
    PETREL_DECL void start_assign(data_set d,
                                  std::function<void(std::error_code, data_share)> done);
    PETREL_DECL void start_round(block_schedule s,
                                 std::function<void(std::error_code, round_assignment)> done);
    PETREL_DECL void start_leave(done_fn done);
    PETREL_DECL void start_fail(std::string why, done_fn done);
    PETREL_DECL void start_retire(done_fn done);
    PETREL_DECL void start_ready(std::uint64_t version, done_fn done);
    PETREL_DECL void start_report_unreachable(node_id server, std::string seen, done_fn done);

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel

// Header-only: the state, which includes the bodies once it is complete.
#if PETREL_HEADER_ONLY
#include <petrel/cluster/detail/member_state.hpp>
#endif
