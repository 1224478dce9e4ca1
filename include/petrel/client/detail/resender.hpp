// Petrel: what a client does for requests that outlive their server: it parks them when
// their connection drops, sends them where the next view places their keys, keeps ordered
// pushes until their server reports them durable, and tells servers that join the newest
// clock tick.
#pragma once

#include <petrel/client/detail/router.hpp>
#include <petrel/client/detail/send_pipeline.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/log.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel {
class member;
} // namespace petrel

namespace petrel::detail {

struct worker_clock;

/// A request that outlives its server: when the connection drops or the view declares
/// the server failed, it waits for the view to say where its keys went and is sent there
/// (a push marked `wire::flag_resent`; servers apply each update id once), or, when the
/// server is still alive after `resender::drop_grace`, to the same server again; until its
/// deadline (the request timeout).
struct resilient {
    node_id server = no_node;
    wire::message message; // as built: before key caching and compression
    reply_callback on_reply;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::steady_clock::time_point parked_at{};
    /// 0 while in flight, then 1 when acknowledged or 2 when it failed for good.
    std::atomic<int> outcome{0};
    /// Why it was last dropped: what it fails with when its deadline passes.
    std::error_code dropped_by{};
    /// Sent to the same server again after a drop (a client without a job does so once).
    bool retried = false;
    /// While parked: ends its wait for a view at the deadline (guarded by the resender's
    /// lock).
    std::shared_ptr<asio::steady_timer> due;

    /// Calls `on_reply` once with the outcome.
    PETREL_DECL void settle(std::error_code ec, wire::message&& reply);
};

/// The pieces of request `m` for the servers that hold its keys under `t` (by slot, as key
/// lists, with their rows for a push), and for each key of `m` in order the piece it went
/// to. No pieces when a server of some key is not alive, or when memory runs out.
struct division {
    std::vector<std::pair<std::size_t, wire::message>> pieces;
    std::vector<std::uint32_t> piece_of_key;
};
[[nodiscard]] PETREL_DECL division divide(const route_table& t, const wire::message& m);

/// What a resender knows of its client.
struct resender_options {
    node_id self = no_node; // the client's node, in log lines
    policy_traits policy{};
    bool read_only = false;             // a reader sends no ticks
    wire::message tick;                 // the client's clock request, without clock or flags
    std::shared_ptr<member> membership; // told of unreachable servers; null without a job
    logger log;
};

/// The requests of one client that outlive their server, and the placement they are sent
/// by. Every view the client adopts is installed here (`install`), and the requests waiting
/// for one are then reviewed (`review_all`).
///
/// Lock order: a client's own lock comes before the resender's, which comes before the
/// worker clock's (`worker_clock::mutex`) and the request links' (leaf locks). Sends and
/// completions never run under the resender's lock: its decisions are collected, then run.
///
/// @par Thread Safety
/// All member functions may be called concurrently. Replies refer to the resender weakly:
/// once it is gone, a dropped request fails with its error instead of waiting.
class resender : public std::enable_shared_from_this<resender> {
public:
    /// How long a request whose connection dropped waits for a view that says its server
    /// failed before it is sent to that server again.
    static constexpr std::chrono::milliseconds drop_grace{200};

    PETREL_DECL resender(asio::any_io_executor ex, std::shared_ptr<send_pipeline> pipe,
                         std::shared_ptr<worker_clock> clock, resender_options opts);

    /// Places requests by `t` from now on, when it is newer than the current placement.
    /// The servers of the first placement hear every tick (see `sync_ticks`).
    PETREL_DECL void install(std::shared_ptr<const route_table> t);

    /// The current placement (null before the first `install`).
    [[nodiscard]] PETREL_DECL std::shared_ptr<const route_table> table() const;

