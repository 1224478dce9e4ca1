// Raw Asio TCP baseline for the Petrel benchmarks.
//
// Measures what plain Asio over loopback achieves for the same traffic
// patterns as Petrel's cases, in the same process:
//
// - stream_throughput: one-way bulk stream, one 1-byte reply per repetition;
// - pingpong:          echo of a fixed-size message;
// - push_pull:         a parameter-server push + pull emulated with a 16-byte
//                      header (kind, payload length) per message;
// - pipelined:         many small fixed-size requests in flight on one
//                      connection, written and answered with gathered writes.
//
// The server (`raw_server`) listens on 127.0.0.1 (ephemeral port) and runs
// C++20 coroutines on its own thread and io_context; it handles one
// connection at a time. The client (`raw_client`) uses blocking synchronous
// Asio calls on the calling thread; the pipelined client is asynchronous and
// runs its own io_context on the calling thread. Both sides set TCP_NODELAY
// and use buffers that are allocated and written once before any timing.
//
// Failure handling: a server-side error closes the connection, so a blocked
// client sees EOF instead of hanging; the client-side exception is rethrown as
// std::runtime_error naming the case and carrying the server's error, if any.
//
// Compile with -DASIO_STANDALONE (and, for clang++ 14, also
// -DASIO_HAS_CO_AWAIT=1 -DASIO_HAS_STD_COROUTINE=1).
#pragma once

#include "bench_stats.hpp"

#include <algorithm>
#include <array>
#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/completion_condition.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace petrel_bench::raw {

using tcp = asio::ip::tcp;

// ---------------------------------------------------------------------------
// Helpers and the push/pull framing
// ---------------------------------------------------------------------------

/// Allocates `n` bytes and writes every byte (so no page faults happen later),
/// filling them with a pattern derived from `seed`.
[[nodiscard]] inline std::vector<std::byte> make_buffer(std::size_t n, unsigned seed = 0) {
    std::vector<std::byte> buf(n);
    for (std::size_t i = 0; i < n; ++i)
        buf[i] = static_cast<std::byte>((i * 131u + seed) & 0xFFu);
    return buf;
}

/// Message kinds of the push/pull emulation.
enum class frame_kind : std::uint64_t { push = 1, ack = 2, pull = 3, data = 4 };

/// The 16-byte push/pull header: kind and payload length, native byte order
/// (both ends live in the same process).
struct frame_header {
    frame_kind kind;
    std::uint64_t length;
};

inline constexpr std::size_t header_bytes = 16;
using header_buffer = std::array<std::byte, header_bytes>;

[[nodiscard]] inline header_buffer encode_header(frame_kind kind, std::uint64_t length) {
    header_buffer out{};
    const auto k = static_cast<std::uint64_t>(kind);
    std::memcpy(out.data(), &k, 8);
    std::memcpy(out.data() + 8, &length, 8);
    return out;
}

[[nodiscard]] inline frame_header decode_header(const header_buffer& in) {
    std::uint64_t k = 0;
    std::uint64_t length = 0;
    std::memcpy(&k, in.data(), 8);
    std::memcpy(&length, in.data() + 8, 8);
    return {static_cast<frame_kind>(k), length};
}

