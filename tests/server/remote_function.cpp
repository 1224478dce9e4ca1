#include <petrel/server/remote_function.hpp>

#include "support/bytes.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

using petrel::errc;
using petrel::function_registry;
using petrel::key_range;
using petrel::no_args;
using petrel::table_rows;
using petrel::detail::sparse_table;
namespace wire = petrel::wire;

using petrel::test::bytes_of;

namespace {

/// A push of `keys` (sorted, unique) with `width` values each.
template <typename Key, typename Value>
wire::message rows_push(const std::vector<Key>& keys, const std::vector<Value>& values,
                        std::uint32_t width) {
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.key_type = wire::scalar_type_of<Key>;
    m.header.value_type = wire::scalar_type_of<Value>;
    m.header.width = width;
    m.header.key_count = keys.size();
    m.header.range_begin = 0;
    m.header.range_end = std::numeric_limits<Key>::max();
    m.set_segment(wire::keys_segment, bytes_of(keys));
    m.set_segment(wire::values_segment, bytes_of(values));
    return m;
}

/// Value j of key k's row: (k + 0.5) / (j + 1), negated for odd j.
template <typename Value>
Value value_at(std::size_t k, std::uint32_t j) {
    const double base = static_cast<double>(k) + 0.5;
    return static_cast<Value>(j % 2 == 0 ? base / (j + 1) : -base / (j + 1));
}

/// Keys 0 .. n-1 with rows of `value_at`.
template <typename Key, typename Value>
void fill(sparse_table<Key, Value>& t, std::size_t n, std::uint32_t width) {
    std::vector<Key> keys;
    std::vector<Value> values;
    for (std::size_t k = 0; k < n; ++k) {
        keys.push_back(static_cast<Key>(k));
        for (std::uint32_t j = 0; j < width; ++j) {
            values.push_back(value_at<Value>(k, j));
        }
    }
    t.add(rows_push(keys, values, width));
}

struct call_outcome {
    std::error_code ec;
    std::vector<std::byte> result;
    std::string message;
};

template <typename Args>
call_outcome invoke(const function_registry& functions, std::string_view name, const Args& args,
                    petrel::detail::table_base* table, wire::scalar_type key_type,
                    wire::scalar_type value_type, std::uint32_t width,
                    key_range<std::uint64_t> range) {
    call_outcome o;
    const auto body = petrel::detail::encode_call(name, args);
    o.ec = functions.invoke(body, table, key_type, value_type, width, range, o.result, o.message);
    return o;
}

/// Invokes `name` on table `t`, with the request's types and width those of `t`.
template <typename Key, typename Value, typename Args>
call_outcome invoke_on(const function_registry& functions, sparse_table<Key, Value>& t,
                       std::uint32_t width, key_range<std::uint64_t> range, std::string_view name,
                       const Args& args) {
    return invoke(functions, name, args, &t, wire::scalar_type_of<Key>, wire::scalar_type_of<Value>,
                  width, range);
}

template <typename Result>
Result result_of(const call_outcome& o) {
    REQUIRE_FALSE(o.ec);
    Result r{};
    REQUIRE_FALSE(petrel::detail::decode_result(std::span<const std::byte>(o.result), r));
    return r;
}

auto sum_of_squares = [](const auto& rows, const no_args&) -> double {
    double s = 0;
    rows.for_each([&](auto, auto row) {
        for (auto v : row) {
            s += static_cast<double>(v) * static_cast<double>(v);
        }
    });
    return s;
};

struct threshold_args {
    double lambda = 0;
    template <class Archive>
    void serialize(Archive& ar) {
        ar(lambda);
    }
};

/// Soft threshold of every stored value in range; returns how many became zero.
auto soft_threshold = [](auto& rows, const threshold_args& a) -> std::uint64_t {
    std::uint64_t zeroed = 0;
    rows.for_each([&](auto, auto row) {
        for (auto& v : row) {
            const double x = std::abs(static_cast<double>(v)) - a.lambda;
            using value = std::remove_reference_t<decltype(v)>;
            v = x > 0 ? static_cast<value>(std::copysign(x, static_cast<double>(v))) : value{0};
            zeroed += x > 0 ? 0 : 1;
        }
    });
    return zeroed;
};

/// The stored keys in range, in the order `for_each` visits them.
auto keys_seen = [](const auto& rows, const no_args&) -> std::vector<std::uint64_t> {
    std::vector<std::uint64_t> keys;
    rows.for_each([&](auto k, auto) { keys.push_back(k); });
    return keys;
};

/// Typed registration: the function names its name, argument and result types.
struct row_stats {
    static constexpr std::string_view name = "row_stats";
    struct args_type {
        std::uint32_t column = 0;
        template <class Archive>
        void serialize(Archive& ar) {
            ar(column);
        }
    };
    /// (rows, sum of the column, the range seen)
    using result_type = std::tuple<std::uint64_t, double, std::pair<std::uint64_t, std::uint64_t>>;

