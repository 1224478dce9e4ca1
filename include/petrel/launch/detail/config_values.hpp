// Petrel: one setting, picked from the program, the command line or the environment, and
// read from text.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/layout.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// What the command line and the help say of one of Petrel's options.
struct config_option {
    std::string_view name;     ///< without the leading "--"
    std::string_view value;    ///< what the value looks like, for messages and usage();
                               ///< empty for a flag, which takes none
    std::string_view variable; ///< the environment variable
    std::string_view help;     ///< what it sets, and its default
};

/// The command line, split into Petrel's options and the rest.
struct command_line {
    /// Petrel's options by name (without "--"); the last occurrence wins.
    std::map<std::string, std::string, std::less<>> values;
    bool help = false;
    std::vector<std::string> rest;
    /// The first malformed Petrel option, reported unless help was asked for.
    std::optional<std::string> error{};
};

/// A value and where it came from: "config::servers", "--servers", "PETREL_SERVERS", or
/// empty for a default.
template <typename T>
struct config_value {
    T value;
    std::string origin;
    std::string text;
};

[[noreturn]] inline void config_fail(std::string_view origin, std::string_view text,
                                     std::string_view problem) {
    throw config_error("petrel: " + std::string(origin) + "=\"" + std::string(text) +
                       "\": " + std::string(problem));
}

template <typename T>
[[noreturn]] void config_fail(const config_value<T>& v, std::string_view problem) {
    config_fail(v.origin.empty() ? std::string_view("the default") : v.origin, v.text, problem);
}

[[nodiscard]] inline std::string config_describe(std::uint32_t v) {
    return std::to_string(v);
}
[[nodiscard]] inline std::string config_describe(std::uint64_t v) {
    return std::to_string(v);
}
[[nodiscard]] inline std::string config_describe(bool v) {
    return v ? "1" : "0";
}
[[nodiscard]] inline std::string config_describe(const std::string& v) {
    return v;
}
[[nodiscard]] inline std::string config_describe(node_role v) {
    return std::string(to_string(v));
}
[[nodiscard]] inline std::string config_describe(petrel::layout v) {
    return std::string(to_string(v));
}
[[nodiscard]] inline std::string config_describe(petrel::worker_failure v) {
    return std::string(to_string(v));
}
[[nodiscard]] inline std::string config_describe(std::chrono::milliseconds v) {
    return std::to_string(v.count());
}
[[nodiscard]] inline std::string config_describe(const std::vector<node_role>& v) {
    std::string out;
    for (const auto r : v) {
        if (!out.empty()) {
            out += ',';
        }
        out += to_string(r);
    }
    return out;
}

/// Parsers from text; each reports a bad value as `config_error` naming `origin`.
[[nodiscard]] inline std::uint32_t
config_parse_number(std::string_view origin, std::string_view text, std::string_view allowed) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
        config_fail(origin, text, "not a number (expected " + std::string(allowed) + ")");
    }
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size()) {
        config_fail(origin, text, "too large (expected " + std::string(allowed) + ")");
    }
    return n;
}

struct config_parse_count {
    std::uint32_t operator()(std::string_view origin, std::string_view text) const {
        return config_parse_number(origin, text, "a whole number, at least 1");
    }
};

struct config_parse_whole {
    std::uint32_t operator()(std::string_view origin, std::string_view text) const {
        return config_parse_number(origin, text, "a whole number");
    }
};

struct config_parse_duration {
    std::chrono::milliseconds operator()(std::string_view origin, std::string_view text) const {
        return std::chrono::milliseconds(
            config_parse_number(origin, text, "a whole number of milliseconds, at least 1"));
    }
};

struct config_parse_flag {
    bool operator()(std::string_view origin, std::string_view text) const {
        if (text == "1" || text == "true" || text == "yes") {
            return true;
        }
        if (text == "0" || text == "false" || text == "no") {
            return false;
        }
        config_fail(origin, text, "not a yes or no (expected 1 or 0)");
    }
};