/// Throws std::runtime_error unless `h` has the expected kind and length.
inline void expect_header(const frame_header& h, frame_kind kind, std::uint64_t length,
                          const char* where) {
    if (h.kind != kind || h.length != length)
        throw std::runtime_error(std::string(where) + ": unexpected header (kind " +
                                 std::to_string(static_cast<std::uint64_t>(h.kind)) + ", length " +
                                 std::to_string(h.length) + "; expected kind " +
                                 std::to_string(static_cast<std::uint64_t>(kind)) + ", length " +
                                 std::to_string(length) + ")");
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

/// Traffic pattern served by a raw_server.
enum class protocol {
    stream,    ///< read `bytes` per repetition, then reply 1 byte
    pingpong,  ///< read exactly `bytes`, write them back
    push_pull, ///< framed push (stored) + pull (returns the stored payload)
    pipelined, ///< requests of `bytes`, each answered with a reply of `chunk_bytes`
};

/// Loopback TCP server on its own thread and io_context. The constructor
/// binds 127.0.0.1:0, listens and starts the thread; the destructor stops the
/// io_context and joins. Connections are served one after another.
class raw_server {
public:
    /// `bytes`: stream = bytes per repetition; pingpong = message size;
    /// push_pull = largest accepted payload; pipelined = request size.
    /// `chunk_bytes` (0 = `bytes`): stream = size of each server read and of
    /// its buffer; pipelined = reply size; otherwise unused.
    raw_server(protocol proto, std::size_t bytes, std::size_t chunk_bytes = 0)
        : proto_(proto), bytes_(bytes),
          acceptor_(ctx_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {
        if (proto == protocol::stream) {
            if (bytes == 0)
                throw std::invalid_argument("raw_server: stream needs bytes > 0");
            chunk_bytes_ = chunk_bytes == 0 ? bytes : std::min(chunk_bytes, bytes);
        } else if (proto == protocol::pingpong) {
            if (bytes == 0)
                throw std::invalid_argument("raw_server: pingpong needs bytes > 0");
            chunk_bytes_ = bytes;
        } else if (proto == protocol::pipelined) {
            if (bytes == 0)
                throw std::invalid_argument("raw_server: pipelined needs bytes > 0");
            chunk_bytes_ = chunk_bytes == 0 ? bytes : chunk_bytes;
        } else {
            chunk_bytes_ = bytes;
        }
        buffer_ = make_buffer(chunk_bytes_, 7);
        asio::co_spawn(ctx_, accept_loop(), [this](std::exception_ptr e) {
            if (e)
                record_error(e);
        });
        thread_ = std::thread([this] {
            try {
                ctx_.run();
            } catch (...) {
                record_error(std::current_exception());
            }
        });
    }

    raw_server(const raw_server&) = delete;
    raw_server& operator=(const raw_server&) = delete;

    ~raw_server() {
        ctx_.stop();
        if (thread_.joinable())
            thread_.join();
    }

    /// The listening endpoint (127.0.0.1 and the ephemeral port).
    [[nodiscard]] tcp::endpoint endpoint() const { return acceptor_.local_endpoint(); }

    /// First error recorded by the server thread; empty if none.
    [[nodiscard]] std::string error() const {
        std::lock_guard lock(mutex_);
        return error_;
    }

private:
    asio::awaitable<void> accept_loop() {
        for (;;) {
            tcp::socket socket = co_await acceptor_.async_accept(asio::use_awaitable);
            try {
                socket.set_option(tcp::no_delay(true));
                switch (proto_) {
                case protocol::stream:
                    co_await serve_stream(socket);
                    break;
                case protocol::pingpong:
                    co_await serve_pingpong(socket);
                    break;
                case protocol::push_pull:
                    co_await serve_push_pull(socket);
                    break;
                case protocol::pipelined:
                    co_await serve_pipelined(socket);
                    break;
                }
            } catch (const std::system_error& e) {
                // EOF / reset: the client closed the connection.
                if (e.code() != asio::error::eof && e.code() != asio::error::connection_reset)
                    record_error(std::current_exception());
            } catch (...) {
                record_error(std::current_exception());
            }
            // `socket` closes here, so a blocked client sees EOF on error.
        }
    }

    asio::awaitable<void> serve_stream(tcp::socket& socket) {
        const std::array<std::byte, 1> reply{std::byte{1}};
        for (;;) {
            for (std::size_t left = bytes_; left > 0;) {
                const std::size_t n = std::min(left, chunk_bytes_);
                co_await asio::async_read(socket, asio::buffer(buffer_.data(), n),
                                          asio::use_awaitable);
                left -= n;
            }
            co_await asio::async_write(socket, asio::buffer(reply), asio::use_awaitable);
        }
    }

    asio::awaitable<void> serve_pingpong(tcp::socket& socket) {
        const auto buf = asio::buffer(buffer_.data(), bytes_);
        for (;;) {
            co_await asio::async_read(socket, buf, asio::use_awaitable);
            co_await asio::async_write(socket, buf, asio::use_awaitable);
        }
    }

    // The client never has more than one message in flight, so the first read
    // of a push can scatter into header + payload store in one recvmsg and can
    // never consume bytes of a later message.
    asio::awaitable<void> serve_push_pull(tcp::socket& socket) {
        header_buffer in{};
        for (;;) {
            // Push: header + payload, stored in buffer_.
            const std::array<asio::mutable_buffer, 2> push_bufs{asio::buffer(in),
                                                                asio::buffer(buffer_)};
            const std::size_t got = co_await asio::async_read(
                socket, push_bufs, asio::transfer_at_least(header_bytes), asio::use_awaitable);
            const frame_header push = decode_header(in);
            if (push.kind != frame_kind::push)
                throw std::runtime_error("raw_server: expected a push header");
            if (push.length > buffer_.size())
                throw std::runtime_error("raw_server: push payload of " +
                                         std::to_string(push.length) + " bytes exceeds capacity " +
                                         std::to_string(buffer_.size()));
            const auto len = static_cast<std::size_t>(push.length);
            if (got - header_bytes > len)
                throw std::runtime_error("raw_server: bytes beyond the push frame");
            if (const std::size_t have = got - header_bytes; have < len)
                co_await asio::async_read(socket, asio::buffer(buffer_.data() + have, len - have),
                                          asio::use_awaitable);
            const header_buffer ack = encode_header(frame_kind::ack, len);
            co_await asio::async_write(socket, asio::buffer(ack), asio::use_awaitable);

            // Pull: 16-byte request, answered with header + stored payload.
            co_await asio::async_read(socket, asio::buffer(in), asio::use_awaitable);
            const frame_header pull = decode_header(in);
            expect_header(pull, frame_kind::pull, len, "raw_server pull");
            const header_buffer reply = encode_header(frame_kind::data, len);
            const std::array<asio::const_buffer, 2> reply_bufs{asio::buffer(reply),
                                                               asio::buffer(buffer_.data(), len)};
            co_await asio::async_write(socket, reply_bufs, asio::use_awaitable);
        }
    }

    // Reads what the client sent so far and answers every whole request in the
    // buffer with one gathered write of as many replies (all from buffer_);
    // a partial request waits at the front of the buffer for its rest.
    asio::awaitable<void> serve_pipelined(tcp::socket& socket) {
        std::vector<std::byte> in(std::max<std::size_t>(std::size_t{64} << 10, 4 * bytes_));
        std::vector<asio::const_buffer> replies;
        std::size_t have = 0;
        for (;;) {
            have += co_await socket.async_read_some(
                asio::buffer(in.data() + have, in.size() - have), asio::use_awaitable);
            const std::size_t whole = have / bytes_;
            if (whole == 0)
                continue;
            replies.assign(whole, asio::buffer(buffer_.data(), chunk_bytes_));
            co_await asio::async_write(socket, replies, asio::use_awaitable);
            const std::size_t used = whole * bytes_;
            std::memmove(in.data(), in.data() + used, have - used);
            have -= used;
        }
    }

    void record_error(std::exception_ptr e) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            what = ex.what();
        } catch (...) {
        }
        std::lock_guard lock(mutex_);
        if (error_.empty())
            error_ = std::move(what);
    }

    protocol proto_;
    std::size_t bytes_;
    std::size_t chunk_bytes_ = 0;
    asio::io_context ctx_{1};
    tcp::acceptor acceptor_;
    std::vector<std::byte> buffer_;
    mutable std::mutex mutex_;
    std::string error_;
    std::thread thread_; // last: started once everything else exists
};

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

