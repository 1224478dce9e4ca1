// Petrel: the bodies of one TCP connection (see <petrel/transport/detail/tcp_connection.hpp>).
#ifndef PETREL_TRANSPORT_IMPL_TCP_CONNECTION_IPP
#define PETREL_TRANSPORT_IMPL_TCP_CONNECTION_IPP

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/handshake.hpp>
#include <petrel/transport/detail/tcp_connection.hpp>

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/error.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace petrel::detail {

PETREL_DECL tcp_connection::tcp_connection(tcp_stream stream, const transport_options& opts,
                                           connection_handlers handlers,
                                           std::function<void(tcp_connection*)> on_gone,
                                           bool accepted, access peer, shared_budgets budgets)
    : stream_(std::move(stream)), wake_(stream_.get_executor()), drained_(stream_.get_executor()),
      budget_freed_(stream_.get_executor()), watchdog_(stream_.get_executor()),
      receive_budget_(std::move(budgets.receiving)), replies_(std::move(budgets.replies)),
      frame_timeout_(opts.frame_timeout), min_receive_rate_(opts.min_receive_rate),
      idle_timeout_(accepted ? opts.idle_timeout : std::chrono::milliseconds{0}),
      max_queued_bytes_(accepted ? opts.max_send_queue_bytes
                                 : std::numeric_limits<std::size_t>::max()),
      decoder_(opts.limits, opts.pool), handlers_(std::move(handlers)), log_(opts.log),
      on_gone_(std::move(on_gone)), accepted_(accepted), peer_access_(peer),
      peer_name_(stream_.peer_name()) {
    if (budgets.key_lists) {
        decoder_.share_key_cache_budget(std::move(budgets.key_lists));
    }
    std::error_code ec;
    stream_.socket().set_option(asio::ip::tcp::no_delay(true), ec);
    stream_.socket().non_blocking(true, ec);
    const auto ep = stream_.socket().remote_endpoint(ec);
    remote_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

PETREL_DECL tcp_connection::~tcp_connection() {
    count_queued(queued_bytes_, 0);
}

PETREL_DECL void tcp_connection::start() {
    if (receive_budget_) {
        decoder_.share_budget(receive_budget_, [weak = weak_from_this()] {
            if (auto self = weak.lock()) {
                asio::post(self->stream_.get_executor(), [self] {
                    self->budget_was_freed_ = true;
                    self->budget_freed_.cancel();
                });
            }
        });
    }
    asio::co_spawn(stream_.get_executor(), read_loop(shared_from_this()), asio::detached);
    asio::co_spawn(stream_.get_executor(), write_loop(shared_from_this()), asio::detached);
    if (frame_timeout_.count() > 0 || idle_timeout_.count() > 0) {
        asio::co_spawn(stream_.get_executor(), watch(shared_from_this()), asio::detached);
    }
}

PETREL_DECL void tcp_connection::send(wire::message m) {
    if (!open_.load(std::memory_order_relaxed)) {
        return; // closed: dropped, as on the strand
    }
    const bool small = wire::framed_payload_bytes(m.header) <= inline_payload_bytes;
    outgoing o;
    if (!small) {
        o = prepare(std::move(m));
    }
    if (reader_.load(std::memory_order_acquire) == std::this_thread::get_id()) {
        // On the strand, inside the read loop's hand-over: no other thread touches the
        // send queue now.
        take_inbox();
        if (small) {
            if (!closed_) {
                const std::size_t before = queued_bytes_;
                queued_bytes_ += append(queue_, m, false);
                count_queued(before, queued_bytes_);
            }
        } else {
            enqueue(std::move(o));
        }
        return;
    }
    bool post = false;
    {
        std::lock_guard lock(inbox_mutex_);
        if (small) {
            append(inbox_, m, true);
        } else {
            inbox_.push_back(std::move(o));
        }
        post = !inbox_posted_;
        inbox_posted_ = true;
    }
    if (post) {
        asio::post(stream_.get_executor(), [self = shared_from_this()] {
            {
                std::lock_guard lock(self->inbox_mutex_);
                self->inbox_posted_ = false;
            }
            self->take_inbox();
            self->flush();
        });
    }
}

PETREL_DECL void tcp_connection::close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
        if (self->stream_.tls() != nullptr && !self->closed_ && self->frame_timeout_.count() > 0 &&
            (self->writing_ || !self->queue_.empty())) {
            self->open_.store(false, std::memory_order_relaxed); // nothing more joins
            self->close_when_written_ = true;
            self->write_deadline_ = clock::now() + self->frame_timeout_;
            if (self->write_deadline_ < self->watching_until_) {
                self->watching_until_ = self->write_deadline_;
                self->watchdog_.expires_at(self->write_deadline_);
            }
            return;
        }
        self->finish(errc::shut_down);
    });
}

