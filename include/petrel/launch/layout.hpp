// Petrel: how a job's processes share out its nodes, and what a failed worker does to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace petrel {

/// How a job's processes share out the servers and the workers.
enum class layout : std::uint8_t {
    dedicated, ///< each process hosts one server or one worker; the first ranks are servers
    colocated, ///< each process hosts one server and one worker
};

/// "dedicated" or "colocated".
[[nodiscard]] constexpr std::string_view to_string(layout l) noexcept {
    switch (l) {
    case layout::dedicated:
        return "dedicated";
    case layout::colocated:
        return "colocated";
    }
    return "unknown";
}

/// "dedicated" or "colocated" (as `to_string` writes them); nothing otherwise.
[[nodiscard]] constexpr std::optional<layout> parse_layout(std::string_view s) noexcept {
    for (auto l : {layout::dedicated, layout::colocated}) {
        if (s == to_string(l)) {
            return l;
        }
    }
    return std::nullopt;
}

/// What a worker that fails does to its job (`manager_options::drop_failed_workers`).
enum class worker_failure : std::uint8_t {
    fail, ///< the job fails, naming the worker
    drop, ///< the job goes on without it, as if it had left
};

/// "fail" or "drop".
[[nodiscard]] constexpr std::string_view to_string(worker_failure w) noexcept {
    return w == worker_failure::drop ? "drop" : "fail";
}

/// "fail" or "drop" (as `to_string` writes them); nothing otherwise.
[[nodiscard]] constexpr std::optional<worker_failure>
parse_worker_failure(std::string_view s) noexcept {
    for (auto w : {worker_failure::fail, worker_failure::drop}) {
        if (s == to_string(w)) {
            return w;
        }
    }
    return std::nullopt;
}

} // namespace petrel
