#include <petrel/server/checkpoint.hpp>

#include "support/checkpoint_files.hpp"
#include "support/temp_dir.hpp"

#include <petrel/core/detail/checksum.hpp>
#include <petrel/server/detail/json.hpp>
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

TEST_CASE("checkpoint: the checksum is XXH64, the same in pieces as in one go", "[checkpoint]") {
    auto bytes_of = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
    // Reference values of XXH64 with seed 0 (as `xxhsum -H1` prints them).
    CHECK(petrel::detail::checksum({}) == 0xEF46DB3751D8E999u);
    CHECK(petrel::detail::checksum(bytes_of("abc")) == 0x44BC2CF5AD770999u);
    CHECK(petrel::detail::checksum(bytes_of("Nobody inspects the spammish repetition")) ==
          0xFBCEA83C8A378BF1u);

    std::vector<std::byte> data(1000);
    std::mt19937_64 rng(5);
    for (auto& b : data) {
        b = static_cast<std::byte>(rng());
    }
    for (std::size_t n : {0, 1, 7, 31, 32, 33, 64, 100, 1000}) {
        const auto all = std::span(data).first(n);
        const auto whole = petrel::detail::checksum(all);
        for (std::size_t step : {1, 3, 8, 31, 32, 45}) {
            petrel::detail::checksum64 h;
            for (std::size_t at = 0; at < n; at += step) {
                h.update(all.subspan(at, std::min(step, n - at)));
            }
            CHECK(h.digest() == whole);
        }
    }
    auto flipped = data;
    flipped[500] ^= std::byte{1};
    CHECK(petrel::detail::checksum(flipped) != petrel::detail::checksum(data));
}

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

TEST_CASE("checkpoint: the manifest's JSON reader is strict and bounded", "[checkpoint]") {
    using petrel::detail::json_error;
    using petrel::detail::json_reader;
    std::string name;
    std::vector<std::uint64_t> sizes;
    auto parse = [&](std::string_view text) {
        name.clear();
        sizes.clear();
        json_reader r(text);
        r.object([&](std::string_view key) {
            if (key == "name") {
                name = r.string(16);
            } else if (key == "sizes") {
                r.array([&] { sizes.push_back(r.u64()); });
            } else {
                r.skip();
            }
        });
        r.finish();
    };

    parse(
        R"( { "sizes" : [ 0, 18446744073709551615 ], "name": "a\"b\\c\/\n\u00e9\ud83d\ude00" } )");
    CHECK(name == "a\"b\\c/\n\xC3\xA9\xF0\x9F\x98\x80");
    CHECK(sizes == std::vector<std::uint64_t>{0, 18446744073709551615u});
    // Unknown members of any kind are skipped.
    parse(R"({"x": [1.5e-3, -2, null, true, {"y": "z\u0041"}, []], "name": "n", "q": {}})");
    CHECK(name == "n");
    // The escaped and plain forms of a string count the same bytes against the limit.
    parse(R"({"name": "0123456789abcd\u00e9"})");
    CHECK(name.size() == 16);
    CHECK_THROWS_AS(parse(R"({"name": "0123456789abcde\u00e9"})"), json_error);

    for (std::string_view bad : {
             R"()",                                  // nothing
             R"({"name": "a"} x)",                   // trailing text
             R"({"name": "a",})",                    // trailing comma
             R"({"name" "a"})",                      // no colon
             R"({"sizes": [01]})",                   // leading zero
             R"({"sizes": [18446744073709551616]})", // more than 64 bits
             R"({"sizes": [-1]})",                   // negative
             R"({"sizes": [1.0]})",                  // not an integer
             R"({"name": "01234567890123456"})",     // longer than the limit
             R"({"name": "\ud83d"})",                // lone surrogate
             R"({"name": "\q"})",                    // unknown escape
             R"({"name": "a)",                       // unterminated
             "{\"name\": \"a\nb\"}",                 // raw control character
             R"({"x": 1.})",                         // malformed number in a skipped value
             R"({"x": nul})",                        // not a literal
         }) {
        INFO(bad);
        CHECK_THROWS_AS(parse(bad), json_error);
    }
    // Nesting is bounded, whatever the length of the text.
    const std::string deep =
        "{\"x\": " + std::string(100'000, '[') + std::string(100'000, ']') + "}";
    CHECK_THROWS_WITH(parse(deep), Catch::Contains("nested deeper than 32 levels"));
    // Errors say where.
    CHECK_THROWS_WITH(parse("{\n  \"sizes\": [1,\n x]}"), Catch::Contains("line 3, column 2"));
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
