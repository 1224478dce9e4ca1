// Petrel: the log hook.
#pragma once

#include <cstddef>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
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

/// `text` as a log may show it: every control character (a line break among them) and
/// every C1 control in UTF-8 (U+0080 to U+009F), which a terminal would act on or which
/// would start a line of its own, written as `\xNN` (`\u00NN`); everything else as it
/// is. Longer than `max_bytes`, it is cut there (at the start of a character, never
/// inside one) and "...(N bytes)" names its whole length. For any text a peer chose (a job id,
/// a name, a reason) before it joins a log line.
[[nodiscard]] inline std::string
printable(std::string_view text, std::size_t max_bytes = std::numeric_limits<std::size_t>::max()) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
    std::size_t i = 0;
    for (; i < text.size() && i < max_bytes; ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
        if (b < 0x20 || b == 0x7f) {
            out += "\\x";
            out += digits[b >> 4];
            out += digits[b & 0xF];
        } else if (b == 0xC2 && next >= 0x80 && next <= 0x9F) {
            out += "\\u00";
            out += digits[next >> 4];
            out += digits[next & 0xF];
            ++i;
        } else {
            out += static_cast<char>(b);
        }
    }
    if (i < text.size()) {
        while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) {
            --i; // not inside a character: its first bytes were copied as they are
            out.pop_back();
        }
        out += "...(" + std::to_string(text.size()) + " bytes)";
    }
    return out;
}

/// The default logger: warnings and errors to stderr. The first line of a message starts
/// with "petrel <level>: "; a message of several lines has its later lines indented by
/// two spaces, and any other control character escaped (see `printable`), so that no text
/// inside a message can pass for a line of its own.
[[nodiscard]] inline logger stderr_logger(log_level min_level = log_level::warning) {
    return [min_level](log_level l, std::string_view text) {
        if (l < min_level) {
            return;
        }
        std::string line = "petrel ";
        line += to_string(l);
        line += ": ";
        for (std::size_t at = 0;;) {
            const auto end = text.find('\n', at);
            line += printable(text.substr(at, end == std::string_view::npos ? end : end - at));
            line += '\n';
            if (end == std::string_view::npos) {
                break;
            }
            at = end + 1;
            line += "  ";
        }
        std::fwrite(line.data(), 1, line.size(), stderr);
    };
}

} // namespace petrel
