// Petrel: the keys of a request, listed or as runs.
#pragma once

#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cstddef>
#include <span>

namespace petrel::detail {

/// The keys of a request: sorted keys, or (`wire::flag_key_runs`) pairs `[begin, end)` of
/// key runs, which stand for every key of each run.
template <typename Key>
struct key_seq {
    std::span<const Key> data;
    bool runs = false;

    [[nodiscard]] static key_seq of(const wire::message& m) {
        return {m.keys().as<Key>(), (m.header.flags & wire::flag_key_runs) != 0};
    }

    /// Calls `f(i, key)` for the i-th key, in order.
    template <typename F>
    void for_each(F&& f) const {
        if (!runs) {
            for (std::size_t i = 0; i < data.size(); ++i) {
                f(i, data[i]);
            }
            return;
        }
        std::size_t i = 0;
        for (std::size_t r = 0; r + 1 < data.size(); r += 2) {
            for (Key k = data[r]; k < data[r + 1]; ++k) {
                f(i++, k);
            }
        }
    }
};

} // namespace petrel::detail
