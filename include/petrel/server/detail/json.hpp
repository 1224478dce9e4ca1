// Petrel: a small strict JSON writer and pull reader, for checkpoint manifests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace petrel::detail {

/// JSON text that `json_reader` cannot read: what went wrong and where ("line 3,
/// column 14: expected ':'").
class json_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Appends `s` to `out` as a JSON string: quoted, with '"', '\\' and control characters
/// escaped; other bytes are copied as they are.
/// @throws std::bad_alloc
inline void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (u < 0x20) {
                out += "\\u00";
                out += "0123456789abcdef"[u >> 4];
                out += "0123456789abcdef"[u & 0xF];
            } else {
                out += c;
            }
        }
    }
    out += '"';
}

/// Reads JSON text in the order the caller asks for values (a pull parser), so that a
/// reader of a known layout allocates only what it keeps.
///
/// Strict: one value per text, no comments, no trailing commas, no leading zeros, no
/// unescaped control characters in strings; nesting deeper than `max_depth` and strings
/// longer than the caller's limit are refused. Every failure throws `json_error` naming
/// the line and column.
///
/// @par Example
/// @code
/// json_reader r(R"({"name": "adam", "sizes": [1, 2]})");
/// r.object([&](std::string_view key) {
///     if (key == "name") {
///         name = r.string(64);
///     } else if (key == "sizes") {
///         r.array([&] { sizes.push_back(r.u64()); });
///     } else {
///         r.skip();
///     }
/// });
/// r.finish();
/// @endcode
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: unsafe.
class json_reader {
public:
    /// The deepest nesting of arrays and objects.
    static constexpr std::size_t max_depth = 32;
    /// The longest member name.
    static constexpr std::size_t max_key_bytes = 256;

    /// Reads `text`, which must outlive the reader.
    explicit json_reader(std::string_view text) noexcept : text_(text) {}

    /// Reads an object, calling `member(key)` for each member in the order of the text;
    /// `member` must read the member's value (or `skip` it). Repeated names are passed on
    /// as they come: the caller tells whether it has seen one.
    /// @throws json_error
    template <typename F>
    void object(F&& member) {
        expect('{');
        enter();
        if (!consume('}')) {
            do {
                const std::string key = string(max_key_bytes);
                expect(':');
                member(std::string_view(key));
            } while (consume(','));
            expect('}');
        }
        leave();
    }

    /// Reads an array, calling `element()` for each element; `element` must read it.
    /// @throws json_error
    template <typename F>
    void array(F&& element) {
        expect('[');
        enter();
        if (!consume(']')) {
            do {
                element();
            } while (consume(','));
            expect(']');
        }
        leave();
    }

    /// Reads a number that is a non-negative integer of at most 64 bits.
    /// @throws json_error
    std::uint64_t u64() {
        skip_space();
        const std::size_t start = pos_;
        if (pos_ == text_.size() || !is_digit(text_[pos_])) {
            fail("expected an unsigned integer");
        }
        std::uint64_t v = 0;
        for (; pos_ < text_.size() && is_digit(text_[pos_]); ++pos_) {
            const auto d = static_cast<std::uint64_t>(text_[pos_] - '0');
            if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
                pos_ = start;
                fail("number does not fit in 64 bits");
            }
            v = v * 10 + d;
        }
        if (text_[start] == '0' && pos_ - start > 1) {
            pos_ = start;
            fail("number with a leading zero");
        }
        if (pos_ < text_.size() &&
            (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
            pos_ = start;
            fail("expected an unsigned integer");
        }
        return v;
    }

    /// Reads `true` or `false`.
    /// @throws json_error
    bool boolean() {
        skip_space();
        if (literal("true")) {
            return true;
        }
        if (literal("false")) {
            return false;
        }
        fail("expected true or false");
    }

    /// Reads a string of at most `max_bytes` bytes once unescaped (UTF-8).
    /// @throws json_error
    std::string string(std::size_t max_bytes) {
        std::string out;
        read_string(&out, max_bytes);
        return out;
    }

    /// Reads and discards one value of any kind.
    /// @throws json_error
    void skip() {
        skip_space();
        if (pos_ == text_.size()) {
            fail("expected a value");
        }
        switch (text_[pos_]) {
        case '{':
            object([&](std::string_view) { skip(); });
            return;
        case '[':
            array([&] { skip(); });
            return;
        case '"':
            read_string(nullptr, std::numeric_limits<std::size_t>::max());
            return;
        case 't':
        case 'f':
            (void)boolean();
            return;
        case 'n':
            if (literal("null")) {
                return;
            }
            break;
        default:
            if (text_[pos_] == '-' || is_digit(text_[pos_])) {
                skip_number();
                return;
            }
        }
        fail("expected a value");
    }

    /// Checks that only white space follows the value read.
    /// @throws json_error
    void finish() {
        skip_space();
        if (pos_ != text_.size()) {
            fail("unexpected text after the end of the document");
        }
    }

    /// Throws a `json_error` about the current position.
    [[noreturn]] void fail(const std::string& what) const {
        std::size_t line = 1;
        std::size_t column = 1;
        for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw json_error("line " + std::to_string(line) + ", column " + std::to_string(column) +
                         ": " + what);
    }

private:
    static constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

