#include <petrel/server/checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <petrel/wire/detail/streambuf.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
using petrel::checkpoint_error;
using petrel::checkpoint_manifest;
using petrel::shard_info;
using petrel::shard_table;
using petrel::wire::scalar_type;

using petrel::test::temp_dir;

template <typename T>
void append(std::vector<std::byte>& out, T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof v);
}

/// A table of `rows` rows with keys 3, 10, 17, ... and values that depend on the row;
/// `noise` makes the values incompressible.
template <typename Key, typename Value>
shard_table make_table(std::uint64_t rows, std::uint32_t width, std::uint32_t state_width,
                       bool noise = false) {
    shard_table t;
    t.table_id = 7;
    t.key_type = petrel::wire::scalar_type_of<Key>;
    t.value_type = petrel::wire::scalar_type_of<Value>;
    t.width = width;
    t.state_width = state_width;
    t.updater = state_width > 0 ? "adam" : "sum";
    t.rows = rows;
    std::mt19937_64 rng(rows * 31 + width);
    for (std::uint64_t i = 0; i < rows; ++i) {
        append(t.keys, static_cast<Key>(3 + 7 * i));
        for (std::uint32_t j = 0; j < width; ++j) {
            append(t.values, noise ? static_cast<Value>(rng()) : static_cast<Value>(i % 13) + j);
        }
        for (std::uint32_t j = 0; j < state_width; ++j) {
            append(t.state, static_cast<Value>(0.5) * static_cast<Value>(i + j));
        }
    }
    return t;
}

checkpoint_manifest manifest_for(const shard_table& t, std::vector<shard_info> shards) {
    checkpoint_manifest m;
    m.table_id = t.table_id;
    m.key_type = t.key_type;
    m.value_type = t.value_type;
    m.width = t.width;
    m.state_width = t.state_width;
    m.updater = t.updater;
    m.clock = 12;
    m.shards = std::move(shards);
    return m;
}