/// Blocking client connection (TCP_NODELAY) used from the calling thread.
class raw_client {
public:
    explicit raw_client(const tcp::endpoint& server) {
        socket_.connect(server);
        socket_.set_option(tcp::no_delay(true));
    }

    [[nodiscard]] tcp::socket& socket() noexcept { return socket_; }

private:
    asio::io_context ctx_{1}; // only owns the socket; never run
    tcp::socket socket_{ctx_};
};

/// One stream repetition: writes `total_bytes` in writes of at most
/// `chunk.size()` bytes (all from `chunk`), then waits for the 1-byte reply.
inline void stream_once(tcp::socket& socket, std::span<const std::byte> chunk,
                        std::size_t total_bytes) {
    for (std::size_t left = total_bytes; left > 0;) {
        const std::size_t n = std::min(left, chunk.size());
        asio::write(socket, asio::buffer(chunk.data(), n));
        left -= n;
    }
    std::array<std::byte, 1> reply{};
    asio::read(socket, asio::buffer(reply));
}

/// One round trip: writes `out`, reads the echo into `in` (same size).
inline void pingpong_once(tcp::socket& socket, std::span<const std::byte> out,
                          std::span<std::byte> in) {
    asio::write(socket, asio::buffer(out.data(), out.size()));
    asio::read(socket, asio::buffer(in.data(), out.size()));
}