    /// A new resilient request to `server`, due by `deadline` (by the request timeout from
    /// now when none is given).
    [[nodiscard]] PETREL_DECL std::shared_ptr<resilient>
    make(node_id server, wire::message m, reply_callback on_reply,
         std::optional<std::chrono::steady_clock::time_point> deadline = {}) const;

    /// Sends `r` on `link` (the link of `r->server`), with its key cache `cache`.
    PETREL_DECL void send(const std::shared_ptr<request_link>& link,
                          const std::shared_ptr<wire::key_cache_sender>& cache,
                          std::shared_ptr<resilient> r);

    /// Keeps an ordered push after its acknowledgement (a server holds it until its clock
    /// is complete) until its server reports the clock durable, so that it can be sent to
    /// the new owner of its keys if that server fails first.
    PETREL_DECL void retain(const std::shared_ptr<resilient>& r);

    /// Sends `request` to every live server of `t`; the task completes when all have
    /// answered a clock reply (with the first error), calling `seen` with each reply.
    [[nodiscard]] PETREL_DECL task<void>
    broadcast(const std::shared_ptr<const route_table>& t, wire::message request,
              std::function<void(const wire::message&)> seen = {});

    /// Tick `n` goes to the servers of the current placement (returned); servers that
    /// join later are told it (`sync_ticks`).
    [[nodiscard]] PETREL_DECL std::shared_ptr<const route_table> note_tick(clock_type n);

    /// Decides what the current view allows: parked requests (`review`), then retained
    /// ordered pushes (`resend_retained`), then ticks for servers that have not heard one
    /// (`sync_ticks`); runs the sends in that order once no lock is held.
    PETREL_DECL void review_all();

    /// Fails the parked requests with `errc::shut_down` and forgets the retained ones;
    /// later drops are not waited for. Idempotent.
    PETREL_DECL void close();

    /// Requests waiting for a view, and ordered pushes retained (for tests).
    [[nodiscard]] PETREL_DECL std::size_t parked() const;
    [[nodiscard]] PETREL_DECL std::size_t retained() const;

private:
    using actions = std::vector<std::function<void()>>;

    /// Handles the reply (or failure) of `r` sent on `link`.
    PETREL_DECL void on_reply(const std::shared_ptr<resilient>& r,
                              const std::weak_ptr<request_link>& link, std::error_code ec,
                              wire::message&& reply);
    PETREL_DECL bool park(const std::shared_ptr<resilient>& r, std::error_code why);
    PETREL_DECL bool left_view(node_id server, std::uint64_t version) const;
    PETREL_DECL void forget_durable(node_id server, clock_type clock);
    PETREL_DECL void report_unreachable(node_id server) const;
    PETREL_DECL actions review();
    PETREL_DECL actions resend_retained();
    PETREL_DECL actions sync_ticks();
    PETREL_DECL actions send_divided(const route_table& where, const std::shared_ptr<resilient>& r,
                                     division parts, bool resent);
    /// A send of `r` to slot `slot` of `where`, to run once no lock is held.
    [[nodiscard]] PETREL_DECL std::function<void()> send_later(const route_table& where,
                                                               std::size_t slot,
                                                               std::shared_ptr<resilient> r,
                                                               bool cached = true);
    static PETREL_DECL void review_weak(const std::weak_ptr<resender>& weak);

    asio::any_io_executor ex_;
    std::shared_ptr<send_pipeline> pipe_;
    std::shared_ptr<worker_clock> clock_;
    resender_options opts_;

    mutable std::mutex mutex_;
    bool closed_ = false;
    std::shared_ptr<const route_table> table_;
    std::vector<std::shared_ptr<resilient>> parked_;   // dropped requests waiting for a view
    std::vector<std::shared_ptr<resilient>> retained_; // ordered pushes not yet durable
    petrel::ring marked_ring_; // the ring of the newest resync tick (see sync_ticks)
    std::set<node_id> told_;   // servers that heard this client's ticks (see sync_ticks)
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/resender.ipp>
#endif
