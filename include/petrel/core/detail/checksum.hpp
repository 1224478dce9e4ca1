// Petrel: a 64-bit checksum of byte streams (XXH64, from xxHash), for checkpoint files and
// key lists.
#pragma once

// xxHash used header-only: its functions are inlined here under names of their own
// (XXH_INLINE_...), so a program may also link libxxhash or include it otherwise.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#define PETREL_XXH_INLINE_ALL_DEFINED
#endif
#include <xxhash.h>
#ifdef PETREL_XXH_INLINE_ALL_DEFINED
#undef XXH_INLINE_ALL
#undef PETREL_XXH_INLINE_ALL_DEFINED
#endif

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
    checksum64() noexcept { XXH64_reset(&state_, 0); }

    /// Adds `bytes` to the stream.
    void update(std::span<const std::byte> bytes) noexcept {
        if (!bytes.empty()) {
            XXH64_update(&state_, bytes.data(), bytes.size());
        }
    }

    /// The hash of every byte added so far; the stream may go on afterwards.
    [[nodiscard]] std::uint64_t digest() const noexcept { return XXH64_digest(&state_); }

private:
    XXH64_state_t state_;
};

/// The XXH64 hash (seed 0) of `bytes`.
[[nodiscard]] inline std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
    return XXH64(bytes.data(), bytes.size(), 0);
}

} // namespace petrel::detail