    template <typename Key, typename Value>
    result_type operator()(table_rows<Key, Value>& rows, const args_type& a) const {
        double s = 0;
        rows.for_each([&](Key, std::span<Value> row) { s += row[a.column]; });
        return {rows.size(), s, {rows.range().begin, rows.range().end}};
    }
};

struct vector_args {
    std::vector<float> weights;
    std::string label;
    template <class Archive>
    void serialize(Archive& ar) {
        ar(weights, label);
    }
};

} // namespace

TEST_CASE("remote_function: a sum of squares by name counts only the keys in range",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);
    REQUIRE(functions.contains("sum_of_squares"));
    REQUIRE_FALSE(functions.contains("sum_of"));

    constexpr std::uint32_t width = 3;
    sparse_table<std::uint64_t, float> t(width);
    fill(t, 100, width);

    double expected = 0;
    for (std::size_t k = 10; k < 50; ++k) {
        for (std::uint32_t j = 0; j < width; ++j) {
            const double v = value_at<float>(k, j);
            expected += v * v;
        }
    }
    const auto o = invoke_on(functions, t, width, {10, 50}, "sum_of_squares", no_args{});
    CHECK(result_of<double>(o) == Approx(expected).epsilon(1e-12));

    // The whole range, and a range beyond the stored keys.
    double all = 0;
    for (std::size_t k = 0; k < 100; ++k) {
        for (std::uint32_t j = 0; j < width; ++j) {
            const double v = value_at<float>(k, j);
            all += v * v;
        }
    }
    CHECK(result_of<double>(invoke_on(functions, t, width, key_range<std::uint64_t>::all(),
                                      "sum_of_squares", no_args{})) == Approx(all));
    CHECK(result_of<double>(
              invoke_on(functions, t, width, {100, 1000}, "sum_of_squares", no_args{})) == 0.0);
}

TEST_CASE("remote_function: a proximal step modifies the rows in range only",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<threshold_args, std::uint64_t>("shrink", soft_threshold);

    constexpr std::uint32_t width = 2;
    sparse_table<std::uint64_t, double> t(width);
    fill(t, 20, width);

    // Values in [5, 15): |v| = (k + 0.5) / (j + 1); a threshold of 6 zeroes those below it.
    const threshold_args args{6.0};
    std::uint64_t expected_zeroed = 0;
    for (std::size_t k = 5; k < 15; ++k) {
        for (std::uint32_t j = 0; j < width; ++j) {
            expected_zeroed += std::abs(value_at<double>(k, j)) <= args.lambda ? 1 : 0;
        }
    }
    const auto o = invoke_on(functions, t, width, {5, 15}, "shrink", args);
    CHECK(result_of<std::uint64_t>(o) == expected_zeroed);

    table_rows<std::uint64_t, double> rows(&t, key_range<std::uint64_t>::all(), width);
    REQUIRE(rows.size() == 20);
    std::size_t visited = 0;
    std::as_const(rows).for_each([&](std::uint64_t k, std::span<const double> row) {
        REQUIRE(row.size() == width);
        for (std::uint32_t j = 0; j < width; ++j) {
            const double before = value_at<double>(k, j);
            double after = before;
            if (k >= 5 && k < 15) {
                const double x = std::abs(before) - args.lambda;
                after = x > 0 ? std::copysign(x, before) : 0.0;
            }
            CHECK(row[j] == Approx(after));
        }
        ++visited;
    });
    CHECK(visited == 20);
}

