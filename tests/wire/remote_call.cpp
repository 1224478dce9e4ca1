#include <petrel/wire/remote_call.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

using petrel::errc;
using petrel::max_function_name;
using petrel::no_args;
using petrel::detail::decode_binary;
using petrel::detail::decode_call;
using petrel::detail::decode_result;
using petrel::detail::decoded_call;
using petrel::detail::encode_call;
using petrel::detail::encode_result;

namespace {

struct shrink_args {
    double lambda = 0;
    std::vector<std::uint32_t> columns;
    std::string tag;

    template <class Archive>
    void serialize(Archive& ar) {
        ar(lambda, columns, tag);
    }

    friend bool operator==(const shrink_args&, const shrink_args&) = default;
};

struct shrink {
    static constexpr std::string_view name = "shrink";
    using args_type = shrink_args;
    using result_type = std::uint64_t;
};

struct nameless {
    using args_type = no_args;
    using result_type = double;
};

/// A body of `name_length` (little-endian u32) followed by `rest` bytes of 'f'.
std::vector<std::byte> body_with(std::uint32_t name_length, std::size_t rest) {
    std::vector<std::byte> body(4 + rest, std::byte{'f'});
    for (std::size_t i = 0; i < 4; ++i) {
        body[i] = static_cast<std::byte>((name_length >> (8 * i)) & 0xFF);
    }
    return body;
}

} // namespace

static_assert(petrel::remote_function<shrink>);
static_assert(!petrel::remote_function<nameless>);
static_assert(petrel::detail::binary_serializable<shrink_args>);
static_assert(petrel::detail::binary_serializable<no_args>);

TEST_CASE("remote_call: a call decodes to its name and arguments", "[wire][remote_call]") {
    const shrink_args args{0.25, {3, 1, 4}, "l1"};
    const auto body = encode_call("shrink", args);

    // A little-endian u32 name length, then the name.
    REQUIRE(body.size() > 4 + 6);
    CHECK(body[0] == std::byte{6});
    CHECK(body[1] == std::byte{0});
    CHECK(body[2] == std::byte{0});
    CHECK(body[3] == std::byte{0});

    decoded_call call;
    std::string message;
    REQUIRE_FALSE(decode_call(body, call, message));
    CHECK(call.name == "shrink");
    CHECK(call.args.size() == body.size() - 4 - 6);
    CHECK(message.empty());

    shrink_args back;
    REQUIRE_FALSE(decode_binary(call.args, back, message));
    CHECK(back == args);
}

TEST_CASE("remote_call: a call without arguments is its name alone", "[wire][remote_call]") {
    const auto body = encode_call("sum_of_squares", no_args{});
    CHECK(body.size() == 4 + std::string_view("sum_of_squares").size());
    decoded_call call;
    std::string message;
    REQUIRE_FALSE(decode_call(body, call, message));
    CHECK(call.name == "sum_of_squares");
    CHECK(call.args.empty());
    no_args none;
    CHECK_FALSE(decode_binary(call.args, none, message));
}

TEST_CASE("remote_call: results decode to what was encoded", "[wire][remote_call]") {
    SECTION("a tuple of a number and a vector") {
        const std::tuple<std::uint64_t, double, std::vector<float>> r{7, -0.5, {1.0f, 2.5f}};
        std::tuple<std::uint64_t, double, std::vector<float>> back;
        REQUIRE_FALSE(decode_result(std::span<const std::byte>(encode_result(r)), back));
        CHECK(back == r);
    }
    SECTION("a pair of an array and a string") {
        const std::pair<std::array<std::int32_t, 3>, std::string> r{{-1, 0, 1}, "done"};
        std::pair<std::array<std::int32_t, 3>, std::string> back;
        REQUIRE_FALSE(decode_result(std::span<const std::byte>(encode_result(r)), back));
        CHECK(back == r);
    }
    SECTION("an arithmetic value is its bytes") {
        const double r = 3.25;
        const auto bytes = encode_result(r);
        CHECK(bytes.size() == sizeof(double));
        double back = 0;
        REQUIRE_FALSE(decode_result(std::span<const std::byte>(bytes), back));
        CHECK(back == r);
    }
}