PETREL_DECL tcp_connection::outgoing tcp_connection::prepare(wire::message&& m) {
    outgoing o;
    o.msg = std::move(m);
    wire::encode_head(o.msg, o.head);
    o.bytes = o.head.size() + wire::framed_payload_bytes(o.msg.header);
    return o;
}

PETREL_DECL void tcp_connection::keep_spare(std::vector<std::byte>&& buffer) {
    if (buffer.capacity() != frames_buffer_bytes) {
        return;
    }
    buffer.clear();
    std::lock_guard lock(inbox_mutex_);
    if (spare_.size() < max_spares) {
        spare_.push_back(std::move(buffer));
    }
}

PETREL_DECL void tcp_connection::take_inbox() {
    {
        std::lock_guard lock(inbox_mutex_);
        if (inbox_.empty()) {
            return;
        }
        taken_.swap(inbox_);
    }
    for (auto& o : taken_) {
        enqueue(std::move(o));
    }
    taken_.clear();
}

PETREL_DECL void tcp_connection::enqueue(outgoing&& o) {
    if (closed_) {
        return;
    }
    count_queued(queued_bytes_, queued_bytes_ + o.bytes);
    queued_bytes_ += o.bytes;
    if (o.frames && !queue_.empty() && queue_.back().frames && !queue_.back().in_write &&
        queue_.back().bytes + o.bytes <= frames_buffer_bytes) {
        auto& b = queue_.back();
        b.head.insert(b.head.end(), o.head.begin(), o.head.end());
        b.bytes = b.head.size();
        return;
    }
    queue_.push_back(std::move(o));
}

PETREL_DECL void tcp_connection::flush() {
    watch_writes();
    if (closed_ || writing_ || queue_.empty()) {
        return;
    }
    if (stream_.tls() != nullptr) {
        wake_.cancel_one();
        return;
    }
    std::error_code ec;
    std::size_t n = 0;
    do {
        gather(buffers_);
        n = stream_.socket().write_some(buffers_, ec);
        if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
            // Not finish() here: that would run completions inside a sender's call.
            // The write loop meets the same error and ends the connection.
            wake_.cancel_one();
            return;
        }
        consume(ec ? 0 : n);
    } while (!ec && n > 0 && !queue_.empty());
    if (!queue_.empty()) {
        wake_.cancel_one();
    }
}

PETREL_DECL std::size_t tcp_connection::gather(std::vector<asio::const_buffer>& buffers) const {
    buffers.clear();
    std::size_t used = 0;
    std::size_t skip = front_written_;
    auto add = [&](const void* data, std::size_t size) {
        if (skip >= size) {
            skip -= size;
            return;
        }
        buffers.emplace_back(static_cast<const std::byte*>(data) + skip, size - skip);
        skip = 0;
    };
    for (const auto& o : queue_) {
        ++used;
        add(o.head.data(), o.head.size());
        for (const auto& seg : o.msg.segments) {
            if (!seg.empty()) {
                add(seg.data(), seg.size());
                const std::size_t pad = wire::padded(seg.size()) - seg.size();
                if (pad) {
                    add(wire::padding_bytes.data(), pad);
                }
            }
        }
        if (buffers.size() >= 256) {
            break;
        }
    }
    return used;
}

PETREL_DECL void tcp_connection::consume(std::size_t n) {
    if (n > 0 && write_deadline_ != never) {
        // The peer took some: it has another frame_timeout for the rest (none once the
        // queue is back within its limit: see below).
        write_deadline_ = clock::now() + frame_timeout_;
    }
    while (n > 0 && !queue_.empty()) {
        const std::size_t left = queue_.front().bytes - front_written_;
        if (n < left) {
            front_written_ += n;
            return;
        }
        n -= left;
        front_written_ = 0;
        count_queued(queued_bytes_, queued_bytes_ - queue_.front().bytes);
        queued_bytes_ -= queue_.front().bytes;
        if (queue_.front().frames) {
            keep_spare(std::move(queue_.front().head));
        }
        queue_.pop_front();
    }
    const bool over_share = replies_ && replies_->over_share(queued_bytes_);
    if (queued_bytes_ <= max_queued_bytes_ / 2 && !over_share) {
        drained_.cancel(); // a read loop held back by the queue may go on
    }
    if (write_deadline_ != never && queued_bytes_ <= max_queued_bytes_ && !over_share &&
        !close_when_written_) {
        write_deadline_ = never; // the watchdog finds that out
    }
}

