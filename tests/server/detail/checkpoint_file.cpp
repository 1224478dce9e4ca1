#include <petrel/server/detail/checkpoint_file.hpp>

#include "support/checkpoint_files.hpp"
#include "support/temp_dir.hpp"

#include <petrel/core/detail/checksum.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/wire/detail/streambuf.hpp>

#include <catch2/catch.hpp>
#include <cereal/archives/binary.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using petrel::checkpoint_error;
using petrel::checkpoint_manifest;
using petrel::shard_info;
using petrel::shard_table;
using petrel::wire::scalar_type;

using petrel::test::append;
using petrel::test::make_table;
using petrel::test::manifest_for;
using petrel::test::no_limit;
using petrel::test::read_bytes;
using petrel::test::require_refused;
using petrel::test::temp_dir;
using petrel::test::write_bytes;
using petrel::test::write_text;

/// `info` describing `bytes` as they are: the size and checksum a manifest would record
/// had they been written so.
shard_info describing(shard_info info, const std::vector<std::byte>& bytes) {
    info.bytes = bytes.size();
    info.checksum = petrel::detail::checksum(bytes);
    return info;
}

template <typename K, typename V>
struct kv {
    using key = K;
    using value = V;
};

} // namespace

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
