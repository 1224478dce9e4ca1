// Petrel: stream buffers over contiguous bytes, for Cereal's binary archives.
#pragma once

#include <cstddef>
#include <span>
#include <streambuf>
#include <vector>

namespace petrel::wire::detail {

/// Appends everything written to a byte vector.
class vector_sink final : public std::streambuf {
public:
    explicit vector_sink(std::vector<std::byte>& out) noexcept : out_(out) {}

protected:
    std::streamsize xsputn(const char* s, std::streamsize n) override {
        const auto* p = reinterpret_cast<const std::byte*>(s);
        out_.insert(out_.end(), p, p + n);
        return n;
    }
    int_type overflow(int_type c) override {
        if (!traits_type::eq_int_type(c, traits_type::eof())) {
            out_.push_back(static_cast<std::byte>(traits_type::to_char_type(c)));
        }
        return traits_type::not_eof(c);
    }

private:
    std::vector<std::byte>& out_;
};

/// Reads from a fixed span; reading past its end yields fewer bytes (Cereal then throws).
class span_source final : public std::streambuf {
public:
    explicit span_source(std::span<const std::byte> bytes) noexcept {
        auto* p = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
        setg(p, p, p + bytes.size());
    }
    [[nodiscard]] bool at_end() const noexcept { return gptr() == egptr(); }
};

} // namespace petrel::wire::detail
