#include <petrel/server/detail/checkpoint_format.hpp>

#include <petrel/core/error.hpp>
#include <petrel/wire/header.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using petrel::wire::scalar_type;

std::vector<std::byte> key_bytes(const std::vector<std::uint32_t>& keys) {
    std::vector<std::byte> out(keys.size() * sizeof(std::uint32_t));
    std::memcpy(out.data(), keys.data(), out.size());
    return out;
}

} // namespace

TEST_CASE("checkpoint format: scalar types are named in manifests, unknown ones refused",
          "[checkpoint]") {
    for (const auto t : {scalar_type::u32, scalar_type::u64, scalar_type::f32, scalar_type::f64}) {
        CHECK(petrel::detail::checkpoint_type_from_name(petrel::detail::checkpoint_type_name(t)) ==
              t);
        CHECK(petrel::detail::checkpoint_type_text(t) == petrel::detail::checkpoint_type_name(t));
    }
    static_assert(petrel::detail::checkpoint_type_name(scalar_type::f64) == "f64");
    static_assert(petrel::detail::checkpoint_type_from_name("u32") == scalar_type::u32);
    CHECK(petrel::detail::checkpoint_type_from_name("u16") == scalar_type::none);
    CHECK(petrel::detail::checkpoint_type_from_name("none") == scalar_type::none);
    CHECK(petrel::detail::checkpoint_type_text(static_cast<scalar_type>(9)) == "unknown (9)");
    CHECK(petrel::detail::is_checkpoint_key_type(scalar_type::u64));
    CHECK_FALSE(petrel::detail::is_checkpoint_key_type(scalar_type::f32));
    CHECK(petrel::detail::is_checkpoint_value_type(scalar_type::f32));
    CHECK_FALSE(petrel::detail::is_checkpoint_value_type(scalar_type::u32));
}

TEST_CASE("checkpoint format: checksums are written as 0x and 16 hex digits", "[checkpoint]") {
    CHECK(petrel::detail::hex64(0) == "0x0000000000000000");
    CHECK(petrel::detail::hex64(0xFEDCBA9876543210u) == "0xfedcba9876543210");
    for (const std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0xABCDEF},
                                  std::numeric_limits<std::uint64_t>::max()}) {
        CHECK(petrel::detail::parse_hex64(petrel::detail::hex64(v)) == v);
    }
    CHECK(petrel::detail::parse_hex64("0X1f") == 0x1Fu);
    for (std::string_view bad : {"", "0x", "12", "x12", "0x12g", "0x-1", "0x00000000000000001"}) {
        INFO(bad);
        CHECK_FALSE(petrel::detail::parse_hex64(bad).has_value());
    }
}

TEST_CASE("checkpoint format: shard file names stay in their table's directory", "[checkpoint]") {
    CHECK(petrel::detail::shard_file_name(3) == "shard-3.bin");
    CHECK(petrel::detail::table_dir("ckpt", 7) == std::filesystem::path("ckpt") / "table-7");
    CHECK(petrel::detail::manifest_path("ckpt/table-7") ==
          std::filesystem::path("ckpt/table-7") / "manifest.json");
    CHECK(petrel::detail::is_plain_file_name("shard-3.bin"));
    CHECK(petrel::detail::is_plain_file_name(std::string(256, 'a')));
    for (const std::string& bad :
         {std::string(), std::string("."), std::string(".."), std::string("a..b"),
          std::string("a/b"), std::string("a\\b"), std::string("c:x"), std::string("a\x01"),
          std::string(257, 'a')}) {
        INFO(bad);
        CHECK_FALSE(petrel::detail::is_plain_file_name(bad));
    }
}

TEST_CASE("checkpoint format: a table's shape gives its payload sizes, or says what is wrong",
          "[checkpoint]") {
    const auto sizes =
        petrel::detail::checkpoint_payload_bytes(scalar_type::u32, scalar_type::f64, 3, 1, 10);
    REQUIRE(sizes.has_value());
    CHECK(*sizes == std::array<std::uint64_t, 3>{40, 240, 80});
    CHECK_FALSE(petrel::detail::checkpoint_payload_bytes(scalar_type::u64, scalar_type::f32, 4, 0,
                                                         std::uint64_t{1} << 62)
                    .has_value());
    CHECK(petrel::detail::checked_add(std::numeric_limits<std::uint64_t>::max(), 1) ==
          std::nullopt);
    CHECK(petrel::detail::checked_mul(std::uint64_t{1} << 32, std::uint64_t{1} << 32) ==
          std::nullopt);
    CHECK(petrel::detail::checked_mul(0, 5) == 0u);

    CHECK(
        petrel::detail::check_table_shape(scalar_type::u64, scalar_type::f32, 1, 0, "sum").empty());
    CHECK(petrel::detail::check_table_shape(scalar_type::f32, scalar_type::f32, 1, 0, "sum") ==
          "key type f32 is not u32 or u64");
    CHECK(petrel::detail::check_table_shape(scalar_type::u64, scalar_type::u64, 1, 0, "sum") ==
          "value type u64 is not f32 or f64");
    CHECK(petrel::detail::check_table_shape(scalar_type::u64, scalar_type::f32, 0, 0, "sum") ==
          "width 0 is not in [1, 2^24]");
    CHECK(petrel::detail::check_table_shape(scalar_type::u64, scalar_type::f32, 1, (1u << 24) + 1,
                                            "sum") == "state width 16777217 exceeds 2^24");
    CHECK(petrel::detail::check_table_shape(scalar_type::u64, scalar_type::f32, 1, 0,
                                            std::string(257, 'x')) ==
          "updater name longer than 256 bytes");

    const auto ascending = key_bytes({1, 5, 9});
    CHECK(petrel::detail::first_unsorted_key(scalar_type::u32, ascending.data(), 3) == 3);
    const auto repeated = key_bytes({1, 5, 5, 9});
    CHECK(petrel::detail::first_unsorted_key(scalar_type::u32, repeated.data(), 4) == 2);
}

