// Petrel: the bodies of the in-process transport (see <petrel/transport/inproc_transport.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_INPROC_TRANSPORT_IPP
#define PETREL_TRANSPORT_IMPL_INPROC_TRANSPORT_IPP

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/inproc_transport.hpp>
#include <petrel/wire/frame.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel {

namespace detail {

PETREL_DECL inproc_connection::inproc_connection(asio::any_io_executor ex,
                                                 const transport_options& opts,
                                                 connection_handlers h, std::string remote)
    : strand_(asio::make_strand(std::move(ex))), limits_(opts.limits), log_(opts.log),
      pool_(opts.pool ? opts.pool : std::make_shared<buffer_pool>()),
      key_cache_(opts.limits.max_key_cache_bytes), handlers_(std::move(h)),
      remote_(std::move(remote)) {}

PETREL_DECL void inproc_connection::pair_with(const std::shared_ptr<inproc_connection>& peer) {
    peer_ = peer;
}

PETREL_DECL void inproc_connection::set_on_gone(std::function<void(inproc_connection*)> f) {
    on_gone_ = std::move(f);
}

PETREL_DECL void inproc_connection::send(wire::message m) {
    auto peer = peer_.lock();
    if (!peer || !open_.load()) {
        return;
    }
    asio::post(peer->strand_, [peer, m = std::move(m)]() mutable { peer->deliver(std::move(m)); });
}

PETREL_DECL void inproc_connection::close() {
    asio::post(strand_, [self = shared_from_this()] { self->finish(errc::shut_down, true); });
}

PETREL_DECL void inproc_connection::deliver(wire::message&& m) {
    if (closed_) {
        return;
    }
    if (auto ec = wire::validate(m, limits_, *pool_, &key_cache_)) {
        if (log_) {
            log_(log_level::warning,
                 "closing connection with " + remote_ + ": invalid message: " + ec.message());
        }
        finish(ec, true);
        return;
    }
    if (!handlers_.on_message) {
        return;
    }
    try {
        handlers_.on_message(shared_from_this(), std::move(m));
    } catch (const std::exception& e) {
        if (log_) {
            log_(log_level::error,
                 "closing connection with " + remote_ + ": message handler failed: " + e.what());
        }
        finish(errc::handler_failed, true);
    }
}

PETREL_DECL void inproc_connection::finish(std::error_code ec, bool tell_peer) {
    if (closed_) {
        return;
    }
    closed_ = true;
    open_ = false;
    auto on_close = std::move(handlers_.on_close);
    handlers_ = {};
    if (on_close) {
        on_close(shared_from_this(), ec);
    }
    if (auto peer = peer_.lock(); peer && tell_peer) {
        asio::post(peer->strand_,
                   [peer] { peer->finish(make_error_code(errc::connection_closed), false); });
    }
    if (auto gone = std::move(on_gone_)) {
        gone(this);
    }
}

} // namespace detail

PETREL_DECL inproc_hub::inproc_hub() : state_(std::make_shared<detail::inproc_hub_state>()) {}

PETREL_DECL inproc_transport::inproc_transport(executor_type ex, inproc_hub hub,
                                               transport_options opts)
    : state_(std::make_shared<state>()) {
    state_->ex = std::move(ex);
    state_->hub = std::move(hub.state_);
    state_->opts = std::move(opts);
    if (!state_->opts.pool) {
        state_->opts.pool = std::make_shared<buffer_pool>();
    }
}

PETREL_DECL inproc_transport& inproc_transport::operator=(inproc_transport&& other) noexcept {
    if (this != &other) {
        close();
        state_ = std::move(other.state_);
    }
    return *this;
}

PETREL_DECL inproc_transport::~inproc_transport() {
    close();
}

PETREL_DECL std::string inproc_transport::listen(std::string_view name, connection_handlers h) {
    // Both locks: `closed` belongs to this transport, the names to the hub. No other
    // code holds both, so the order cannot deadlock.
    std::scoped_lock lock(state_->mutex, state_->hub->mutex);
    std::string n =
        name.empty() ? "inproc-" + std::to_string(state_->hub->next_name++) : std::string(name);
    if (state_->closed) {
        throw std::system_error(make_error_code(errc::shut_down),
                                "petrel: listen on a closed in-process transport");
    }
    if (state_->hub->listeners.contains(n)) {
        throw std::system_error(make_error_code(errc::invalid_argument),
                                "petrel: in-process address '" + n + "' is taken");
    }
    std::weak_ptr<state> weak = state_;
    detail::inproc_listener l{state_->ex, state_->opts, std::move(h), state_, {}};
    l.adopt = [weak](const std::shared_ptr<detail::inproc_connection>& c) {
        auto s = weak.lock();
        return s && s->add(c);
    };
    state_->hub->listeners.emplace(n, std::move(l));
    state_->names.push_back(n);
    return n;
}

PETREL_DECL void inproc_transport::close() {
    if (state_) {
        state_->close();
    }
}

PETREL_DECL bool inproc_transport::state::add(const std::shared_ptr<detail::inproc_connection>& c) {
    std::weak_ptr<state> weak = weak_from_this();
    std::lock_guard lock(mutex);
    if (closed) {
        return false;
    }
    c->set_on_gone([weak](detail::inproc_connection* gone) {
        if (auto s = weak.lock()) {
            std::lock_guard lock(s->mutex);
            s->connections.erase(gone);
        }
    });
    connections.emplace(c.get(), c);
    return true;
}

PETREL_DECL std::pair<std::error_code, connection_ptr>
inproc_transport::state::connect(const std::string& name, connection_handlers h) {
    detail::inproc_listener l;
    {
        std::lock_guard lock(hub->mutex);
        auto it = hub->listeners.find(name);
        if (it == hub->listeners.end() || it->second.owner.expired()) {
            return {make_error_code(std::errc::connection_refused), nullptr};
        }
        l = it->second;
    }
    auto mine = std::make_shared<detail::inproc_connection>(ex, opts, std::move(h), name);
    auto theirs =
        std::make_shared<detail::inproc_connection>(l.ex, l.opts, l.handlers, "inproc-peer");
    mine->pair_with(theirs);
    theirs->pair_with(mine);
    if (!add(mine)) {
        return {make_error_code(errc::shut_down), nullptr};
    }
    if (!l.adopt(theirs)) {
        // The listener closed between the lookup and now: no half-open connection.
        std::lock_guard lock(mutex);
        connections.erase(mine.get());
        return {make_error_code(std::errc::connection_refused), nullptr};
    }
    return {std::error_code{}, mine};
}

PETREL_DECL void inproc_transport::state::close() {
    std::vector<std::shared_ptr<detail::inproc_connection>> conns;
    {
        std::lock_guard lock(mutex);
        if (closed) {
            return;
        }
        closed = true;
        for (auto& [raw, c] : connections) {
            conns.push_back(c);
        }
    }
    {
        std::lock_guard lock(hub->mutex);
        for (const auto& n : names) {
            hub->listeners.erase(n);
        }
    }
    for (auto& c : conns) {
        c->close();
    }
}

} // namespace petrel

#endif