/// One push + pull of `push_payload.size()` bytes; the pulled payload lands in
/// the front of `pull_payload` (which must be at least as large).
inline void push_pull_once(tcp::socket& socket, std::span<const std::byte> push_payload,
                           std::span<std::byte> pull_payload) {
    const std::size_t len = push_payload.size();
    const header_buffer push = encode_header(frame_kind::push, len);
    const std::array<asio::const_buffer, 2> push_bufs{asio::buffer(push),
                                                      asio::buffer(push_payload.data(), len)};
    asio::write(socket, push_bufs);

    header_buffer in{};
    asio::read(socket, asio::buffer(in));
    expect_header(decode_header(in), frame_kind::ack, len, "raw client ack");

    const header_buffer pull = encode_header(frame_kind::pull, len);
    asio::write(socket, asio::buffer(pull));
    const std::array<asio::mutable_buffer, 2> reply_bufs{asio::buffer(in),
                                                         asio::buffer(pull_payload.data(), len)};
    asio::read(socket, reply_bufs);
    expect_header(decode_header(in), frame_kind::data, len, "raw client data");
}

/// Client side of the pipelined exchange: its own io_context, run on the
/// calling thread. `send` queues a request; while a write is in flight the
/// queue grows, and the next write takes every queued request in one gathered
/// async_write. A read loop counts whole replies.
class pipelined_client {
public:
    pipelined_client(const tcp::endpoint& server, std::size_t request_bytes,
                     std::size_t reply_bytes)
        : request_(make_buffer(request_bytes, 5)), reply_bytes_(reply_bytes),
          in_(std::max<std::size_t>(std::size_t{64} << 10, 4 * reply_bytes)) {
        socket_.connect(server);
        socket_.set_option(tcp::no_delay(true));
    }

    /// Sends `count` requests (all queued before the first is written) and
    /// runs the io_context until every reply arrived; throws on a socket error
    /// or when the replies take longer than `limit`.
    void batch(std::size_t count, std::chrono::seconds limit = std::chrono::seconds(60)) {
        if (count == 0)
            return;
        error_ = {};
        expected_ = count;
        replies_ = 0;
        received_ = 0;
        read();
        for (std::size_t i = 0; i < count; ++i)
            send();
        ctx_.restart();
        ctx_.run_for(limit);
        if (error_)
            throw std::system_error(error_, "pipelined client");
        if (replies_ != expected_ || writing_ || !queued_.empty()) {
            // Left running: close the socket so that nothing completes later.
            std::error_code ignored;
            socket_.close(ignored);
            throw std::runtime_error("pipelined client: " + std::to_string(replies_) + " of " +
                                     std::to_string(expected_) + " replies within " +
                                     std::to_string(limit.count()) + " s");
        }
    }

private:
    void send() {
        queued_.push_back(asio::buffer(request_));
        if (!writing_)
            write();
    }

    void write() {
        writing_ = true;
        sending_.swap(queued_);
        queued_.clear();
        asio::async_write(socket_, sending_, [this](std::error_code ec, std::size_t) {
            writing_ = false;
            if (ec) {
                fail(ec);
                return;
            }
            if (!queued_.empty())
                write();
        });
    }

    void read() {
        socket_.async_read_some(asio::buffer(in_), [this](std::error_code ec, std::size_t n) {
            if (ec) {
                fail(ec);
                return;
            }
            received_ += n;
            replies_ = received_ / reply_bytes_;
            if (received_ > expected_ * reply_bytes_) {
                fail(std::make_error_code(std::errc::protocol_error));
                return;
            }
            if (replies_ < expected_)
                read();
        });
    }

    void fail(std::error_code ec) {
        if (!error_)
            error_ = ec;
        queued_.clear();
        std::error_code ignored;
        socket_.close(ignored);
    }

    asio::io_context ctx_{1};
    tcp::socket socket_{ctx_};
    std::vector<std::byte> request_;
    std::size_t reply_bytes_;
    std::vector<std::byte> in_;
    std::vector<asio::const_buffer> queued_;
    std::vector<asio::const_buffer> sending_;
    bool writing_ = false;
    std::size_t expected_ = 0;
    std::size_t replies_ = 0;
    std::size_t received_ = 0;
    std::error_code error_;
};

/// Runs `fn` and returns its result; on failure rethrows as
/// std::runtime_error naming `what` and adding the server's own error, if it
/// recorded one.
template <class Fn>
auto with_server_context(const char* what, const raw_server& server, Fn&& fn) {
    try {
        return fn();
    } catch (const std::exception& e) {
        std::string msg = std::string("raw baseline ") + what + ": " + e.what();
        if (const std::string s = server.error(); !s.empty())
            msg += " (server: " + s + ")";
        throw std::runtime_error(msg);
    }
}