TEST_CASE("checkpoint format: payloads round-trip through snappy blocks, checked first",
          "[checkpoint]") {
    // More than two blocks, half of it incompressible.
    std::vector<std::byte> in(petrel::detail::checkpoint_block_bytes * 2 + 12345);
    std::mt19937_64 rng(11);
    for (std::size_t i = 0; i < in.size(); ++i) {
        in[i] = i < in.size() / 2 ? static_cast<std::byte>(rng()) : static_cast<std::byte>(i % 7);
    }
    const auto stored = petrel::detail::compress_payload(in);
    CHECK(petrel::detail::check_payload(stored, in.size()).empty());
    std::vector<std::byte> out(in.size());
    REQUIRE(petrel::detail::uncompress_payload(stored, out));
    CHECK(out == in);

    CHECK(petrel::detail::compress_payload({}).empty());
    CHECK(petrel::detail::check_payload({}, 0).empty());

    const std::span<const std::byte> all(stored);
    CHECK(petrel::detail::check_payload(all.first(2), in.size()) ==
          "truncated (a block length is missing)");
    CHECK(petrel::detail::check_payload(all.first(all.size() - 1), in.size())
              .starts_with("truncated (a block needs"));
    CHECK(petrel::detail::check_payload(all, in.size() - 1).starts_with("a block uncompresses to"));

    auto longer = petrel::detail::compress_payload(std::span(in).first(100));
    CHECK(petrel::detail::check_payload(longer, 100).empty());
    longer.push_back(std::byte{0});
    CHECK(petrel::detail::check_payload(longer, 100) == "1 bytes follow the last block");
}

TEST_CASE("checkpoint format: a save's directory resolves under the root, never out of it",
          "[checkpoint][security]") {
    using petrel::detail::resolve_checkpoint_dir;
    const std::filesystem::path root = "/srv/ckpt";
    std::filesystem::path out;
    std::string why;
    auto refused = [&](const std::filesystem::path& r, std::string_view dir) {
        out.clear();
        why.clear();
        const auto ec = resolve_checkpoint_dir(r, dir, out, why);
        return ec == petrel::errc::invalid_argument && out.empty() && !why.empty();
    };

    REQUIRE_FALSE(resolve_checkpoint_dir(root, "run1/epoch3", out, why));
    CHECK(out == root / "run1" / "epoch3");
    REQUIRE_FALSE(resolve_checkpoint_dir(root, "./run1", out, why));
    CHECK(out == root / "." / "run1");
    REQUIRE_FALSE(resolve_checkpoint_dir(root, "a..b/..c", out, why)); // names, not climbs
    CHECK(out == root / "a..b" / "..c");

    CHECK(refused(root, "/etc"));
    CHECK_THAT(why, Catch::Contains("absolute") && Catch::Contains("--checkpoint-root"));
    CHECK(refused(root, "//host/share"));
    for (const auto* climb : {"..", "../x", "run/../../x", "run/..", "./../x", "a/../b"}) {
        INFO(climb);
        CHECK(refused(root, climb));
        CHECK_THAT(why, Catch::Contains("\"..\""));
    }
    // Always refused, with a root or without.
    for (const auto& r : {root, std::filesystem::path{}}) {
        CHECK(refused(r, ""));
        CHECK(refused(r, std::string_view("run\0/x", 6)));
        CHECK_THAT(why, Catch::Contains("NUL") && Catch::Contains("run\\x00/x"));
        CHECK(refused(r, std::string(petrel::detail::checkpoint_max_dir_bytes + 1, 'a')));
    }
    // A text with control characters is shown escaped.
    CHECK(refused(root, "/x\n\x1b[2J"));
    CHECK(why.find('\n') == std::string::npos);
    CHECK(why.find('\x1b') == std::string::npos);

    // Without a root (every client in this process), any directory as given.
    REQUIRE_FALSE(resolve_checkpoint_dir({}, "/tmp/../ckpt", out, why));
    CHECK(out == "/tmp/../ckpt");
    REQUIRE_FALSE(resolve_checkpoint_dir(
        root, std::string(petrel::detail::checkpoint_max_dir_bytes, 'a'), out, why));
}
