// Petrel: requests to one peer, matched with their replies.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
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
[[nodiscard]] inline std::error_code status_error(std::uint32_t status) noexcept {
    if (status == 0) {
        return {};
    }
    if (status <= static_cast<std::uint32_t>(last_errc)) {
        return make_error_code(static_cast<errc>(status));
    }
    return make_error_code(errc::remote_error);
}

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
    request_link(any_transport transport, std::string address, std::chrono::milliseconds timeout,
                 request_link_options options = {})
        : transport_(std::move(transport)), address_(std::move(address)), timeout_(timeout),
          options_(options), log_(transport_.options().log), timer_(transport_.get_executor()),
          retry_timer_(transport_.get_executor()), give_up_timer_(transport_.get_executor()) {}

    [[nodiscard]] const std::string& address() const noexcept { return address_; }

    /// Takes the peer's messages that are not replies (otherwise they close the
    /// connection, as from a broken peer). Call before the first request.
    void on_notify(notify_callback cb) {
        std::lock_guard lock(mutex_);
        notify_ = std::move(cb);
    }

    /// Sends `m` and calls `cb` once with its reply or with the error that ended the wait,
    /// at the latest after the link's timeout.
    void request(wire::message m, reply_callback cb) {
        request(std::move(m), std::move(cb), timeout_);
    }

    /// As above with this request's own timeout (`no_deadline` for none), and `observer`
    /// (when given) shown its reply before `cb` is called.
    void request(wire::message m, reply_callback cb, std::chrono::milliseconds timeout,
                 std::shared_ptr<reply_observer> observer = nullptr) {
        connection_ptr conn;
        bool connect = false;
        {
            std::unique_lock lock(mutex_);
            if (closed_) {
                lock.unlock();
                asio::post(
                    transport_.get_executor(),
                    [cb = std::move(cb), ec = closed_with_]() mutable { cb(ec, wire::message{}); });
                return;
            }
            const std::uint64_t id = ++next_id_;
            m.header.request_id = id;
            const auto deadline =
                timeout == no_deadline ? clock::time_point::max() : clock::now() + timeout;
            pending_.emplace(id, pending{deadline, std::move(cb), std::move(observer)});
            arm_timer();
            switch (phase_) {
            case phase::connected:
                conn = conn_;
                break;
            case phase::connecting:
                backlog_.push_back(std::move(m));
                if (!in_round_) {
                    // The peer was treated as failed while an attempt still ran: a new
                    // round, which makes its own attempt once that one has failed.
                    begin_connecting();
                }
                return;
            case phase::idle:
                phase_ = phase::connecting;
                backlog_.push_back(std::move(m));
                begin_connecting();
                attempting_ = true;
                attempt_round_ = round_;
                connect = true;
                break;
            }
        }
        if (conn) {
            conn->send(std::move(m));
        } else if (connect) {
            start_connect();
        }
    }

    /// Fails every waiting request with `ec` (`errc::shut_down` by default) and closes the
    /// connection; later requests fail with `ec` too. Idempotent: the first call decides.
    void close(std::error_code ec = make_error_code(errc::shut_down)) {
        connection_ptr conn;
        std::vector<reply_callback> failed;
        {
            std::lock_guard lock(mutex_);
            if (closed_) {
                return;
            }
            closed_ = true;
            closed_with_ = ec;
            conn = std::move(conn_);
            failed = take_all();
            backlog_.clear();
            timer_.cancel();
            retry_timer_.cancel();
            give_up_timer_.cancel();
        }
        if (conn) {
            conn->close();
        }
        fail(failed, ec);
    }

    /// Whether close() was called.
    [[nodiscard]] bool closed() const {
        std::lock_guard lock(mutex_);
        return closed_;
    }

    /// Whether the link treats its peer as failed: connecting kept failing for
    /// `request_link_options::unreachable_after`, and no attempt has succeeded since.
    [[nodiscard]] bool unreachable() const {
        std::lock_guard lock(mutex_);
        return unreachable_;
    }

    /// True once per time the peer became unreachable: for a user of the link that adds
    /// its own report (naming the node) without repeating it for every request.
    [[nodiscard]] bool first_unreachable_report() {
        std::lock_guard lock(mutex_);
        const bool first = unreachable_ && !unreachable_reported_;
        unreachable_reported_ = unreachable_reported_ || unreachable_;
        return first;
    }

    /// Requests waiting for a reply.
    [[nodiscard]] std::size_t in_flight() const {
        std::lock_guard lock(mutex_);
        return pending_.size();
    }

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
    [[nodiscard]] static bool cannot_reach(std::error_code ec) noexcept {
        return refused(ec) || timed_out(ec) || ec == asio::error::host_unreachable ||
               ec == asio::error::network_unreachable || ec == std::errc::host_unreachable ||
               ec == std::errc::network_unreachable;
    }

    [[nodiscard]] static bool refused(std::error_code ec) noexcept {
        return ec == asio::error::connection_refused || ec == std::errc::connection_refused;
    }

    [[nodiscard]] static bool timed_out(std::error_code ec) noexcept {
        return ec == asio::error::timed_out || ec == std::errc::timed_out || ec == errc::timed_out;
    }

    /// Starts a round of connection attempts (phase connecting): with `unreachable_after`,
    /// the peer is treated as failed if the round has not connected by its end. Holds
    /// the lock.
    void begin_connecting() {
        ++round_;
        in_round_ = true;
        round_error_ = {};
        if (!gives_up()) {
            return;
        }
        give_up_timer_.expires_after(options_.unreachable_after);
        round_ends_ = give_up_timer_.expiry();
        std::weak_ptr<request_link> weak = weak_from_this();
        give_up_timer_.async_wait([weak, round = round_](std::error_code ec) {
            if (auto self = weak.lock(); self && ec != asio::error::operation_aborted) {
                self->on_round_end(round);
            }
        });
    }

    /// Ends the round of connection attempts (the lock is held).
    void end_round() {
        ++round_; // late timer handlers of the round do nothing
        in_round_ = false;
        retry_timer_.cancel();
        give_up_timer_.cancel();
    }

    /// The round's time is up and it has not connected: the peer is treated as failed.
    void on_round_end(std::uint64_t round) {
        std::vector<reply_callback> failed;
        std::string line;
        {
            std::lock_guard lock(mutex_);
            if (closed_ || round != round_ || !in_round_ || phase_ != phase::connecting) {
                return;
            }
            line = give_up(failed);
            if (!attempting_) {
                phase_ = phase::idle;
            } // else the attempt still runs: its end decides (see on_connected)
        }
        report(line);
        fail(failed, errc::node_failed);
    }

    /// Treats the peer as failed: takes the waiting requests, ends the round, and returns
    /// the line to log (empty when the peer was already treated as failed). Holds the lock.
    std::string give_up(std::vector<reply_callback>& failed) {
        failed = take_all(); // not connected: only the backlog was waiting
        backlog_.clear();
        end_round();
        if (unreachable_) {
            return {};
        }
        unreachable_ = true;
        const auto ms = options_.unreachable_after.count();
        const auto span =
            ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
        const auto ec = round_error_;
        std::string what = "does not answer connection attempts";
        if (refused(ec)) {
            what = "refuses connections";
        } else if (ec == errc::connection_closed) {
            what = "closes connections before the handshake";
        } else if (ec && !timed_out(ec)) {
            what = "is unreachable"; // host or network unreachable
        }
        return "petrel: " + address_ + " " + what + (ec ? " (" + ec.message() + ")" : "") +
               " for " + span + ": its requests fail with node_failed";
    }

    void report(const std::string& line, log_level level = log_level::error) const {
        if (!line.empty() && log_) {
            log_(level, line);
        }
    }

    /// Another attempt of round `round`, unless nobody waits for it any more.
    void on_retry(std::uint64_t round) {
        {
            std::lock_guard lock(mutex_);
            if (closed_ || round != round_ || !in_round_ || phase_ != phase::connecting) {
                return;
            }
            if (pending_.empty()) { // every request of the round timed out
                backlog_.clear();
                end_round();
                phase_ = phase::idle;
                return;
            }
            attempting_ = true;
            attempt_round_ = round_;
        }
        start_connect();
    }

    /// One connection attempt; the caller set `attempting_` and `attempt_round_`.
    void start_connect() {
        std::weak_ptr<request_link> weak = weak_from_this();
        connection_handlers h;
        h.on_message = [weak](const connection_ptr& c, wire::message&& m) {
            if (auto self = weak.lock()) {
                self->on_message(c, std::move(m));
            }
        };
        h.on_close = [weak](const connection_ptr& c, std::error_code ec) {
            if (auto self = weak.lock()) {
                self->on_close(c, ec);
            }
        };
        transport_.async_connect(address_, std::move(h),
                                 [weak](std::error_code ec, connection_ptr c) {
                                     if (auto self = weak.lock()) {
                                         self->on_connected(ec, std::move(c));
                                     } else if (c) {
                                         c->close();
                                     }
                                 });
    }

    void on_connected(std::error_code ec, connection_ptr c) {
        std::vector<wire::message> backlog;
        std::vector<reply_callback> failed;
        std::error_code failed_with = ec;
        std::string line;
        log_level level = log_level::error;
        bool discard = false;
        bool failed_now = false;
        bool again = false;
        // A connect that the peer closed before its handshake's hello reached no node of
        // this job (another process may hold the port now): as unreachable as a refusal.
        const bool closed_at_connect = ec == errc::connection_closed;
        if (!ec && c && !options_.peer_name.empty()) {
            if (const auto shown = c->peer_name(); shown != options_.peer_name) {
                ec = make_error_code(errc::not_permitted);
                line = "petrel: " + address_ + " shows the certificate of '" +
                       printable(shown, 256) + "', not of '" + options_.peer_name +
                       "': nothing was sent to it";
            }
        }
        {
            std::lock_guard lock(mutex_);
            attempting_ = false;
            if (!ec && !closed_ && (!c || !c->is_open())) {
                // Closed before this completion ran: its on_close found no conn_ to reset.
                ec = make_error_code(errc::connection_closed);
            }
            if (closed_) {
                ec = closed_with_;
            }
            failed_with = ec;
            // With unreachable_after, a peer that cannot be reached is tried again within
            // the round's time, and treated as failed after it.
            const bool unreached =
                ec && !closed_ && gives_up() && (cannot_reach(ec) || closed_at_connect);
            if (unreached && in_round_ && attempt_round_ != round_) {
                // An attempt from before this round (see request()): the round makes its
                // own now.
                round_error_ = ec;
                attempting_ = true;
                attempt_round_ = round_;
                again = true;
            } else if (unreached) {
                round_error_ = ec;
                if (unreachable_ || !in_round_ || clock::now() >= round_ends_) {
                    line = give_up(failed); // (empty when already treated as failed)
                    phase_ = phase::idle;
                    failed_with = make_error_code(errc::node_failed);
                    failed_now = true;
                } else {
                    // Within the round's time: try again shortly (on_retry).
                    const auto left = round_ends_ - clock::now();
                    retry_timer_.expires_after(
                        std::min<clock::duration>(options_.retry_interval, left));
                    std::weak_ptr<request_link> weak = weak_from_this();
                    retry_timer_.async_wait([weak, round = round_](std::error_code e) {
                        if (auto self = weak.lock(); self && e != asio::error::operation_aborted) {
                            self->on_retry(round);
                        }
                    });
                }
                discard = c != nullptr;
            } else if (ec) {
                phase_ = phase::idle;
                backlog.swap(backlog_);
                failed = take_all(); // only the backlog was waiting
                end_round();
                discard = c != nullptr;
                failed_now = true;
            } else {
                backlog.swap(backlog_);
                phase_ = phase::connected;
                conn_ = c;
                end_round();
                if (unreachable_) {
                    unreachable_ = false;
                    unreachable_reported_ = false;
                    line = "petrel: " + address_ + " accepts connections again";
                    level = log_level::info;
                }
            }
        }
        if (discard) {
            c->close();
        }
        report(line, level);
        if (failed_now) {
            fail(failed, failed_with);
            return;
        }
        if (again) {
            start_connect();
            return;
        }
        if (ec) {
            return; // tried again later
        }
        for (auto& m : backlog) {
            c->send(std::move(m));
        }
    }

    void on_message(const connection_ptr& c, wire::message&& m) {
        if (!wire::is_reply(m.header.kind)) {
            notify_callback notify;
            {
                std::lock_guard lock(mutex_);
                notify = notify_;
            }
            if (notify) {
                notify(std::move(m));
            } else {
                c->close(); // a peer that sends requests to a requester is broken
            }
            return;
        }
        reply_callback cb;
        std::shared_ptr<reply_observer> observer;
        {
            std::lock_guard lock(mutex_);
            auto it = pending_.find(m.header.request_id);
            if (it == pending_.end()) {
                return; // a reply after its request timed out
            }
            cb = std::move(it->second.callback);
            observer = std::move(it->second.observer);
            pending_.erase(it);
        }
        if (observer) {
            observer->observe(m);
        }
        cb(status_error(m.header.status), std::move(m));
    }

    void on_close(const connection_ptr& c, std::error_code ec) {
        std::vector<reply_callback> failed;
        {
            std::lock_guard lock(mutex_);
            if (conn_ != c) {
                return;
            }
            conn_.reset();
            phase_ = phase::idle;
            failed = take_all();
        }
        const bool ours = ec.category() == error_category() && ec != errc::shut_down;
        fail(failed, ours ? ec : make_error_code(errc::connection_closed));
    }

    /// Keeps one timer running while requests wait; it fails those past their deadline.
    void arm_timer() {
        if (timer_armed_ || pending_.empty()) {
            return;
        }
        timer_armed_ = true;
        const auto tick = std::clamp<clock::duration>(timeout_ / 4, std::chrono::milliseconds(5),
                                                      std::chrono::seconds(1));
        timer_.expires_after(tick);
        std::weak_ptr<request_link> weak = weak_from_this();
        timer_.async_wait([weak](std::error_code ec) {
            if (auto self = weak.lock()) {
                self->on_tick(ec);
            }
        });
    }

    void on_tick(std::error_code ec) {
        std::vector<reply_callback> expired;
        {
            std::lock_guard lock(mutex_);
            timer_armed_ = false;
            if (closed_ || ec == asio::error::operation_aborted) {
                return;
            }
            const auto now = clock::now();
            for (auto it = pending_.begin(); it != pending_.end();) {
                if (it->second.deadline <= now) {
                    expired.push_back(std::move(it->second.callback));
                    it = pending_.erase(it);
                } else {
                    ++it;
                }
            }
            arm_timer();
        }
        fail(expired, errc::timed_out);
    }

    std::vector<reply_callback> take_all() {
        std::vector<reply_callback> all;
        all.reserve(pending_.size());
        for (auto& [id, p] : pending_) {
            all.push_back(std::move(p.callback));
        }
        pending_.clear();
        return all;
    }

    static void fail(std::vector<reply_callback>& callbacks, std::error_code ec) {
        for (auto& cb : callbacks) {
            cb(ec, wire::message{});
        }
    }

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
