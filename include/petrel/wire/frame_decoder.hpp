// Petrel: cutting a byte stream into validated messages.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/detail/byte_budget.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/frame.hpp>
#include <petrel/wire/key_cache.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace petrel::wire {

/// Cuts a byte stream into validated messages.
///
/// Incremental and socket-free: the owner reads into `buffer()` and reports how much
/// arrived with `consume()`. Small frames are parsed from one staging buffer, several
/// per read; the payload of a large frame is read straight into a pooled buffer of its
/// exact size, allocated only after the envelope and the header were checked against
/// the limits. After an error the decoder stays failed: close the connection.
///
/// @par Thread Safety
/// Not thread safe: one decoder per connection, used by its read loop.
class frame_decoder {
public:
    frame_decoder(wire_limits limits, std::shared_ptr<buffer_pool> pool)
        : limits_(limits), pool_(std::move(pool)), key_cache_(limits.max_key_cache_bytes),
          staging_(std::max<std::size_t>(64 * 1024,
                                         detail::max_envelope_bytes + limits.max_header_bytes)) {}

    /// Draws the payloads of frames larger than 512 bytes from `budget`, shared with
    /// other decoders: a frame whose share is not free now is not received until it is
    /// (`waiting_for_budget()`), and `wake` is called (on any thread) when bytes were given
    /// back, for a later `consume(0, ...)` to try again. A frame's share is given back once
    /// its message was handed over (or the decoder fails or goes). A payload larger than
    /// the whole budget is refused with `errc::frame_too_large`.
    void share_budget(std::shared_ptr<petrel::detail::byte_budget> budget,
                      std::function<void()> wake) {
        budget_ = std::move(budget);
        wake_ = std::move(wake);
    }

    /// Whether the last `consume` stopped before a frame's payload, whose share of the
    /// budget is not free yet. `buffer()` must not be read into before a `consume(0, ...)`
    /// got it.
    [[nodiscard]] bool waiting_for_budget() const noexcept { return waiting_; }

    /// Draws the bytes of the key lists the peer asks to keep from `budget` as well,
    /// shared with other decoders (see `key_cache_receiver::share_budget`).
    void share_key_cache_budget(std::shared_ptr<petrel::detail::byte_budget> budget) noexcept {
        key_cache_.share_budget(std::move(budget));
    }

    /// Gives the share of the frame being received back now (its connection closed).
    void drop_budget_share() noexcept { share_.reset(); }

    /// Where the next bytes from the stream go. Never empty unless the decoder failed.
    [[nodiscard]] std::span<std::byte> buffer() noexcept {
        if (failed_) {
            return {};
        }
        if (in_body_) {
            return body_.span().subspan(body_filled_);
        }
        return std::span<std::byte>(staging_).subspan(end_);
    }

    /// Accounts for `n` bytes just written into `buffer()` and calls
    /// `on_message(message&&)` for every frame completed. Returns the first error.
    template <typename OnMessage>
    std::error_code consume(std::size_t n, OnMessage&& on_message) {
        return consume(n, on_message, [] { return false; });
    }

