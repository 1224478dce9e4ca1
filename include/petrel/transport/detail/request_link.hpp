// Petrel: requests to one peer, matched with their replies.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace petrel::detail {

/// Called once per request: with the reply, or with the error that ended the wait.
using reply_callback = std::function<void(std::error_code, wire::message&&)>;

/// Called with each message from the peer that is not a reply (a notification).
using notify_callback = std::function<void(wire::message&&)>;

/// Sees each reply to the requests it was given with, just before the request's callback
/// (a client's traffic counters, say). Never sees the errors that end a wait without a
/// reply.
class reply_observer {
public:
    virtual void observe(const wire::message& reply) noexcept = 0;

protected:
    reply_observer() = default;
    reply_observer(const reply_observer&) = default;
    reply_observer& operator=(const reply_observer&) = default;
    ~reply_observer() = default;
};

/// A request that waits for its reply without a deadline of its own (something else,
/// such as a heartbeat, must end the wait).
inline constexpr std::chrono::milliseconds no_deadline = std::chrono::milliseconds::max();

/// How long connecting to a peer may keep failing before the links of a store treat it
/// as failed (`request_link_options::unreachable_after`).
inline constexpr std::chrono::milliseconds default_unreachable_after{2000};

/// How a `request_link` treats a peer it cannot connect to.
struct request_link_options {
    /// When connecting keeps failing this long (refused, host or network unreachable, or
    /// an attempt that does not complete), the link treats its peer as failed: it fails
    /// every waiting request with `errc::node_failed` and logs one line naming the
    /// address and the reason. Until then it tries again every `retry_interval`, so a
    /// peer that starts listening within this time is reached normally.
    /// Zero (the default): never; a connection attempt that fails fails the requests
    /// waiting for it with its error at once (for callers that try again by themselves,
    /// such as a member joining a root that starts late).
    std::chrono::milliseconds unreachable_after{0};
    /// The pause between connection attempts within `unreachable_after`.
    std::chrono::milliseconds retry_interval{100};
    /// Under TLS: the common name the peer's certificate must show (empty: any the
    /// authority signed). A connection to a peer that shows another is closed before
    /// any request is sent on it, and the waiting requests fail with
    /// `errc::not_permitted` (logged).
    std::string peer_name{};
};

/// The error a reply's status stands for.
[[nodiscard]] PETREL_DECL std::error_code status_error(std::uint32_t status) noexcept;

/// One peer seen from a requester: connects on first use, gives each request an id,
/// hands each reply to its request's callback, and ends every wait: with the reply,
/// with `errc::timed_out` at the deadline, with `errc::connection_closed` when the
/// connection drops, or with `errc::shut_down` on close(). A later request after a
/// failure connects again.
///
/// A peer that cannot be reached: by default a failed connection attempt fails the
/// requests that waited for it with its error. With `request_link_options::
/// unreachable_after` set, the link tries again until that much time has passed since
/// its first attempt; then it treats the peer as failed (`unreachable()`): every waiting
/// request fails with `errc::node_failed`, and the link logs one line through the
/// transport's logger ("petrel: 10.0.0.2:4001 refuses connections (Connection refused)
/// for 2 s: its requests fail with node_failed"). A later request on such a link makes one more
/// connection attempt (the requests made while it runs wait for it too): if it fails
/// as well, they fail at once with `errc::node_failed`, without another line in the log
/// (an attempt that does not complete ends them after `unreachable_after`); if it
/// succeeds, the link works as before (and logs that the peer accepts connections
/// again).
///
/// @par Thread Safety
/// All member functions may be called from any thread. Callbacks run on the transport's
/// executor (or the thread that called close()), never inside `request()`.
class request_link : public std::enable_shared_from_this<request_link> {
public:
    PETREL_DECL request_link(any_transport transport, std::string address,
                             std::chrono::milliseconds timeout, request_link_options options = {});

    [[nodiscard]] const std::string& address() const noexcept { return address_; }

    /// Takes the peer's messages that are not replies (otherwise they close the
    /// connection, as from a broken peer). Call before the first request.
    PETREL_DECL void on_notify(notify_callback cb);

    /// Sends `m` and calls `cb` once with its reply or with the error that ended the wait,
    /// at the latest after the link's timeout.
    PETREL_DECL void request(wire::message m, reply_callback cb);

    /// As above with this request's own timeout (`no_deadline` for none), and `observer`
    /// (when given) shown its reply before `cb` is called.
    PETREL_DECL void request(wire::message m, reply_callback cb, std::chrono::milliseconds timeout,
                             std::shared_ptr<reply_observer> observer = nullptr);

