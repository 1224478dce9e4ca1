// Petrel: a 64-bit checksum of byte streams (XXH64), for checkpoint files and key lists.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace petrel::detail {

static_assert(std::endian::native == std::endian::little,
              "Petrel's checksums read little-endian words; big-endian hosts are not supported");

/// The XXH64 hash (seed 0) of a byte stream that arrives in pieces of any size.
///
/// Reads 64-bit words, four independent lanes of them per 32-byte stripe, so it runs at
/// memory speed. The result equals `xxhsum -H1` of the same bytes, so a checkpoint file
/// can be checked with standard tools. It detects accidental corruption (truncation, bit
/// flips, mixed-up files); it is not a cryptographic hash.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe.
class checksum64 {
public:
    /// Adds `bytes` to the stream.
    void update(std::span<const std::byte> bytes) noexcept {
        std::size_t n = bytes.size();
        if (n == 0) {
            return;
        }
        const std::byte* p = bytes.data();
        total_ += n;
        if (buffered_ + n < stripe_bytes) {
            std::memcpy(buffer_.data() + buffered_, p, n);
            buffered_ += n;
            return;
        }
        if (buffered_ > 0) {
            const std::size_t fill = stripe_bytes - buffered_;
            std::memcpy(buffer_.data() + buffered_, p, fill);
            stripe(buffer_.data());
            p += fill;
            n -= fill;
            buffered_ = 0;
        }
        for (; n >= stripe_bytes; p += stripe_bytes, n -= stripe_bytes) {
            stripe(p);
        }
        if (n > 0) {
            std::memcpy(buffer_.data(), p, n);
        }
        buffered_ = n;
    }

    /// The hash of every byte added so far; the stream may go on afterwards.
    [[nodiscard]] std::uint64_t digest() const noexcept {
        std::uint64_t h = 0;
        if (total_ >= stripe_bytes) {
            h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) +
                std::rotl(lanes_[3], 18);
            for (const auto lane : lanes_) {
                h = (h ^ round(0, lane)) * prime1 + prime4;
            }
        } else {
            h = prime5;
        }
        h += total_;
        const std::byte* p = buffer_.data();
        std::size_t n = buffered_;
        for (; n >= 8; p += 8, n -= 8) {
            h ^= round(0, load<std::uint64_t>(p));
            h = std::rotl(h, 27) * prime1 + prime4;
        }
        if (n >= 4) {
            h ^= std::uint64_t{load<std::uint32_t>(p)} * prime1;
            h = std::rotl(h, 23) * prime2 + prime3;
            p += 4;
            n -= 4;
        }
        for (; n > 0; ++p, --n) {
            h ^= std::uint64_t{std::to_integer<std::uint8_t>(*p)} * prime5;
            h = std::rotl(h, 11) * prime1;
        }
        h ^= h >> 33;
        h *= prime2;
        h ^= h >> 29;
        h *= prime3;
        h ^= h >> 32;
        return h;
    }

private:
    static constexpr std::size_t stripe_bytes = 32;
    static constexpr std::uint64_t prime1 = 0x9E3779B185EBCA87u;
    static constexpr std::uint64_t prime2 = 0xC2B2AE3D27D4EB4Fu;
    static constexpr std::uint64_t prime3 = 0x165667B19E3779F9u;
    static constexpr std::uint64_t prime4 = 0x85EBCA77C2B2AE63u;
    static constexpr std::uint64_t prime5 = 0x27D4EB2F165667C5u;

    template <typename T>
    static T load(const std::byte* p) noexcept {
        T v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }

    static constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t word) noexcept {
        return std::rotl(acc + word * prime2, 31) * prime1;
    }

    void stripe(const std::byte* p) noexcept {
        for (std::size_t i = 0; i < lanes_.size(); ++i) {
            lanes_[i] = round(lanes_[i], load<std::uint64_t>(p + 8 * i));
        }
    }

    std::array<std::uint64_t, 4> lanes_{prime1 + prime2, prime2, 0, 0 - prime1};
    std::array<std::byte, stripe_bytes> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t total_ = 0;
};

/// The XXH64 hash (seed 0) of `bytes`: `checksum64` fed them in one piece.
[[nodiscard]] inline std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
    checksum64 h;
    h.update(bytes);
    return h.digest();
}

} // namespace petrel::detail