PETREL_DECL bool tcp_connection::too_much_queued() const noexcept {
    return queued_bytes_ > max_queued_bytes_ || (replies_ && replies_->over_share(queued_bytes_));
}

PETREL_DECL void tcp_connection::count_queued(std::size_t before, std::size_t after) noexcept {
    if (replies_) {
        replies_->change(before, after);
    }
}

PETREL_DECL void tcp_connection::watch_writes() {
    if (!too_much_queued() || write_deadline_ != never || frame_timeout_.count() == 0 || closed_) {
        return;
    }
    write_deadline_ = clock::now() + frame_timeout_;
    if (write_deadline_ < watching_until_) {
        watching_until_ = write_deadline_;
        watchdog_.expires_at(write_deadline_); // ends its wait: it looks again
    }
}

PETREL_DECL asio::awaitable<void> tcp_connection::read_loop(std::shared_ptr<tcp_connection> self) {
    const connection_ptr as_connection = self;
    const share_guard guard{decoder_};
    for (;;) {
        std::error_code ec;
        if (decoder_.waiting_for_budget()) {
            // The node's receive budget is held by other connections' frames: wait
            // until some of it is given back. The peer is not the one that is slow.
            read_deadline_ = never;
            in_frame_ = false;
            while (!budget_was_freed_ && !closed_) {
                budget_freed_.expires_at(asio::steady_timer::time_point::max());
                co_await budget_freed_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            }
            budget_was_freed_ = false;
        } else {
            // Back-pressure: while the replies to this peer pile up unsent (it does not
            // read), stop reading its requests (between frames: a frame under way is
            // received whole, so that its share of the budget comes back).
            if (too_much_queued() && decoder_.payload_bytes() == 0) {
                read_deadline_ = never; // the peer is not the one that is slow
                in_frame_ = false;
                // (Its share may have been passed by others' replies, without one
                // of its own queued since: its peer's time to read starts now.)
                watch_writes();
                while (too_much_queued() && !closed_) {
                    drained_.expires_at(asio::steady_timer::time_point::max());
                    co_await drained_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                }
            }
            arm_read_deadline();
        }
        if (closed_) {
            co_return;
        }
        std::size_t n = 0; // frames held back by the last read are handled first
        if (!decoder_.held() && !decoder_.waiting_for_budget()) {
            const auto buf = decoder_.buffer();
            n = co_await stream_.async_read_some(asio::buffer(buf.data(), buf.size()),
                                                 asio::redirect_error(asio::use_awaitable, ec));
            if (ec) {
                finish(ec == asio::error::eof ? make_error_code(errc::connection_closed) : ec);
                co_return;
            }
        }
        std::error_code err;
        try {
            // Replies sent by the handlers meanwhile queue up (see send()) and leave
            // together once every complete frame of this read was handled.
            const reading_scope scope(reader_);
            // Back-pressure before each frame: once the replies queued for this peer
            // pass the limit, the frames after stay staged until they are sent.
            err = decoder_.consume(
                n,
                [&](wire::message&& m) {
                    if (!closed_ && handlers_.on_message) {
                        handlers_.on_message(as_connection, std::move(m));
                    }
                },
                [this] { return too_much_queued(); });
        } catch (const std::bad_alloc&) {
            if (log_) {
                log_(log_level::error, "closing connection with " + remote_ +
                                           ": out of memory while handling a message");
            }
            finish(std::make_error_code(std::errc::not_enough_memory));
            co_return;
        } catch (const std::exception& e) {
            if (log_) {
                log_(log_level::error, "closing connection with " + remote_ +
                                           ": message handler failed: " + e.what());
            }
            finish(errc::handler_failed);
            co_return;
        }
        flush();
        if (err) {
            if (log_) {
                log_(log_level::warning, "closing connection with " + remote_ +
                                             ": invalid frame: " + decoder_.error_text());
            }
            if (err == errc::auth_failed && accepted_ && !writing_ && queue_.empty()) {
                open_.store(false, std::memory_order_relaxed); // nothing joins the queue
                co_await answer_hello();
            }
            finish(err);
            co_return;
        }
        if (closed_) {
            co_return;
        }
    }
}

