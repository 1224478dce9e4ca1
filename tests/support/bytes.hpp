// Test support: byte buffers made from vectors.
#pragma once

#include <petrel/core/buffer_pool.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace petrel::test {

/// A new buffer holding a copy of `v`.
template <typename T>
petrel::shared_bytes bytes_of(const std::vector<T>& v) {
    return petrel::shared_bytes::copy_of(std::as_bytes(std::span(v)));
}

} // namespace petrel::test
