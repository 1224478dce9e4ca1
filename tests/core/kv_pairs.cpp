#include <petrel/core/kv_pairs.hpp>

#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <system_error>
#include <vector>

using petrel::errc;

namespace {

using kv64f = petrel::kv_pairs<std::uint64_t, float>;

/// Runs `f` and returns the error code of the std::system_error it throws.
template <typename F>
std::error_code thrown_code(F&& f) {
    try {
        f();
    } catch (const std::system_error& e) {
        return e.code();
    }
    return {};
}

} // namespace

TEST_CASE("kv_pairs: copy_of copies keys and values", "[core][kv_pairs]") {
    std::vector<std::uint64_t> keys{2, 5, 9};
    std::vector<float> values{1.5f, 2.5f, 3.5f};
    const auto kv = kv64f::copy_of(keys, values);
    REQUIRE(kv.size() == 3);
    CHECK_FALSE(kv.empty());
    CHECK(kv.width() == 1);
    CHECK(kv.key_span().data() != keys.data());
    CHECK(kv.value_span().data() != values.data());
    keys[0] = 100;
    values[0] = 100.0f;
    CHECK(kv.key_span()[0] == 2);
    CHECK(kv.value_span()[0] == 1.5f);
    CHECK((kv.keys() == xt::xtensor<std::uint64_t, 1>{2, 5, 9}));
    CHECK((kv.values() == xt::xtensor<float, 1>{1.5f, 2.5f, 3.5f}));
}

TEST_CASE("kv_pairs: copy_of refuses keys that are not sorted and unique", "[core][kv_pairs]") {
    const std::vector<float> values{1, 2, 3};
    const std::vector<std::uint64_t> unsorted{3, 1, 2};
    const std::vector<std::uint64_t> duplicate{1, 2, 2};
    const std::vector<std::uint64_t> descending{3, 2, 1};
    CHECK(thrown_code([&] { (void)kv64f::copy_of(unsorted, values); }) == errc::keys_not_sorted);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(duplicate, values); }) == errc::keys_not_sorted);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(descending, values); }) == errc::keys_not_sorted);
    CHECK_THROWS_AS(kv64f::copy_of(unsorted, values), std::system_error);
    // Sorted keys with the right count pass.
    const std::vector<std::uint64_t> sorted{1, 2, 3};
    CHECK_NOTHROW(kv64f::copy_of(sorted, values));
}

TEST_CASE("kv_pairs: copy_of refuses a value count other than keys x width", "[core][kv_pairs]") {
    const std::vector<std::uint64_t> keys{1, 2, 3};
    const std::vector<float> three(3, 1.0f);
    const std::vector<float> four(4, 1.0f);
    const std::vector<float> six(6, 1.0f);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(keys, four); }) == errc::value_count_mismatch);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(keys, three, 2); }) == errc::value_count_mismatch);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(keys, six, 3); }) == errc::value_count_mismatch);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(keys, three, 0); }) == errc::value_count_mismatch);
    CHECK(thrown_code([&] { (void)kv64f::copy_of({}, {}, 0); }) == errc::value_count_mismatch);
    CHECK(thrown_code([&] { (void)kv64f::copy_of(keys, six, 2); }) == std::error_code{});
}

TEST_CASE("kv_pairs: scalars have shape [n], rows have shape [n, width]", "[core][kv_pairs]") {
    const std::vector<std::uint64_t> keys{10, 20, 30, 40};

    SECTION("width 1") {
        const std::vector<float> v{1, 2, 3, 4};
        const auto kv = kv64f::copy_of(keys, v);
        const auto values = kv.values();
        REQUIRE(values.dimension() == 1);
        CHECK(values.shape()[0] == 4);
        CHECK(kv.keys().dimension() == 1);
        CHECK(kv.keys().shape()[0] == 4);
        CHECK(values(2) == 3.0f);
    }
    SECTION("width 3") {
        std::vector<float> v(12);
        std::iota(v.begin(), v.end(), 0.0f);
        const auto kv = kv64f::copy_of(keys, v, 3);
        CHECK(kv.width() == 3);
        const auto values = kv.values();
        REQUIRE(values.dimension() == 2);
        CHECK(values.shape()[0] == 4);
        CHECK(values.shape()[1] == 3);
        CHECK(values(1, 0) == 3.0f);
        CHECK(values(3, 2) == 11.0f);
        CHECK((xt::view(values, 2, xt::all()) == xt::xtensor<float, 1>{6, 7, 8}));
        CHECK(kv.keys().shape()[0] == 4);
    }
    SECTION("rows = true keeps width 1 as a column") {
        const std::vector<float> v{1, 2, 3, 4};
        const kv64f kv(petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))),
                       petrel::shared_bytes::copy_of(std::as_bytes(std::span(v))), 1, true);
        const auto values = kv.values();
        REQUIRE(values.dimension() == 2);
        CHECK(values.shape()[0] == 4);
        CHECK(values.shape()[1] == 1);
        CHECK((values == xt::xtensor<float, 2>{{1}, {2}, {3}, {4}}));
    }
    SECTION("rows = false does not flatten wider rows") {
        const std::vector<float> v(8, 0.5f);
        const kv64f kv(petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))),
                       petrel::shared_bytes::copy_of(std::as_bytes(std::span(v))), 2, false);
        CHECK(kv.values().dimension() == 2);
        CHECK(kv.values().shape()[1] == 2);
    }
}