TEST_CASE("remote_function: a function registered by its type", "[server][remote_function]") {
    static_assert(petrel::remote_function<row_stats>);
    static_assert(!petrel::remote_function<int>);

    function_registry functions;
    functions.add<row_stats>();
    REQUIRE(functions.contains("row_stats"));
    REQUIRE(functions.size() == 1);

    constexpr std::uint32_t width = 2;
    sparse_table<std::uint64_t, float> t(width);
    fill(t, 10, width);

    const auto o = invoke_on(functions, t, width, {2, 6}, row_stats::name, row_stats::args_type{1});
    const auto [n, sum, range] = result_of<row_stats::result_type>(o);
    double expected = 0;
    for (std::size_t k = 2; k < 6; ++k) {
        expected += value_at<float>(k, 1);
    }
    CHECK(n == 4);
    CHECK(sum == Approx(expected));
    CHECK(range == std::pair<std::uint64_t, std::uint64_t>{2, 6});

    CHECK_THROWS_AS(functions.add<row_stats>(), std::invalid_argument);
}

TEST_CASE("remote_function: for_each visits the stored keys in increasing order",
          "[server][remote_function]") {
    sparse_table<std::uint64_t, float> t(1);
    // Pushed out of order, so that storage order is not key order.
    t.add(rows_push<std::uint64_t, float>({500, 900}, {1, 2}, 1));
    t.add(rows_push<std::uint64_t, float>({3, 70, 1000}, {3, 4, 5}, 1));
    t.add(rows_push<std::uint64_t, float>({40, 600}, {6, 7}, 1));
    t.add(rows_push<std::uint64_t, float>({2}, {8}, 1));

    function_registry functions;
    functions.add<no_args, std::vector<std::uint64_t>>("keys", keys_seen);

    using keys = std::vector<std::uint64_t>;
    CHECK(result_of<keys>(invoke_on(functions, t, 1, key_range<std::uint64_t>::all(), "keys",
                                    no_args{})) == keys{2, 3, 40, 70, 500, 600, 900, 1000});
    CHECK(result_of<keys>(invoke_on(functions, t, 1, {3, 900}, "keys", no_args{})) ==
          keys{3, 40, 70, 500, 600});
    CHECK(result_of<keys>(invoke_on(functions, t, 1, {4, 40}, "keys", no_args{})).empty());

    // The table's own traversal, and rows' values in key order.
    std::vector<float> values;
    t.for_each_in({0, 1001},
                  [&](std::uint64_t, std::span<float> row) { values.push_back(row[0]); });
    CHECK(values == std::vector<float>{8, 3, 6, 4, 1, 7, 2, 5});
}

TEST_CASE("remote_function: without a table a function sees no rows", "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>(
        "shape", [](const auto& rows, const no_args&) {
            std::uint64_t visited = 0;
            rows.for_each([&](auto, auto) { ++visited; });
            return std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>{rows.size(), visited,
                                                                           rows.width()};
        });
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);

    const auto o = invoke(functions, "shape", no_args{}, nullptr, wire::scalar_type::u64,
                          wire::scalar_type::f32, 4, {0, 100});
    CHECK(result_of<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>>(o) ==
          std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>{0, 0, 4});
    CHECK(result_of<double>(invoke(functions, "sum_of_squares", no_args{}, nullptr,
                                   wire::scalar_type::u32, wire::scalar_type::f64, 1,
                                   key_range<std::uint64_t>::all())) == 0.0);

    table_rows<std::uint32_t, float> rows(nullptr, {0, 10}, 3);
    CHECK(rows.size() == 0);
    CHECK(rows.empty());
    CHECK(rows.width() == 3);
    CHECK(rows.range() == key_range<std::uint32_t>{0, 10});
}

TEST_CASE("remote_function: an unknown name fails with unknown_function",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);
    const auto o = invoke(functions, "sum_of_cubes", no_args{}, nullptr, wire::scalar_type::u64,
                          wire::scalar_type::f32, 1, {0, 10});
    CHECK(o.ec == errc::unknown_function);
    CHECK(o.message.find("sum_of_cubes") != std::string::npos);
    CHECK(o.result.empty());

    const function_registry none;
    CHECK(invoke(none, "sum_of_squares", no_args{}, nullptr, wire::scalar_type::u64,
                 wire::scalar_type::f32, 1, {0, 10})
              .ec == errc::unknown_function);
}

