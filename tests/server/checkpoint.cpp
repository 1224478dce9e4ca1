#include <petrel/server/checkpoint.hpp>

#include "support/checkpoint_files.hpp"
#include "support/temp_dir.hpp"

#include <petrel/wire/detail/streambuf.hpp>

#include <catch2/catch.hpp>
#include <cereal/archives/binary.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <istream>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
using petrel::shard_info;
using petrel::shard_table;

using petrel::test::make_table;
using petrel::test::manifest_for;
using petrel::test::no_limit;
using petrel::test::require_refused;
using petrel::test::temp_dir;

} // namespace

TEST_CASE("checkpoint: shard records round-trip through Cereal's binary archive, bounded",
          "[checkpoint]") {
    const shard_info info{"shard-12.bin", 12, 77, 9000, 0x0123456789ABCDEFu};
    std::vector<std::byte> bytes;
    {
        petrel::wire::detail::vector_sink sink(bytes);
        std::ostream os(&sink);
        cereal::BinaryOutputArchive ar(os);
        ar(info);
    }
    auto decode = [](const std::vector<std::byte>& b) {
        petrel::wire::detail::span_source source(b);
        std::istream is(&source);
        cereal::BinaryInputArchive ar(is);
        shard_info out;
        ar(out);
        return out;
    };
    CHECK(decode(bytes) == info);

    // A huge name length is refused before anything is allocated.
    auto huge = bytes;
    const std::uint32_t big = 0xFFFFFFF0u;
    std::memcpy(huge.data(), &big, sizeof big);
    CHECK_THROWS_AS(decode(huge), std::length_error);
    // Truncations throw.
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        CHECK_THROWS(decode(std::vector<std::byte>(bytes.begin(), bytes.begin() + n)));
    }
    // A name that leaves the table's directory is refused.
    auto escape = info;
    escape.file = "../../etc/x";
    std::vector<std::byte> escaping;
    {
        petrel::wire::detail::vector_sink sink(escaping);
        std::ostream os(&sink);
        cereal::BinaryOutputArchive ar(os);
        ar(escape);
    }
    CHECK_THROWS_AS(decode(escaping), std::domain_error);
    // Names too long are not written.
    escape.file.assign(300, 'a');
    std::vector<std::byte> ignored;
    petrel::wire::detail::vector_sink sink(ignored);
    std::ostream os(&sink);
    cereal::BinaryOutputArchive ar(os);
    CHECK_THROWS_AS(ar(escape), std::length_error);
}

TEST_CASE("checkpoint: a table saved by several servers reads back shard by shard",
          "[checkpoint]") {
    // The whole flow: each server writes its shard, the manifest follows, a reader
    // (possibly of another server count) reads every shard the manifest lists.
    const temp_dir dir;
    const fs::path tdir = petrel::detail::table_dir(dir.path(), 7);
    std::vector<shard_table> tables;
    std::vector<shard_info> infos;
    for (std::uint32_t s = 0; s < 3; ++s) {
        tables.push_back(make_table<std::uint64_t, float>(100 * s, 2, 2));
        infos.push_back(
            petrel::detail::write_shard(tdir / petrel::detail::shard_file_name(s), s, tables[s]));
    }
    auto m = manifest_for(tables[0], infos);
    petrel::detail::write_manifest(tdir, m);

    const auto back = petrel::detail::read_manifest(tdir);
    REQUIRE(back.shards.size() == 3);
    for (std::size_t s = 0; s < 3; ++s) {
        const auto& info = back.shards[s];
        CHECK(petrel::detail::read_shard(tdir / info.file, back, info, no_limit) == tables[s]);
    }
    // Shards swapped on disk are caught.
    fs::rename(tdir / "shard-1.bin", tdir / "swap");
    fs::rename(tdir / "shard-2.bin", tdir / "shard-1.bin");
    require_refused(
        [&] {
            (void)petrel::detail::read_shard(tdir / "shard-1.bin", back, back.shards[1], no_limit);
        },
        tdir / "shard-1.bin", "the manifest records");
}
