// Petrel: XXH64 through xxHash (see <petrel/core/detail/checksum.hpp>).
#ifndef PETREL_CORE_IMPL_CHECKSUM_IPP
#define PETREL_CORE_IMPL_CHECKSUM_IPP

#include <petrel/core/detail/checksum.hpp>

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
#include <new>
#include <span>
#include <type_traits>

namespace petrel::detail {

PETREL_DECL checksum64::checksum64() noexcept {
    static_assert(sizeof(XXH64_state_t) <= state_bytes &&
                      alignof(XXH64_state_t) <= alignof(std::uint64_t) &&
                      std::is_trivially_copyable_v<XXH64_state_t>,
                  "checksum64 holds xxHash's XXH64_state_t, and copies of it its bytes");
    XXH64_reset(::new (static_cast<void*>(state_)) XXH64_state_t, 0);
}

PETREL_DECL void checksum64::update(std::span<const std::byte> bytes) noexcept {
    if (!bytes.empty()) {
        XXH64_update(std::launder(reinterpret_cast<XXH64_state_t*>(state_)), bytes.data(),
                     bytes.size());
    }
}

PETREL_DECL std::uint64_t checksum64::digest() const noexcept {
    return XXH64_digest(std::launder(reinterpret_cast<const XXH64_state_t*>(state_)));
}

PETREL_DECL std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
    return XXH64(bytes.data(), bytes.size(), 0);
}

} // namespace petrel::detail

#endif
