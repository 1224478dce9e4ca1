#include <petrel/server/detail/make_table.hpp>

#include <petrel/core/error.hpp>

#include <catch2/catch.hpp>

#include <tuple>

using petrel::wire::scalar_type;

TEST_CASE("make_table: a sparse summing table of the header's key and value types and width",
          "[server]") {
    for (const auto& [key, value] : {std::tuple{scalar_type::u32, scalar_type::f32},
                                     std::tuple{scalar_type::u32, scalar_type::f64},
                                     std::tuple{scalar_type::u64, scalar_type::f32},
                                     std::tuple{scalar_type::u64, scalar_type::f64}}) {
        petrel::wire::message_header h;
        h.key_type = key;
        h.value_type = value;
        h.width = 3;
        const auto t = petrel::detail::make_table(h);
        REQUIRE(t != nullptr);
        CHECK_FALSE(t->check(h));
        CHECK(t->size() == 0);
        CHECK(t->updater_name() == "sum");
        CHECK_FALSE(t->dense_keys());
        auto other = h;
        other.width = 4;
        CHECK(t->check(other) == petrel::errc::width_mismatch);
        other = h;
        other.value_type = value == scalar_type::f32 ? scalar_type::f64 : scalar_type::f32;
        CHECK(t->check(other) == petrel::errc::value_type_mismatch);
    }
}