std::vector<std::byte> read_bytes(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

void write_bytes(const fs::path& file, const std::vector<std::byte>& bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
}

/// `info` describing `bytes` as they are: the size and checksum a manifest would record
/// had they been written so.
shard_info describing(shard_info info, const std::vector<std::byte>& bytes) {
    info.bytes = bytes.size();
    info.checksum = petrel::detail::checksum(bytes);
    return info;
}

constexpr std::uint64_t no_limit = std::uint64_t{1} << 32;

/// Runs `f`, which must throw a checkpoint_error about `file` whose message contains
/// `problem`.
template <typename F>
void require_refused(F&& f, const fs::path& file, std::string_view problem) {
    try {
        f();
        FAIL("no checkpoint_error was thrown; expected \"" << problem << "\"");
    } catch (const checkpoint_error& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(e.path() == file);
        CHECK(what.find(file.string()) != std::string::npos);
        CHECK(what.find(problem) != std::string::npos);
    }
}

template <typename K, typename V>
struct kv {
    using key = K;
    using value = V;
};

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

TEMPLATE_TEST_CASE("checkpoint: a shard round-trips its rows", "[checkpoint]",
                   (kv<std::uint32_t, float>), (kv<std::uint64_t, double>),
                   (kv<std::uint32_t, double>), (kv<std::uint64_t, float>)) {
    using key = typename TestType::key;
    using value = typename TestType::value;
    const temp_dir dir;
    const fs::path tdir = petrel::detail::table_dir(dir.path(), 7);
    CHECK(tdir == dir.path() / "table-7");
    const fs::path file = tdir / petrel::detail::shard_file_name(3);

    shard_table t;
    SECTION("without optimizer state") {
        t = make_table<key, value>(1000, 4, 0);
    }
    SECTION("with optimizer state") {
        t = make_table<key, value>(1000, 3, 6);
    }
    SECTION("empty") {
        t = make_table<key, value>(0, 2, 1);
    }
    SECTION("incompressible values over several compression blocks") {
        t = make_table<key, value>(300'000, 5, 0, true);
    }

    const shard_info info = petrel::detail::write_shard(file, 3, t);
    CHECK(info.file == "shard-3.bin");
    CHECK(info.server == 3);
    CHECK(info.rows == t.rows);
    REQUIRE(fs::exists(file));
    CHECK_FALSE(fs::exists(fs::path(file) += ".tmp"));
    CHECK(info.bytes == fs::file_size(file));
    CHECK(info.checksum == petrel::detail::checksum(read_bytes(file)));

    const auto m = manifest_for(t, {info});
    const shard_table back = petrel::detail::read_shard(file, m, info, no_limit);
    CHECK(back == t);
}

TEST_CASE("checkpoint: a shard that is rewritten is replaced whole", "[checkpoint]") {
    const temp_dir dir;
    const fs::path file = dir.path() / "shard-0.bin";
    // A leftover temporary file of a crashed writer does not get in the way.
    write_text(fs::path(file) += ".tmp", "half a file");
    const auto first = make_table<std::uint64_t, float>(50, 2, 0);
    const auto second = make_table<std::uint64_t, float>(80, 2, 0);
    const auto info1 = petrel::detail::write_shard(file, 0, first);
    const auto info2 = petrel::detail::write_shard(file, 0, second);
    CHECK_FALSE(fs::exists(fs::path(file) += ".tmp"));
    CHECK(info1.checksum != info2.checksum);
    CHECK(petrel::detail::read_shard(file, manifest_for(second, {info2}), info2, no_limit) ==
          second);
    // The first version's record no longer matches the file.
    require_refused(
        [&] {
            (void)petrel::detail::read_shard(file, manifest_for(first, {info1}), info1, no_limit);
        },
        file, "the manifest records");
}

TEST_CASE("checkpoint: write_shard refuses tables that are not well formed", "[checkpoint]") {
    const temp_dir dir;
    const fs::path file = dir.path() / "shard-0.bin";
    auto t = make_table<std::uint32_t, float>(10, 2, 0);

    SECTION("keys out of order") {
        std::swap_ranges(t.keys.begin() + 8, t.keys.begin() + 12, t.keys.begin() + 12);
    }
    SECTION("a repeated key") {
        std::copy(t.keys.begin() + 4, t.keys.begin() + 8, t.keys.begin() + 8);
    }
    SECTION("values that do not match the rows") {
        t.values.pop_back();
    }
    SECTION("state that does not match the rows") {
        t.state.resize(4);
    }
    SECTION("width 0") {
        t.width = 0;
    }
    SECTION("an unknown key type") {
        t.key_type = scalar_type::f32;
    }
    SECTION("an unknown value type") {
        t.value_type = scalar_type::u64;
    }
    SECTION("an updater name that is too long") {
        t.updater.assign(300, 'x');
    }

    CHECK_THROWS_AS(petrel::detail::write_shard(file, 0, t), std::invalid_argument);
    CHECK_FALSE(fs::exists(file));
    CHECK_FALSE(fs::exists(fs::path(file) += ".tmp"));
}

TEST_CASE("checkpoint: damaged or mismatched shards are refused, naming the file", "[checkpoint]") {
    const temp_dir dir;
    const fs::path file = dir.path() / "table-7" / "shard-1.bin";
    const auto t = make_table<std::uint64_t, float>(2000, 4, 2);
    const auto info = petrel::detail::write_shard(file, 1, t);
    const auto m = manifest_for(t, {info});
    const auto good = read_bytes(file);
    auto read = [&](const shard_info& expected, const checkpoint_manifest& manifest,
                    std::uint64_t limit = no_limit) {
        return [manifest, expected, limit, &file] {
            (void)petrel::detail::read_shard(file, manifest, expected, limit);
        };
    };

    SECTION("a missing file") {
        fs::remove(file);
        require_refused(read(info, m), file, "cannot read");
    }
    SECTION("a truncated file") {
        write_bytes(file, std::vector<std::byte>(good.begin(), good.end() - 10));
        require_refused(read(info, m), file, "truncated");
    }
    SECTION("a longer file") {
        auto longer = good;
        longer.push_back(std::byte{0});
        write_bytes(file, longer);
        require_refused(read(info, m), file, "more than the manifest records");
    }
    SECTION("a flipped byte") {
        auto bad = good;
        bad[bad.size() / 2] ^= std::byte{0x10};
        write_bytes(file, bad);
        require_refused(read(info, m), file, "checksum mismatch");
    }
    SECTION("a wrong checksum in the manifest") {
        auto wrong = info;
        wrong.checksum ^= 1;
        require_refused(read(wrong, m), file, "checksum mismatch");
    }
    SECTION("a shard written for another table") {
        auto other = m;
        other.table_id = 8;
        require_refused(read(info, other), file, "written for table 7, not table 8");
    }
    SECTION("a shard written by another server") {
        auto wrong = info;
        wrong.server = 2;
        require_refused(read(wrong, m), file, "written by server 1, not server 2");
    }
    SECTION("another row count") {
        auto wrong = info;
        wrong.rows = 1999;
        require_refused(read(wrong, m), file, "2000 rows");
    }
    SECTION("another value type, width or updater") {
        auto other = m;
        other.value_type = scalar_type::f64;
        require_refused(read(info, other), file, "f32 values");
        other = m;
        other.width = 5;
        require_refused(read(info, other), file, "width 4");
        other = m;
        other.updater = "sgd";
        require_refused(read(info, other), file, "updater \"adam\"");
    }
    SECTION("a file above the limit") {
        require_refused(read(info, m, info.bytes - 1), file, "limit");
    }
    SECTION("rows above the limit") {
        require_refused(read(info, m, info.bytes + 1000), file, "limit");
    }
}

TEST_CASE("checkpoint: shard contents are checked even when size and checksum match",
          "[checkpoint]") {
    // A file whose record matches it (as if the damage happened before it was hashed):
    // the parser alone must refuse it, cleanly, without reading or allocating beyond
    // what the bytes hold.
    const temp_dir dir;
    const fs::path file = dir.path() / "shard-0.bin";
    const auto t = make_table<std::uint32_t, double>(300, 3, 1);
    const auto info = petrel::detail::write_shard(file, 0, t);
    const auto m = manifest_for(t, {info});
    const auto good = read_bytes(file);
    auto read_as_is = [&](const std::vector<std::byte>& bytes) {
        write_bytes(file, bytes);
        return petrel::detail::read_shard(file, m, describing(info, bytes), no_limit);
    };

    SECTION("every truncation") {
        for (std::size_t n = 0; n < good.size(); n += (n < 200 ? 1 : 97)) {
            INFO("truncated to " << n << " bytes");
            CHECK_THROWS_AS(read_as_is(std::vector<std::byte>(good.begin(), good.begin() + n)),
                            checkpoint_error);
        }
        require_refused(
            [&] { (void)read_as_is(std::vector<std::byte>(good.begin(), good.begin() + 40)); },
            file, "truncated");
    }
    SECTION("trailing bytes") {
        auto longer = good;
        longer.push_back(std::byte{0});
        require_refused([&] { (void)read_as_is(longer); }, file, "follow the payloads");
    }
    SECTION("a wrong magic number") {
        auto bad = good;
        bad[0] = std::byte{'X'};
        require_refused([&] { (void)read_as_is(bad); }, file, "not a Petrel checkpoint shard");
    }
    SECTION("another format version") {
        auto bad = good;
        bad[4] = std::byte{2};
        require_refused([&] { (void)read_as_is(bad); }, file, "format version 2");
    }
    SECTION("a huge header length") {
        auto bad = good;
        bad[11] = std::byte{0x7F};
        require_refused([&] { (void)read_as_is(bad); }, file, "malformed header");
    }
    SECTION("a huge updater name length") {
        // The header starts at byte 12: table id, server, two types, two widths (18
        // bytes), then the updater name's length.
        auto bad = good;
        const std::uint32_t huge = 0xFFFFFFF0u;
        std::memcpy(bad.data() + 12 + 18, &huge, sizeof huge);
        require_refused([&] { (void)read_as_is(bad); }, file, "malformed header");
    }
    SECTION("an unknown key type") {
        auto bad = good;
        bad[12 + 8] = std::byte{9};
        require_refused([&] { (void)read_as_is(bad); }, file, "unknown key type");
    }
    SECTION("every byte flipped in turn") {
        // Each damaged file is refused or, where the damage hits a value, read as a
        // well-formed table; never anything else (the sanitizer builds check the rest).
        std::size_t refused = 0;
        for (std::size_t i = 0; i < good.size(); i += (i < 300 ? 1 : 37)) {
            auto bad = good;
            bad[i] ^= std::byte{0x41};
            try {
                const auto back = read_as_is(bad);
                CHECK(back.rows == t.rows);
                CHECK(back.keys.size() == t.keys.size());
                CHECK(back.values.size() == t.values.size());
                CHECK(back.state.size() == t.state.size());
            } catch (const checkpoint_error&) {
                ++refused;
            }
        }
        CHECK(refused > 100);
    }
    SECTION("keys out of order in the file") {
        // Written by hand as write_shard would, had it not refused the keys.
        auto unsorted = make_table<std::uint32_t, double>(3, 3, 1);
        std::swap_ranges(unsorted.keys.begin(), unsorted.keys.begin() + 4,
                         unsorted.keys.begin() + 4);
        petrel::detail::checkpoint_shard_header h;
        h.table_id = unsorted.table_id;
        h.key_type = unsorted.key_type;
        h.value_type = unsorted.value_type;
        h.width = unsorted.width;
        h.state_width = unsorted.state_width;
        h.updater = unsorted.updater;
        h.rows = unsorted.rows;
        const std::vector<std::byte>* in[] = {&unsorted.keys, &unsorted.values, &unsorted.state};
        std::vector<std::byte> payloads;
        for (std::size_t i = 0; i < 3; ++i) {
            const auto p = petrel::detail::compress_payload(*in[i]);
            h.compressed[i] = p.size();
            h.uncompressed[i] = in[i]->size();
            payloads.insert(payloads.end(), p.begin(), p.end());
        }
        std::vector<std::byte> header;
        {
            petrel::wire::detail::vector_sink sink(header);
            std::ostream os(&sink);
            cereal::BinaryOutputArchive ar(os);
            ar(h);
        }
        std::vector<std::byte> bytes;
        append(bytes, petrel::detail::checkpoint_magic);
        append(bytes, petrel::checkpoint_format_version);
        append(bytes, static_cast<std::uint32_t>(header.size()));
        bytes.insert(bytes.end(), header.begin(), header.end());
        bytes.insert(bytes.end(), payloads.begin(), payloads.end());
        write_bytes(file, bytes);
        auto expected = describing(info, bytes);
        expected.rows = 3;
        require_refused(
            [&] {
                (void)petrel::detail::read_shard(file, manifest_for(unsorted, {expected}), expected,
                                                 no_limit);
            },
            file, "keys are not strictly ascending (row 1)");
    }
}

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
