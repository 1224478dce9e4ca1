// Petrel: the in-process transport.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/frame.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel {

namespace detail {

class inproc_connection final : public connection,
                                public std::enable_shared_from_this<inproc_connection> {
public:
    inproc_connection(asio::any_io_executor ex, const transport_options& opts,
                      connection_handlers h, std::string remote)
        : strand_(asio::make_strand(std::move(ex))), limits_(opts.limits), log_(opts.log),
          pool_(opts.pool ? opts.pool : std::make_shared<buffer_pool>()),
          key_cache_(opts.limits.max_key_cache_bytes), handlers_(std::move(h)),
          remote_(std::move(remote)) {}

    void pair_with(const std::shared_ptr<inproc_connection>& peer) { peer_ = peer; }
    void set_on_gone(std::function<void(inproc_connection*)> f) { on_gone_ = std::move(f); }

    void send(wire::message m) override {
        auto peer = peer_.lock();
        if (!peer || !open_.load()) {
            return;
        }
        asio::post(peer->strand_,
                   [peer, m = std::move(m)]() mutable { peer->deliver(std::move(m)); });
    }

    void close() override {
        asio::post(strand_, [self = shared_from_this()] { self->finish(errc::shut_down, true); });
    }

    [[nodiscard]] bool is_open() const noexcept override { return open_.load(); }
    [[nodiscard]] std::string remote_address() const override { return remote_; }

private:
    void deliver(wire::message&& m) {
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
                log_(log_level::error, "closing connection with " + remote_ +
                                           ": message handler failed: " + e.what());
            }
            finish(errc::handler_failed, true);
        }
    }

    void finish(std::error_code ec, bool tell_peer) {
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

    asio::strand<asio::any_io_executor> strand_;
    wire::wire_limits limits_;
    logger log_;
    std::shared_ptr<buffer_pool> pool_;
    wire::key_cache_receiver key_cache_; // used on the strand only
    connection_handlers handlers_;
    std::string remote_;
    std::weak_ptr<inproc_connection> peer_;
    std::function<void(inproc_connection*)> on_gone_;
    bool closed_ = false;
    std::atomic<bool> open_{true};
};

struct inproc_listener {
    asio::any_io_executor ex;
    transport_options opts;
    connection_handlers handlers;
    std::weak_ptr<void> owner; // the listening transport's state
    /// Takes ownership of the listening end; false when the listener closed meanwhile.
    std::function<bool(const std::shared_ptr<inproc_connection>&)> adopt;
};

struct inproc_hub_state {
    std::mutex mutex;
    std::map<std::string, inproc_listener, std::less<>> listeners;
    std::uint64_t next_name = 0;
};

} // namespace detail

/// A namespace of in-process addresses. Nodes whose `inproc_transport`s share a hub
/// can reach each other; there is no global registry. Copies refer to the same hub.
class inproc_hub {
public:
    inproc_hub() : state_(std::make_shared<detail::inproc_hub_state>()) {}

private:
    friend class inproc_transport;
    std::shared_ptr<detail::inproc_hub_state> state_;
};

/// Messages between nodes of one process, without sockets or serialization.
///
/// The same interface and guarantees as `tcp_transport` (ordered delivery, one
/// `on_close` per end, validation of every received message against the receiver's
/// limits), for tests and for nodes that share a process. Messages are posted to the
/// receiving connection's strand; payloads are shared, not copied.
///
/// @par Thread Safety
/// All member functions may be called from any thread.
class inproc_transport {
public:
    using executor_type = asio::any_io_executor;

    inproc_transport(executor_type ex, inproc_hub hub, transport_options opts = {})
        : state_(std::make_shared<state>()) {
        state_->ex = std::move(ex);
        state_->hub = std::move(hub.state_);
        state_->opts = std::move(opts);
        if (!state_->opts.pool) {
            state_->opts.pool = std::make_shared<buffer_pool>();
        }
    }

    inproc_transport(inproc_transport&&) noexcept = default;
    inproc_transport& operator=(inproc_transport&& other) noexcept {
        if (this != &other) {
            close();
            state_ = std::move(other.state_);
        }
        return *this;
    }
    inproc_transport(const inproc_transport&) = delete;
    inproc_transport& operator=(const inproc_transport&) = delete;
    ~inproc_transport() { close(); }

    [[nodiscard]] executor_type get_executor() const { return state_->ex; }
    [[nodiscard]] const transport_options& options() const { return state_->opts; }
    [[nodiscard]] const std::shared_ptr<buffer_pool>& pool() const { return state_->opts.pool; }

    /// Registers `name` in the hub; an empty name gets a unique one. Returns the name.
    /// @throws std::system_error when the name is taken or the transport closed.
    std::string listen(std::string_view name, connection_handlers h) {
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

    /// Connects to a listener of the same hub. Completion signature
    /// `void(std::error_code, connection_ptr)`.
    template <typename CompletionToken>
    auto async_connect(std::string_view name, connection_handlers h, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code, connection_ptr)>(
            [s = state_](auto handler, std::string n, connection_handlers hs) {
                detail::completion done(std::move(handler), s->ex);
                auto [ec, conn] = s->connect(n, std::move(hs));
                std::move(done).post(ec, std::move(conn));
            },
            token, std::string(name), std::move(h));
    }

    void close() {
        if (state_) {
            state_->close();
        }
    }

private:
    struct state : std::enable_shared_from_this<state> {
        asio::any_io_executor ex;
        std::shared_ptr<detail::inproc_hub_state> hub;
        transport_options opts;
        std::mutex mutex;
        bool closed = false;
        std::vector<std::string> names;
        // Open connections are owned here until they close (as a TCP connection is owned
        // by its own read and write loops).
        std::unordered_map<detail::inproc_connection*, std::shared_ptr<detail::inproc_connection>>
            connections;

        /// Owns `c` until it closes; false (and `c` untouched) once this transport closed.
        bool add(const std::shared_ptr<detail::inproc_connection>& c) {
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

        std::pair<std::error_code, connection_ptr> connect(const std::string& name,
                                                           connection_handlers h) {
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
            auto theirs = std::make_shared<detail::inproc_connection>(l.ex, l.opts, l.handlers,
                                                                      "inproc-peer");
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

        void close() {
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
    };

    std::shared_ptr<state> state_;
};

static_assert(transport<inproc_transport>);

} // namespace petrel
