// Petrel: a connection between two nodes, as every transport provides it.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/credential.hpp>
#include <petrel/transport/tls_files.hpp>
#include <petrel/wire/frame.hpp>
#include <petrel/wire/message.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <system_error>

namespace petrel {

/// One end of a message stream between two nodes.
///
/// Messages sent on a connection arrive in order or not at all; when a connection
/// fails or is closed, each end's `on_close` handler runs exactly once and nothing
/// more is delivered.
///
/// @par Thread Safety
/// `send`, `close`, `is_open` and `remote_address` may be called from any thread.
class connection {
public:
    virtual ~connection() = default;

    /// Queues `m` for sending and returns at once. Messages sent on a closed connection
    /// are dropped (its `on_close` handler has run or is about to).
    virtual void send(wire::message m) = 0;

    /// Closes the connection; idempotent. `on_close` runs with `errc::shut_down`.
    virtual void close() = 0;

    [[nodiscard]] virtual bool is_open() const noexcept = 0;

    /// The peer's address, for messages.
    [[nodiscard]] virtual std::string remote_address() const = 0;

    /// What the peer proved in its handshake; `access::full` on a connecting end and
    /// without a secret.
    [[nodiscard]] virtual access peer_access() const noexcept { return access::full; }

    /// The common name of the certificate the peer showed in its TLS handshake, verified
    /// against the job's authority; empty without TLS.
    [[nodiscard]] virtual std::string peer_name() const { return {}; }
};

using connection_ptr = std::shared_ptr<connection>;

/// What a node does with a connection's events. Both run on the transport's executor
/// (serialized per connection), never concurrently for one connection.
///
/// `on_close` may run after `close()` (of the connection or of its transport) has
/// returned: whatever the handlers capture must live until the executor has run them,
/// so capture shared or weak pointers rather than references to the stack.
struct connection_handlers {
    /// A validated message arrived.
    std::function<void(const connection_ptr&, wire::message&&)> on_message;
    /// The connection ended: closed by either side, failed, or closed because the peer
    /// sent an invalid frame (which the transport also reports to its logger).
    std::function<void(const connection_ptr&, std::error_code)> on_close;
};

/// Settings shared by every transport.
struct transport_options {
    /// What this node accepts from peers.
    wire::wire_limits limits{};
    /// Pool for received payloads and outgoing copies; a new one when empty.
    std::shared_ptr<buffer_pool> pool{};
    /// Where connection failures and bad frames are reported.
    logger log = stderr_logger();
    /// Bytes an accepted connection may hold queued for sending; beyond this it stops
    /// handling its peer's frames (checked before each one, also within one read) and
    /// reading until half of them are sent, so a peer that sends requests but never
    /// reads the replies cannot make a server buffer more than about one reply past it.
    /// (Connecting ends always read: the replies they receive free memory.)
    std::size_t max_send_queue_bytes = std::size_t{256} << 20;
    /// The job's secret: when set, every connection starts with a mutual challenge-
    /// response over it (HMAC-SHA256, see `detail::authenticate`) and carries no frame
    /// until both ends proved they know it. Every node of a job needs the same one. Empty:
    /// no authentication (a node then talks to any peer that reaches its ports).
    std::string secret{};
    /// What `secret` is: the job's secret, or a reader's credential made from it
    /// (`reader_credential`), with which this node can only read. A node with the job's
    /// secret also accepts peers that prove a reader's credential, as `access::read_only`.
    access credential = access::full;
    /// How long a connection's handshake may take, on either end.
    std::chrono::milliseconds handshake_timeout{5000};
    /// How long an accepting end waits before it closes a connection whose peer failed
    /// the handshake (slowing down guessing).
    std::chrono::milliseconds auth_failure_delay{200};
    /// Once a frame's first byte arrived, its header must be whole within this time and
    /// its payload must follow at `min_receive_rate` bytes a second or faster; a peer
    /// that sends slower is closed with `errc::timed_out` and logged, so that a peer
    /// cannot hold a connection's buffers by trickling. The clock stops while this end
    /// holds back its reads (its send queue is full). The other way round, an accepted
    /// connection whose replies pass `max_send_queue_bytes` is closed the same way when
    /// its peer takes none of them for this long, so that a peer that does not read
    /// cannot hold its replies' memory. Zero: no deadline.
    std::chrono::milliseconds frame_timeout{30000};
    std::size_t min_receive_rate = std::size_t{64} << 10;
    /// An accepted connection on which nothing arrives for this long is closed (its peer
    /// connects again when it next sends). Zero: never (the default: a worker may compute
    /// for long between its requests, and the connection limits bound idle connections).
    /// Set it above the longest a request may be held (a pull waiting for a slow clock).
    std::chrono::milliseconds idle_timeout{0};
    /// Connections a node's listeners keep at once (those in their handshake included):
    /// beyond it an accepted connection is closed at once and the refusal logged, so that
    /// idle connections cannot hold a node's memory without bound.
    std::size_t max_accepted_connections = 4096;
    /// Of those, from one peer address (processes of one host share theirs).
    std::size_t max_connections_per_address = 512;
    /// Bytes of frame payloads a node's accepted connections receive at once, together:
    /// a frame's payload (above 512 bytes) is allocated once this much is free beside the
    /// others' and counted until its message is handed over, so that many peers each
    /// announcing a large frame cannot make the node reserve a frame's size for each. A
    /// connection whose frame must wait reads nothing meanwhile (its deadlines stopped:
    /// its peer is not the slow one); a frame larger than this is refused with
    /// `errc::frame_too_large`. Zero: no budget.
    std::uint64_t max_receiving_bytes = std::uint64_t{2} << 30;
    /// Bytes of the key lists a node's accepted connections keep for their peers, together
    /// (each connection also keeps at most `limits.max_key_cache_bytes`): a list that does
    /// not fit once that connection's older lists are gone is not kept, and its sender
    /// sends the keys again when it refers to it. Zero: no budget beyond each
    /// connection's.
    std::uint64_t max_cached_key_bytes = std::uint64_t{1} << 30;
    /// Bytes of replies a node's accepted connections hold queued for their peers,
    /// together (each connection also holds at most `max_send_queue_bytes`): once the
    /// total passes it, a connection holding more than its share (this divided by the
    /// connections holding replies) stops reading its peer's requests until its queue
    /// drains, and its peer must take some of its replies within `frame_timeout` or is
    /// closed. So peers that do not read cannot make a node hold more than about this
    /// (plus one reply each), while the others are served. Zero: no budget beyond each
    /// connection's.
    std::uint64_t max_queued_reply_bytes = std::uint64_t{2} << 30;
    /// Mutual TLS (TCP only): every connection, accepted or made, first runs a TLS
    /// handshake in which both ends show a certificate signed by `tls.authority`, then the
    /// secret's handshake and all frames go through it (encrypted, integrity-checked). A
    /// peer without such a certificate, or without TLS, is refused with `errc::tls_failed`
    /// and logged. Every node of a job needs it or none. Empty: plain TCP.
    tls_files tls{};
};

} // namespace petrel
