// Petrel: requests to one peer, matched with their replies.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

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

/// A request that waits for its reply without a deadline of its own (something else,
/// such as a heartbeat, must end the wait).
inline constexpr std::chrono::milliseconds no_deadline = std::chrono::milliseconds::max();

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
/// @par Thread Safety
/// All member functions may be called from any thread. Callbacks run on the transport's
/// executor (or the thread that called close()), never inside `request()`.
class request_link : public std::enable_shared_from_this<request_link> {
public:
    request_link(any_transport transport, std::string address, std::chrono::milliseconds timeout)
        : transport_(std::move(transport)), address_(std::move(address)), timeout_(timeout),
          timer_(transport_.get_executor()) {}

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

    /// As above with this request's own timeout (`no_deadline` for none).
    void request(wire::message m, reply_callback cb, std::chrono::milliseconds timeout) {
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
            pending_.emplace(id, pending{deadline, std::move(cb)});
            arm_timer();
            switch (phase_) {
            case phase::connected:
                conn = conn_;
                break;
            case phase::connecting:
                backlog_.push_back(std::move(m));
                return;
            case phase::idle:
                phase_ = phase::connecting;
                backlog_.push_back(std::move(m));
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
            timer_.cancel();
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
    };

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
        bool discard = false;
        bool failed_now = false;
        {
            std::lock_guard lock(mutex_);
            backlog.swap(backlog_);
            if (!ec && !closed_ && (!c || !c->is_open())) {
                // Closed before this completion ran: its on_close found no conn_ to reset.
                ec = make_error_code(errc::connection_closed);
            }
            if (closed_) {
                ec = closed_with_;
            }
            if (ec) {
                phase_ = phase::idle;
                failed = take_all(); // only the backlog was waiting
                discard = c != nullptr;
                failed_now = true;
            } else {
                phase_ = phase::connected;
                conn_ = c;
            }
        }
        if (discard) {
            c->close();
        }
        if (failed_now) {
            fail(failed, ec);
            return;
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
        {
            std::lock_guard lock(mutex_);
            auto it = pending_.find(m.header.request_id);
            if (it == pending_.end()) {
                return; // a reply after its request timed out
            }
            cb = std::move(it->second.callback);
            pending_.erase(it);
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
    mutable std::mutex mutex_;
    asio::steady_timer timer_;
    bool timer_armed_ = false;
    bool closed_ = false;
    std::error_code closed_with_;
    notify_callback notify_;
    phase phase_ = phase::idle;
    connection_ptr conn_;
    std::vector<wire::message> backlog_;
    std::uint64_t next_id_ = 0;
    std::unordered_map<std::uint64_t, pending> pending_;
};

} // namespace petrel::detail
