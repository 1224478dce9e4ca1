// Petrel: the message header.
#pragma once

#include <petrel/core/clock_entry.hpp>
#include <petrel/core/key.hpp>

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace petrel::wire {

static_assert(std::endian::native == std::endian::little,
              "Petrel's wire format is little-endian; big-endian hosts are not supported");

/// "PTRL" read as a little-endian 32-bit number: `message_header::magic` of every
/// well-formed message (a frame's envelope carries its own, shorter magic).
inline constexpr std::uint32_t magic = 0x4C525450;
/// The wire protocol's version. Peers of one major version work together whatever their
/// minor versions: a newer minor only adds optional header fields, which an older peer
/// skips (`detail/header_codec.hpp`). A peer of another major version is refused.
inline constexpr std::uint8_t protocol_major = 7;
inline constexpr std::uint8_t protocol_minor = 0;
/// `message_header::version`: major << 8 | minor.
inline constexpr std::uint16_t protocol_version =
    static_cast<std::uint16_t>(protocol_major << 8 | protocol_minor);
[[nodiscard]] constexpr std::uint8_t major_of(std::uint16_t version) noexcept {
    return static_cast<std::uint8_t>(version >> 8);
}
[[nodiscard]] constexpr std::uint8_t minor_of(std::uint16_t version) noexcept {
    return static_cast<std::uint8_t>(version & 0xFF);
}
/// The most clock entries one header may carry (bounds what a decoder allocates).
inline constexpr std::uint32_t max_clock_entries = 4096;
/// The largest body of a control message (membership, barriers, heartbeats).
inline constexpr std::uint64_t max_control_bytes = std::uint64_t{16} << 20;

/// What a message asks or answers. Numbers are fixed: they are on the wire.
enum class message_kind : std::uint8_t {
    push = 1,          ///< worker → server: keys and values to aggregate
    pull = 2,          ///< worker → server: keys whose values are wanted
    push_reply = 3,    ///< server → worker: the push was applied (or `status` says why not)
    pull_reply = 4,    ///< server → worker: values in the order of the pull's keys
    control = 5,       ///< node ↔ manager: membership, barriers, heartbeats (body in values)
    control_reply = 6, ///< the answer to a `control` request
    clock = 7,         ///< worker → server: completed clocks on a key range, or leaving the clock
    clock_reply = 8,   ///< server → worker: the clock was recorded
    call = 9,          ///< worker → server: run a registered function on a key range (body)
    call_reply = 10,   ///< server → worker: the function's result (body), or why it failed
    /// server → server: an update the primary of its keys applied (a worker's push), for
    /// the replicas of its chain or a joining server taking the keys over; `receiver`
    /// names the primary and `clock` the update's clock. Answered by a `push_reply`.
    replica_update = 11,
    /// server → server: rows copied whole, replacing the receiver's: `width` is the
    /// table's width plus its optimizer state per key, and each row's values are followed
    /// by its state. With `flag_ordered`, the rows a clock changed (`clock` is that
    /// clock); otherwise rows of a full copy (a new replica, a joining server), ended by
    /// a transfer of no rows whose `clock` is the view the copy was made for. Answered by
    /// a `push_reply`.
    row_transfer = 12,
    /// server → joining server: the end of its copy, handing the partitions over (no
    /// keys). Answered by a `push_reply`.
    hand_over = 13,
};

[[nodiscard]] constexpr bool is_known(message_kind k) noexcept {
    return k >= message_kind::push && k <= message_kind::hand_over;
}
/// Whether `k` is sent by a server to a server: it must carry the job's server secret
/// (`message_header::secret`) and is judged by the view it was sent under.
[[nodiscard]] constexpr bool is_server_update(message_kind k) noexcept {
    return k == message_kind::replica_update || k == message_kind::row_transfer ||
           k == message_kind::hand_over;
}
/// Whether `k` changes a server's rows: a worker's push or a server's update. Each is
/// answered by a `push_reply`.
[[nodiscard]] constexpr bool is_push(message_kind k) noexcept {
    return k == message_kind::push || is_server_update(k);
}
[[nodiscard]] constexpr bool is_reply(message_kind k) noexcept {
    return k == message_kind::push_reply || k == message_kind::pull_reply ||
           k == message_kind::control_reply || k == message_kind::clock_reply ||
           k == message_kind::call_reply;
}
/// The kind of the reply that answers a request of kind `k` (a reply: `k` itself).
[[nodiscard]] constexpr message_kind reply_kind_of(message_kind k) noexcept {
    switch (k) {
    case message_kind::pull:
        return message_kind::pull_reply;
    case message_kind::control:
        return message_kind::control_reply;
    case message_kind::clock:
        return message_kind::clock_reply;
    case message_kind::call:
        return message_kind::call_reply;
    case message_kind::push:
    case message_kind::replica_update:
    case message_kind::row_transfer:
    case message_kind::hand_over:
        return message_kind::push_reply;
    default:
        return k;
    }
}

/// Whether a peer admitted with a reader's credential (`access::read_only`) may send a
/// message of kind `k`: pulls, replies and control messages (whose operations the
/// manager judges, `detail::read_only_may_send`). Pushes, clocks, calls and servers'
/// updates are refused with `errc::not_permitted` before they are looked at.
[[nodiscard]] constexpr bool read_only_may_send(message_kind k) noexcept {
    return k == message_kind::pull || k == message_kind::control || is_reply(k);
}

/// Bits of `message_header::flags`.
enum message_flag : std::uint8_t {
    /// push: hold it back until every live worker has completed its clock, then apply
    /// the pushes of that clock in worker order (`sequential`). row_transfer: the rows
    /// of one clock.
    flag_ordered = 1,
    /// clock: the worker leaves the clock (it no longer holds anybody back).
    flag_finish = 2,
    /// clock with `flag_finish`: on every table of the server, not only `table_id`.
    flag_all_tables = 4,
    /// push, pull, replica_update, row_transfer: the keys segment holds pairs
    /// `[begin, end)` of key runs, ascending and disjoint, standing for every key of each
    /// run (`key_count` keys in all); a range push or pull sends no per-key list.
    flag_key_runs = 8,
    /// pull, call: the worker takes a reply whose values are snappy-compressed, and the
    /// server compresses them where that pays (`server_options::compression`).
    flag_compress_reply = 16,
    /// push: sent again, to the new owner of its keys, after the server it went to
    /// failed; `receiver` names that server. An ordered push whose clock the new owner
    /// already received combined from that server is acknowledged and dropped.
    /// clock: the worker's newest tick again, sent once it has resent (after them, on
    /// the same link) what it retained when the keys' placement changed in view `view`;
    /// a server that took keys over answers ordered reads once every live worker's came.
    flag_resent = 128,
};

/// Every flag some kind defines: a header with another bit set is malformed.
inline constexpr std::uint8_t flag_known_mask = flag_ordered | flag_finish | flag_all_tables |
                                                flag_key_runs | flag_compress_reply | flag_resent;

/// Bits of `message_header::encoding`: how the payload segments were encoded on the way.
/// A receiver undoes every encoding (`wire::receive`) before anything reads the payload.
enum encoding_flag : std::uint8_t {
    /// The keys segment is a snappy block (its raw length inside, checked before use).
    encoding_keys_snappy = 1,
    /// The values segment is a snappy block.
    encoding_values_snappy = 2,
    /// push, pull: no keys segment; the keys are the list the sender stored on this
    /// connection as `key_list_id` (with digest `key_list_digest` and `key_count` keys).
    /// A receiver that does not hold that list leaves this bit set, and the server answers
    /// `errc::key_cache_miss`; the sender then sends the keys again.
    encoding_keys_cached = 4,
    /// push, pull: the keys segment holds the keys; the receiver keeps them on this
    /// connection as list `key_list_id` (their digest is `key_list_digest`).
    encoding_keys_store = 8,
};

inline constexpr std::uint8_t encoding_snappy_mask = encoding_keys_snappy | encoding_values_snappy;
inline constexpr std::uint8_t encoding_known_mask =
    encoding_keys_snappy | encoding_values_snappy | encoding_keys_cached | encoding_keys_store;

/// `message_header::worker` of a request that is not part of any worker's clock.
inline constexpr std::uint32_t no_worker = 0xFFFFFFFF;

/// The scalar types of keys and values on the wire.
enum class scalar_type : std::uint8_t { none = 0, u32 = 1, u64 = 2, f32 = 3, f64 = 4 };

/// The C++ type a scalar type stands for, for messages: "std::uint32_t", "float"...
[[nodiscard]] constexpr std::string_view type_name(scalar_type t) noexcept {
    switch (t) {
    case scalar_type::u32:
        return "std::uint32_t";
    case scalar_type::u64:
        return "std::uint64_t";
    case scalar_type::f32:
        return "float";
    case scalar_type::f64:
        return "double";
    case scalar_type::none:
        break;
    }
    return "no type";
}

[[nodiscard]] constexpr std::size_t size_of(scalar_type t) noexcept {
    switch (t) {
    case scalar_type::u32:
    case scalar_type::f32:
        return 4;
    case scalar_type::u64:
    case scalar_type::f64:
        return 8;
    case scalar_type::none:
        return 0;
    }
    return 0;
}

template <typename T>
inline constexpr scalar_type scalar_type_of = scalar_type::none;
template <>
inline constexpr scalar_type scalar_type_of<std::uint32_t> = scalar_type::u32;
template <>
inline constexpr scalar_type scalar_type_of<std::uint64_t> = scalar_type::u64;
template <>
inline constexpr scalar_type scalar_type_of<float> = scalar_type::f32;
template <>
inline constexpr scalar_type scalar_type_of<double> = scalar_type::f64;

/// Value types a table may hold.
template <typename T>
concept wire_value = std::same_as<T, float> || std::same_as<T, double>;

/// Key types that have a wire encoding.
template <typename T>
concept wire_key = key<T> &&(std::same_as<T, std::uint32_t> || std::same_as<T, std::uint64_t>);

/// One worker's clock on one key range (see `petrel::clock_entry`).
using clock_entry = petrel::clock_entry;

/// Index of each payload segment in `message_header::segment_bytes`.
enum segment : std::size_t { keys_segment = 0, values_segment = 1, lengths_segment = 2 };
inline constexpr std::size_t segment_count = 3;

/// The header of every message, as the receiver's code reads it.
///
/// On the wire a header is an envelope and a body that carries only the fields away
/// from their defaults and allowed for its kind (`detail/header_codec.hpp`). The payload
/// (keys, values, optional per-key lengths) follows as raw bytes whose sizes are in
/// `segment_bytes`; see `frame.hpp` for the frame layout and validation.
struct message_header {
    std::uint32_t magic = wire::magic;
    /// The sender's protocol version (`protocol_version`; a received header holds the
    /// version its sender wrote).
    std::uint16_t version = protocol_version;
    message_kind kind = message_kind::push;
    std::uint8_t flags = 0;
    std::uint32_t sender = 0;
    std::uint32_t receiver = 0;
    std::uint64_t request_id = 0;
    std::uint32_t table_id = 0;
    scalar_type key_type = scalar_type::u64;
    scalar_type value_type = scalar_type::f32;
    /// Values per key (1 for scalars, the row length for embeddings).
    std::uint32_t width = 1;
    /// On replies: a `petrel::errc` value, 0 when the request succeeded.
    std::uint32_t status = 0;
    /// Every key of the message lies in `[range_begin, range_end)`.
    std::uint64_t range_begin = 0;
    std::uint64_t range_end = 0;
    std::uint64_t key_count = 0;
    /// The sender's worker index in the clocks of the table (`no_worker` for none).
    std::uint32_t worker = no_worker;
    /// push: the worker's clock when it pushed; pull and call: the clocks every live
    /// worker must have completed on the range before the server answers; clock: the
    /// clocks the worker has now completed.
    std::uint64_t clock = 0;
    /// `encoding_flag` bits: how the segments travel (compressed, keys by reference).
    std::uint8_t encoding = 0;
    /// With `encoding_keys_cached` or `encoding_keys_store`: the sender's number for the
    /// key list on this connection (never 0) and the XXH64 digest of its bytes.
    std::uint64_t key_list_id = 0;
    std::uint64_t key_list_digest = 0;
    /// The version of the sender's membership view (0 without a cluster): a server
    /// holds back a replica update sent under a newer view than its own until that view
    /// reaches it.
    std::uint64_t view = 0;
    /// push, replica_update: the sender's number for this update, unique over the job (a
    /// random start per store, then one more per push; 0 for none), kept by the primary
    /// and its replicas so that a push resent after a failover is applied once.
    std::uint64_t update_id = 0;
    /// replica_update, row_transfer, hand_over: the job's server secret, known only to
    /// the servers of the job (`member::server_secret`).
    std::uint64_t secret = 0;
    /// On replies: the clocks of the range (every live worker's, per key range).
    std::vector<clock_entry> clocks;
    std::array<std::uint64_t, segment_count> segment_bytes{};

    friend bool operator==(const message_header&, const message_header&) = default;
};

} // namespace petrel::wire
