// Test support: checkpoint tables to write, raw file access, and checks of refusals.
#pragma once

#include <petrel/server/checkpoint.hpp>
#include <petrel/wire/header.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel::test {

/// Appends the bytes of `v` to `out`, as it lies in memory.
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
    t.key_type = wire::scalar_type_of<Key>;
    t.value_type = wire::scalar_type_of<Value>;
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

/// The manifest of `t`'s table at clock 12, listing `shards`.
inline checkpoint_manifest manifest_for(const shard_table& t, std::vector<shard_info> shards) {
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

inline std::vector<std::byte> read_bytes(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

inline void write_bytes(const std::filesystem::path& file, const std::vector<std::byte>& bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_text(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
}

/// A limit on shard sizes that no test reaches.
inline constexpr std::uint64_t no_limit = std::uint64_t{1} << 32;

/// Runs `f`, which must throw a checkpoint_error about `file` whose message contains
/// `problem`.
template <typename F>
void require_refused(F&& f, const std::filesystem::path& file, std::string_view problem) {
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

} // namespace petrel::test
