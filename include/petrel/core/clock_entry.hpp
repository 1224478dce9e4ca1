// Petrel: one worker's clock on one key range, as servers report it.
#pragma once

#include <cstdint>
#include <limits>

namespace petrel {

/// Worker `worker` has completed `clock` iterations on every key of `[begin, end)`.
///
/// Servers put these on their replies so that a worker can tell how fresh the values it
/// read are. A worker that has left the table's clock reports `departed_clock`.
struct clock_entry {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint32_t worker = 0;
    std::uint64_t clock = 0;

    friend bool operator==(const clock_entry&, const clock_entry&) = default;

    template <class Archive>
    void serialize(Archive& ar) {
        ar(begin, end, worker, clock);
    }
};

/// The clock of a worker that takes no further part: it holds nobody back.
inline constexpr std::uint64_t departed_clock = std::numeric_limits<std::uint64_t>::max();

} // namespace petrel