TEST_CASE("remote_function: names are unique and of bounded length", "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("norm", sum_of_squares);
    try {
        functions.add<no_args, double>("norm", sum_of_squares);
        FAIL("a second function named norm was registered");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("'norm'") != std::string::npos);
    }
    auto add_named = [&](std::string name) {
        functions.add<no_args, double>(std::move(name), sum_of_squares);
    };
    CHECK_THROWS_AS(add_named(""), std::invalid_argument);
    const std::string longest(petrel::max_function_name, 'f');
    CHECK_THROWS_AS(add_named(longest + "f"), std::invalid_argument);
    CHECK_THROWS_AS(petrel::detail::encode_call(longest + "f", no_args{}), std::invalid_argument);
    CHECK_THROWS_AS(petrel::detail::encode_call("", no_args{}), std::invalid_argument);

    add_named(longest);
    CHECK(functions.size() == 2);
    CHECK(result_of<double>(invoke(functions, longest, no_args{}, nullptr, wire::scalar_type::u64,
                                   wire::scalar_type::f32, 1, {0, 10})) == 0.0);
}

TEST_CASE("remote_function: a function that throws fails with handler_failed",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("broken", [](const auto& rows, const no_args&) -> double {
        if (rows.size() > 0) {
            throw std::runtime_error("broken: the rows are not normalised");
        }
        return 0;
    });
    functions.add<no_args, int>("odd", [](const auto&, const no_args&) -> int { throw 42; });

    sparse_table<std::uint64_t, float> t(1);
    fill(t, 4, 1);
    const auto o = invoke_on(functions, t, 1, {0, 10}, "broken", no_args{});
    CHECK(o.ec == errc::handler_failed);
    CHECK(o.message == "broken: the rows are not normalised");
    CHECK(o.result.empty());

    const auto odd = invoke_on(functions, t, 1, {0, 10}, "odd", no_args{});
    CHECK(odd.ec == errc::handler_failed);
    CHECK_FALSE(odd.message.empty());

    // The registry is still usable.
    CHECK(result_of<double>(invoke_on(functions, t, 1, {5, 10}, "broken", no_args{})) == 0.0);
}

TEST_CASE("remote_function: a truncated or garbage body fails with invalid_argument",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<vector_args, double>("weigh", [](const auto& rows, const vector_args& a) {
        double s = 0;
        rows.for_each([&](auto, auto row) {
            for (std::size_t j = 0; j < row.size() && j < a.weights.size(); ++j) {
                s += a.weights[j] * row[j];
            }
        });
        return s + static_cast<double>(a.label.size());
    });

    sparse_table<std::uint64_t, float> t(2);
    fill(t, 4, 2);
    const vector_args args{{1.0f, 2.0f}, "abc"};
    const auto body = petrel::detail::encode_call("weigh", args);
    std::vector<std::byte> result;
    std::string message;
    auto call = [&](std::span<const std::byte> b) {
        return functions.invoke(b, &t, wire::scalar_type::u64, wire::scalar_type::f32, 2, {0, 10},
                                result, message);
    };

    REQUIRE_FALSE(call(body));
    double expected = 3;
    for (std::size_t k = 0; k < 4; ++k) {
        expected += value_at<float>(k, 0) + 2.0 * value_at<float>(k, 1);
    }
    double r = 0;
    REQUIRE_FALSE(petrel::detail::decode_result(std::span<const std::byte>(result), r));
    CHECK(r == Approx(expected));

    // Every proper prefix fails cleanly: in the name length, the name, or the arguments.
    for (std::size_t n = 0; n < body.size(); ++n) {
        INFO("prefix of " << n << " bytes");
        message.clear();
        CHECK(call(std::span(body).first(n)) == errc::invalid_argument);
        CHECK_FALSE(message.empty());
        CHECK(result.empty());
    }

    // Trailing bytes after the arguments.
    auto longer = body;
    longer.push_back(std::byte{0});
    CHECK(call(longer) == errc::invalid_argument);

    // A vector length far beyond the body: refused before allocating it.
    auto huge = body;
    const std::size_t size_at = 4 + std::string_view("weigh").size();
    const std::uint64_t count = std::uint64_t{1} << 28; // 1 GiB of floats
    for (std::size_t i = 0; i < 8; ++i) {
        huge[size_at + i] = static_cast<std::byte>((count >> (8 * i)) & 0xFF);
    }
    message.clear();
    CHECK(call(huge) == errc::invalid_argument);
    CHECK(message.find("size of 268435456") != std::string::npos);

    // Garbage after a valid name.
    auto garbage = body;
    for (std::size_t i = size_at; i < garbage.size(); ++i) {
        garbage[i] = static_cast<std::byte>(0xA5 ^ i);
    }
    CHECK(call(garbage) == errc::invalid_argument);
}

