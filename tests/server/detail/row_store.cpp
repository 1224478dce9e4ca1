#include <petrel/server/detail/row_store.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

TEST_CASE("row_store: rows keep their place while the store grows, and can be dropped",
          "[server]") {
    petrel::detail::row_store<float> rows(3);
    CHECK(rows.stride() == 3);
    std::vector<const float*> where;
    for (std::size_t i = 0; i < 20000; ++i) {
        rows.reserve_more(1);
        const std::size_t r = rows.add();
        REQUIRE(r == i);
        for (std::size_t j = 0; j < 3; ++j) {
            rows.row(r)[j] = static_cast<float>(i * 3 + j);
        }
        where.push_back(rows.row(r));
    }
    CHECK(rows.rows() == 20000);
    for (std::size_t i = 0; i < 20000; i += 997) {
        CHECK(rows.row(i) == where[i]); // growing moves no row
        CHECK(rows.row(i)[2] == static_cast<float>(i * 3 + 2));
    }
    rows.drop(5);
    CHECK(rows.rows() == 19995);
    CHECK(rows.memory_bytes() >= 20000 * 3 * sizeof(float));
}