    /// As above; after each frame, when `hold()` is true, stops with the frames still
    /// staged unhandled (`held()`): a later `consume(0, ...)` hands them over, and
    /// `buffer()` must not be read into before that.
    template <typename OnMessage, typename Hold>
    std::error_code consume(std::size_t n, OnMessage&& on_message, Hold&& hold) {
        if (failed_) {
            return failed_;
        }
        held_ = false;
        waiting_ = false;
        if (in_body_) {
            body_filled_ += n;
        } else {
            end_ += n;
        }
        for (;;) {
            if (in_body_) {
                if (body_filled_ < body_.size()) {
                    begin_ = end_ = 0; // every staged byte went into the body
                    return {};
                }
                in_body_ = false;
                if (auto ec = finish(on_message)) {
                    return fail(ec);
                }
                if (end_ > begin_ && hold()) {
                    held_ = true;
                    break;
                }
                continue;
            }
            const std::size_t avail = end_ - begin_;
            frame_envelope envelope;
            if (auto ec = parse_envelope({staging_.data() + begin_, avail}, limits_, envelope)) {
                peer_version_ = envelope.version;
                return fail(ec);
            }
            if (envelope.size == 0 || avail - envelope.size < envelope.body_bytes) {
                break;
            }
            current_ = message{};
            if (auto ec =
                    decode_body({staging_.data() + begin_ + envelope.size, envelope.body_bytes},
                                envelope, current_.header)) {
                return fail(ec);
            }
            if (auto ec = check_header(current_.header, envelope.payload_bytes)) {
                return fail(ec);
            }
            const std::uint64_t payload = envelope.payload_bytes;
            if (budget_ && payload > small_body_bytes) {
                if (payload > budget_->limit()) {
                    return fail(errc::frame_too_large);
                }
                if (!budget_->take_or_wait(payload, wake_)) {
                    waiting_ = true; // the header is read again when asked again
                    current_ = message{};
                    break;
                }
                share_ = petrel::detail::budget_share(budget_, payload);
            }
            begin_ += envelope.size + envelope.body_bytes;
            current_.received_head_bytes = envelope.size + envelope.body_bytes;
            body_ = payload == 0                  ? pooled_buffer{}
                    : payload <= small_body_bytes ? small_body(payload)
                                                  : pool_->acquire(payload);
            const std::size_t staged = std::min<std::size_t>(end_ - begin_, payload);
            if (staged) {
                std::memcpy(body_.data(), staging_.data() + begin_, staged);
            }
            begin_ += staged;
            body_filled_ = staged;
            in_body_ = true;
        }
        // Keep the unparsed tail at the front, so buffer() has room for a whole header.
        if (begin_ == end_) {
            begin_ = end_ = 0;
        } else if (begin_ > 0 &&
                   staging_.size() - end_ < detail::max_envelope_bytes + limits_.max_header_bytes) {
            std::memmove(staging_.data(), staging_.data() + begin_, end_ - begin_);
            end_ -= begin_;
            begin_ = 0;
        }
        return {};
    }

    [[nodiscard]] std::error_code error() const noexcept { return failed_; }

    /// Whether the last `consume` stopped at its `hold()` with bytes still staged.
    [[nodiscard]] bool held() const noexcept { return held_; }

    /// Whether part of a frame arrived and the rest has not yet.
    [[nodiscard]] bool mid_frame() const noexcept { return in_body_ || end_ > begin_; }

    /// The payload bytes of the frame being received, once its header is whole (else 0).
    [[nodiscard]] std::size_t payload_bytes() const noexcept { return in_body_ ? body_.size() : 0; }

    /// What the error says in words, with the versions of both sides where the peer
    /// speaks another major version of the protocol.
    [[nodiscard]] std::string error_text() const {
        if (failed_ == errc::unsupported_version) {
            return failed_.message() + " (the peer speaks wire protocol " +
                   version_text(peer_version_) + ", this node " + version_text(protocol_version) +
                   ")";
        }
        return failed_.message();
    }

    /// The key lists this connection's peer asked to keep.
    [[nodiscard]] const key_cache_receiver& key_cache() const noexcept { return key_cache_; }

private:
    /// Payloads up to this size get a buffer of their own size (one allocation, with its
    /// count) rather than a pooled one (whose smallest class is 4 KiB, behind a lock).
    static constexpr std::uint64_t small_body_bytes = 512;

    static pooled_buffer small_body(std::uint64_t n) {
        auto bytes = std::make_shared_for_overwrite<std::byte[]>(n);
        std::byte* p = bytes.get();
        return {std::shared_ptr<std::byte>(std::move(bytes), p), n};
    }

    template <typename OnMessage>
    std::error_code finish(OnMessage& on_message) {
        std::uint64_t offset = 0;
        for (std::size_t i = 0; i < segment_count; ++i) {
            const auto n = current_.header.segment_bytes[i];
            current_.segments[i] = n ? body_.share(offset, n) : shared_bytes{};
            offset += padded(n);
        }
        body_ = {};
        if (auto ec = receive(current_, limits_, *pool_, &key_cache_)) {
            return ec;
        }
        on_message(std::move(current_));
        current_ = message{};
        share_.reset();
        return {};
    }

    std::error_code fail(std::error_code ec) {
        failed_ = ec;
        body_ = {};
        current_ = message{};
        share_.reset();
        return ec;
    }

    wire_limits limits_;
    std::shared_ptr<buffer_pool> pool_;
    key_cache_receiver key_cache_;
    std::vector<std::byte> staging_;
    std::size_t begin_ = 0;
    std::size_t end_ = 0;
    bool in_body_ = false;
    bool held_ = false;
    bool waiting_ = false;
    std::shared_ptr<petrel::detail::byte_budget> budget_;
    std::function<void()> wake_;
    petrel::detail::budget_share share_; // the payload's bytes, while it is received
    pooled_buffer body_;
    std::size_t body_filled_ = 0;
    message current_;
    std::error_code failed_;
    std::uint16_t peer_version_ = 0;
};

} // namespace petrel::wire
