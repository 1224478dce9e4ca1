// Petrel: the TCP transport (Asio, C++20 coroutines).
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/detail/log_throttle.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/transport/detail/tcp_connection.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>
#include <petrel/transport/transport.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel {

namespace detail {

/// A new strand for a connection of a transport on `ex`. On an `io_context`'s executor
/// (the common case) the strand wraps that executor itself rather than `ex`: such a strand
/// fits inside an `asio::any_io_executor`, so the copies Asio makes of a socket's executor
/// for every operation (with work tracked, or blocking relaxed) allocate nothing.
/// (`target` alone does not check the type: `target_type` does.)
[[nodiscard]] PETREL_DECL asio::any_io_executor connection_strand(const asio::any_io_executor& ex);

struct tcp_transport_state;

/// An accepted connection's place under the listeners' limits
/// (`transport_options::max_accepted_connections`, `max_connections_per_address`), given
/// back once: when the connection goes, or with the last copy of the ticket.
class connection_ticket {
public:
    connection_ticket(std::weak_ptr<tcp_transport_state> state, std::string address);
    connection_ticket(const connection_ticket&) = delete;
    connection_ticket& operator=(const connection_ticket&) = delete;
    ~connection_ticket();
    void release() noexcept;

private:
    std::weak_ptr<tcp_transport_state> state_;
    std::string address_;
    std::atomic<bool> released_{false};
};

struct tcp_transport_state : std::enable_shared_from_this<tcp_transport_state> {
    tcp_transport_state(asio::any_io_executor e, transport_options o, std::chrono::milliseconds t);

    /// `socket`, with TLS over it when the options ask for TLS (its handshake yet to run).
    [[nodiscard]] tcp_stream wrap(asio::ip::tcp::socket socket) const;

    /// Whether a connection runs handshakes before it carries frames.
    [[nodiscard]] bool shakes_hands() const noexcept { return tls || !opts.secret.empty(); }

    void log(log_level level, const std::string& text) const;

    /// Wraps a connected socket, registers it and starts its loops; nullptr after close().
    /// An accepted connection holds its `ticket` until it goes.
    std::shared_ptr<tcp_connection> adopt(tcp_stream stream, connection_handlers h, bool accepted,
                                          std::shared_ptr<connection_ticket> ticket = {},
                                          access peer = access::full);

    // The coroutines below are static and take their owner as a parameter: the coroutine
    // frame holds it from the spawn on, so the state cannot die between co_spawn and the
    // first resumption.
    static asio::awaitable<void> accept_loop(std::shared_ptr<tcp_transport_state> self,
                                             std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                                             connection_handlers h);

    /// A place for a connection just accepted on `socket`, or none (it is to be closed,
    /// the refusal logged) when the listeners hold `max_accepted_connections` already, or
    /// `max_connections_per_address` from its peer's address.
    std::shared_ptr<connection_ticket> take_ticket(const asio::ip::tcp::socket& socket);

    /// Gives back a ticket's place (`connection_ticket::release`).
    void return_ticket(const std::string& address) noexcept;

    /// Registers an accepted socket whose handshake begins, so that `close` can end it;
    /// false (the socket is to be closed) once closed, or when `max_handshakes` run
    /// already.
    bool begin_handshake(const std::shared_ptr<tcp_stream>& socket);

    /// Runs the acceptor's end of the handshakes on `socket` (TLS, then the secret's),
    /// then serves it as an accepted connection; a peer that fails either is closed after
    /// `auth_failure_delay`.
    static asio::awaitable<void> admit(std::shared_ptr<tcp_transport_state> self,
                                       std::shared_ptr<tcp_stream> socket, connection_handlers h,
                                       std::shared_ptr<connection_ticket> ticket);

    /// Logs a refused connection, at most one line a second (then with the number of
    /// refusals not logged since the last line).
    void note_refusal(const std::string& who, const std::string& why);

    /// Under `mutex`: the line to log for a refusal, or none within a second of the last.
    std::string refusal_line(const std::string& who, const std::string& why);

    static asio::awaitable<std::pair<std::error_code, connection_ptr>>
    connect(std::shared_ptr<tcp_transport_state> self, std::string address, connection_handlers h);

    void close();

    /// Accepted connections whose handshakes may run at once; more are closed at once.
    static constexpr std::size_t max_handshakes = 128;