TEST_CASE("kv_pairs: row(i) is the i-th key's values", "[core][kv_pairs]") {
    const std::vector<std::uint32_t> keys{1, 4, 7};
    const std::vector<double> v{1, 2, 10, 20, 100, 200};
    const auto kv = petrel::kv_pairs<std::uint32_t, double>::copy_of(keys, v, 2);
    for (std::size_t i = 0; i < kv.size(); ++i) {
        const auto r = kv.row(i);
        REQUIRE(r.size() == 2);
        CHECK(r.data() == kv.value_span().data() + 2 * i);
    }
    CHECK(kv.row(1)[0] == 10.0);
    CHECK(kv.row(1)[1] == 20.0);
    CHECK(kv.row(2)[1] == 200.0);
}

TEST_CASE("kv_pairs: find returns the index of a key or size()", "[core][kv_pairs]") {
    const std::vector<std::uint64_t> keys{3, 8, 20, 1000};
    const std::vector<float> v{0, 1, 2, 3};
    const auto kv = kv64f::copy_of(keys, v);
    CHECK(kv.find(3) == 0);
    CHECK(kv.find(8) == 1);
    CHECK(kv.find(20) == 2);
    CHECK(kv.find(1000) == 3);
    CHECK(kv.find(0) == kv.size());
    CHECK(kv.find(9) == kv.size());
    CHECK(kv.find(5000) == kv.size());
    CHECK(kv.row(kv.find(20))[0] == 2.0f);
}

TEST_CASE("kv_pairs: adopted buffers are not copied", "[core][kv_pairs]") {
    const std::vector<std::uint64_t> k{1, 2, 3};
    const std::vector<float> v{4, 5, 6, 7, 8, 9};
    const auto key_bytes = petrel::shared_bytes::copy_of(std::as_bytes(std::span(k)));
    const auto value_bytes = petrel::shared_bytes::copy_of(std::as_bytes(std::span(v)));
    std::weak_ptr<const void> watch = value_bytes.owner();
    kv64f kv(key_bytes, value_bytes, 2);

    const void* buffer = value_bytes.data();
    CHECK(static_cast<const void*>(kv.values().data()) == buffer);
    CHECK(static_cast<const void*>(&kv.values()(0, 0)) == buffer);
    CHECK(static_cast<const void*>(kv.keys().data()) == static_cast<const void*>(key_bytes.data()));
    CHECK(kv.value_bytes().data() == value_bytes.data());
    CHECK(kv.key_bytes().data() == key_bytes.data());

    // Copies share the bytes too, and keep them alive.
    const kv64f copy = kv;
    CHECK(copy.values().data() == kv.values().data());
    kv = kv64f{};
    CHECK_FALSE(watch.expired());
    CHECK(copy.values()(2, 1) == 9.0f);
}

TEST_CASE("kv_pairs: an empty one has no keys and no values", "[core][kv_pairs]") {
    const kv64f none;
    CHECK(none.empty());
    CHECK(none.size() == 0);
    CHECK(none.width() == 1);
    CHECK(none.find(0) == 0);
    CHECK(none.keys().size() == 0);
    CHECK(none.values().size() == 0);
    CHECK(none.values().dimension() == 1);

    const auto copied = kv64f::copy_of({}, {}, 4);
    CHECK(copied.empty());
    CHECK(copied.width() == 4);
    CHECK(copied.values().size() == 0);
    CHECK(copied.values().dimension() == 2);
}