struct config_parse_text {
    std::string operator()(std::string_view, std::string_view text) const {
        return std::string(text);
    }
};

struct config_parse_join {
    node_role operator()(std::string_view origin, std::string_view text) const {
        const auto role = parse_node_role(text);
        if (role != node_role::server && role != node_role::worker && role != node_role::manager) {
            config_fail(origin, text, "not a role that joins (expected server, worker or manager)");
        }
        return *role;
    }
};

struct config_parse_worker_failure {
    petrel::worker_failure operator()(std::string_view origin, std::string_view text) const {
        if (const auto w = parse_worker_failure(text)) {
            return *w;
        }
        config_fail(origin, text, "not a worker failure policy (expected fail or drop)");
    }
};

struct config_parse_layout {
    petrel::layout operator()(std::string_view origin, std::string_view text) const {
        if (const auto l = parse_layout(text)) {
            return *l;
        }
        config_fail(origin, text, "not a layout (expected dedicated or colocated)");
    }
};

struct config_parse_roles {
    std::vector<node_role> operator()(std::string_view origin, std::string_view text) const {
        std::vector<node_role> roles;
        std::string_view left = text;
        while (true) {
            const auto comma = left.find(',');
            const std::string_view item = left.substr(0, comma);
            auto role = parse_node_role(item);
            if (role == node_role::reader) {
                role.reset(); // readers attach to running jobs (petrel::attachment)
            }
            if (!role) {
                config_fail(origin, text,
                            (item.empty() ? std::string("an empty role")
                                          : "\"" + std::string(item) + "\" is not a role") +
                                " (expected a comma-separated list of manager, server and "
                                "worker)");
            }
            roles.push_back(*role);
            if (comma == std::string_view::npos) {
                break;
            }
            left = left.substr(comma + 1);
        }
        return roles;
    }
};

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

/// Picks a setting from the program's field, the command line and the environment.
///
/// A field the program sets is fixed in code, where a user of the program cannot see it:
/// a command-line option or variable with another value is refused, naming both, rather
/// than silently dropped (the same value is fine). Otherwise the command line wins over
/// the environment, and the variable it overrides is noted in `overridden` (for the log).
/// Every value given is parsed, so a malformed one is always reported.
template <typename T, typename Parse>
[[nodiscard]] std::optional<config_value<T>>
config_pick(const std::optional<T>& program, const config_option& option, const command_line& cl,
            const environment& env, std::vector<std::string>& overridden, Parse parse) {
    std::optional<config_value<T>> from_program;
    std::optional<config_value<T>> from_argv;
    std::optional<config_value<T>> from_env;
    if (program) {
        std::string origin = "config::" + std::string(option.name);
        std::replace(origin.begin(), origin.end(), '-', '_');
        from_program = config_value<T>{*program, std::move(origin), config_describe(*program)};
    }
    if (const auto it = cl.values.find(option.name); it != cl.values.end()) {
        const std::string origin = "--" + std::string(option.name);
        from_argv = config_value<T>{parse(origin, it->second), origin, it->second};
    }
    if (env) {
        if (auto text = env(option.variable)) {
            const std::string origin(option.variable);
            T value = parse(origin, *text);
            from_env = config_value<T>{std::move(value), origin, std::move(*text)};
        }
    }
    const auto where = [](const config_value<T>& v) { return v.origin + "=\"" + v.text + "\""; };
    if (from_program) {
        for (const auto* other : {&from_argv, &from_env}) {
            if (*other && !((*other)->value == from_program->value)) {
                throw config_error(
                    "petrel: " + where(*from_program) + " (in the program) and " + where(**other) +
                    (other == &from_argv ? " (on the command line)" : " (in the environment)") +
                    " disagree: the program fixes this setting; leave " + from_program->origin +
                    " unset in the program to take it from the command line or the "
                    "environment, or give the same value");
            }
        }
        return from_program;
    }
    if (from_argv) {
        if (from_env && !(from_env->value == from_argv->value)) {
            overridden.push_back(where(*from_argv) + " overrides " + where(*from_env));
        }
        return from_argv;
    }
    return from_env;
}

