// Petrel: one TCP connection: a read loop and a write loop on a strand.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/wire/frame.hpp>

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace petrel::detail {

class tcp_connection final : public connection,
                             public std::enable_shared_from_this<tcp_connection> {
public:
    tcp_connection(asio::ip::tcp::socket socket, const transport_options& opts,
                   connection_handlers handlers, std::function<void(tcp_connection*)> on_gone)
        : socket_(std::move(socket)), wake_(socket_.get_executor()),
          decoder_(opts.limits, opts.pool), handlers_(std::move(handlers)), log_(opts.log),
          on_gone_(std::move(on_gone)) {
        std::error_code ec;
        socket_.set_option(asio::ip::tcp::no_delay(true), ec);
        const auto ep = socket_.remote_endpoint(ec);
        remote_ =
            ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
    }

    void start() {
        asio::co_spawn(socket_.get_executor(), read_loop(shared_from_this()), asio::detached);
        asio::co_spawn(socket_.get_executor(), write_loop(shared_from_this()), asio::detached);
    }

    void send(wire::message m) override {
        outgoing o;
        o.msg = std::move(m);
        wire::encode_head(o.msg, o.head);
        asio::dispatch(socket_.get_executor(),
                       [self = shared_from_this(), o = std::move(o)]() mutable {
                           if (self->closed_) {
                               return;
                           }
                           self->queue_.push_back(std::move(o));
                           if (!self->writing_) {
                               self->wake_.cancel_one();
                           }
                       });
    }

    void close() override {
        asio::post(socket_.get_executor(),
                   [self = shared_from_this()] { self->finish(errc::shut_down); });
    }

    [[nodiscard]] bool is_open() const noexcept override { return open_.load(); }
    [[nodiscard]] std::string remote_address() const override { return remote_; }

private:
    struct outgoing {
        wire::message msg;
        std::vector<std::byte> head;
    };

    asio::awaitable<void> read_loop(std::shared_ptr<tcp_connection> self) {
        const connection_ptr as_connection = self;
        for (;;) {
            std::error_code ec;
            const auto buf = decoder_.buffer();
            const std::size_t n =
                co_await socket_.async_read_some(asio::buffer(buf.data(), buf.size()),
                                                 asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                finish(ec == asio::error::eof ? make_error_code(errc::connection_closed) : ec);
                co_return;
            }
            const auto err = decoder_.consume(n, [&](wire::message&& m) {
                if (!closed_ && handlers_.on_message) {
                    handlers_.on_message(as_connection, std::move(m));
                }
            });
            if (err) {
                if (log_) {
                    log_(log_level::warning, "closing connection with " + remote_ +
                                                 ": invalid frame: " + err.message());
                }
                finish(err);
                co_return;
            }
            if (closed_) {
                co_return;
            }
        }
    }

    asio::awaitable<void> write_loop([[maybe_unused]] std::shared_ptr<tcp_connection> self) {
        std::vector<asio::const_buffer> buffers;
        while (!closed_) {
            if (queue_.empty()) {
                std::error_code ignored;
                wake_.expires_at(asio::steady_timer::time_point::max());
                co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
                continue;
            }
            buffers.clear();
            std::size_t batch = 0;
            for (const auto& o : queue_) {
                buffers.emplace_back(o.head.data(), o.head.size());
                for (const auto& seg : o.msg.segments) {
                    if (!seg.empty()) {
                        buffers.emplace_back(seg.data(), seg.size());
                        const std::size_t pad = wire::padded(seg.size()) - seg.size();
                        if (pad) {
                            buffers.emplace_back(wire::padding_bytes.data(), pad);
                        }
                    }
                }
                ++batch;
                if (buffers.size() >= 256) {
                    break;
                }
            }
            writing_ = true;
            std::error_code ec;
            co_await asio::async_write(socket_, buffers,
                                       asio::redirect_error(asio::use_awaitable, ec));
            writing_ = false;
            if (ec) {
                finish(ec);
                co_return;
            }
            if (!closed_) {
                queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(batch));
            }
        }
    }

    /// Ends the connection once: closes the socket, stops both loops, reports `ec`.
    void finish(std::error_code ec) {
        if (closed_) {
            return;
        }
        closed_ = true;
        open_ = false;
        std::error_code ignored;
        socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
        wake_.cancel();
        if (!writing_) {
            queue_.clear();
        }
        auto on_close = std::move(handlers_.on_close);
        handlers_ = {};
        if (on_close) {
            on_close(shared_from_this(), ec);
        }
        if (on_gone_) {
            on_gone_(this);
        }
    }

    asio::ip::tcp::socket socket_;
    asio::steady_timer wake_;
    wire::frame_decoder decoder_;
    connection_handlers handlers_;
    logger log_;
    std::function<void(tcp_connection*)> on_gone_;
    std::string remote_;
    std::deque<outgoing> queue_;
    bool writing_ = false;
    bool closed_ = false;
    std::atomic<bool> open_{true};
};

} // namespace petrel::detail