// ---------------------------------------------------------------------------
// Benchmarks (each starts its own server and connection, and tears them down)
// ---------------------------------------------------------------------------

/// One-way stream of `total_bytes` in `chunk_bytes` writes, `repeats` timed
/// repetitions after one warm-up. One sample per repetition, from the first
/// write to the server's 1-byte reply. Goodput: gbit_per_s(total_bytes, s.median()).
inline samples stream_throughput(std::size_t total_bytes, std::size_t chunk_bytes, int repeats) {
    if (total_bytes == 0 || chunk_bytes == 0 || repeats < 1)
        throw std::invalid_argument(
            "stream_throughput: need total_bytes, chunk_bytes, repeats > 0");
    chunk_bytes = std::min(chunk_bytes, total_bytes);
    raw_server server(protocol::stream, total_bytes, chunk_bytes);
    raw_client client(server.endpoint());
    const std::vector<std::byte> chunk = make_buffer(chunk_bytes, 1);
    const auto n = static_cast<std::size_t>(repeats);
    return with_server_context("stream", server, [&] {
        return run_timed([&] { stream_once(client.socket(), chunk, total_bytes); }, n, 0.0, n, 1);
    });
}

/// Echo round trips of `message_bytes`. Per-round-trip samples; see
/// run_timed for the iteration limits. The echoed bytes are verified.
inline samples pingpong(std::size_t message_bytes, std::size_t min_iterations = 1000,
                        double min_seconds = 0.5, std::size_t max_iterations = 1'000'000) {
    if (message_bytes == 0)
        throw std::invalid_argument("pingpong: message_bytes must be > 0");
    raw_server server(protocol::pingpong, message_bytes);
    raw_client client(server.endpoint());
    const std::vector<std::byte> out = make_buffer(message_bytes, 1);
    std::vector<std::byte> in = make_buffer(message_bytes, 2);
    return with_server_context("pingpong", server, [&] {
        samples s = run_timed([&] { pingpong_once(client.socket(), out, in); }, min_iterations,
                              min_seconds, max_iterations);
        if (in != out)
            throw std::runtime_error("echoed bytes differ");
        return s;
    });
}

/// Push + pull of `payload_bytes` (header + payload, 16-byte ack, 16-byte
/// request, header + payload). One sample per push+pull; see run_timed for
/// the iteration limits. The pulled bytes are verified.
inline samples push_pull(std::size_t payload_bytes, std::size_t min_iterations = 20,
                         double min_seconds = 0.5, std::size_t max_iterations = 1'000'000) {
    raw_server server(protocol::push_pull, payload_bytes);
    raw_client client(server.endpoint());
    const std::vector<std::byte> push = make_buffer(payload_bytes, 3);
    std::vector<std::byte> pull = make_buffer(payload_bytes, 4);
    return with_server_context("push_pull", server, [&] {
        samples s = run_timed([&] { push_pull_once(client.socket(), push, pull); }, min_iterations,
                              min_seconds, max_iterations);
        if (pull != push)
            throw std::runtime_error("pulled bytes differ");
        return s;
    });
}

/// `in_flight` requests of `request_bytes` sent at once on one connection
/// and answered with replies of `reply_bytes`: the client queues them and
/// writes what queued in one gathered write, the server answers every whole
/// request it has read with one gathered write. One sample per batch, from
/// the first send to the last reply; see run_timed for the iteration limits.
inline samples pipelined(std::size_t request_bytes, std::size_t reply_bytes, std::size_t in_flight,
                         std::size_t min_iterations = 20, double min_seconds = 0.5,
                         std::size_t max_iterations = 1'000'000) {
    if (request_bytes == 0 || reply_bytes == 0 || in_flight == 0)
        throw std::invalid_argument("pipelined: need request_bytes, reply_bytes, in_flight > 0");
    raw_server server(protocol::pipelined, request_bytes, reply_bytes);
    pipelined_client client(server.endpoint(), request_bytes, reply_bytes);
    return with_server_context("pipelined", server, [&] {
        return run_timed([&] { client.batch(in_flight); }, min_iterations, min_seconds,
                         max_iterations);
    });
}

} // namespace petrel_bench::raw
