// Test support: bounded waits, and a recorder of connection events.
#pragma once

#include "support/bytes.hpp"
#include "support/cluster.hpp"

#include <petrel/core/buffer_pool.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/wire/message.hpp>

#include <asio/post.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <system_error>
#include <vector>

namespace petrel::test {

/// How long a test waits for anything before it fails.
inline constexpr auto timeout = std::chrono::seconds(10);

/// True when `f` became ready within `timeout`.
template <typename T>
bool ready(std::future<T>& f) {
    return f.wait_for(timeout) == std::future_status::ready;
}

/// How a `std::future<void>` of an operation ended: no error, or the error it threw.
/// Fails the test when it does not end within `timeout`.
inline std::error_code code_of(std::future<void>& f) {
    REQUIRE(ready(f));
    try {
        f.get();
        return {};
    } catch (const std::system_error& e) {
        return e.code();
    }
}

/// Returns once every handler queued on a one-thread io_context before the call has run.
inline void drain(io_threads& io) {
    for (int round = 0; round < 3; ++round) {
        std::promise<void> p;
        auto f = p.get_future();
        asio::post(io.context(), [&p] { p.set_value(); });
        REQUIRE(f.wait_for(timeout) == std::future_status::ready);
    }
}

/// What one side of connections saw, with handlers that record it. Declare it before the
/// io_threads, so that it outlives every handler that may still run on them.
struct events {
    std::mutex mutex;
    std::vector<wire::message> messages;
    std::vector<std::error_code> closes;
    // Which connection each message came on. Only weak references: a connection must not
    // outlive the io_context it runs on, and this object does.
    std::vector<const petrel::connection*> senders;
    std::weak_ptr<petrel::connection> first_sender;
    std::size_t expected_messages = 0;
    std::promise<void> all_messages;
    std::promise<void> closed;
    /// Answer every message with an empty push_reply on the same connection.
    bool echo = false;

    petrel::connection_handlers handlers() {
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr& c, wire::message&& m) {
            if (echo) {
                c->send(wire::make_reply(m.header, wire::message_kind::push_reply));
            }
            std::lock_guard lock(mutex);
            messages.push_back(std::move(m));
            if (senders.empty()) {
                first_sender = c;
            }
            senders.push_back(c.get());
            if (messages.size() == expected_messages) {
                all_messages.set_value();
            }
        };
        h.on_close = [this](const petrel::connection_ptr&, std::error_code ec) {
            std::lock_guard lock(mutex);
            closes.push_back(ec);
            if (closes.size() == 1) {
                closed.set_value();
            }
        };
        return h;
    }

    std::size_t message_count() {
        std::lock_guard lock(mutex);
        return messages.size();
    }
    std::size_t close_count() {
        std::lock_guard lock(mutex);
        return closes.size();
    }
    std::vector<std::error_code> close_codes() {
        std::lock_guard lock(mutex);
        return closes;
    }
    std::error_code first_close() {
        std::lock_guard lock(mutex);
        return closes.empty() ? std::error_code{} : closes.front();
    }
    petrel::connection_ptr first_connection() {
        std::lock_guard lock(mutex);
        return first_sender.lock();
    }
};

} // namespace petrel::test
