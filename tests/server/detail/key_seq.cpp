#include <petrel/server/detail/key_seq.hpp>

#include <catch2/catch.hpp>

#include <petrel/core/buffer_pool.hpp>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace {

petrel::wire::message with_keys(const std::vector<std::uint32_t>& keys, bool runs) {
    petrel::wire::message m;
    m.header.key_type = petrel::wire::scalar_type::u32;
    if (runs) {
        m.header.flags |= petrel::wire::flag_key_runs;
    }
    m.set_segment(petrel::wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    return m;
}

} // namespace

TEST_CASE("key_seq: listed keys, and runs that stand for every key in them", "[server]") {
    using seq = petrel::detail::key_seq<std::uint32_t>;
    std::vector<std::pair<std::size_t, std::uint32_t>> seen;
    auto collect = [&](std::size_t i, std::uint32_t k) { seen.emplace_back(i, k); };

    const auto listed_message = with_keys({3, 9, 12}, false); // (the keys stay in it)
    const auto listed = seq::of(listed_message);
    CHECK_FALSE(listed.runs);
    listed.for_each(collect);
    CHECK(seen == std::vector<std::pair<std::size_t, std::uint32_t>>{{0, 3}, {1, 9}, {2, 12}});

    seen.clear();
    const auto runs_message = with_keys({4, 7, 20, 22}, true);
    const auto runs = seq::of(runs_message);
    CHECK(runs.runs);
    runs.for_each(collect);
    CHECK(seen == std::vector<std::pair<std::size_t, std::uint32_t>>{
                      {0, 4}, {1, 5}, {2, 6}, {3, 20}, {4, 21}});
}
