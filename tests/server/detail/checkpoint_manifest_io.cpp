#include <petrel/server/detail/checkpoint_manifest_io.hpp>

#include "support/checkpoint_files.hpp"
#include "support/temp_dir.hpp"

#include <petrel/server/checkpoint.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace {

namespace fs = std::filesystem;
using petrel::checkpoint_manifest;
using petrel::wire::scalar_type;

using petrel::test::make_table;
using petrel::test::read_text;
using petrel::test::require_refused;
using petrel::test::temp_dir;
using petrel::test::write_text;

} // namespace

TEST_CASE("checkpoint: a manifest round-trips", "[checkpoint]") {
    const temp_dir dir;
    const fs::path tdir = petrel::detail::table_dir(dir.path(), 4);
    checkpoint_manifest m;
    m.table_id = 4;
    m.key_type = scalar_type::u32;
    m.value_type = scalar_type::f64;
    m.width = 16;
    m.state_width = 32;
    m.updater = "adam \"x\" \\ \n\t\x01 \xC3\xA9";
    m.dense = true;
    m.dense_begin = 100;
    m.dense_end = 1'000'100;
    m.clock = 42;
    m.clock_limit = 45;
    m.shards = {{"shard-0.bin", 0, 500'000, 123'456, 0xFEDCBA9876543210u},
                {"shard-2.bin", 2, 0, 80, 1},
                {"shard-1.bin", 1, 499'999, 120'000, 0}};

    petrel::detail::write_manifest(tdir, m);
    CHECK_FALSE(fs::exists(petrel::detail::manifest_path(tdir) += ".tmp"));
    const auto back = petrel::detail::read_manifest(tdir);
    // Shards come back in server order.
    auto sorted = m;
    std::swap(sorted.shards[1], sorted.shards[2]);
    CHECK(back == sorted);

    // The manifest is readable JSON with named fields and hex checksums.
    const auto text = read_text(tdir / "manifest.json");
    CHECK(text.find(R"("updater": "adam \"x\" \\ \n\t\u0001 )"
                    "\xC3\xA9\"") != std::string::npos);
    CHECK(text.find("\"key_type\": \"u32\"") != std::string::npos);
    CHECK(text.find("\"checksum\": \"0xfedcba9876543210\"") != std::string::npos);

    SECTION("an empty table") {
        checkpoint_manifest empty;
        empty.table_id = 9;
        petrel::detail::write_manifest(petrel::detail::table_dir(dir.path(), 9), empty);
        CHECK(petrel::detail::read_manifest(petrel::detail::table_dir(dir.path(), 9)) == empty);
    }
}

