// Petrel: the bodies of the TCP transport (see <petrel/transport/tcp_transport.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_TCP_TRANSPORT_IPP
#define PETREL_TRANSPORT_IMPL_TCP_TRANSPORT_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/address.hpp>
#include <petrel/transport/detail/handshake.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <typeinfo>
#include <utility>
#include <vector>

namespace petrel {

namespace detail {

PETREL_DECL asio::any_io_executor connection_strand(const asio::any_io_executor& ex) {
#if !defined(ASIO_NO_TYPEID)
    if (ex.target_type() == typeid(asio::io_context::executor_type)) {
        return asio::make_strand(*ex.target<asio::io_context::executor_type>());
    }
#endif
    return asio::make_strand(ex);
}

PETREL_DECL connection_ticket::connection_ticket(std::weak_ptr<tcp_transport_state> state,
                                                 std::string address)
    : state_(std::move(state)), address_(std::move(address)) {}

PETREL_DECL connection_ticket::~connection_ticket() {
    release();
}

PETREL_DECL void connection_ticket::release() noexcept {
    if (released_.exchange(true)) {
        return;
    }
    if (auto s = state_.lock()) {
        s->return_ticket(address_);
    }
}

PETREL_DECL tcp_transport_state::tcp_transport_state(asio::any_io_executor e, transport_options o,
                                                     std::chrono::milliseconds t)
    : ex(std::move(e)), opts(std::move(o)), connect_timeout(t) {
    if (!opts.pool) {
        opts.pool = std::make_shared<buffer_pool>();
    }
    if (opts.max_receiving_bytes > 0) {
        budgets.receiving = std::make_shared<byte_budget>(opts.max_receiving_bytes);
    }
    if (opts.max_cached_key_bytes > 0) {
        budgets.key_lists = std::make_shared<byte_budget>(opts.max_cached_key_bytes);
    }
    if (opts.max_queued_reply_bytes > 0) {
        budgets.replies = std::make_shared<reply_budget>(opts.max_queued_reply_bytes);
    }
    if (opts.tls.enabled()) {
        tls = make_tls_context(opts.tls);
    }
}

PETREL_DECL tcp_stream tcp_transport_state::wrap(asio::ip::tcp::socket socket) const {
    return tls ? tcp_stream(std::move(socket), *tls) : tcp_stream(std::move(socket));
}

PETREL_DECL void tcp_transport_state::log(log_level level, const std::string& text) const {
    if (opts.log) {
        opts.log(level, text);
    }
}

PETREL_DECL std::shared_ptr<tcp_connection>
tcp_transport_state::adopt(tcp_stream stream, connection_handlers h, bool accepted,
                           std::shared_ptr<connection_ticket> ticket, access peer) {
    std::weak_ptr<tcp_transport_state> weak = weak_from_this();
    auto forget = [weak, ticket = std::move(ticket)](tcp_connection* gone) {
        if (auto s = weak.lock()) {
            std::lock_guard lock(s->mutex);
            s->connections.erase(gone);
        }
        if (ticket) {
            ticket->release();
        }
    };
    auto conn =
        std::make_shared<tcp_connection>(std::move(stream), opts, std::move(h), std::move(forget),
                                         accepted, peer, accepted ? budgets : shared_budgets{});
    {
        std::lock_guard lock(mutex);
        if (closed) {
            return nullptr;
        }
        connections.emplace(conn.get(), conn);
    }
    conn->start();
    return conn;
}

PETREL_DECL asio::awaitable<void>
tcp_transport_state::accept_loop(std::shared_ptr<tcp_transport_state> self,
                                 std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                                 connection_handlers h) {
    for (;;) {
        std::error_code ec;
        asio::ip::tcp::socket socket = co_await acceptor->async_accept(
            connection_strand(self->ex), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            if (ec == asio::error::operation_aborted || !acceptor->is_open()) {
                co_return;
            }
            self->log(log_level::warning, "accept failed: " + ec.message());
            asio::steady_timer pause(self->ex, std::chrono::milliseconds(50));
            co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            continue;
        }
        auto ticket = self->take_ticket(socket);
        if (!ticket) {
            std::error_code ignored;
            socket.close(ignored);
            continue;
        }
        if (!self->shakes_hands()) {
            self->adopt(tcp_stream(std::move(socket)), h, true, std::move(ticket));
            continue;
        }
        auto pending = std::make_shared<tcp_stream>(self->wrap(std::move(socket)));
        if (!self->begin_handshake(pending)) {
            pending->close();
            continue;
        }
        asio::co_spawn(pending->get_executor(), admit(self, pending, h, std::move(ticket)),
                       asio::detached);
    }
}

PETREL_DECL std::shared_ptr<connection_ticket>
tcp_transport_state::take_ticket(const asio::ip::tcp::socket& socket) {
    std::error_code ec;
    const auto ep = socket.remote_endpoint(ec);
    if (ec) {
        return nullptr; // gone already
    }
    std::string address = ep.address().to_string();
    std::string line;
    {
        std::lock_guard lock(mutex);
        const auto it = per_address.find(address);
        const std::size_t from = it == per_address.end() ? 0 : it->second;
        if (accepted_count < opts.max_accepted_connections &&
            from < opts.max_connections_per_address) {
            ++accepted_count;
            ++per_address[address];
            return std::make_shared<connection_ticket>(weak_from_this(), std::move(address));
        }
        const bool per_peer = from >= opts.max_connections_per_address;
        line = refusal_line(address + ":" + std::to_string(ep.port()),
                            per_peer
                                ? "it has " + std::to_string(opts.max_connections_per_address) +
                                      " connections open (max_connections_per_address)"
                                : "this node has " + std::to_string(opts.max_accepted_connections) +
                                      " accepted connections open (max_accepted_connections)");
    }
    if (!line.empty()) {
        log(log_level::warning, line);
    }
    return nullptr;
}

PETREL_DECL void tcp_transport_state::return_ticket(const std::string& address) noexcept {
    std::lock_guard lock(mutex);
    --accepted_count;
    if (const auto it = per_address.find(address); it != per_address.end() && --it->second == 0) {
        per_address.erase(it);
    }
}

PETREL_DECL bool tcp_transport_state::begin_handshake(const std::shared_ptr<tcp_stream>& socket) {
    std::string line;
    {
        std::lock_guard lock(mutex);
        if (!closed && handshakes.size() < max_handshakes) {
            handshakes.emplace(socket.get(), socket);
            return true;
        }
        if (!closed) {
            line = refusal_line("a peer", "too many handshakes under way");
        }
    }
    if (!line.empty()) {
        log(log_level::warning, line);
    }
    return false;
}

PETREL_DECL asio::awaitable<void>
tcp_transport_state::admit(std::shared_ptr<tcp_transport_state> self,
                           std::shared_ptr<tcp_stream> socket, connection_handlers h,
                           std::shared_ptr<connection_ticket> ticket) {
    std::error_code ec;
    access granted = access::full;
    std::string who = "a peer";
    if (const auto ep = socket->socket().remote_endpoint(ec); !ec) {
        who = ep.address().to_string() + ":" + std::to_string(ep.port());
    }
    std::string reason;
    try {
        if (self->tls) {
            ec = co_await tls_handshake(*socket, false, self->opts.handshake_timeout, &reason);
        }
        if (!ec && !self->opts.secret.empty()) {
            ec = co_await authenticate(*socket, self->opts.secret, false,
                                       self->opts.handshake_timeout, self->opts.credential,
                                       &granted);
        }
    } catch (const std::exception&) {
        ec = errc::auth_failed;
    }
    if (ec && ec != asio::error::operation_aborted) {
        self->note_refusal(who, reason.empty() ? ec.message() : reason + ": " + ec.message());
        if (ec == errc::auth_failed || ec == errc::tls_failed) {
            asio::steady_timer pause(socket->get_executor(), self->opts.auth_failure_delay);
            std::error_code ignored;
            co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
        }
    }
    {
        std::lock_guard lock(self->mutex);
        self->handshakes.erase(socket.get());
    }
    if (ec) {
        socket->close();
        co_return;
    }
    self->adopt(std::move(*socket), std::move(h), true, std::move(ticket), granted);
}

PETREL_DECL void tcp_transport_state::note_refusal(const std::string& who, const std::string& why) {
    std::string line;
    {
        std::lock_guard lock(mutex);
        line = refusal_line(who, why);
    }
    if (!line.empty()) {
        log(log_level::warning, line);
    }
}

PETREL_DECL std::string tcp_transport_state::refusal_line(const std::string& who,
                                                          const std::string& why) {
    return refusals.line("refused a connection from " + who + ": " + why,
                         std::chrono::steady_clock::now());
}

PETREL_DECL asio::awaitable<std::pair<std::error_code, connection_ptr>>
tcp_transport_state::connect(std::shared_ptr<tcp_transport_state> self, std::string address,
                             connection_handlers h) {
    const auto hp = parse_host_port(address);
    if (!hp) {
        co_return std::pair{make_error_code(errc::invalid_argument), connection_ptr{}};
    }
    std::error_code ec;
    asio::ip::tcp::resolver resolver(self->ex);
    auto endpoints = co_await resolver.async_resolve(hp->host, std::to_string(hp->port),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
        co_return std::pair{ec, connection_ptr{}};
    }
    auto strand = co_await asio::this_coro::executor;
    asio::ip::tcp::socket socket(strand);
    asio::steady_timer deadline(strand, self->connect_timeout);
    // Both the timer's handler and this coroutine run on `strand`; `state` tells the
    // handler whether the coroutine still waits in async_connect (0), has moved on (1),
    // or was timed out (2).
    auto state = std::make_shared<int>(0);
    deadline.async_wait([&socket, state](std::error_code e) {
        if (!e && *state == 0) {
            *state = 2;
            std::error_code ignored;
            socket.close(ignored);
        }
    });
    co_await asio::async_connect(socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (*state == 2) {
        ec = errc::timed_out;
    }
    *state = 1;
    deadline.cancel();
    if (ec) {
        co_return std::pair{ec, connection_ptr{}};
    }
    std::shared_ptr<tcp_stream> shaking;
    if (self->shakes_hands()) {
        // Registered like an accepted socket's handshake, so that close() ends it.
        shaking = std::make_shared<tcp_stream>(self->wrap(std::move(socket)));
        {
            std::lock_guard lock(self->mutex);
            if (self->closed) {
                co_return std::pair{make_error_code(errc::shut_down), connection_ptr{}};
            }
            self->handshakes.emplace(shaking.get(), shaking);
        }
        try {
            if (self->tls) {
                ec = co_await tls_handshake(*shaking, true, self->opts.handshake_timeout);
            }
            if (!ec && !self->opts.secret.empty()) {
                ec = co_await authenticate(*shaking, self->opts.secret, true,
                                           self->opts.handshake_timeout, self->opts.credential);
            }
        } catch (const std::exception&) {
            ec = errc::auth_failed;
        }
        {
            std::lock_guard lock(self->mutex);
            self->handshakes.erase(shaking.get());
        }
        if (ec) {
            co_return std::pair{ec, connection_ptr{}};
        }
    }
    auto conn = self->adopt(shaking ? std::move(*shaking) : tcp_stream(std::move(socket)),
                            std::move(h), false);
    if (!conn) {
        co_return std::pair{make_error_code(errc::shut_down), connection_ptr{}};
    }
    co_return std::pair{std::error_code{}, connection_ptr(std::move(conn))};
}

PETREL_DECL void tcp_transport_state::close() {
    std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acc;
    std::vector<std::shared_ptr<tcp_connection>> conns;
    std::vector<std::shared_ptr<tcp_stream>> shaking;
    {
        std::lock_guard lock(mutex);
        if (closed) {
            return;
        }
        closed = true;
        acc.swap(acceptors);
        for (auto& [raw, weak] : handshakes) {
            if (auto s = weak.lock()) {
                shaking.push_back(std::move(s));
            }
        }
        for (auto& [raw, weak] : connections) {
            if (auto c = weak.lock()) {
                conns.push_back(std::move(c));
            }
        }
    }
    for (auto& a : acc) {
        asio::post(a->get_executor(), [a] {
            std::error_code ignored;
            a->close(ignored);
        });
    }
    for (auto& c : conns) {
        c->close();
    }
    for (auto& s : shaking) {
        asio::post(s->get_executor(), [s] { s->close(); });
    }
}

} // namespace detail

PETREL_DECL tcp_transport::tcp_transport(executor_type ex, transport_options opts,
                                         std::chrono::milliseconds connect_timeout)
    : state_(std::make_shared<detail::tcp_transport_state>(std::move(ex), std::move(opts),
                                                           connect_timeout)) {}

PETREL_DECL tcp_transport& tcp_transport::operator=(tcp_transport&& other) noexcept {
    if (this != &other) {
        close();
        state_ = std::move(other.state_);
    }
    return *this;
}

PETREL_DECL tcp_transport::~tcp_transport() {
    close();
}

PETREL_DECL std::string tcp_transport::listen(std::string_view address, connection_handlers h) {
    const auto hp = detail::parse_host_port(address);
    if (!hp) {
        throw std::system_error(make_error_code(errc::invalid_argument),
                                "petrel: listen address must be host:port, got '" +
                                    std::string(address) + "'");
    }
    auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(asio::make_strand(state_->ex));
    asio::ip::tcp::endpoint bound;
    try {
        asio::ip::tcp::resolver resolver(state_->ex);
        const auto results =
            resolver.resolve(hp->host.empty() ? "0.0.0.0" : hp->host, std::to_string(hp->port),
                             asio::ip::tcp::resolver::passive);
        const asio::ip::tcp::endpoint endpoint = *results.begin();
        acceptor->open(endpoint.protocol());
        acceptor->set_option(asio::socket_base::reuse_address(true));
        acceptor->bind(endpoint);
        acceptor->listen();
        bound = acceptor->local_endpoint();
    } catch (const std::system_error& e) {
        // Name the address: "bind: Address already in use" alone does not say which.
        throw std::system_error(e.code(), "petrel: cannot listen on " + std::string(address) +
                                              " (" + e.what() +
                                              "): another process may hold the port, or "
                                              "the host is not an address of this machine");
    }
    {
        std::lock_guard lock(state_->mutex);
        if (state_->closed) {
            throw std::system_error(make_error_code(errc::shut_down),
                                    "petrel: listen on a closed transport");
        }
        state_->acceptors.push_back(acceptor);
    }
    asio::co_spawn(acceptor->get_executor(),
                   detail::tcp_transport_state::accept_loop(state_, acceptor, std::move(h)),
                   asio::detached);
    return detail::format_host_port(bound.address().to_string(), bound.port());
}

PETREL_DECL void tcp_transport::close() {
    if (state_) {
        state_->close();
    }
}

} // namespace petrel

#endif