    /// Fails every waiting request with `ec` (`errc::shut_down` by default) and closes the
    /// connection; later requests fail with `ec` too. Idempotent: the first call decides.
    PETREL_DECL void close(std::error_code ec = make_error_code(errc::shut_down));

    /// Whether close() was called.
    [[nodiscard]] PETREL_DECL bool closed() const;

    /// Whether the link treats its peer as failed: connecting kept failing for
    /// `request_link_options::unreachable_after`, and no attempt has succeeded since.
    [[nodiscard]] PETREL_DECL bool unreachable() const;

    /// True once per time the peer became unreachable: for a user of the link that adds
    /// its own report (naming the node) without repeating it for every request.
    [[nodiscard]] PETREL_DECL bool first_unreachable_report();

    /// Requests waiting for a reply.
    [[nodiscard]] PETREL_DECL std::size_t in_flight() const;

private:
    using clock = std::chrono::steady_clock;
    enum class phase { idle, connecting, connected };
    struct pending {
        clock::time_point deadline;
        reply_callback callback;
        std::shared_ptr<reply_observer> observer; // none for most requests
    };

    [[nodiscard]] bool gives_up() const noexcept { return options_.unreachable_after.count() > 0; }

    /// Whether a failed connection attempt says that the peer cannot be reached (as
    /// opposed to, say, an address that does not resolve). TCP reports Asio's system
    /// errors, the in-process transport the generic ones.
    [[nodiscard]] PETREL_DECL static bool cannot_reach(std::error_code ec) noexcept;

    [[nodiscard]] PETREL_DECL static bool refused(std::error_code ec) noexcept;

    [[nodiscard]] PETREL_DECL static bool timed_out(std::error_code ec) noexcept;

    /// Starts a round of connection attempts (phase connecting): with `unreachable_after`,
    /// the peer is treated as failed if the round has not connected by its end. Holds
    /// the lock.
    PETREL_DECL void begin_connecting();

    /// Ends the round of connection attempts (the lock is held).
    PETREL_DECL void end_round();

    /// The round's time is up and it has not connected: the peer is treated as failed.
    PETREL_DECL void on_round_end(std::uint64_t round);

    /// Treats the peer as failed: takes the waiting requests, ends the round, and returns
    /// the line to log (empty when the peer was already treated as failed). Holds the lock.
    PETREL_DECL std::string give_up(std::vector<reply_callback>& failed);

    PETREL_DECL void report(const std::string& line, log_level level = log_level::error) const;

    /// Another attempt of round `round`, unless nobody waits for it any more.
    PETREL_DECL void on_retry(std::uint64_t round);

    /// One connection attempt; the caller set `attempting_` and `attempt_round_`.
    PETREL_DECL void start_connect();

    PETREL_DECL void on_connected(std::error_code ec, connection_ptr c);

    PETREL_DECL void on_message(const connection_ptr& c, wire::message&& m);

    PETREL_DECL void on_close(const connection_ptr& c, std::error_code ec);

    /// Keeps one timer running while requests wait; it fails those past their deadline.
    PETREL_DECL void arm_timer();

    PETREL_DECL void on_tick(std::error_code ec);

    PETREL_DECL std::vector<reply_callback> take_all();

    PETREL_DECL static void fail(std::vector<reply_callback>& callbacks, std::error_code ec);

    any_transport transport_;
    std::string address_;
    std::chrono::milliseconds timeout_;
    request_link_options options_;
    logger log_;
    mutable std::mutex mutex_;
    asio::steady_timer timer_;
    asio::steady_timer retry_timer_;   // the next connection attempt of a round
    asio::steady_timer give_up_timer_; // the end of a round (with unreachable_after)
    bool timer_armed_ = false;
    bool closed_ = false;
    std::error_code closed_with_;
    notify_callback notify_;
    phase phase_ = phase::idle;
    connection_ptr conn_;
    // A round of connection attempts runs while phase_ is connecting (see
    // begin_connecting); round_ numbers them, so that a timer of an ended round does
    // nothing.
    std::uint64_t round_ = 0;
    bool in_round_ = false;
    clock::time_point round_ends_{};
    std::error_code round_error_;       // why the round's last attempt failed
    bool attempting_ = false;           // a connection attempt runs
    std::uint64_t attempt_round_ = 0;   // the round that started it
    bool unreachable_ = false;          // see unreachable()
    bool unreachable_reported_ = false; // see first_unreachable_report()
    std::vector<wire::message> backlog_;
    std::uint64_t next_id_ = 0;
    std::unordered_map<std::uint64_t, pending> pending_;
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/request_link.ipp>
#endif
