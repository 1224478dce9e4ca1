#include <petrel/cluster/node.hpp>

#include <catch2/catch.hpp>

TEST_CASE("node: node keys match only themselves, and no key matches nothing", "[cluster]") {
    const petrel::node_key a{1, 2};
    CHECK(petrel::same_key(a, a));
    CHECK_FALSE(petrel::same_key(a, {1, 3}));
    CHECK_FALSE(petrel::same_key(a, {0, 2}));
    CHECK_FALSE(petrel::same_key({}, {}));
    CHECK_FALSE(petrel::same_key(a, {}));
}
