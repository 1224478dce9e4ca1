// Petrel: the log hook.
#pragma once

#include <cstdio>
#include <functional>
#include <string_view>

namespace petrel {

enum class log_level { debug, info, warning, error };

[[nodiscard]] constexpr std::string_view to_string(log_level l) noexcept {
    switch (l) {
    case log_level::debug:
        return "debug";
    case log_level::info:
        return "info";
    case log_level::warning:
        return "warning";
    case log_level::error:
        return "error";
    }
    return "?";
}

/// Where a node reports what it cannot return to a caller: a peer that sent a bad
/// frame, a connection that dropped. Each node has its own (there is no global log);
/// an empty function discards everything.
///
/// @par Thread Safety
/// A node may call its logger from any of its threads, concurrently.
using logger = std::function<void(log_level, std::string_view)>;

/// The default logger: warnings and errors to stderr, one line each.
[[nodiscard]] inline logger stderr_logger(log_level min_level = log_level::warning) {
    return [min_level](log_level l, std::string_view text) {
        if (l < min_level) {
            return;
        }
        std::fprintf(stderr, "petrel %.*s: %.*s\n", static_cast<int>(to_string(l).size()),
                     to_string(l).data(), static_cast<int>(text.size()), text.data());
    };
}

} // namespace petrel
