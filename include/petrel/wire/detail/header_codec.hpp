// Petrel: the encoding of a frame's envelope and header body (wire protocol 6).
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/wire/header.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <system_error>
#include <type_traits>
#include <utility>

namespace petrel::wire::detail {

// A frame starts with an envelope:
//
//   magic (u16, "PT") | major (u8) | minor (u8) | kind (u8) | body bytes (varint)
//   | payload bytes (varint)
//
// and a header body: a presence mask (varint), then each field whose bit is set, in bit
// order, then zero bytes of padding, if any (see `wire::aligned_payload_bytes`). A field
// at its default value is left out. Unsigned numbers are LEB128 varints
// (7 bits per byte, low first, at most 10 bytes); the three random 64-bit fields (an
// update id, a key list digest and the server secret) are 8 little-endian bytes.
// Compatibility between minor versions rests on two rules: a newer minor adds fields
// only with new, higher bits, and every field it adds is a varint. A reader skips the
// varints of bits it does not know and takes a missing field as its default. A peer of
// another major version is refused.

/// The fields of a header body, by presence bit. Numbers are fixed: they are on the wire.
enum class header_field : unsigned {
    request_id = 0,
    keys_bytes, ///< segment sizes
    values_bytes,
    key_count,
    range_begin,
    range_length, ///< range_end - range_begin, modulo 2^64
    sender,
    receiver,
    worker, ///< absent: `no_worker`
    clock,
    clocks, ///< count, then per entry: begin and end as zigzag differences from
            ///< the range's begin and end, the worker and the clock
    status,
    update_id, ///< 8 bytes
    view,
    table_id,
    width, ///< absent: 1
    types, ///< key type << 4 | value type; absent: u64 keys, f32 values
    flags,
    encoding,
    key_list_id,
    key_list_digest, ///< 8 bytes
    lengths_bytes,
    secret, ///< 8 bytes
};
inline constexpr unsigned header_field_count = 23;

[[nodiscard]] constexpr std::uint64_t field_bit(header_field f) noexcept {
    return std::uint64_t{1} << static_cast<unsigned>(f);
}

/// The fields each kind may carry: a status and clock entries only on replies (and a
/// status on control messages, whose failures travel both ways); an update id only on
/// a worker's push or a replica update; a key list only on a worker's push or pull; the
/// server secret only on a server's update. A body with a field its kind may not carry
/// is malformed.
[[nodiscard]] constexpr std::uint64_t allowed_fields(message_kind k) noexcept {
    constexpr std::uint64_t all = (std::uint64_t{1} << header_field_count) - 1;
    std::uint64_t m = all;
    if (!is_reply(k)) {
        m &= ~field_bit(header_field::clocks);
        if (k != message_kind::control) {
            m &= ~field_bit(header_field::status);
        }
    }
    if (k != message_kind::push && k != message_kind::replica_update) {
        m &= ~field_bit(header_field::update_id);
    }
    if (!is_server_update(k)) {
        m &= ~field_bit(header_field::secret);
    }
    if (k != message_kind::push && k != message_kind::pull) {
        m &= ~(field_bit(header_field::key_list_id) | field_bit(header_field::key_list_digest));
    }
    return m;
}

inline constexpr std::uint16_t envelope_magic = 0x5450; // "PT", little-endian
/// magic, major, minor, kind: the fixed part of the envelope.
inline constexpr std::size_t envelope_fixed_bytes = 5;
/// The longest varint: 64 bits, 7 per byte.
inline constexpr std::size_t max_varint_bytes = 10;
/// The longest envelope: its fixed part and two varints.
inline constexpr std::size_t max_envelope_bytes = envelope_fixed_bytes + 2 * max_varint_bytes;

[[nodiscard]] constexpr std::size_t varint_bytes(std::uint64_t v) noexcept {
    return (static_cast<std::size_t>(std::bit_width(v | 1)) + 6) / 7;
}

[[nodiscard]] constexpr std::uint64_t zigzag(std::uint64_t difference) noexcept {
    return (difference << 1) ^ (0 - (difference >> 63));
}
[[nodiscard]] constexpr std::uint64_t unzigzag(std::uint64_t z) noexcept {
    return (z >> 1) ^ (0 - (z & 1));
}

[[nodiscard]] constexpr bool is_fixed64(header_field f) noexcept {
    return f == header_field::update_id || f == header_field::key_list_digest ||
           f == header_field::secret;
}

/// The member of `h` that field `F` travels in, for the fields that are one member each
/// (all but `range_length` and `types`, which are encoded from two, and `clocks`, which
/// is read and written on its own): the one table of fields and members.
template <header_field F, typename Header>
[[nodiscard]] constexpr auto& member_of(Header& h) noexcept {
    using enum header_field;
    static_assert(F != range_length && F != types && F != clocks);
    if constexpr (F == request_id) {
        return h.request_id;
    } else if constexpr (F == keys_bytes) {
        return h.segment_bytes[keys_segment];
    } else if constexpr (F == values_bytes) {
        return h.segment_bytes[values_segment];
    } else if constexpr (F == key_count) {
        return h.key_count;
    } else if constexpr (F == range_begin) {
        return h.range_begin;
    } else if constexpr (F == sender) {
        return h.sender;
    } else if constexpr (F == receiver) {
        return h.receiver;
    } else if constexpr (F == worker) {
        return h.worker;
    } else if constexpr (F == clock) {
        return h.clock;
    } else if constexpr (F == status) {
        return h.status;
    } else if constexpr (F == update_id) {
        return h.update_id;
    } else if constexpr (F == view) {
        return h.view;
    } else if constexpr (F == table_id) {
        return h.table_id;
    } else if constexpr (F == width) {
        return h.width;
    } else if constexpr (F == flags) {
        return h.flags;
    } else if constexpr (F == encoding) {
        return h.encoding;
    } else if constexpr (F == key_list_id) {
        return h.key_list_id;
    } else if constexpr (F == key_list_digest) {
        return h.key_list_digest;
    } else if constexpr (F == lengths_bytes) {
        return h.segment_bytes[lengths_segment];
    } else {
        static_assert(F == secret, "every field but the three above is one member");
        return h.secret;
    }
}

/// The value scalar field `F` of `h` is encoded from (every field but `clocks`).
template <header_field F>
[[nodiscard]] constexpr std::uint64_t field_value(const message_header& h) noexcept {
    if constexpr (F == header_field::range_length) {
        return h.range_end - h.range_begin;
    } else if constexpr (F == header_field::types) {
        return static_cast<std::uint64_t>(h.key_type) << 4 |
               static_cast<std::uint64_t>(h.value_type);
    } else {
        return member_of<F>(h);
    }
}

/// The value of each field when it is left out: that of a default `message_header`.
[[nodiscard]] constexpr std::uint64_t default_value(header_field f) noexcept {
    switch (f) {
    case header_field::worker:
        return no_worker;
    case header_field::width:
        return 1;
    case header_field::types:
        return static_cast<std::uint64_t>(scalar_type::u64) << 4 |
               static_cast<std::uint64_t>(scalar_type::f32);
    default:
        return 0;
    }
}

/// Calls `f(std::integral_constant<header_field, F>{})` for every field, in bit order;
/// each call knows its field at compile time.
template <typename F>
constexpr void for_each_field(F&& f) {
    [&]<unsigned... I>(std::integer_sequence<unsigned, I...>) {
        (f(std::integral_constant<header_field, static_cast<header_field>(I)>{}), ...);
    }
    (std::make_integer_sequence<unsigned, header_field_count>{});
}

/// Sets scalar field `F` of `h` from its decoded value; false where the value does not
/// fit. `range_begin` precedes `range_length` on the wire.
template <header_field F>
[[nodiscard]] constexpr bool set_field(message_header& h, std::uint64_t v) noexcept {
    if constexpr (F == header_field::range_length) {
        h.range_end = h.range_begin + v;
        return true;
    } else if constexpr (F == header_field::types) {
        if (v > 0xFF) {
            return false;
        }
        h.key_type = static_cast<scalar_type>(v >> 4);
        h.value_type = static_cast<scalar_type>(v & 0xF);
        return true;
    } else {
        auto& out = member_of<F>(h);
        using T = std::remove_reference_t<decltype(out)>;
        if (v > std::uint64_t{static_cast<T>(~T{})}) {
            return false;
        }
        out = static_cast<T>(v);
        if constexpr (F == header_field::range_begin) {
            h.range_end = v; // an empty range unless its length follows
        }
        return true;
    }
}

/// Sets field `f` of `h` from its decoded value; false where the value does not fit, and
/// for `clocks`.
[[nodiscard]] inline bool set_field(message_header& h, header_field f, std::uint64_t v) noexcept {
    bool ok = false;
    for_each_field([&](auto field) {
        if constexpr (decltype(field)::value != header_field::clocks) {
            if (decltype(field)::value == f) {
                ok = set_field<decltype(field)::value>(h, v);
            }
        }
    });
    return ok;
}

[[nodiscard]] inline std::size_t clock_entry_bytes(const message_header& h,
                                                   const clock_entry& c) noexcept {
    return varint_bytes(zigzag(c.begin - h.range_begin)) +
           varint_bytes(zigzag(c.end - h.range_end)) + varint_bytes(c.worker) +
           varint_bytes(c.clock);
}

/// The presence mask of `h` (a bit for every field away from its default) and the bytes
/// of its header body, in one pass.
struct body_plan {
    std::uint64_t mask = 0;
    std::size_t bytes = 0;
};

[[nodiscard]] inline body_plan plan_body(const message_header& h) noexcept {
    std::uint64_t mask = 0;
    std::size_t n = 0;
    for_each_field([&](auto f) {
        constexpr header_field field = decltype(f)::value;
        constexpr unsigned bit = static_cast<unsigned>(field);
        if constexpr (field == header_field::clocks) {
            if (!h.clocks.empty()) {
                mask |= std::uint64_t{1} << bit;
                n += varint_bytes(h.clocks.size());
                for (const auto& c : h.clocks) {
                    n += clock_entry_bytes(h, c);
                }
            }
        } else {
            const std::uint64_t v = field_value<field>(h);
            if (v != default_value(field)) { // most fields are not: predicted well
                mask |= std::uint64_t{1} << bit;
                if constexpr (is_fixed64(field)) {
                    n += 8;
                } else {
                    n += varint_bytes(v);
                }
            }
        }
    });
    return {mask, n + varint_bytes(mask)};
}

/// The presence mask of `h`: a bit for every field away from its default.
[[nodiscard]] inline std::uint64_t present_fields(const message_header& h) noexcept {
    return plan_body(h).mask;
}

/// Bytes of the header body of `h` (mask and fields).
[[nodiscard]] inline std::size_t body_bytes(const message_header& h) noexcept {
    return plan_body(h).bytes;
}

/// Writes into memory the caller sized.
class varint_writer {
public:
    explicit varint_writer(std::byte* at) noexcept : at_(at) {}
    void varint(std::uint64_t v) noexcept {
        while (v >= 0x80) {
            *at_++ = static_cast<std::byte>(v | 0x80);
            v >>= 7;
        }
        *at_++ = static_cast<std::byte>(v);
    }
    void fixed64(std::uint64_t v) noexcept {
        std::memcpy(at_, &v, 8);
        at_ += 8;
    }
    void byte(std::uint8_t v) noexcept { *at_++ = static_cast<std::byte>(v); }
    [[nodiscard]] std::byte* position() const noexcept { return at_; }

private:
    std::byte* at_;
};

/// Reads from a span; every read says whether the bytes held what it wanted.
class varint_reader {
public:
    explicit varint_reader(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}
    /// False where the bytes run out or the number takes more than 64 bits. Inlined: a
    /// header body is mostly one-byte numbers.
    [[nodiscard, gnu::always_inline]] bool varint(std::uint64_t& out) noexcept {
        if (at_ < bytes_.size() && (std::to_integer<unsigned>(bytes_[at_]) & 0x80) == 0) {
            out = std::to_integer<std::uint64_t>(bytes_[at_++]); // one byte: most fields
            return true;
        }
        return long_varint(out);
    }
    [[nodiscard]] bool fixed64(std::uint64_t& out) noexcept {
        if (remaining() < 8) {
            return false;
        }
        std::memcpy(&out, bytes_.data() + at_, 8);
        at_ += 8;
        return true;
    }
    [[nodiscard]] bool byte(std::uint8_t& out) noexcept {
        if (at_ == bytes_.size()) {
            return false;
        }
        out = std::to_integer<std::uint8_t>(bytes_[at_++]);
        return true;
    }
    [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - at_; }
    [[nodiscard]] std::size_t position() const noexcept { return at_; }

private:
    [[nodiscard]] bool long_varint(std::uint64_t& out) noexcept {
        std::uint64_t v = 0;
        for (unsigned shift = 0; shift < 7 * max_varint_bytes; shift += 7) {
            if (at_ == bytes_.size()) {
                return false;
            }
            const auto b = std::to_integer<std::uint64_t>(bytes_[at_++]);
            if (shift == 63 && b > 1) {
                return false;
            }
            v |= (b & 0x7F) << shift;
            if ((b & 0x80) == 0) {
                out = v;
                return true;
            }
        }
        return false;
    }