    asio::any_io_executor ex;
    transport_options opts;
    std::chrono::milliseconds connect_timeout;
    std::mutex mutex;
    bool closed = false;
    std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acceptors;
    std::unordered_map<tcp_connection*, std::weak_ptr<tcp_connection>> connections;
    /// Sockets in their handshake, accepted or connecting (both count towards
    /// `max_handshakes` when a listener accepts).
    std::unordered_map<tcp_stream*, std::weak_ptr<tcp_stream>> handshakes;
    /// Mutual TLS on every connection (`transport_options::tls`), or none.
    std::shared_ptr<asio::ssl::context> tls;
    detail::log_throttle refusals;
    // What the accepted connections draw on together (`max_receiving_bytes`,
    // `max_cached_key_bytes`, `max_queued_reply_bytes`).
    shared_budgets budgets;
    /// Accepted connections holding a ticket, in all and by peer address.
    std::size_t accepted_count = 0;
    std::unordered_map<std::string, std::size_t> per_address;
};

} // namespace detail

/// Messages over TCP, with Asio and C++20 coroutines.
///
/// Each connection runs a read loop and a write loop on its own strand. Outgoing
/// messages are queued and written with gathered writes (header and payload segments
/// straight from their buffers, several messages per system call when they queue up);
/// incoming payloads land in pooled buffers; TCP_NODELAY is on. A peer that sends an
/// invalid frame loses its connection, and the reason goes to the logger. With a secret
/// in the options, a connection carries frames only once both ends proved they know it
/// (`detail::authenticate`): connecting fails with `errc::auth_failed`, and a listener
/// closes a peer that fails, after a short delay, and logs it (a line a second at most).
///
/// Addresses are "host:port" (IPv6 as "[::1]:port"). Port 0 in `listen` picks a free
/// port; the returned address has it.
///
/// @par Example
/// @code
/// asio::io_context io;
/// petrel::tcp_transport t(io.get_executor());
/// std::string address = t.listen("127.0.0.1:0", handlers);
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread. The executor may be an
/// `io_context` run by several threads.
class tcp_transport {
public:
    using executor_type = asio::any_io_executor;

    explicit tcp_transport(executor_type ex, transport_options opts = {},
                           std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));

    tcp_transport(tcp_transport&&) noexcept = default;
    tcp_transport& operator=(tcp_transport&& other) noexcept;
    tcp_transport(const tcp_transport&) = delete;
    tcp_transport& operator=(const tcp_transport&) = delete;

    /// Closes everything this transport opened.
    ~tcp_transport();

    [[nodiscard]] executor_type get_executor() const { return state_->ex; }
    [[nodiscard]] const transport_options& options() const { return state_->opts; }
    [[nodiscard]] const std::shared_ptr<buffer_pool>& pool() const { return state_->opts.pool; }

    /// Starts accepting connections at `address`; each gets `h`. Returns the bound
    /// address. @throws std::system_error when the address is invalid or taken.
    std::string listen(std::string_view address, connection_handlers h);

    /// Connects to `address`. Completion signature `void(std::error_code, connection_ptr)`.
    template <typename CompletionToken>
    auto async_connect(std::string_view address, connection_handlers h, CompletionToken&& token) {
        return asio::async_initiate<CompletionToken, void(std::error_code, connection_ptr)>(
            [state = state_](auto handler, std::string addr, connection_handlers hs) {
                detail::completion done(std::move(handler), state->ex);
                auto strand = detail::connection_strand(state->ex);
                asio::co_spawn(
                    strand,
                    detail::tcp_transport_state::connect(state, std::move(addr), std::move(hs)),
                    [done = std::move(done)](std::exception_ptr ep,
                                             std::pair<std::error_code, connection_ptr> r) mutable {
                        if (ep) {
                            r = {make_error_code(errc::invalid_argument), nullptr};
                        }
                        std::move(done).dispatch(r.first, std::move(r.second));
                    });
            },
            token, std::string(address), std::move(h));
    }

    /// Stops listening and closes every connection; idempotent.
    void close();

private:
    std::shared_ptr<detail::tcp_transport_state> state_;
};

static_assert(transport<tcp_transport>);

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/tcp_transport.ipp>
#endif
