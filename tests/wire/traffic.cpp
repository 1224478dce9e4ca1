#include <petrel/wire/traffic.hpp>

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using petrel::wire::detail::traffic_counters;

TEST_CASE("traffic: counters add up from many threads and load as one snapshot",
          "[wire][efficiency]") {
    traffic_counters c;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&c] {
            for (int i = 0; i < 1000; ++i) {
                c.requests.fetch_add(1);
                c.filter.add({12, 4});
                c.compression.add({4, 1});
                c.sent_bytes.fetch_add(100);
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    const auto s = c.load();
    CHECK(s.requests == 4000);
    CHECK(s.filter.in == 48000);
    CHECK(s.filter.out == 16000);
    CHECK(s.compression.in == 16000);
    CHECK(s.compression.out == 4000);
    CHECK(s.sent_bytes == 400000);
    CHECK(s.replies == 0);
    CHECK(s.key_cache_hits == 0);
}
