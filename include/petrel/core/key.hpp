// Petrel: key types.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace petrel {

/// A parameter key: an unsigned integral type other than `bool`.
///
/// Keys name parameters (a weight, an embedding row, a block of a matrix). They are
/// ordered, and every message carries them sorted and unique. The largest value of
/// the type is reserved as the exclusive end of the whole key space, so it is never
/// a valid key itself.
template <typename Key>
concept key = std::unsigned_integral<Key> && !std::same_as<std::remove_cv_t<Key>, bool>;

/// The exclusive end of the key space for `Key`; not a valid key.
template <key Key>
inline constexpr Key key_space_end = std::numeric_limits<Key>::max();

} // namespace petrel
