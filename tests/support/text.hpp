// Test support: looking at text (log lines, messages).
#pragma once

#include <cstddef>
#include <string>

namespace petrel::test {

/// How often `part` occurs in `text` (overlapping occurrences counted).
inline std::size_t count_of(const std::string& text, const std::string& part) {
    std::size_t n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
        ++n;
    }
    return n;
}

} // namespace petrel::test