TEST_CASE("remote_call: a name must have 1 to max_function_name bytes", "[wire][remote_call]") {
    const std::string longest(max_function_name, 'f');
    const auto body = encode_call(longest, no_args{});
    decoded_call call;
    std::string message;
    REQUIRE_FALSE(decode_call(body, call, message));
    CHECK(call.name == longest);

    CHECK_THROWS_AS(encode_call(longest + "f", no_args{}), std::invalid_argument);
    CHECK_THROWS_AS(encode_call("", no_args{}), std::invalid_argument);

    // Decoding refuses them too, even when the body holds the whole name.
    const auto over = static_cast<std::uint32_t>(max_function_name + 1);
    CHECK(decode_call(body_with(over, over), call, message) == errc::invalid_argument);
    CHECK(message.find("name length of " + std::to_string(over)) != std::string::npos);
    message.clear();
    CHECK(decode_call(body_with(0, 8), call, message) == errc::invalid_argument);
    CHECK(message.find("name length of 0") != std::string::npos);
}

TEST_CASE("remote_call: truncated bytes are refused and say why", "[wire][remote_call]") {
    const shrink_args args{1.5, {2, 7}, "abc"};
    const auto body = encode_call("shrink", args);
    decoded_call call;
    std::string message;

    // Too short for the name length.
    CHECK(decode_call(std::span(body).first(3), call, message) == errc::invalid_argument);
    CHECK(message.find("too short") != std::string::npos);

    // Cut within the name.
    message.clear();
    CHECK(decode_call(std::span(body).first(4 + 3), call, message) == errc::invalid_argument);
    CHECK(message.find("beyond its body of 7 bytes") != std::string::npos);

    // Cut anywhere within the arguments: the name decodes, the arguments do not.
    REQUIRE_FALSE(decode_call(body, call, message));
    const auto all = call.args;
    for (std::size_t n = 0; n < all.size(); ++n) {
        INFO("arguments cut to " << n << " bytes");
        message.clear();
        shrink_args back;
        CHECK(decode_binary(all.first(n), back, message) == errc::invalid_argument);
        CHECK_FALSE(message.empty());
    }

    // The double alone, with nothing after it.
    message.clear();
    shrink_args back;
    CHECK(decode_binary(all.first(sizeof(double) + 3), back, message) == errc::invalid_argument);
    CHECK(message == "needs 8 bytes, 3 left");

    // Bytes left over.
    std::vector<std::byte> longer(all.begin(), all.end());
    longer.push_back(std::byte{0});
    message.clear();
    CHECK(decode_binary(std::span<const std::byte>(longer), back, message) ==
          errc::invalid_argument);
    CHECK(message == "1 bytes left over after decoding");

    // A result cut short.
    const auto result = encode_result(std::vector<double>{1, 2, 3});
    for (std::size_t n = 0; n < result.size(); ++n) {
        std::vector<double> part;
        CHECK(decode_result(std::span(result).first(n), part) == errc::invalid_argument);
    }
}

TEST_CASE("remote_call: a size beyond the bytes left is refused before allocating",
          "[wire][remote_call]") {
    auto bytes = encode_result(std::vector<float>{1.0f});
    const std::uint64_t count = std::uint64_t{1} << 40;
    for (std::size_t i = 0; i < 8; ++i) {
        bytes[i] = static_cast<std::byte>((count >> (8 * i)) & 0xFF);
    }
    std::vector<float> back;
    std::string message;
    CHECK(decode_binary(std::span<const std::byte>(bytes), back, message) ==
          errc::invalid_argument);
    CHECK(message == "a size of 1099511627776 with only 4 bytes left");
    CHECK(back.capacity() < 1024);
}
