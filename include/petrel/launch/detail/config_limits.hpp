// Petrel: a process's limits, picked from the program, the command line or the environment.
#pragma once

#include <petrel/launch/detail/config_options.hpp>
#include <petrel/launch/detail/config_values.hpp>
#include <petrel/launch/limits.hpp>

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace petrel::detail {

/// A whole number, optionally times 1024 (K), 1024² (M), 1024³ (G) or 1024⁴ (T).
struct config_parse_amount {
    std::uint64_t operator()(std::string_view origin, std::string_view text) const {
        constexpr std::string_view allowed =
            "a whole number, or one with K, M, G or T for times 1024, 1024^2, 1024^3 or 1024^4";
        std::string_view digits = text;
        unsigned shift = 0;
        if (!digits.empty()) {
            switch (digits.back()) {
            case 'K':
                shift = 10;
                break;
            case 'M':
                shift = 20;
                break;
            case 'G':
                shift = 30;
                break;
            case 'T':
                shift = 40;
                break;
            default:
                break;
            }
            if (shift != 0) {
                digits.remove_suffix(1);
            }
        }
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
            config_fail(origin, text, "not a number (expected " + std::string(allowed) + ")");
        }
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (ec != std::errc{} || end != digits.data() + digits.size() ||
            n > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
            config_fail(origin, text, "too large (expected " + std::string(allowed) + ")");
        }
        return n << shift;
    }
};

/// Sets `out` to the value picked for option `name`, if any (`positive`: 0 is refused).
template <typename T, typename Parse>
void config_limit(std::optional<T>& out, const std::optional<T>& program, std::string_view name,
                  const command_line& cl, const environment& env,
                  std::vector<std::string>& overridden, Parse parse, bool positive = false) {
    if (auto v = config_pick(program, name, cl, env, overridden, parse)) {
        if (positive && v->value == T{}) {
            config_fail(*v, "must be at least 1");
        }
        out = v->value;
    }
}

/// The limits given in the program, on the command line or in the environment (with
/// `config_pick`'s precedence); those given nowhere stay unset.
[[nodiscard]] inline process_limits config_limits(const process_limits& program,
                                                  const command_line& cl, const environment& env,
                                                  std::vector<std::string>& overridden) {
    process_limits l;
    const auto count = config_parse_whole{};
    const auto amount = config_parse_amount{};
    const auto duration = config_parse_duration{};
    config_limit(l.max_connections, program.max_connections, "max-connections", cl, env, overridden,
                 count, true);
    config_limit(l.max_connections_per_address, program.max_connections_per_address,
                 "max-connections-per-address", cl, env, overridden, count, true);
    config_limit(l.idle_timeout, program.idle_timeout, "idle-timeout", cl, env, overridden,
                 duration);
    config_limit(l.frame_timeout, program.frame_timeout, "frame-timeout", cl, env, overridden,
                 duration);
    config_limit(l.max_receiving_bytes, program.max_receiving_bytes, "max-receiving-bytes", cl, env,
                 overridden, amount);
    config_limit(l.max_queued_reply_bytes, program.max_queued_reply_bytes, "max-queued-reply-bytes",
                 cl, env, overridden, amount);
    config_limit(l.max_cached_key_bytes, program.max_cached_key_bytes, "max-cached-key-bytes", cl,
                 env, overridden, amount);
    config_limit(l.max_held_bytes, program.max_held_bytes, "max-held-bytes", cl, env, overridden,
                 amount, true);
    config_limit(l.max_tables_per_connection, program.max_tables_per_connection,
                 "max-tables-per-connection", cl, env, overridden, count);
    config_limit(l.max_rows_per_connection, program.max_rows_per_connection,
                 "max-rows-per-connection", cl, env, overridden, amount);
    config_limit(l.max_readers, program.max_readers, "max-readers", cl, env, overridden, count);
    config_limit(l.departed_grace, program.departed_grace, "departed-grace", cl, env, overridden,
                 duration);
    return l;
}

} // namespace petrel::detail