PETREL_DECL void tcp_connection::arm_read_deadline() {
    if (decoder_.mid_frame() && frame_timeout_.count() > 0) {
        if (!in_frame_) {
            in_frame_ = true;
            frame_started_ = clock::now();
        }
        auto at = frame_started_ + frame_timeout_;
        if (const auto payload = decoder_.payload_bytes(); payload > 0 && min_receive_rate_ > 0) {
            at += std::chrono::milliseconds(payload / min_receive_rate_ * 1000 +
                                            payload % min_receive_rate_ * 1000 / min_receive_rate_);
        }
        read_deadline_ = at;
    } else {
        in_frame_ = false;
        // The clock is read only where a deadline is set.
        read_deadline_ = idle_timeout_.count() > 0 ? clock::now() + idle_timeout_ : never;
    }
    if (read_deadline_ < watching_until_) {
        watching_until_ = read_deadline_;
        watchdog_.expires_at(read_deadline_); // ends its wait: it looks again
    }
}

PETREL_DECL asio::awaitable<void>
tcp_connection::watch([[maybe_unused]] std::shared_ptr<tcp_connection> self) {
    while (!closed_) {
        const auto now = clock::now();
        const bool reads_late = read_deadline_ != never && now >= read_deadline_;
        if (reads_late || (write_deadline_ != never && now >= write_deadline_)) {
            if (log_) {
                log_(log_level::warning,
                     "closing connection with " + remote_ +
                         (!reads_late ? ": the peer takes none of the replies queued for "
                                        "it (frame_timeout, max_send_queue_bytes)"
                          : in_frame_ ? ": a frame arrives too slowly (frame_timeout, "
                                        "min_receive_rate)"
                                      : ": nothing arrived within idle_timeout"));
            }
            finish(errc::timed_out);
            co_return;
        }
        watching_until_ = std::min(read_deadline_, write_deadline_);
        watchdog_.expires_at(watching_until_);
        std::error_code ignored;
        co_await watchdog_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
}

PETREL_DECL asio::awaitable<void> tcp_connection::answer_hello() {
    try {
        const auto hello = auth_hello::fresh().encode();
        std::error_code ignored;
        writing_ = true; // flush() leaves the socket alone meanwhile
        co_await asio::async_write(stream_, asio::buffer(hello),
                                   asio::redirect_error(asio::use_awaitable, ignored));
        writing_ = false;
    } catch (const std::exception&) {
        // No random bytes: the peer sees a closed connection.
    }
}

PETREL_DECL asio::awaitable<void>
tcp_connection::write_loop([[maybe_unused]] std::shared_ptr<tcp_connection> self) {
    std::vector<asio::const_buffer> buffers;
    while (!closed_) {
        if (queue_.empty()) {
            if (close_when_written_) {
                finish(errc::shut_down);
                co_return;
            }
            std::error_code ignored;
            wake_.expires_at(asio::steady_timer::time_point::max());
            co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
            continue;
        }
        const std::size_t used = gather(buffers);
        for (std::size_t i = 0; i < used; ++i) {
            queue_[i].in_write = true; // small frames join a later buffer meanwhile
        }
        writing_ = true;
        std::error_code ec;
        // What the socket takes now, not all of it: each write's progress counts for
        // the peer's write deadline (see `watch_writes`).
        const std::size_t n = co_await stream_.async_write_some(
            buffers, asio::redirect_error(asio::use_awaitable, ec));
        writing_ = false;
        if (ec) {
            finish(ec);
            co_return;
        }
        if (!closed_) {
            consume(n);
        }
    }
}

PETREL_DECL void tcp_connection::finish(std::error_code ec) {
    if (closed_) {
        return;
    }
    closed_ = true;
    open_ = false;
    stream_.close();
    wake_.cancel();
    drained_.cancel();
    budget_freed_.cancel();
    watchdog_.cancel();
    if (!writing_) {
        queue_.clear();
        count_queued(queued_bytes_, 0);
        queued_bytes_ = 0;
    }
    {
        std::lock_guard lock(inbox_mutex_);
        inbox_.clear();
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

} // namespace petrel::detail

#endif
