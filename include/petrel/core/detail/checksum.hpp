// Petrel: a 64-bit checksum of byte streams (XXH64, from xxHash), for checkpoint files and
// key lists.
#pragma once

#include <petrel/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace petrel::detail {

/// The XXH64 hash (seed 0) of a byte stream that arrives in pieces of any size.
///
/// The result equals `xxhsum -H1` of the same bytes, so a checkpoint file can be checked
/// with standard tools. It detects accidental corruption (truncation, bit flips, mixed-up
/// files); it is not a cryptographic hash.
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe.
class checksum64 {
public:
    PETREL_DECL checksum64() noexcept;

    /// Adds `bytes` to the stream.
    PETREL_DECL void update(std::span<const std::byte> bytes) noexcept;

    /// The hash of every byte added so far; the stream may go on afterwards.
    [[nodiscard]] PETREL_DECL std::uint64_t digest() const noexcept;

private:
    /// The bytes of xxHash's `XXH64_state_t`, kept here so that only the bodies
    /// (core/impl/checksum.ipp) include <xxhash.h>, whose macros then stay out of the
    /// units of a program compiled against the compiled library.
    static constexpr std::size_t state_bytes = 88;
    alignas(std::uint64_t) std::byte state_[state_bytes];
};

/// The XXH64 hash (seed 0) of `bytes`.
[[nodiscard]] PETREL_DECL std::uint64_t checksum(std::span<const std::byte> bytes) noexcept;

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/core/impl/checksum.ipp>
#endif