TEST_CASE("checkpoint: missing or damaged manifests are refused, naming the file", "[checkpoint]") {
    const temp_dir dir;
    const fs::path tdir = petrel::detail::table_dir(dir.path(), 3);
    const fs::path file = tdir / "manifest.json";
    auto read = [&] { (void)petrel::detail::read_manifest(tdir); };

    SECTION("no manifest: an incomplete checkpoint") {
        // The shards are there, the manifest is not (the writer died before it).
        const auto t = make_table<std::uint64_t, float>(5, 1, 0);
        (void)petrel::detail::write_shard(tdir / "shard-0.bin", 0, t);
        write_text(fs::path(file) += ".tmp", "{\"format_version\": 1");
        require_refused(read, file, "missing");
    }
    SECTION("no directory at all") {
        require_refused(read, file, "missing");
    }

    checkpoint_manifest m;
    m.table_id = 3;
    m.key_type = scalar_type::u64;
    m.value_type = scalar_type::f32;
    m.width = 8;
    m.updater = "sgd";
    m.shards = {{"shard-0.bin", 0, 10, 100, 5}, {"shard-1.bin", 1, 11, 101, 6}};
    petrel::detail::write_manifest(tdir, m);
    REQUIRE(petrel::detail::read_manifest(tdir) == m);
    const auto text = read_text(file);
    auto with = [&](std::string_view from, std::string_view to) {
        auto s = text;
        const auto at = s.find(from);
        REQUIRE(at != std::string::npos);
        s.replace(at, from.size(), to);
        write_text(file, s);
    };

    SECTION("truncated JSON") {
        write_text(file, text.substr(0, text.size() / 2));
        require_refused(read, file, "malformed manifest");
    }
    SECTION("not JSON") {
        write_text(file, "PTCK\x01\x02garbage");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("an empty file") {
        write_text(file, "");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("a JSON array") {
        write_text(file, "[1, 2, 3]");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("a missing field") {
        with("\"clock\": 0,", "");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("a manifest without clock_limit (an older one) reads it as its clock") {
        with("\"clock_limit\": 0,", "");
        CHECK(petrel::detail::read_manifest(tdir) == m);
        with("\"clock\": 0,\n    \"clock_limit\": 0,", "\"clock\": 7,");
        CHECK(petrel::detail::read_manifest(tdir).clock_limit == 7);
    }
    SECTION("a clock_limit below the clock") {
        with("\"clock\": 0,", "\"clock\": 7,");
        require_refused(read, file, "clock_limit 0 is below clock 7");
    }
    SECTION("a field of the wrong type") {
        with("\"width\": 8", "\"width\": \"eight\"");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("a negative number") {
        with("\"width\": 8", "\"width\": -8");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("an unknown format version") {
        with("\"format_version\": 1", "\"format_version\": 2");
        require_refused(read, file, "format version 2 is not supported");
    }
    SECTION("an unknown key type") {
        with("\"key_type\": \"u64\"", "\"key_type\": \"u16\"");
        require_refused(read, file, "unknown key type \"u16\"");
    }
    SECTION("a key type given as a value type") {
        with("\"value_type\": \"f32\"", "\"value_type\": \"u32\"");
        require_refused(read, file, "value type u32 is not f32 or f64");
    }
    SECTION("width 0") {
        with("\"width\": 8", "\"width\": 0");
        require_refused(read, file, "width 0");
    }
    SECTION("an absurd width") {
        with("\"width\": 8", "\"width\": 4000000000");
        require_refused(read, file, "width 4000000000");
    }
    SECTION("a shard file name with a directory") {
        with("\"shard-1.bin\"", "\"sub/shard-1.bin\"");
        require_refused(read, file, "not a plain file name");
    }
    SECTION("a shard file name leaving the directory") {
        with("\"shard-1.bin\"", "\"..\"");
        require_refused(read, file, "not a plain file name");
    }
    SECTION("a checksum that is not hex") {
        with("\"0x0000000000000006\"", "\"6\"");
        require_refused(read, file, "malformed manifest");
    }
    SECTION("a member given twice") {
        with("\"clock\": 0,", "\"clock\": 0, \"clock\": 1,");
        require_refused(read, file, "member \"clock\" appears twice");
    }
    SECTION("unknown members are skipped") {
        with("\"clock\": 0,", "\"clock\": 0, \"later\": {\"a\": [1.5, null]},");
        CHECK(petrel::detail::read_manifest(tdir) == m);
    }
    SECTION("a server listed twice") {
        with("\"server\": 1", "\"server\": 0");
        require_refused(read, file, "strictly increasing server order");
    }
    SECTION("a file listed twice") {
        with("\"shard-1.bin\"", "\"shard-0.bin\"");
        require_refused(read, file, "listed twice");
    }
    SECTION("an empty dense range") {
        with("\"dense\": false", "\"dense\": true");
        require_refused(read, file, "dense key range [0, 0) is empty");
    }
}

TEST_CASE("checkpoint: write_manifest refuses manifests read_manifest would", "[checkpoint]") {
    const temp_dir dir;
    const fs::path tdir = dir.path() / "table-1";
    checkpoint_manifest m;
    m.table_id = 1;
    m.shards = {{"shard-0.bin", 0, 1, 100, 5}};

    SECTION("a bad file name") {
        m.shards[0].file = "../shard-0.bin";
    }
    SECTION("a server twice") {
        m.shards.push_back({"shard-0b.bin", 0, 1, 100, 5});
    }
    SECTION("too many shards") {
        m.shards.clear();
        for (std::uint32_t s = 0; s <= (1u << 16); ++s) {
            m.shards.push_back({petrel::detail::shard_file_name(s), s, 0, 100, 0});
        }
    }
    SECTION("a bad type") {
        m.key_type = scalar_type::none;
    }
    SECTION("another format version") {
        m.format_version = 0;
    }

    CHECK_THROWS_AS(petrel::detail::write_manifest(tdir, m), std::invalid_argument);
    CHECK_FALSE(fs::exists(tdir / "manifest.json"));
}

TEST_CASE("checkpoint: a manifest's text is strict JSON, bounded, and an older Petrel's reads",
          "[checkpoint]") {
    // As Petrel wrote manifests before clock_limit was recorded (byte for byte).
    const std::string older = R"({
    "format_version": 1,
    "table_id": 3,
    "key_type": "u64",
    "value_type": "f32",
    "width": 8,
    "state_width": 16,
    "updater": "adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0}",
    "dense": false,
    "dense_begin": 0,
    "dense_end": 0,
    "clock": 12,
    "shards": [
        {
            "file": "shard-1.bin",
            "server": 1,
            "rows": 10,
            "bytes": 100,
            "checksum": "0x0000000000000005"
        },
        {
            "file": "shard-2.bin",
            "server": 2,
            "rows": 11,
            "bytes": 101,
            "checksum": "0xfedcba9876543210"
        }
    ]
}
)";
    auto parse = [](std::string_view text) {
        return petrel::detail::parse_manifest_json("manifest.json", text);
    };
    auto with = [&](std::string_view from, std::string_view to) {
        auto s = older;
        const auto at = s.find(from);
        REQUIRE(at != std::string::npos);
        s.replace(at, from.size(), to);
        return s;
    };
    auto refused = [&](const std::string& text, std::string_view why) {
        INFO(text.substr(0, 300));
        CHECK_THROWS_AS(parse(text), petrel::checkpoint_error);
        CHECK_THROWS_WITH(parse(text), Catch::Contains("manifest.json") &&
                                           Catch::Contains("malformed manifest") &&
                                           Catch::Contains(std::string(why)));
    };

    const auto m = parse(older);
    CHECK(m.table_id == 3);
    CHECK(m.width == 8);
    CHECK(m.state_width == 16);
    CHECK(m.updater == "adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0}");
    CHECK(m.clock == 12);
    CHECK(m.clock_limit == 12); // none recorded: the clock
    REQUIRE(m.shards.size() == 2);
    CHECK(m.shards[1].checksum == 0xfedcba9876543210u);
    CHECK(m.shards[1].rows == 11);
    // Written again, it is the same text but for the clock limit now recorded.
    CHECK(petrel::detail::manifest_json(m) ==
          with("\"clock\": 12,\n", "\"clock\": 12,\n    \"clock_limit\": 12,\n"));

    // Escapes decoded; the largest 64-bit number read; unknown members of any kind skipped.
    const auto escaped =
        parse(with(R"("updater": "adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0}")",
                   R"("updater": "a\"b\\c\/\n\u00e9\ud83d\ude00")"));
    CHECK(escaped.updater == "a\"b\\c/\n\xC3\xA9\xF0\x9F\x98\x80");
    CHECK(parse(with("\"rows\": 10", "\"rows\": 18446744073709551615")).shards[0].rows ==
          18446744073709551615u);
    CHECK(parse(with("\"clock\": 12,",
                     R"("clock": 12, "x": [1.5e-3, -2, null, true, {"y": "z\u0041"}, []],)")) == m);
    // Strings are bounded in bytes, escaped or not.
    const std::string a254(254, 'a');
    CHECK(parse(with("\"file\": \"shard-1.bin\"", "\"file\": \"" + a254 + "\\u00e9\""))
              .shards[0]
              .file.size() == 256);
    refused(with("\"file\": \"shard-1.bin\"", "\"file\": \"" + a254 + "a\\u00e9\""),
            "member \"file\" is longer than 256 bytes");

    refused("", "line 1, column 1");
    refused(older + " x", "parse error");
    refused(with("\"0xfedcba9876543210\"", "\"0xfedcba9876543210\","), "parse error");
    refused(with("\"width\": 8", "\"width\" 8"), "parse error");
    refused(with("\"width\": 8", "\"width\": 08"), "parse error");
    refused(with("\"rows\": 10", "\"rows\": 18446744073709551616"),
            "member \"rows\" is not an integer");
    refused(with("\"rows\": 10", "\"rows\": -1"), "member \"rows\" is not an integer");
    refused(with("\"rows\": 10", "\"rows\": 1.0"), "member \"rows\" is not an integer");
    refused(with("\"width\": 8", "\"width\": 4294967296"), "width 4294967296 does not fit");
    refused(with("\"dense\": false", "\"dense\": 0"), "member \"dense\" is not true or false");
    refused(with("\"updater\": \"adagrad", "\"updater\": \"\\ud83d adagrad"), "parse error");
    refused(with("\"updater\": \"adagrad", "\"updater\": \"\\q"), "parse error");
    refused(with("\"updater\": \"adagrad", "\"updater\": \"a\nb"), "parse error");
    refused(with("\"updater\": \"adagrad", "\"updater\": \"\xff"), "parse error");
    refused(older.substr(0, older.size() / 2), "parse error");
    refused(with("\"clock\": 12,", "\"clock\": 12, \"x\": 1.,"), "parse error");
    refused(with("\"clock\": 12,", "\"clock\": 12, \"x\": nul,"), "parse error");
    refused(with("\"clock\": 12,", "\"clock\": 12, // a comment\n"), "parse error");
    refused(with("\"rows\": 10,", "\"rows\": 10, \"rows\": 10,"), "member \"rows\" appears twice");
    refused(with("\"clock\": 12,", ""), "the manifest has no member \"clock\"");
    refused(with("\"bytes\": 101,", ""), "a shard has no member \"bytes\"");
    refused(with("\"shards\": [", "\"shards\": [7, "), "a shard is not a JSON object");
    refused("[1, 2]", "the manifest is not a JSON object");
    // Nesting is bounded, whatever the length of the text.
    refused(with("\"clock\": 12,", "\"clock\": 12, \"x\": " + std::string(100'000, '[') +
                                       std::string(100'000, ']') + ","),
            "nested deeper than 32 levels");
    // Unknown members are skipped, not kept: a name may come again; the shards are counted
    // as they come.
    CHECK(parse(with("\"clock\": 12,", "\"clock\": 12, \"x\": 1, \"x\": [2], \"x\": {},")) == m);
    std::string many = "\"shards\": [";
    for (std::uint32_t s = 0; s <= 65536; ++s) {
        many += std::string(s == 0 ? "" : ",") +
                "{\"file\": \"f\", \"server\": " + std::to_string(s) +
                ", \"rows\": 0, \"bytes\": 12, \"checksum\": \"0x0\"}";
    }
    refused(with("\"shards\": [", many + ","), "more than 65536 shards");
    // Errors in the text say where.
    refused(with("\"width\": 8", "\"width\": x"), "line 6, column");
}
