// Petrel: how many I/O threads a process runs unless told.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

namespace petrel {

/// The I/O threads a process runs unless `config::threads` says otherwise: the machine's
/// hardware threads, at most 16 (2 where the number is not known), so that a process
/// reads, decodes and sends on every core it has.
[[nodiscard]] inline std::uint32_t default_io_threads() noexcept {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 2U : std::min(n, 16U);
}

} // namespace petrel