TEST_CASE("remote_function: a huge name length fails with invalid_argument",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);
    std::vector<std::byte> result;
    std::string message;
    auto call = [&](const std::vector<std::byte>& body) {
        message.clear();
        return functions.invoke(body, nullptr, wire::scalar_type::u64, wire::scalar_type::f32, 1,
                                {0, 10}, result, message);
    };

    // 0xFFFFFFFF, then a few bytes.
    std::vector<std::byte> body(12, std::byte{0x41});
    for (std::size_t i = 0; i < 4; ++i) {
        body[i] = std::byte{0xFF};
    }
    CHECK(call(body) == errc::invalid_argument);
    CHECK(message.find("name length") != std::string::npos);

    // One above the limit, with a body long enough to hold it.
    const auto over = static_cast<std::uint32_t>(petrel::max_function_name + 1);
    std::vector<std::byte> long_name(4 + over, std::byte{'f'});
    for (std::size_t i = 0; i < 4; ++i) {
        long_name[i] = static_cast<std::byte>((over >> (8 * i)) & 0xFF);
    }
    CHECK(call(long_name) == errc::invalid_argument);

    // A zero name length.
    CHECK(call(std::vector<std::byte>(8, std::byte{0})) == errc::invalid_argument);
}

TEST_CASE("remote_function: types a function or table does not take are refused",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>(
        "float_only", [](table_rows<std::uint64_t, float>& rows, const no_args&) -> double {
            return static_cast<double>(rows.size());
        });
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);

    sparse_table<std::uint64_t, double> doubles(1);
    fill(doubles, 3, 1);
    auto o = invoke_on(functions, doubles, 1, {0, 10}, "float_only", no_args{});
    CHECK(o.ec == errc::value_type_mismatch);
    CHECK(o.message.find("float_only") != std::string::npos);

    sparse_table<std::uint32_t, float> small_keys(1);
    fill(small_keys, 3, 1);
    CHECK(invoke_on(functions, small_keys, 1, {0, 10}, "float_only", no_args{}).ec ==
          errc::key_type_mismatch);

    sparse_table<std::uint64_t, float> floats(1);
    fill(floats, 3, 1);
    CHECK(result_of<double>(invoke_on(functions, floats, 1, {0, 10}, "float_only", no_args{})) ==
          3.0);
    // Without a table the request's types decide.
    CHECK(invoke(functions, "float_only", no_args{}, nullptr, wire::scalar_type::u64,
                 wire::scalar_type::f64, 1, {0, 10})
              .ec == errc::value_type_mismatch);

    // The request's types and width must be the table's.
    CHECK(invoke(functions, "sum_of_squares", no_args{}, &floats, wire::scalar_type::u64,
                 wire::scalar_type::f64, 1, {0, 10})
              .ec == errc::value_type_mismatch);
    CHECK(invoke(functions, "sum_of_squares", no_args{}, &floats, wire::scalar_type::u32,
                 wire::scalar_type::f32, 1, {0, 10})
              .ec == errc::key_type_mismatch);
    CHECK(invoke(functions, "sum_of_squares", no_args{}, &floats, wire::scalar_type::u64,
                 wire::scalar_type::f32, 2, {0, 10})
              .ec == errc::width_mismatch);
    CHECK(invoke(functions, "sum_of_squares", no_args{}, nullptr, wire::scalar_type::none,
                 wire::scalar_type::f32, 1, {0, 10})
              .ec == errc::key_type_mismatch);
    CHECK(invoke(functions, "sum_of_squares", no_args{}, nullptr, wire::scalar_type::u64,
                 wire::scalar_type::u32, 1, {0, 10})
              .ec == errc::value_type_mismatch);
}

