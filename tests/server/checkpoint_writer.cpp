#include <petrel/server/checkpoint_writer.hpp>

#include "support/events.hpp"
#include "support/temp_dir.hpp"

#include <petrel/core/detail/checksum.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

/// Rows 0 .. n-1 of width 2 (u64 keys, float values), value = key.
petrel::shard_table rows(std::uint64_t n) {
    petrel::shard_table t;
    t.table_id = 3;
    t.key_type = petrel::wire::scalar_type_of<std::uint64_t>;
    t.value_type = petrel::wire::scalar_type_of<float>;
    t.width = 2;
    t.updater = "sum";
    t.rows = n;
    std::vector<std::uint64_t> keys(n);
    std::vector<float> values(n * 2);
    for (std::uint64_t k = 0; k < n; ++k) {
        keys[k] = k;
        values[2 * k] = values[2 * k + 1] = static_cast<float>(k);
    }
    const auto kb = std::as_bytes(std::span(keys));
    const auto vb = std::as_bytes(std::span(values));
    t.keys.assign(kb.begin(), kb.end());
    t.values.assign(vb.begin(), vb.end());
    return t;
}

petrel::checkpoint_writer::shard_job job_for(const std::filesystem::path& dir, std::uint32_t server,
                                             std::uint64_t n) {
    petrel::checkpoint_writer::shard_job j;
    j.file = petrel::detail::table_dir(dir, 3) / petrel::detail::shard_file_name(server);
    j.server = server;
    j.rows = rows(n);
    j.record.updater = "sum";
    j.record.clock_limit = 9;
    return j;
}

} // namespace

TEST_CASE("checkpoint_writer: writes the shard and answers with its record", "[checkpoint]") {
    petrel::test::temp_dir dir;
    petrel::checkpoint_writer writer;
    const auto out = writer.write(job_for(dir.path(), 2, 1000));
    REQUIRE_FALSE(out.error);
    CHECK(out.message.empty());
    petrel::detail::saved_shard record;
    std::string why;
    REQUIRE_FALSE(petrel::detail::decode_binary(out.result, record, why));
    CHECK(record.clock_limit == 9);
    CHECK(record.updater == "sum");
    CHECK(record.shard.server == 2);
    CHECK(record.shard.rows == 1000);
    CHECK(record.shard.file == petrel::detail::shard_file_name(2));
    const auto file = petrel::detail::table_dir(dir.path(), 3) / record.shard.file;
    CHECK(std::filesystem::file_size(file) == record.shard.bytes);
    const auto bytes = petrel::detail::read_file_of_size(file, record.shard.bytes);
    CHECK(petrel::detail::checksum(bytes) == record.shard.checksum);
}

TEST_CASE("checkpoint_writer: a shard that cannot be written fails, saying why, and logs it",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    // A file where the table's directory should be.
    std::ofstream(petrel::detail::table_dir(dir.path(), 3)) << "in the way";
    petrel::test::log_capture log;
    petrel::checkpoint_writer writer;
    const auto out = writer.write(job_for(dir.path(), 2, 10), log.logger());
    CHECK(out.error == petrel::errc::checkpoint_failed);
    CHECK(out.result.empty());
    CHECK_THAT(out.message, Catch::Contains("table-3"));
    CHECK_THAT(log.all(), Catch::Contains("petrel server 2: checkpoint failed"));
}

TEST_CASE("checkpoint_writer: writes one shard at a time", "[checkpoint]") {
    petrel::test::temp_dir dir;
    std::atomic<int> inside{0};
    std::atomic<int> most{0};
    petrel::checkpoint_writer writer(
        [&](const std::filesystem::path& file, std::uint32_t server, const petrel::shard_table& t) {
            const int now = ++inside;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            auto info = petrel::detail::write_shard(file, server, t);
            --inside;
            return info;
        });
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (std::uint32_t i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
            // Two of them write the same file: its temporary file is shared too.
            if (writer.write(job_for(dir.path(), i % 2, 100 + i)).error) {
                ++failed;
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(failed == 0);
    CHECK(most == 1);
}