    std::span<const std::byte> bytes_;
    std::size_t at_ = 0;
};

/// Writes the header body of `h` whose presence mask is `mask` at `w`
/// (`plan_body(h)` gives both).
inline void write_body(const message_header& h, std::uint64_t mask, varint_writer& w) noexcept {
    w.varint(mask);
    for_each_field([&](auto f) {
        constexpr header_field field = decltype(f)::value;
        if ((mask >> static_cast<unsigned>(field) & 1) == 0) {
            return;
        }
        if constexpr (is_fixed64(field)) {
            w.fixed64(field_value<field>(h));
        } else if constexpr (field == header_field::clocks) {
            w.varint(h.clocks.size());
            for (const auto& c : h.clocks) {
                w.varint(zigzag(c.begin - h.range_begin));
                w.varint(zigzag(c.end - h.range_end));
                w.varint(c.worker);
                w.varint(c.clock);
            }
        } else {
            w.varint(field_value<field>(h));
        }
    });
}

/// Writes the header body of `h` at `w` (`body_bytes(h)` bytes).
inline void write_body(const message_header& h, varint_writer& w) noexcept {
    write_body(h, present_fields(h), w);
}

/// Reads `count` clock entries of `h` (whose range precedes them). An entry takes at
/// least 4 bytes: the count is checked against the bytes left before anything is
/// allocated.
[[nodiscard]] inline bool read_clocks(varint_reader& r, message_header& h, std::uint64_t count) {
    if (count == 0 || count > max_clock_entries || count > r.remaining() / 4) {
        return false;
    }
    try {
        h.clocks.resize(static_cast<std::size_t>(count));
    } catch (const std::exception&) {
        return false;
    }
    for (auto& c : h.clocks) {
        std::uint64_t begin = 0;
        std::uint64_t end = 0;
        std::uint64_t worker = 0;
        if (!r.varint(begin) || !r.varint(end) || !r.varint(worker) || !r.varint(c.clock) ||
            worker > 0xFFFFFFFF) {
            return false;
        }
        c.begin = h.range_begin + unzigzag(begin);
        c.end = h.range_end + unzigzag(end);
        c.worker = static_cast<std::uint32_t>(worker);
    }
    return true;
}

/// Reads a header body of kind `h.kind` from exactly the bytes of `r`: fields this
/// version does not know (a newer minor's) are skipped, fields the kind may not carry
/// and values that do not fit are refused. Never allocates more than
/// `max_clock_entries` clock entries, nor more than the bytes present could hold.
[[nodiscard]] inline std::error_code read_body(varint_reader& r, message_header& h) {
    std::uint64_t mask = 0;
    if (!r.varint(mask)) {
        return errc::malformed_header;
    }
    constexpr std::uint64_t known = (std::uint64_t{1} << header_field_count) - 1;
    if ((mask & known & ~allowed_fields(h.kind)) != 0) {
        return errc::malformed_header;
    }
    bool ok = true;
    for_each_field([&](auto f) {
        constexpr header_field field = decltype(f)::value;
        if (!ok || (mask >> static_cast<unsigned>(field) & 1) == 0) {
            return;
        }
        std::uint64_t v = 0;
        if constexpr (is_fixed64(field)) {
            ok = r.fixed64(v) && set_field<field>(h, v);
        } else if constexpr (field == header_field::clocks) {
            ok = r.varint(v) && read_clocks(r, h, v);
        } else {
            ok = r.varint(v) && set_field<field>(h, v);
        }
    });
    if (!ok) {
        return errc::malformed_header;
    }
    // Fields of a newer minor version: varints to skip.
    for (std::uint64_t rest = mask >> header_field_count; rest != 0; rest &= rest - 1) {
        std::uint64_t v = 0;
        if (!r.varint(v)) {
            return errc::malformed_header;
        }
    }
    // Then only zero bytes: the padding that aligns a large frame's payload.
    std::uint8_t pad = 0;
    while (r.remaining() != 0) {
        if (!r.byte(pad) || pad != 0) {
            return errc::malformed_header;
        }
    }
    return {};
}

} // namespace petrel::wire::detail