TEST_CASE("remote_function: a table of 32-bit keys sees the range clamped to its keys",
          "[server][remote_function]") {
    constexpr std::uint32_t width = 2;
    sparse_table<std::uint32_t, double> t(width);
    constexpr std::uint32_t top = std::numeric_limits<std::uint32_t>::max() - 1;
    t.add(rows_push<std::uint32_t, double>({1, 7, top}, {1, 2, 3, 4, 5, 6}, width));

    function_registry functions;
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);
    functions.add<no_args, std::vector<std::uint64_t>>("keys", keys_seen);
    functions.add<row_stats>();

    using keys = std::vector<std::uint64_t>;
    CHECK(result_of<keys>(invoke_on(functions, t, width, key_range<std::uint64_t>::all(), "keys",
                                    no_args{})) == keys{1, 7, top});
    CHECK(result_of<keys>(invoke_on(functions, t, width, {7, std::uint64_t{1} << 40}, "keys",
                                    no_args{})) == keys{7, top});
    CHECK(result_of<keys>(invoke_on(functions, t, width,
                                    {std::uint64_t{1} << 33, std::uint64_t{1} << 40}, "keys",
                                    no_args{}))
              .empty());
    CHECK(result_of<double>(invoke_on(functions, t, width, {0, 5}, "sum_of_squares", no_args{})) ==
          5.0);

    const auto [n, sum, range] = result_of<row_stats::result_type>(
        invoke_on(functions, t, width, key_range<std::uint64_t>::all(), "row_stats",
                  row_stats::args_type{0}));
    CHECK(n == 3);
    CHECK(sum == 9.0);
    CHECK(range ==
          std::pair<std::uint64_t, std::uint64_t>{0, petrel::key_space_end<std::uint32_t>});
}

TEST_CASE("remote_function: results decode only from what was encoded",
          "[server][remote_function]") {
    using result = std::pair<std::vector<double>, std::string>;
    const result r{{1.5, -2.0}, "ok"};
    const auto bytes = petrel::detail::encode_result(r);
    result back;
    REQUIRE_FALSE(petrel::detail::decode_result(std::span<const std::byte>(bytes), back));
    CHECK(back == r);

    for (std::size_t n = 0; n < bytes.size(); ++n) {
        result part;
        CHECK(petrel::detail::decode_result(std::span(bytes).first(n), part) ==
              errc::invalid_argument);
    }
    auto longer = bytes;
    longer.push_back(std::byte{1});
    CHECK(petrel::detail::decode_result(std::span<const std::byte>(longer), back) ==
          errc::invalid_argument);

    no_args none;
    CHECK(petrel::detail::encode_result(none).empty());
    CHECK_FALSE(petrel::detail::decode_result(std::span<const std::byte>(), none));
}

TEST_CASE("remote_function: a registry is called from several threads at once",
          "[server][remote_function]") {
    function_registry functions;
    functions.add<no_args, double>("sum_of_squares", sum_of_squares);

    constexpr std::size_t threads = 4;
    std::vector<std::unique_ptr<sparse_table<std::uint64_t, float>>> tables;
    for (std::size_t i = 0; i < threads; ++i) {
        tables.push_back(std::make_unique<sparse_table<std::uint64_t, float>>(1));
        fill(*tables.back(), 50 + i, 1);
    }
    std::vector<double> sums(threads);
    std::vector<std::thread> pool;
    for (std::size_t i = 0; i < threads; ++i) {
        pool.emplace_back([&, i] {
            for (int n = 0; n < 50; ++n) {
                std::vector<std::byte> result;
                std::string message;
                const auto body = petrel::detail::encode_call("sum_of_squares", no_args{});
                if (!functions.invoke(body, tables[i].get(), wire::scalar_type::u64,
                                      wire::scalar_type::f32, 1, {0, 1000}, result, message)) {
                    double s = 0;
                    if (!petrel::detail::decode_result(std::span<const std::byte>(result), s)) {
                        sums[i] = s;
                    }
                }
            }
        });
    }
    for (auto& th : pool) {
        th.join();
    }
    for (std::size_t i = 0; i < threads; ++i) {
        double expected = 0;
        for (std::size_t k = 0; k < 50 + i; ++k) {
            const double v = value_at<float>(k, 0);
            expected += v * v;
        }
        CHECK(sums[i] == Approx(expected));
    }
}

TEST_CASE("remote_function: names lists the registered functions in order",
          "[server][remote_function]") {
    function_registry functions;
    CHECK(functions.names().empty());
    functions.add<no_args, double>("norm", sum_of_squares);
    functions.add<no_args, double>("count", sum_of_squares);
    CHECK(functions.names() == std::vector<std::string>{"count", "norm"});
}
