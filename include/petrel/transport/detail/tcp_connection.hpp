// Petrel: one TCP connection: a read loop and a write loop on a strand.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/core/detail/byte_budget.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>
#include <petrel/wire/frame_decoder.hpp>

#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace petrel::detail {

/// What the accepted connections of a transport draw on together: the payloads being
/// received (`transport_options::max_receiving_bytes`), the key lists their peers
/// asked them to keep (`max_cached_key_bytes`) and the replies queued for their peers
/// (`max_queued_reply_bytes`). Null: no such budget.
struct shared_budgets {
    std::shared_ptr<byte_budget> receiving;
    std::shared_ptr<byte_budget> key_lists;
    std::shared_ptr<reply_budget> replies;
};

class tcp_connection final : public connection,
                             public std::enable_shared_from_this<tcp_connection> {
public:
    /// `accepted`: this end was accepted by a listener. Only such an end holds back its
    /// reads when its send queue is full: its peer sends requests and must read the
    /// replies, while the connecting end always reads (its replies free memory), so two
    /// ends can never wait for each other.
    PETREL_DECL tcp_connection(tcp_stream stream, const transport_options& opts,
                               connection_handlers handlers,
                               std::function<void(tcp_connection*)> on_gone, bool accepted,
                               access peer = access::full, shared_budgets budgets = {});

    tcp_connection(const tcp_connection&) = delete;
    tcp_connection& operator=(const tcp_connection&) = delete;
    /// Gives back what is still counted of its queue (a write loop that ended with the
    /// connection leaves its queue to here).
    PETREL_DECL ~tcp_connection() override;

    PETREL_DECL void start();

    /// From the connection's own read loop (a reply decided while it hands over what it
    /// read), `m` joins the send queue at once and leaves with the other replies of that
    /// read in one write. From anywhere else it goes to the inbox, and the first message
    /// of an empty inbox posts one handler that moves everything that arrived by then to
    /// the send queue and writes it, so that messages sent in a burst share system calls
    /// and a hop to the strand. Small frames are encoded whole, one after the other, into
    /// one buffer (see `outgoing`).
    PETREL_DECL void send(wire::message m) override;

    /// Under TLS, messages sent before `close` leave first (the write loop writes them,
    /// within `frame_timeout` when one is set): `flush` does not write them at once there.
    PETREL_DECL void close() override;

    [[nodiscard]] bool is_open() const noexcept override { return open_.load(); }

    [[nodiscard]] access peer_access() const noexcept override { return peer_access_; }
    [[nodiscard]] std::string peer_name() const override { return peer_name_; }
    [[nodiscard]] std::string remote_address() const override { return remote_; }

private:
    /// A frame to write (its head here, its segments in `msg`), or several small frames
    /// encoded whole one after the other (`msg` empty).
    struct outgoing {
        wire::message msg;
        std::vector<std::byte> head; // the prefix and header, or whole small frames
        std::size_t bytes = 0;       // head and padded segments
        bool frames = false;         // whole small frames, which more may join
        bool in_write = false;       // an asynchronous write uses its bytes: it cannot grow
    };

    /// Frames whose padded payload is at most this many bytes are encoded whole (header
    /// and segments) and join the small frames queued before them in one buffer, so that
    /// a burst of them leaves in one system call and allocates nothing per frame.
    static constexpr std::size_t inline_payload_bytes = 512;
    /// The most bytes of small frames one buffer collects (a burst takes a few).
    static constexpr std::size_t frames_buffer_bytes = std::size_t{32} << 10;

    /// Encodes the head of `m`, on the sender's thread.
    PETREL_DECL static outgoing prepare(wire::message&& m);

    /// Encodes the whole frame of `m` (prefix, header, padded segments) at the end of
    /// the last buffer of small frames of `q` when it has room and no write uses its bytes,
    /// else of a new one (a spare one when there is one). `locked`: the caller holds
    /// `inbox_mutex_`. Returns the frame's bytes.
    template <typename Queue>
    std::size_t append(Queue& q, const wire::message& m, bool locked) {
        const auto layout = wire::layout_of(m.header);
        const std::size_t size = layout.frame_bytes();
        if (q.empty() || !q.back().frames || q.back().in_write ||
            q.back().bytes + size > frames_buffer_bytes) {
            outgoing o;
            o.frames = true;
            {
                std::unique_lock lock(inbox_mutex_, std::defer_lock);
                if (!locked) {
                    lock.lock();
                }
                if (!spare_.empty()) {
                    o.head = std::move(spare_.back());
                    spare_.pop_back();
                }
            }
            o.head.reserve(frames_buffer_bytes); // no growing copies; kept as a spare
            q.push_back(std::move(o));
        }
        auto& b = q.back();
        const std::size_t at = b.head.size();
        b.head.resize(at + size); // zeroed: the padding
        std::byte* out = b.head.data() + at;
        out += wire::encode_head_into(m, layout, out);
        // The frame's size came from the header's segment sizes: copy no more than they
        // say, whatever a segment holds (they agree when `set_segment` filled them).
        for (std::size_t i = 0; i < m.segments.size(); ++i) {
            const std::size_t n = m.header.segment_bytes[i];
            if (const auto copied = std::min<std::size_t>(n, m.segments[i].size()); copied > 0) {
                std::memcpy(out, m.segments[i].data(), copied);
            }
            out += wire::padded(n);
        }
        b.bytes = b.head.size();
        return size;
    }

    /// Keeps a written buffer of small frames for the next ones (a few at most), so that
    /// a steady stream of them allocates nothing.
    PETREL_DECL void keep_spare(std::vector<std::byte>&& buffer);

    /// On the strand: moves the messages of the inbox to the send queue, in order.
    PETREL_DECL void take_inbox();

    /// On the strand: queues `o` (dropped once the connection is closed); small frames
    /// join the last buffer of small frames while no write uses it.
    PETREL_DECL void enqueue(outgoing&& o);

    /// On the strand. When the write loop is idle, writes what is queued at once without
    /// blocking (most bursts of small messages leave here in a few system calls, without
    /// waking the loop); what the socket does not take is left to the write loop. Under
    /// TLS the write loop writes everything (a TLS record cannot be written in part
    /// without blocking and then taken back).
    PETREL_DECL void flush();

    /// The buffers of the queued messages (several, when they have piled up), starting
    /// after the bytes of the first message that were already written. Returns how many
    /// messages they take from.
    PETREL_DECL std::size_t gather(std::vector<asio::const_buffer>& buffers) const;

    /// Drops the messages the socket took in full; remembers how far into the next one
    /// it got.
    PETREL_DECL void consume(std::size_t n);

    /// Whether this connection holds back its peer's requests: its replies queued pass its
    /// own limit, or its share of the node's (`reply_budget`) while that is exhausted.
    [[nodiscard]] PETREL_DECL bool too_much_queued() const noexcept;

    /// Its queue went from `before` to `after` bytes: counted in the node's reply budget.
    PETREL_DECL void count_queued(std::size_t before, std::size_t after) noexcept;

    /// On the strand, once replies were queued: when they pass the limit of an accepted
    /// connection (its own, or its share of the node's), its peer must take some within
    /// `frame_timeout`.
    PETREL_DECL void watch_writes();

    /// Marks the thread that runs the read loop's hand-over of what this connection read,
    /// for as long as it does (`send` from that thread is from a handler of this read).
    struct reading_scope {
        explicit reading_scope(std::atomic<std::thread::id>& r) noexcept : reader(r) {
            reader.store(std::this_thread::get_id(), std::memory_order_release);
        }
        ~reading_scope() { reader.store(std::thread::id{}, std::memory_order_release); }
        reading_scope(const reading_scope&) = delete;
        reading_scope& operator=(const reading_scope&) = delete;
        std::atomic<std::thread::id>& reader;
    };

    /// Gives the receive budget's share of an unfinished frame back when the read loop
    /// ends.
    struct share_guard {
        wire::frame_decoder& decoder;
        ~share_guard() { decoder.drop_budget_share(); }
    };

    PETREL_DECL asio::awaitable<void> read_loop(std::shared_ptr<tcp_connection> self);

    using clock = std::chrono::steady_clock;
    static constexpr clock::time_point never = clock::time_point::max();

    /// Before a read: when the peer must have sent more. Within a frame: its header within
    /// `frame_timeout` of its first byte, its payload at `min_receive_rate` after that;
    /// between frames, `idle_timeout` from now. Wakes the watchdog when that is earlier
    /// than it would wake by itself (once per frame at most; between frames of an idle
    /// timeout the deadline only moves later, and the watchdog finds that out).
    PETREL_DECL void arm_read_deadline();

    /// Closes the connection with `errc::timed_out` once a read or write deadline passed.
    PETREL_DECL asio::awaitable<void> watch(std::shared_ptr<tcp_connection> self);

    /// This end has no secret and the peer opened with a handshake's hello: a hello back
    /// tells the peer that it reached a Petrel node, which fails its handshake with
    /// `errc::auth_failed` when this end closes, instead of a closed connection (which it
    /// would take for a node that is gone).
    PETREL_DECL asio::awaitable<void> answer_hello();

    PETREL_DECL asio::awaitable<void> write_loop(std::shared_ptr<tcp_connection> self);

    /// Ends the connection once: closes the socket, stops both loops, reports `ec`.
    PETREL_DECL void finish(std::error_code ec);

    tcp_stream stream_;
    asio::steady_timer wake_;         // wakes the write loop
    asio::steady_timer drained_;      // wakes a read loop held back by a full send queue
    asio::steady_timer budget_freed_; // wakes a read loop waiting for the receive budget
    bool budget_was_freed_ = false;   // (set with it, on the strand)
    asio::steady_timer watchdog_;     // wakes watch() at the read or write deadline
    std::shared_ptr<byte_budget> receive_budget_; // shared by the transport's connections
    std::shared_ptr<reply_budget> replies_;       // (also)
    std::chrono::milliseconds frame_timeout_;
    std::size_t min_receive_rate_;
    std::chrono::milliseconds idle_timeout_;
    clock::time_point read_deadline_ = never;  // the peer must have sent more by then
    clock::time_point write_deadline_ = never; // the peer must have taken some replies by then
    clock::time_point watching_until_ = never; // when watch() wakes next
    clock::time_point frame_started_{};        // the first byte of the frame under way
    bool in_frame_ = false;
    std::size_t max_queued_bytes_;
    std::size_t queued_bytes_ = 0; // whole messages queued, written or not
    wire::frame_decoder decoder_;
    connection_handlers handlers_;
    logger log_;
    std::function<void(tcp_connection*)> on_gone_;
    bool accepted_;
    access peer_access_;
    std::string peer_name_; // of the peer's TLS certificate, read once after its handshake
    std::string remote_;
    std::deque<outgoing> queue_;
    std::vector<asio::const_buffer> buffers_; // flush()'s gathered write
    std::mutex inbox_mutex_;
    std::vector<outgoing> inbox_; // sent from outside the read loop, not yet queued
    bool inbox_posted_ = false;   // a handler that takes the inbox is on its way
    static constexpr std::size_t max_spares = 2;
    std::vector<std::vector<std::byte>> spare_; // written buffers of small frames, reused
    std::vector<outgoing> taken_;               // take_inbox()'s, kept for its capacity
    /// The thread running the read loop's hand-over of a read, while it does (none
    /// otherwise).
    std::atomic<std::thread::id> reader_{};
    std::size_t front_written_ = 0;
    bool writing_ = false;
    bool closed_ = false;
    bool close_when_written_ = false; // close() waits for the write loop (TLS)
    std::atomic<bool> open_{true};
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/tcp_connection.ipp>
#endif
