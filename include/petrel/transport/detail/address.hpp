// Petrel: parsing "host:port" addresses.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace petrel::detail {

struct host_port {
    std::string host;
    std::uint16_t port = 0;
};

/// Splits "host:port", "[v6-address]:port" or ":port" (any address); nullopt when the
/// text has no valid port.
[[nodiscard]] inline std::optional<host_port> parse_host_port(std::string_view text) {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
        return std::nullopt;
    }
    std::string_view host = text.substr(0, colon);
    const std::string_view port_text = text.substr(colon + 1);
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port > 65535 ||
        port_text.empty()) {
        return std::nullopt;
    }
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    return host_port{std::string(host), static_cast<std::uint16_t>(port)};
}

/// "host:port", an IPv6 host in brackets: what `parse_host_port` reads back.
[[nodiscard]] inline std::string format_host_port(const std::string& host, std::uint16_t port) {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

} // namespace petrel::detail