template <typename T>
[[nodiscard]] config_value<T> config_or(std::optional<config_value<T>> v, T fallback) {
    if (v) {
        return std::move(*v);
    }
    std::string text = config_describe(fallback);
    return config_value<T>{std::move(fallback), std::string(), std::move(text)};
}

[[nodiscard]] inline bool config_is_wildcard(std::string_view host) noexcept {
    return host == "0.0.0.0" || host == "::" || host.empty();
}

[[nodiscard]] inline bool config_is_loopback(std::string_view host) noexcept {
    return host == "localhost" || host.starts_with("127.") || host == "::1";
}

/// A bare host from "host" or "[v6-address]"; `config_error` for an empty host or one that
/// looks like "host:port".
[[nodiscard]] inline std::string config_host(const config_value<std::string>& v) {
    std::string_view host = v.value;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) {
        config_fail(v, "empty (expected a host name or address, without a port)");
    }
    if (host.find_first_of(" \t\r\n[]/") != std::string_view::npos ||
        std::count(host.begin(), host.end(), ':') == 1) {
        config_fail(v, "not a host (expected a host name or address, without a port; IPv6 "
                       "addresses as ::1 or [::1])");
    }
    return std::string(host);
}

/// The host of a "host:port" root; `config_error` when it is not one.
[[nodiscard]] inline std::string config_root_host(const config_value<std::string>& v,
                                                  bool launched) {
    const std::string_view text = v.value;
    const std::string_view expected =
        launched ? "expected host:port with a port from 1 to 65535, IPv6 as [::1]:port"
                 : "expected host:port with a port from 0 to 65535, IPv6 as [::1]:port";
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
        config_fail(v, "no port (" + std::string(expected) + ")");
    }
    std::string_view host = text.substr(0, colon);
    const std::string_view port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string_view::npos) {
        config_fail(v, "an IPv6 address needs brackets (" + std::string(expected) + ")");
    }
    if (host.empty() || host.find_first_of(" \t\r\n[]/") != std::string_view::npos) {
        config_fail(v, "not a host (" + std::string(expected) + ")");
    }
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos ||
        ec != std::errc{} || end != port.data() + port.size() || n > 65535 ||
        (launched && n == 0)) {
        config_fail(v, "bad port (" + std::string(expected) + ")");
    }
    if (launched && config_is_wildcard(host)) {
        config_fail(v, "a wildcard address is not reachable: give the address other processes "
                       "connect to (rank 0's host)");
    }
    return std::string(host);
}

template <typename T>
requires std::is_unsigned_v<T>
void config_check_positive(const config_value<T>& v) {
    if (v.value == 0) {
        config_fail(v, "must be at least 1");
    }
}

inline void config_check_positive(const config_value<std::chrono::milliseconds>& v) {
    if (v.value.count() <= 0) {
        config_fail(v, "must be at least 1 millisecond");
    }
}

inline void config_check_roles(const config_value<std::vector<node_role>>& v) {
    if (v.value.empty()) {
        config_fail(v, "no roles (expected a comma-separated list of manager, server and "
                       "worker)");
    }
    for (std::size_t i = 0; i < v.value.size(); ++i) {
        if (!parse_node_role(to_string(v.value[i])) || v.value[i] == node_role::reader) {
            config_fail(v, "not a role (expected manager, server or worker)");
        }
        for (std::size_t j = 0; j < i; ++j) {
            if (v.value[i] == v.value[j]) {
                config_fail(v, "lists " + std::string(to_string(v.value[i])) +
                                   " twice (each role at most once)");
            }
        }
    }
}

} // namespace petrel::detail
