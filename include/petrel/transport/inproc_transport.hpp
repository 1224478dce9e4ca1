// Petrel: the in-process transport.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/frame.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
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
    PETREL_DECL inproc_connection(asio::any_io_executor ex, const transport_options& opts,
                                  connection_handlers h, std::string remote);

    PETREL_DECL void pair_with(const std::shared_ptr<inproc_connection>& peer);
    PETREL_DECL void set_on_gone(std::function<void(inproc_connection*)> f);

    PETREL_DECL void send(wire::message m) override;

    PETREL_DECL void close() override;

    [[nodiscard]] bool is_open() const noexcept override { return open_.load(); }
    [[nodiscard]] std::string remote_address() const override { return remote_; }

private:
    PETREL_DECL void deliver(wire::message&& m);

    PETREL_DECL void finish(std::error_code ec, bool tell_peer);

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
    PETREL_DECL inproc_hub();

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

    PETREL_DECL inproc_transport(executor_type ex, inproc_hub hub, transport_options opts = {});

    inproc_transport(inproc_transport&&) noexcept = default;
    PETREL_DECL inproc_transport& operator=(inproc_transport&& other) noexcept;
    inproc_transport(const inproc_transport&) = delete;
    inproc_transport& operator=(const inproc_transport&) = delete;
    PETREL_DECL ~inproc_transport();

    [[nodiscard]] executor_type get_executor() const { return state_->ex; }
    [[nodiscard]] const transport_options& options() const { return state_->opts; }
    [[nodiscard]] const std::shared_ptr<buffer_pool>& pool() const { return state_->opts.pool; }

    /// Registers `name` in the hub; an empty name gets a unique one. Returns the name.
    /// @throws std::system_error when the name is taken or the transport closed.
    PETREL_DECL std::string listen(std::string_view name, connection_handlers h);

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

    PETREL_DECL void close();

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
        PETREL_DECL bool add(const std::shared_ptr<detail::inproc_connection>& c);

        PETREL_DECL std::pair<std::error_code, connection_ptr> connect(const std::string& name,
                                                                       connection_handlers h);

        PETREL_DECL void close();
    };

    std::shared_ptr<state> state_;
};

static_assert(transport<inproc_transport>);

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/inproc_transport.ipp>
#endif
