#include <petrel/server/detail/table_base.hpp>

#include "support/rows.hpp"

#include <catch2/catch.hpp>

#include <petrel/core/buffer_pool.hpp>
#include <petrel/server/detail/make_table.hpp>
#include <petrel/server/detail/table.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace {

namespace wire = petrel::wire;

wire::message message_of(wire::message_kind kind, const std::vector<std::uint64_t>& keys,
                         const std::vector<float>& values) {
    return petrel::test::rows_request(kind, keys, values, 2);
}

} // namespace

TEST_CASE("table_base: a table used through its interface alone", "[server]") {
    const auto push = message_of(wire::message_kind::push, {3, 9}, {1, 2, 3, 4});
    std::unique_ptr<petrel::detail::table_base> t = petrel::detail::make_table(push.header);
    CHECK(t->key_type() == wire::scalar_type::u64);
    CHECK(t->value_type() == wire::scalar_type::f32);
    CHECK(t->width() == 2);
    CHECK(t->state_values() == 0);
    CHECK(t->updater_name() == "sum");
    auto narrow = push;
    narrow.header.width = 1;
    CHECK(t->check(narrow.header) == petrel::errc::width_mismatch);
    REQUIRE_FALSE(t->check(push.header));
    REQUIRE_FALSE(t->check_keys(push));
    t->reserve(push);
    t->apply(push);
    CHECK(t->size() == 2);
    const auto rows = t->dump(5);
    CHECK(rows.table_id == 5);
    CHECK(rows.rows == 2);
    std::vector<float> values(4);
    std::memcpy(values.data(), rows.values.data(), rows.values.size());
    CHECK(values == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("table_base: the rows mutex, held exclusively, keeps shared readers out", "[server]") {
    const auto push = message_of(wire::message_kind::push, {1}, {5, 6});
    auto t = petrel::detail::make_table(push.header);
    t->reserve(push);
    t->apply(push);
    const auto pull = message_of(wire::message_kind::pull, {1}, {});
    std::atomic<bool> read{false};
    std::vector<float> out(2);
    std::thread reader;
    {
        std::unique_lock held(t->rows_mutex());
        reader = std::thread([&] {
            t->read_shared(pull, reinterpret_cast<std::byte*>(out.data()));
            read = true;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK_FALSE(read); // waits for the holder
    }
    reader.join();
    CHECK(read);
    CHECK(out == std::vector<float>{5, 6});
}