    void skip_space() noexcept {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                       text_[pos_] == '\n' || text_[pos_] == '\r')) {
            ++pos_;
        }
    }

    bool consume(char c) noexcept {
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }

    void expect(char c) {
        if (!consume(c)) {
            fail(pos_ == text_.size()
                     ? std::string("unexpected end of the document, expected '") + c + "'"
                     : std::string("expected '") + c + "'");
        }
    }

    bool literal(std::string_view word) noexcept {
        if (text_.substr(pos_, word.size()) == word) {
            pos_ += word.size();
            return true;
        }
        return false;
    }

    void enter() {
        if (++depth_ > max_depth) {
            fail("nested deeper than " + std::to_string(max_depth) + " levels");
        }
    }
    void leave() noexcept { --depth_; }

    void skip_number() {
        // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
        const std::size_t start = pos_;
        auto digits = [&] {
            const std::size_t from = pos_;
            while (pos_ < text_.size() && is_digit(text_[pos_])) {
                ++pos_;
            }
            return pos_ - from;
        };
        if (text_[pos_] == '-') {
            ++pos_;
        }
        const std::size_t int_start = pos_;
        const std::size_t n = digits();
        if (n == 0 || (n > 1 && text_[int_start] == '0')) {
            pos_ = start;
            fail("malformed number");
        }
        if (pos_ < text_.size() && text_[pos_] == '.') {
            ++pos_;
            if (digits() == 0) {
                pos_ = start;
                fail("malformed number");
            }
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) {
                ++pos_;
            }
            if (digits() == 0) {
                pos_ = start;
                fail("malformed number");
            }
        }
    }

    unsigned hex4() {
        if (text_.size() - pos_ < 4) {
            fail("truncated \\u escape");
        }
        unsigned v = 0;
        for (int i = 0; i < 4; ++i, ++pos_) {
            const char c = text_[pos_];
            v <<= 4;
            if (c >= '0' && c <= '9') {
                v |= static_cast<unsigned>(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                v |= static_cast<unsigned>(c - 'a' + 10);
            } else if (c >= 'A' && c <= 'F') {
                v |= static_cast<unsigned>(c - 'A' + 10);
            } else {
                fail("malformed \\u escape");
            }
        }
        return v;
    }

    /// Writes `cp` as UTF-8 into `out`; returns the bytes written.
    static std::size_t encode_utf8(unsigned cp, char (&out)[4]) noexcept {
        if (cp < 0x80) {
            out[0] = static_cast<char>(cp);
            return 1;
        }
        if (cp < 0x800) {
            out[0] = static_cast<char>(0xC0 | (cp >> 6));
            out[1] = static_cast<char>(0x80 | (cp & 0x3F));
            return 2;
        }
        if (cp < 0x10000) {
            out[0] = static_cast<char>(0xE0 | (cp >> 12));
            out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out[2] = static_cast<char>(0x80 | (cp & 0x3F));
            return 3;
        }
        out[0] = static_cast<char>(0xF0 | (cp >> 18));
        out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out[3] = static_cast<char>(0x80 | (cp & 0x3F));
        return 4;
    }

    /// The code point of the escape after a backslash.
    unsigned escape() {
        if (pos_ == text_.size()) {
            fail("unterminated string");
        }
        const char e = text_[pos_++];
        switch (e) {
        case '"':
        case '\\':
        case '/':
            return static_cast<unsigned char>(e);
        case 'b':
            return '\b';
        case 'f':
            return '\f';
        case 'n':
            return '\n';
        case 'r':
            return '\r';
        case 't':
            return '\t';
        case 'u':
            break;
        default:
            --pos_;
            fail("unknown escape in a string");
        }
        const unsigned cp = hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in a \\u escape");
        }
        if (cp < 0xD800 || cp > 0xDBFF) {
            return cp;
        }
        if (!literal("\\u")) {
            fail("unpaired surrogate in a \\u escape");
        }
        const unsigned low = hex4();
        if (low < 0xDC00 || low > 0xDFFF) {
            fail("unpaired surrogate in a \\u escape");
        }
        return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }

    /// Reads a string into `out` (or nowhere when null), refusing more than `max_bytes`
    /// bytes once unescaped.
    void read_string(std::string* out, std::size_t max_bytes) {
        expect('"');
        std::size_t length = 0;
        for (;;) {
            if (pos_ == text_.size()) {
                fail("unterminated string");
            }
            const char c = text_[pos_++];
            if (c == '"') {
                return;
            }
            if (static_cast<unsigned char>(c) < 0x20) {
                --pos_;
                fail("control character in a string");
            }
            char utf8[4] = {c, 0, 0, 0};
            const std::size_t n = c == '\\' ? encode_utf8(escape(), utf8) : 1;
            length += n;
            if (length > max_bytes) {
                fail("string longer than " + std::to_string(max_bytes) + " bytes");
            }
            if (out != nullptr) {
                out->append(utf8, n);
            }
        }
    }

    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t depth_ = 0;
};

} // namespace petrel::detail
