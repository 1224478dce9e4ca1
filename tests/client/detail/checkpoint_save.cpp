#include <petrel/client/detail/checkpoint_save.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/store_cores.hpp"
#include "support/temp_dir.hpp"

#include <petrel/core/error.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/server/detail/checkpoint_manifest_io.hpp>
#include <petrel/wire/remote_call.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

using petrel::errc;
using petrel::test::core_over_two;
using petrel::test::run_op;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

namespace {

detail::saved_shard shard_of(std::uint32_t server, std::string updater = "sum") {
    detail::saved_shard s;
    s.shard.file = "shard-" + std::to_string(server) + ".bin";
    s.shard.server = server;
    s.shard.rows = 10 + server;
    s.shard.bytes = 4096 + server;
    s.updater = std::move(updater);
    s.clock_limit = 4;
    return s;
}

petrel::shared_bytes encoded(const detail::saved_shard& s) {
    return petrel::shared_bytes::copy_of(detail::encode_result(s));
}

} // namespace

TEST_CASE("checkpoint_save: the manifest names every server's shard, in server order",
          "[client][checkpoint]") {
    petrel::test::temp_dir dir;
    petrel::test::log_capture logs;
    const detail::save_target target{dir.path().string(),    3, 5, wire::scalar_type::u64,
                                     wire::scalar_type::f32, 2, 1, logs.logger()};
    const auto ec = detail::finish_save(target, {encoded(shard_of(1)), encoded(shard_of(0))});
    INFO(logs.all());
    REQUIRE_FALSE(ec);
    const auto m = detail::read_manifest(detail::table_dir(dir.path().string(), 5));
    REQUIRE(m.shards.size() == 2);
    CHECK(m.shards[0].server == 0);
    CHECK(m.shards[1].rows == 11);
    CHECK(m.clock == 3);
    CHECK(m.clock_limit == 4);
    CHECK(m.width == 2);
}

TEST_CASE("checkpoint_save: no answer, answers that disagree or do not decode fail the save",
          "[client][checkpoint]") {
    petrel::test::temp_dir dir;
    petrel::test::log_capture logs;
    detail::save_target target{dir.path().string(),    3, 5, wire::scalar_type::u64,
                               wire::scalar_type::f32, 1, 9, logs.logger()};
    CHECK(detail::finish_save(target, {}) == errc::checkpoint_failed);
    CHECK_THAT(logs.all(),
               Catch::Contains("petrel worker 9: checkpoint failed: no server answered"));
    CHECK(detail::finish_save(target, {encoded(shard_of(0)), encoded(shard_of(1, "adam"))}) ==
          errc::checkpoint_failed);
    CHECK_THAT(logs.all(), Catch::Contains("different update rules"));
    const std::vector<std::byte> junk(3, std::byte{0xff});
    CHECK(detail::finish_save(target, {petrel::shared_bytes::copy_of(junk)}) ==
          errc::invalid_argument);
    CHECK_FALSE(
        std::filesystem::exists(detail::table_dir(dir.path().string(), 5) / "manifest.json"));
}

TEST_CASE("checkpoint_save: a save is the checkpoint call to every server, then the manifest",
          "[client][checkpoint]") {
    std::atomic<std::uint32_t> next{0};
    auto answer_shards = [&next](const wire::message& q, wire::message& r) {
        if (q.header.kind == wire::message_kind::call) {
            r.header.kind = wire::message_kind::call_reply;
            r.set_segment(wire::values_segment, encoded(shard_of(next++)));
        }
    };
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, answer_shards);
    petrel::test::temp_dir dir;
    auto [ec] = run_op<>(detail::initiate_save{&t.core}, dir.path().string());
    REQUIRE_FALSE(ec);
    CHECK(t.seen().size() == 2);
    const auto m = detail::read_manifest(detail::table_dir(dir.path().string(), 3));
    CHECK(m.shards.size() == 2);
    CHECK(m.table_id == 3);
}
