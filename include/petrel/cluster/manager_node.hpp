// Petrel: the manager: rendezvous, membership view, barriers and heartbeats.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/transport.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
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
    /// `heartbeat_timeout` after the first came with a majority of them (readers aside):
    /// it answers them with that view + 1 and takes the job over once a majority of its
    /// live servers and workers spoke on the connections it answered (their next
    /// heartbeat; a node that comes back meanwhile is taken in); the others are then
    /// declared failed, as on a missed heartbeat. A node follows one manager at a time,
    /// so of two standbys that both answered a majority (a node counted by both) at most
    /// one is confirmed: one not confirmed within `heartbeat_timeout` closes the
    /// connections it answered and waits as a standby again, and their nodes look for a
    /// manager again (where another took the job over, they did not come back to it and
    /// were declared failed there; if neither was confirmed, the nodes come back anew).
    /// Without a majority within four heartbeat timeouts it sends them away: the job's
    /// manager may still be alive. Block schedules start again from their
    /// first round; barriers, data sets and joins are asked for again by the nodes, barriers with
    /// their numbers, from which it learns which barriers the lost manager released.
    bool take_over = false;
    /// Readers attached at once (those waiting for the job to form included); one more
    /// is refused with `errc::job_full`, so that attaching cannot grow the view, and the
    /// messages every view change sends, without bound.
    std::uint32_t max_readers = 64;
    /// A node that went stays in the view this long (so that every node sees it go), then
    /// a new view leaves it out, so that nodes joining and going cannot grow the view
    /// without bound: a reader that left or failed, and a server or worker that joined
    /// the running job (its index at least the job's `servers` or `workers`) and left, or
    /// failed in a way the job survived (`membership_view::replaced`), holding no keys
    /// in the ring or the next ring. Servers and workers the job formed with stay (their
    /// indices are in every server's clocks from the start), as does a failure the job
    /// did not survive. The node with the highest id and the one with the highest index
    /// of each role stay, so that ids and indices never repeat.
    std::chrono::milliseconds departed_grace{std::chrono::seconds(60)};
    /// Every process's TLS certificate names its rank (common name `rank-N`, see
    /// `certificate_rank`): a server or worker joins, and registers again, only with the
    /// rank its connection's certificate names; others are refused with
    /// `errc::not_permitted` and logged. So one process of the job cannot take the role a
    /// launcher meant for another, nor come back as another's node. Needs TLS
    /// (`transport_options::tls`); readers may show any certificate of the authority.
    bool ranked_certificates = false;
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
    PETREL_DECL manager_node(any_transport transport, manager_options opts);

    manager_node(const manager_node&) = delete;
    manager_node& operator=(const manager_node&) = delete;
    PETREL_DECL ~manager_node();

    /// Accepts nodes at `address` ("host:port"; port 0 picks one) and starts the startup
    /// deadline; returns the address to give them (the root). @throws std::system_error
    PETREL_DECL std::string listen(std::string_view address);

    /// The current view; null until every node has registered.
    [[nodiscard]] PETREL_DECL std::shared_ptr<const membership_view> view() const;

    /// Completes once the job is over: every node has left (success) or some failed
    /// (`errc::node_failed`), or not all registered in time (`errc::timed_out`), or the
    /// manager was closed (`errc::shut_down`). Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_wait_finished(CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            [this](auto handler) {
                start_wait_finished(detail::once_function<std::error_code>(
                    std::move(handler), transport_.get_executor()));
            },
            token);
    }

    /// The rounds of block schedule `name` handed out so far (the newest 256), oldest
    /// first; empty for an unknown schedule.
    [[nodiscard]] PETREL_DECL std::vector<round_assignment> rounds(std::string_view name) const;

    /// What made the job fail, one line per failed node; empty otherwise.
    [[nodiscard]] PETREL_DECL std::string failure() const;

    /// Stops serving; waiters complete with `errc::shut_down`. Idempotent.
    PETREL_DECL void close();

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    struct state;

    // The body of `async_wait_finished`, with its completion handler as a function
    // (`detail::once_function`).
    PETREL_DECL void start_wait_finished(std::function<void(std::error_code)> done);

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel

// Header-only: the state, which includes the bodies once it is complete.
#if PETREL_HEADER_ONLY
#include <petrel/cluster/detail/manager_state.hpp>
#endif
