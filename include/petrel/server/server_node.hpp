// Petrel: a server node.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/detail/sparse_table.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>

namespace petrel {

struct server_options {
    /// This node's id, written as the sender of its replies.
    std::uint32_t node_id = 0;
};

/// A server: holds tables of values by key and answers pushes and pulls.
///
/// A push adds its rows to the table (keys seen for the first time are inserted);
/// a pull returns the rows of its keys, zeros for keys never pushed. A table is
/// created by its first push with that push's key type, value type (`float` or
/// `double`) and width; later requests must match them or get an error reply. Every
/// request is checked completely before anything is applied: a rejected push changes
/// nothing.
///
/// @par Example
/// @code
/// asio::io_context io;
/// petrel::server_node server(petrel::tcp_transport(io.get_executor()));
/// std::string address = server.listen("127.0.0.1:0");
/// io.run();
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread; requests from many connections
/// are served concurrently when the executor runs on several threads.
class server_node {
public:
    explicit server_node(any_transport transport, server_options opts = {})
        : transport_(std::move(transport)), state_(std::make_shared<state>()) {
        state_->opts = opts;
        state_->pool = transport_.pool();
        state_->log = transport_.options().log;
        state_->limits = transport_.options().limits;
    }

    server_node(const server_node&) = delete;
    server_node& operator=(const server_node&) = delete;

    /// Stops serving and closes every connection.
    ~server_node() { close(); }

    /// Accepts workers at `address` ("host:port" for TCP, a name for in-process);
    /// returns the address to give them. @throws std::system_error
    std::string listen(std::string_view address) {
        std::weak_ptr<state> weak = state_;
        connection_handlers h;
        h.on_message = [weak](const connection_ptr& c, wire::message&& m) {
            if (auto s = weak.lock()) {
                s->handle(c, std::move(m));
            }
        };
        return transport_.listen(address, std::move(h));
    }

    /// Stops listening and closes all connections; idempotent.
    void close() { transport_.close(); }

    /// Keys stored in a table (0 for a table that does not exist).
    [[nodiscard]] std::size_t key_count(std::uint32_t table_id) const {
        std::lock_guard lock(state_->mutex);
        auto it = state_->tables.find(table_id);
        return it == state_->tables.end() ? 0 : it->second->size();
    }

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    struct state {
        server_options opts;
        std::shared_ptr<buffer_pool> pool;
        wire::wire_limits limits;
        logger log;
        mutable std::mutex mutex;
        std::map<std::uint32_t, std::unique_ptr<detail::table_base>> tables;

        /// A reply's status: Petrel's own error codes travel as they are, any other as
        /// errc::remote_error.
        static std::uint32_t status_of(std::error_code ec) noexcept {
            if (!ec) {
                return 0;
            }
            return static_cast<std::uint32_t>(ec.category() == error_category()
                                                  ? ec.value()
                                                  : static_cast<int>(errc::remote_error));
        }

        void handle(const connection_ptr& c, wire::message&& m) {
            const auto& h = m.header;
            switch (h.kind) {
            case wire::message_kind::push: {
                auto reply = wire::make_reply(h, wire::message_kind::push_reply);
                reply.header.sender = opts.node_id;
                reply.header.key_count = 0;
                reply.header.status = status_of(push(m));
                c->send(std::move(reply));
                return;
            }
            case wire::message_kind::pull: {
                auto reply = wire::make_reply(h, wire::message_kind::pull_reply);
                reply.header.sender = opts.node_id;
                if (auto ec = pull(m, reply)) {
                    reply.header.status = status_of(ec);
                    reply.header.key_count = 0;
                }
                c->send(std::move(reply));
                return;
            }
            case wire::message_kind::push_reply:
            case wire::message_kind::pull_reply:
            case wire::message_kind::control:
            case wire::message_kind::control_reply:
                break;
            }
            if (log) {
                log(log_level::warning, "closing connection with " + c->remote_address() +
                                            ": a server takes only pushes and pulls");
            }
            c->close();
        }

        std::error_code push(const wire::message& m) {
            std::lock_guard lock(mutex);
            if (!m.lengths().empty()) {
                return errc::invalid_argument; // variable-length rows: not supported by tables
            }
            auto it = tables.find(m.header.table_id);
            const bool created = it == tables.end();
            if (created) {
                it = tables.emplace(m.header.table_id, detail::make_table(m.header)).first;
            } else if (auto ec = it->second->check(m.header)) {
                return ec;
            }
            try {
                it->second->add(m); // all or nothing
            } catch (const std::bad_alloc&) {
                if (created) {
                    tables.erase(it);
                }
                return errc::out_of_memory;
            }
            return {};
        }

        std::error_code pull(const wire::message& m, wire::message& reply) {
            const auto& h = m.header;
            // The header passed wire validation, so this product does not overflow.
            const std::uint64_t bytes = h.key_count * h.width * wire::size_of(h.value_type);
            if (wire::padded(bytes) > limits.max_frame_bytes) {
                return errc::frame_too_large; // the reply would exceed what peers accept
            }
            // The table's types and width are checked before the reply is allocated.
            pooled_buffer out;
            {
                std::lock_guard lock(mutex);
                auto it = tables.find(h.table_id);
                if (it != tables.end()) {
                    if (auto ec = it->second->check(h)) {
                        return ec;
                    }
                }
                out = pool->acquire(bytes);
                if (it == tables.end()) {
                    std::memset(out.data(), 0, bytes);
                } else {
                    it->second->read(m, out.data());
                }
            }
            reply.set_segment(wire::values_segment, out.share(0, bytes));
            return {};
        }
    };

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel
