// Petrel: a server's side of its job: it follows the views, takes keys over and leaves.
#pragma once

#include <petrel/cluster/member.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/config.hpp>
#include <petrel/launch/detail/agent_ops.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/detail/completion.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <system_error>

namespace petrel {

/// The chains along which the servers of view `v` replicate (see
/// `server_node::replicate`): for each live server that is the primary of some partition,
/// the live servers of that partition's owner list, primary first. The ring gives every
/// partition of one primary the same successors. While servers join, also the primaries
/// of the ring their copies are made for, and where the joining servers listen.
[[nodiscard]] PETREL_DECL replication_plan replication_plan_of(const membership_view& v);

/// Brings server `server` in line with view `v` of its job: workers that left or failed
/// hold nobody back in the tables' clocks (`server_node::depart_worker`), workers that
/// joined the running job are served from the current clock (`server_node::admit_worker`),
/// and updates are replicated along the view's live chains, marked with the job's
/// server secret `secret` (`member::server_secret`). A `server_agent` calls it with every
/// view its member receives.
PETREL_DECL void follow_view(server_node& server, const membership_view& v, std::uint64_t secret);

/// A server's side of its job: one object that holds a server's membership (`member`)
/// and its `server_node`, and keeps the two in line. From its construction on, every
/// view the member receives goes to the server (`follow_view`); the server's copies and
/// hand-overs, which it reports as they complete (`server_node::watch`), go to the
/// manager (`member::async_ready`). Joining a running job and leaving it are
/// asynchronous operations that take completion tokens, driven by those events (no
/// polling). `petrel::run` hosts its servers this way; so can a job assembled by hand.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: safe; at most one operation of each kind waits
/// at a time (a second completes at once with `errc::in_progress`).
class server_agent {
public:
    /// Follows the member's views with the server from now on, with the member's server
    /// secret, and names the server by the member's id (`server_node::set_node_id`).
    /// Construct it once the member joined (`member::async_join`) and the server holds
    /// what it restores (`server_node::restore`).
    /// @throws std::invalid_argument when `m` or `server` is null, or `m` is not a server
    /// that joined
    PETREL_DECL server_agent(std::shared_ptr<member> m, std::shared_ptr<server_node> server);

    server_agent(const server_agent&) = delete;
    server_agent& operator=(const server_agent&) = delete;

    /// Ends the waits (`cancel`) and stops following the views; leaves the member and the
    /// server open.
    PETREL_DECL ~server_agent();

    /// For a server that joined a running job (`manager_options::max_servers`): reports
    /// each plan under which the primaries whose partitions move to it have copied them
    /// to it in full (`server_node::join_ready`, `member::async_ready`), until the ring
    /// makes it their primary. Completes with no error then, with `errc::node_failed`
    /// when the member failed or was refused (`member::failure` says why), or with
    /// `errc::timed_out` after `patience`. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_take_over(std::chrono::milliseconds patience, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            initiate_wait(this, detail_wait::take_over), token, patience, std::uint64_t{0});
    }

    /// Waits until the server follows view `view` (or a later one) and its last copy down
    /// its chain is acknowledged (`server_node::chain_whole`), as a server should before
    /// it leaves after another one did. Completes with no error, or with
    /// `errc::timed_out` after `patience`. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_settle(std::uint64_t view, std::chrono::milliseconds patience,
                      CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            initiate_wait(this, detail_wait::settle), token, patience, view);
    }

    /// The server leaves the running job gracefully (`member::async_retire`). With
    /// replicas its partitions move to them at once. In a ring without replicas the
    /// manager plans their hand-over (`errc::in_progress`): the server copies them to
    /// their new owners and reports it (`server_node::hand_over_ready`), the manager
    /// makes the new owners their primaries, the server sends them its last updates and
    /// the end of its ownership, and then asks to leave again. Completes with no error
    /// once the manager let it go (close the server then), with the manager's refusal
    /// (the server stays in the job), `errc::node_failed`, `errc::timed_out` when the
    /// hand-over did not end within `patience`, or `errc::shut_down` (`cancel`). A plan
    /// given up on stays with the manager until the server leaves or fails: asked again,
    /// the hand-over goes on. Signature `void(std::error_code)`.
    template <typename CompletionToken>
    auto async_retire(std::chrono::milliseconds patience, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code)>(
            initiate_wait(this, detail_wait::retire), token, patience, std::uint64_t{0});
    }

    /// Ends every wait with `errc::shut_down` (the process is ending). The agent goes on
    /// following the views, and takes new operations.
    PETREL_DECL void cancel();

    [[nodiscard]] member& membership() const noexcept { return *member_; }
    [[nodiscard]] server_node& server() const noexcept { return *server_; }
    [[nodiscard]] asio::any_io_executor get_executor() const { return server_->get_executor(); }

private:
    enum class detail_wait : std::uint8_t { take_over, settle, retire };

    /// The initiation object of the three waits.
    class initiate_wait {
    public:
        initiate_wait(server_agent* self, detail_wait what) noexcept : self_(self), what_(what) {}

        template <typename Handler>
        void operator()(Handler&& handler, std::chrono::milliseconds patience,
                        std::uint64_t view) const {
            self_->start(what_, patience, view,
                         detail::once_function<std::error_code>(std::forward<Handler>(handler),
                                                                self_->get_executor()));
        }

    private:
        server_agent* self_;
        detail_wait what_;
    };

    struct state;

    PETREL_DECL void start(detail_wait what, std::chrono::milliseconds patience, std::uint64_t view,
                           std::function<void(std::error_code)> done);

    std::shared_ptr<member> member_;
    std::shared_ptr<server_node> server_;
    std::shared_ptr<state> state_;
    std::size_t view_subscription_ = 0;
    std::size_t failure_subscription_ = 0;
    std::size_t watch_ = 0;
};

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/launch/impl/server_agent.ipp>
#endif
