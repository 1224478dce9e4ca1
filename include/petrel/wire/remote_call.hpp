// Petrel: the wire form of a call to a remote function (its name and arguments) and of its
// result, which workers encode and servers decode, and back.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/wire/detail/streambuf.hpp>

#include <cereal/archives/binary.hpp>
#include <cereal/cereal.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace petrel {

/// The longest name of a remote function, in bytes.
inline constexpr std::size_t max_function_name = 256;

/// The arguments of a remote function that takes none.
struct no_args {
    template <class Archive>
    void serialize(Archive&) {}
};

/// A function a worker can run on the servers by its type: `F::name` names it (a
/// `std::string_view` or string literal), `F::args_type` and `F::result_type` are what it
/// takes and returns (both serializable by Cereal), and `F{}` is called as
/// `result_type(table_rows<K, V>&, const args_type&) const` (see `function_registry`, in
/// `<petrel/server/remote_function.hpp>`).
template <typename F>
concept remote_function = std::default_initializable<F> && requires {
    typename F::args_type;
    typename F::result_type;
    { F::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

/// Reads what `cereal::BinaryOutputArchive` wrote, straight from a span of bytes.
///
/// Unlike `cereal::BinaryInputArchive`, it refuses a size (of a vector, a string, a map)
/// larger than the bytes left, so corrupt or hostile input cannot make it allocate more
/// than a small multiple of its size. Types must serialize through templates on the
/// archive (`serialize`, or `save` and `load`), as Cereal's own types do.
class span_input_archive
    : public cereal::InputArchive<span_input_archive, cereal::AllowEmptyClassElision> {
public:
    explicit span_input_archive(std::span<const std::byte> bytes)
        : cereal::InputArchive<span_input_archive, cereal::AllowEmptyClassElision>(this),
          bytes_(bytes) {}

    /// Copies the next `size` bytes to `data`. @throws cereal::Exception past the end
    void load_binary(void* data, std::size_t size) {
        if (size > remaining()) {
            throw cereal::Exception("needs " + std::to_string(size) + " bytes, " +
                                    std::to_string(remaining()) + " left");
        }
        if (size > 0) {
            std::memcpy(data, bytes_.data() + at_, size);
        }
        at_ += size;
    }

    /// Bytes not read yet.
    [[nodiscard]] std::size_t remaining() const noexcept { return bytes_.size() - at_; }

private:
    std::span<const std::byte> bytes_;
    std::size_t at_ = 0;
};

template <class T>
requires std::is_arithmetic_v<T>
void CEREAL_LOAD_FUNCTION_NAME(span_input_archive& ar, T& t) {
    ar.load_binary(std::addressof(t), sizeof(t));
}

template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(span_input_archive& ar, cereal::NameValuePair<T>& t) {
    ar(t.value);
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(span_input_archive& ar, cereal::SizeTag<T>& t) {
    ar(t.size);
    if (t.size > ar.remaining()) {
        throw cereal::Exception("a size of " + std::to_string(t.size) + " with only " +
                                std::to_string(ar.remaining()) + " bytes left");
    }
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(span_input_archive& ar, cereal::BinaryData<T>& bd) {
    ar.load_binary(bd.data, static_cast<std::size_t>(bd.size));
}

} // namespace detail
} // namespace petrel

// What `span_input_archive` reads is what `BinaryOutputArchive` writes (Cereal checks
// `load_minimal` against `save_minimal` through this).
namespace cereal::traits::detail {
template <>
struct get_output_from_input<petrel::detail::span_input_archive> {
    using type = cereal::BinaryOutputArchive;
};
} // namespace cereal::traits::detail

namespace petrel::detail {

/// Whether Cereal can write `T` with its binary archive and read it back.
template <typename T>
concept binary_serializable = std::default_initializable<T> &&
    cereal::traits::is_output_serializable<T, cereal::BinaryOutputArchive>::value &&
    cereal::traits::is_input_serializable<T, span_input_archive>::value;

/// Appends `value` to `out` as Cereal's binary archive writes it. @throws std::bad_alloc
template <typename T>
void append_binary(std::vector<std::byte>& out, const T& value) {
    wire::detail::vector_sink sink(out);
    std::ostream os(&sink);
    cereal::BinaryOutputArchive ar(os);
    ar(value);
}

/// Reads `out` from all of `bytes`; `errc::invalid_argument` (and why, in `message`) when
/// they are truncated, corrupt or longer than what `T` reads.
template <typename T>
std::error_code decode_binary(std::span<const std::byte> bytes, T& out, std::string& message) {
    try {
        span_input_archive ar(bytes);
        ar(out);
        if (ar.remaining() != 0) {
            message = std::to_string(ar.remaining()) + " bytes left over after decoding";
            return errc::invalid_argument;
        }
    } catch (const std::bad_alloc&) {
        throw;
    } catch (const std::exception& e) {
        message = e.what();
        return errc::invalid_argument;
    }
    return {};
}

/// The body of a call: a little-endian u32 name length, the name, then the arguments as
/// written by Cereal's binary archive.
/// @throws std::invalid_argument if `name` is empty or longer than `max_function_name`
template <typename Args>
[[nodiscard]] std::vector<std::byte> encode_call(std::string_view name, const Args& args) {
    if (name.empty() || name.size() > max_function_name) {
        throw std::invalid_argument("petrel: a remote function's name must have 1 to " +
                                    std::to_string(max_function_name) + " bytes");
    }
    const auto n = static_cast<std::uint32_t>(name.size());
    std::vector<std::byte> out(4 + name.size());
    for (std::size_t i = 0; i < 4; ++i) {
        out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    }
    std::memcpy(out.data() + 4, name.data(), name.size());
    append_binary(out, args);
    return out;
}

/// A call body split into the function's name and its encoded arguments (views into the
/// body).
struct decoded_call {
    std::string_view name;
    std::span<const std::byte> args;
};

/// Splits a call body; `errc::invalid_argument` (and why, in `message`) when it is too
/// short or its name length is 0, above `max_function_name` or beyond the body. Checks the
/// length before anything else and allocates nothing but the message.
inline std::error_code decode_call(std::span<const std::byte> body, decoded_call& out,
                                   std::string& message) {
    if (body.size() < 4) {
        message = "a remote call's body of " + std::to_string(body.size()) +
                  " bytes is too short for its name length";
        return errc::invalid_argument;
    }
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
        n |= static_cast<std::uint32_t>(body[static_cast<std::size_t>(i)]) << (8 * i);
    }
    if (n == 0 || n > max_function_name || n > body.size() - 4) {
        message = "a remote call's name length of " + std::to_string(n) +
                  " is 0, above max_function_name or beyond its body of " +
                  std::to_string(body.size()) + " bytes";
        return errc::invalid_argument;
    }
    out.name = std::string_view(reinterpret_cast<const char*>(body.data() + 4), n);
    out.args = body.subspan(4 + n);
    return {};
}

/// A function's result, as the server sends it back. @throws std::bad_alloc
template <typename Result>
[[nodiscard]] std::vector<std::byte> encode_result(const Result& result) {
    std::vector<std::byte> out;
    append_binary(out, result);
    return out;
}

/// Reads a function's result from a reply; `errc::invalid_argument` when the bytes are
/// truncated, corrupt or longer than what `Result` reads. @throws std::bad_alloc
template <typename Result>
std::error_code decode_result(std::span<const std::byte> bytes, Result& out) {
    std::string message;
    return decode_binary(bytes, out, message);
}

/// The name of the built-in call that saves a server's rows of a table (`kv_store::save`);
/// names starting "petrel." are the server's own.
inline constexpr std::string_view checkpoint_call = "petrel.checkpoint";

} // namespace petrel::detail
