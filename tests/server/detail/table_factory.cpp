#include <petrel/server/detail/table_factory.hpp>

#include <petrel/server/detail/table.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <typeinfo>

namespace {

template <typename Key, typename Value, typename Rule>
void check_made(Rule rule, std::optional<petrel::key_range<std::uint64_t>> dense) {
    INFO(typeid(Key).name() << " " << typeid(Value).name());
    const auto box = petrel::detail::make_updater<Value>(rule);
    const auto t = petrel::detail::make_table_of<Key, Value>(3, box, {}, dense);
    REQUIRE(t);
    CHECK(dynamic_cast<petrel::detail::table<Key, Value>*>(t.get()) != nullptr);
    CHECK(t->key_type() == petrel::wire::scalar_type_of<Key>);
    CHECK(t->value_type() == petrel::wire::scalar_type_of<Value>);
    CHECK(t->width() == 3);
    CHECK(t->updater_name() == box->name());
    CHECK(t->state_values() == box->state_size(3));
    CHECK(t->dense_keys() == dense);
    if (!dense) {
        CHECK(t->size() == 0);
    }
}

} // namespace

TEST_CASE("table_factory: makes a table of each key and value type with its width, rule and "
          "dense range",
          "[server]") {
    const petrel::key_range<std::uint64_t> range{10, 20};
    check_made<std::uint32_t, float>(petrel::sum{}, std::nullopt);
    check_made<std::uint32_t, double>(petrel::adam{}, range);
    check_made<std::uint64_t, float>(petrel::adagrad{}, range);
    check_made<std::uint64_t, double>(petrel::sgd{}, std::nullopt);
}
