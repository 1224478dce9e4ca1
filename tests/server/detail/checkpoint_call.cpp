#include <petrel/server/detail/checkpoint_call.hpp>

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cereal/archives/binary.hpp>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>

using petrel::detail::saved_shard;

namespace {

saved_shard a_shard() {
    saved_shard s;
    s.shard = {.file = "shard-3.bin", .server = 3, .rows = 1000, .bytes = 64123, .checksum = 77};
    s.state_width = 2;
    s.updater = "adagrad";
    s.dense = true;
    s.dense_begin = 1 << 20;
    s.dense_end = 1 << 21;
    s.clock_limit = 9;
    return s;
}

} // namespace

TEST_CASE("checkpoint_call: a server's answer to the call reads back as it was written",
          "[server][checkpoint]") {
    const auto sent = a_shard();
    std::stringstream bytes;
    {
        cereal::BinaryOutputArchive out(bytes);
        out(sent);
    }
    saved_shard got;
    cereal::BinaryInputArchive in(bytes);
    in(got);
    CHECK(got.shard == sent.shard);
    CHECK(got.state_width == 2);
    CHECK(got.updater == "adagrad");
    CHECK(got.dense);
    CHECK(got.dense_begin == sent.dense_begin);
    CHECK(got.dense_end == sent.dense_end);
    CHECK(got.clock_limit == 9);
}

TEST_CASE("checkpoint_call: a name over the limit is refused when written and when read, "
          "before anything is allocated for it",
          "[server][checkpoint]") {
    auto s = a_shard();
    s.updater.assign(petrel::detail::checkpoint_max_name + 1, 'u');
    std::stringstream refused;
    cereal::BinaryOutputArchive out(refused);
    CHECK_THROWS_AS(out(s), std::length_error);

    // An answer whose updater name claims 1 GiB: refused from its length alone.
    std::stringstream forged;
    {
        cereal::BinaryOutputArchive w(forged);
        const auto ok = a_shard();
        w(ok.shard, ok.state_width);
        w(std::uint32_t{1} << 30);
    }
    saved_shard got;
    cereal::BinaryInputArchive in(forged);
    CHECK_THROWS_AS(in(got), std::length_error);
}

TEST_CASE("checkpoint_call: read_checkpoint names the manifest it cannot find",
          "[server][checkpoint]") {
    const petrel::test::temp_dir dir;
    try {
        (void)petrel::read_checkpoint(dir.path(), 4);
        FAIL("a directory with no checkpoint was read");
    } catch (const petrel::checkpoint_error& e) {
        CHECK(std::string(e.what()).find("table-4") != std::string::npos);
    }
}
