// Petrel: the bodies of a request link (see <petrel/transport/detail/request_link.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_REQUEST_LINK_IPP
#define PETREL_TRANSPORT_IMPL_REQUEST_LINK_IPP

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/error.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel::detail {

PETREL_DECL std::error_code status_error(std::uint32_t status) noexcept {
    if (status == 0) {
        return {};
    }
    if (status <= static_cast<std::uint32_t>(last_errc)) {
        return make_error_code(static_cast<errc>(status));
    }
    return make_error_code(errc::remote_error);
}

PETREL_DECL request_link::request_link(any_transport transport, std::string address,
                                       std::chrono::milliseconds timeout,
                                       request_link_options options)
    : transport_(std::move(transport)), address_(std::move(address)), timeout_(timeout),
      options_(options), log_(transport_.options().log), timer_(transport_.get_executor()),
      retry_timer_(transport_.get_executor()), give_up_timer_(transport_.get_executor()) {}

PETREL_DECL void request_link::on_notify(notify_callback cb) {
    std::lock_guard lock(mutex_);
    notify_ = std::move(cb);
}

PETREL_DECL void request_link::request(wire::message m, reply_callback cb) {
    request(std::move(m), std::move(cb), timeout_);
}

PETREL_DECL void request_link::request(wire::message m, reply_callback cb,
                                       std::chrono::milliseconds timeout,
                                       std::shared_ptr<reply_observer> observer) {
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

PETREL_DECL void request_link::close(std::error_code ec) {
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

PETREL_DECL bool request_link::closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
}

PETREL_DECL bool request_link::unreachable() const {
    std::lock_guard lock(mutex_);
    return unreachable_;
}

PETREL_DECL bool request_link::first_unreachable_report() {
    std::lock_guard lock(mutex_);
    const bool first = unreachable_ && !unreachable_reported_;
    unreachable_reported_ = unreachable_reported_ || unreachable_;
    return first;
}

PETREL_DECL std::size_t request_link::in_flight() const {
    std::lock_guard lock(mutex_);
    return pending_.size();
}

PETREL_DECL bool request_link::cannot_reach(std::error_code ec) noexcept {
    return refused(ec) || timed_out(ec) || ec == asio::error::host_unreachable ||
           ec == asio::error::network_unreachable || ec == std::errc::host_unreachable ||
           ec == std::errc::network_unreachable;
}

PETREL_DECL bool request_link::refused(std::error_code ec) noexcept {
    return ec == asio::error::connection_refused || ec == std::errc::connection_refused;
}

PETREL_DECL bool request_link::timed_out(std::error_code ec) noexcept {
    return ec == asio::error::timed_out || ec == std::errc::timed_out || ec == errc::timed_out;
}

PETREL_DECL void request_link::begin_connecting() {
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

PETREL_DECL void request_link::end_round() {
    ++round_; // late timer handlers of the round do nothing
    in_round_ = false;
    retry_timer_.cancel();
    give_up_timer_.cancel();
}

PETREL_DECL void request_link::on_round_end(std::uint64_t round) {
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

PETREL_DECL std::string request_link::give_up(std::vector<reply_callback>& failed) {
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
    return "petrel: " + address_ + " " + what + (ec ? " (" + ec.message() + ")" : "") + " for " +
           span + ": its requests fail with node_failed";
}

PETREL_DECL void request_link::report(const std::string& line, log_level level) const {
    if (!line.empty() && log_) {
        log_(level, line);
    }
}

PETREL_DECL void request_link::on_retry(std::uint64_t round) {
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

PETREL_DECL void request_link::start_connect() {
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
    transport_.async_connect(address_, std::move(h), [weak](std::error_code ec, connection_ptr c) {
        if (auto self = weak.lock()) {
            self->on_connected(ec, std::move(c));
        } else if (c) {
            c->close();
        }
    });
}

PETREL_DECL void request_link::on_connected(std::error_code ec, connection_ptr c) {
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
            line = "petrel: " + address_ + " shows the certificate of '" + printable(shown, 256) +
                   "', not of '" + options_.peer_name + "': nothing was sent to it";
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

PETREL_DECL void request_link::on_message(const connection_ptr& c, wire::message&& m) {
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

PETREL_DECL void request_link::on_close(const connection_ptr& c, std::error_code ec) {
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

PETREL_DECL void request_link::arm_timer() {
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

PETREL_DECL void request_link::on_tick(std::error_code ec) {
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

PETREL_DECL std::vector<reply_callback> request_link::take_all() {
    std::vector<reply_callback> all;
    all.reserve(pending_.size());
    for (auto& [id, p] : pending_) {
        all.push_back(std::move(p.callback));
    }
    pending_.clear();
    return all;
}

PETREL_DECL void request_link::fail(std::vector<reply_callback>& callbacks, std::error_code ec) {
    for (auto& cb : callbacks) {
        cb(ec, wire::message{});
    }
}

} // namespace petrel::detail

#endif
