// Petrel: checkpoint manifests: their checks, their JSON text, and the manifest file.
#ifndef PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP
#define PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP

#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_file.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/server/detail/checkpoint_manifest_io.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel::detail {

PETREL_DECL std::string check_manifest(const checkpoint_manifest& m) {
    if (m.format_version != checkpoint_format_version) {
        return "format version " + std::to_string(m.format_version) +
               " is not supported (this build reads version " +
               std::to_string(checkpoint_format_version) + ")";
    }
    if (auto why = check_table_shape(m.key_type, m.value_type, m.width, m.state_width, m.updater);
        !why.empty()) {
        return why;
    }
    if (m.dense && m.dense_begin >= m.dense_end) {
        return "dense key range [" + std::to_string(m.dense_begin) + ", " +
               std::to_string(m.dense_end) + ") is empty";
    }
    if (m.shards.size() > checkpoint_max_shards) {
        return std::to_string(m.shards.size()) + " shards, more than 65536";
    }
    std::vector<std::string_view> names;
    names.reserve(m.shards.size());
    std::uint64_t rows = 0;
    for (std::size_t i = 0; i < m.shards.size(); ++i) {
        const auto& s = m.shards[i];
        if (!is_plain_file_name(s.file)) {
            return "shard file name \"" + s.file.substr(0, checkpoint_max_name) +
                   "\" is not a plain file name";
        }
        if (i > 0 && s.server <= m.shards[i - 1].server) {
            return "shards are not in strictly increasing server order (server " +
                   std::to_string(s.server) + ")";
        }
        if (s.bytes < checkpoint_prefix_bytes) {
            return "shard " + s.file + " is recorded with " + std::to_string(s.bytes) +
                   " bytes, too few for a shard file";
        }
        const auto sum = checked_add(rows, s.rows);
        if (!sum) {
            return "shard row counts overflow";
        }
        rows = *sum;
        names.push_back(s.file);
    }
    std::sort(names.begin(), names.end());
    if (const auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end()) {
        return "shard file " + std::string(*dup) + " is listed twice";
    }
    return {};
}

PETREL_DECL std::string manifest_json(const checkpoint_manifest& m) {
    // ordered_json keeps the members in the order written here.
    nlohmann::ordered_json j;
    j["format_version"] = m.format_version;
    j["table_id"] = m.table_id;
    j["key_type"] = checkpoint_type_name(m.key_type);
    j["value_type"] = checkpoint_type_name(m.value_type);
    j["width"] = m.width;
    j["state_width"] = m.state_width;
    j["updater"] = m.updater;
    j["dense"] = m.dense;
    j["dense_begin"] = m.dense_begin;
    j["dense_end"] = m.dense_end;
    j["clock"] = m.clock;
    j["clock_limit"] = std::max(m.clock_limit, m.clock);
    auto& shards = j["shards"] = nlohmann::ordered_json::array();
    for (const auto& s : m.shards) {
        shards.push_back({{"file", s.file},
                          {"server", s.server},
                          {"rows", s.rows},
                          {"bytes", s.bytes},
                          {"checksum", hex64(s.checksum)}});
    }
    try {
        return j.dump(4) + "\n";
    } catch (const nlohmann::ordered_json::type_error& e) {
        // A string that is not UTF-8 (the updater's name).
        throw std::invalid_argument(std::string("petrel::detail::manifest_json: ") + e.what());
    }
}

/// A manifest's text that is not a manifest: what is wrong, said after
/// "malformed manifest: ".
class manifest_text_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Reads a manifest's JSON text as nlohmann-json parses it (SAX events), keeping only
/// what a manifest holds: each known member once and of its type, at most
/// `checkpoint_max_shards` shards, unknown members skipped without being kept, nesting at
/// most `checkpoint_max_json_depth` deep. What a text costs is bounded by what the
/// manifest keeps, whatever the text.
class manifest_sax {
public:
    manifest_sax(const std::filesystem::path& file, checkpoint_manifest& m) : file_(file), m_(m) {}

    bool null() { return other_scalar(); }
    bool boolean(bool v) {
        if (const auto f = field(); f == top_dense) {
            m_.dense = v;
        } else if (f != unknown) {
            wrong(f);
        }
        return true;
    }
    bool number_integer(nlohmann::json::number_integer_t) { return other_scalar(); }
    bool number_unsigned(nlohmann::json::number_unsigned_t v) {
        if (const auto f = field(); f != unknown) {
            number(f, v);
        }
        return true;
    }
    bool number_float(nlohmann::json::number_float_t, const std::string&) { return other_scalar(); }
    bool string(std::string& v) {
        if (const auto f = field(); f != unknown) {
            text(f, std::move(v));
        }
        return true;
    }
    bool binary(nlohmann::json::binary_t&) { return other_scalar(); }

    bool start_object(std::size_t) {
        enter();
        if (frames_.empty()) {
            frames_.push_back({kind::top});
        } else if (frames_.back().of == kind::shards) {
            if (m_.shards.size() == checkpoint_max_shards) {
                fail("more than 65536 shards");
            }
            m_.shards.emplace_back();
            frames_.push_back({kind::shard});
        } else if (const auto f = field(); f == unknown) {
            frames_.push_back({kind::skip});
        } else {
            wrong(f);
        }
        return true;
    }
    bool key(std::string& name) {
        auto& fr = frames_.back();
        if (fr.of == kind::skip) {
            return true;
        }
        const std::span<const std::string_view> names =
            fr.of == kind::top ? std::span<const std::string_view>(top_names)
                               : std::span<const std::string_view>(shard_names);
        const auto at = std::find(names.begin(), names.end(), name);
        fr.member = at == names.end() ? unknown : static_cast<int>(at - names.begin());
        if (fr.member != unknown) {
            if ((fr.seen >> fr.member & 1u) != 0) {
                fail("member \"" + name + "\" appears twice");
            }
            fr.seen |= 1u << fr.member;
        }
        return true;
    }
    bool end_object() {
        const auto fr = frames_.back();
        frames_.pop_back();
        --depth_;
        if (fr.of == kind::top || fr.of == kind::shard) {
            const std::span<const std::string_view> names =
                fr.of == kind::top ? std::span<const std::string_view>(top_names)
                                   : std::span<const std::string_view>(shard_names);
            for (std::size_t i = 0; i < names.size(); ++i) {
                if ((fr.seen >> i & 1u) == 0 && names[i] != "clock_limit") {
                    fail(std::string(fr.of == kind::top ? "the manifest" : "a shard") +
                         " has no member \"" + std::string(names[i]) + "\"");
                }
            }
        }
        return true;
    }
    bool start_array(std::size_t) {
        enter();
        if (const auto f = field(); f == top_shards) {
            frames_.push_back({kind::shards});
        } else if (f == unknown) {
            frames_.push_back({kind::skip});
        } else {
            wrong(f);
        }
        return true;
    }
    bool end_array() {
        frames_.pop_back();
        --depth_;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
        throw manifest_text_error(e.what());
    }

    /// Whether the manifest recorded `clock_limit` (older ones did not).
    [[nodiscard]] bool clock_limit_seen() const noexcept { return clock_limit_seen_; }

private:
    enum class kind { top, shards, shard, skip };
    struct frame {
        kind of;
        std::uint32_t seen = 0; // bit i: member i of the object's names was read
        int member = -1;        // the member whose value comes next, or `unknown`
    };
    static constexpr int unknown = -1;
    static constexpr std::array<std::string_view, 13> top_names{
        "format_version", "table_id",    "key_type", "value_type",  "width",
        "state_width",    "updater",     "dense",    "dense_begin", "dense_end",
        "clock",          "clock_limit", "shards"};
    static constexpr std::array<std::string_view, 5> shard_names{"file", "server", "rows", "bytes",
                                                                 "checksum"};
    // Indices of top_names; a shard's member i is field shard_base + i.
    static constexpr int top_key_type = 2;
    static constexpr int top_value_type = 3;
    static constexpr int top_updater = 6;
    static constexpr int top_dense = 7;
    static constexpr int top_clock_limit = 11;
    static constexpr int top_shards = 12;
    static constexpr int shard_base = 100;
    static constexpr int shard_file = shard_base + 0;
    static constexpr int shard_checksum = shard_base + 4;

    [[noreturn]] static void fail(const std::string& why) { throw manifest_text_error(why); }

    void enter() {
        if (++depth_ > checkpoint_max_json_depth) {
            fail("nested deeper than " + std::to_string(checkpoint_max_json_depth) + " levels");
        }
    }

    /// The member the next value is for: an index of `top_names`, `shard_base` plus one of
    /// `shard_names`, or `unknown` (a member skipped, or a value inside one).
    int field() {
        if (frames_.empty()) {
            fail("the manifest is not a JSON object");
        }
        auto& fr = frames_.back();
        if (fr.of == kind::shards) {
            fail("a shard is not a JSON object");
        }
        if (fr.of == kind::skip || fr.member == unknown) {
            return unknown;
        }
        const int f = fr.of == kind::top ? fr.member : shard_base + fr.member;
        fr.member = unknown;
        return f;
    }

    [[nodiscard]] static std::string name_of(int f) {
        return std::string(f >= shard_base ? shard_names[static_cast<std::size_t>(f - shard_base)]
                                           : top_names[static_cast<std::size_t>(f)]);
    }

    [[noreturn]] static void wrong(int f) {
        const char* expected = "an integer in [0, 2^64)";
        if (f == top_dense) {
            expected = "true or false";
        } else if (f == top_shards) {
            expected = "an array";
        } else if (f == top_key_type || f == top_value_type || f == top_updater ||
                   f == shard_file || f == shard_checksum) {
            expected = "a string";
        }
        fail("member \"" + name_of(f) + "\" is not " + expected);
    }

    bool other_scalar() {
        if (const auto f = field(); f != unknown) {
            wrong(f);
        }
        return true;
    }

    static std::uint32_t u32(int f, std::uint64_t v) {
        if (v > std::numeric_limits<std::uint32_t>::max()) {
            fail(name_of(f) + " " + std::to_string(v) + " does not fit in 32 bits");
        }
        return static_cast<std::uint32_t>(v);
    }

    void number(int f, std::uint64_t v) {
        switch (f) {
        case 0:
            m_.format_version = u32(f, v);
            if (m_.format_version != checkpoint_format_version) {
                throw checkpoint_error(file_, "format version " + std::to_string(v) +
                                                  " is not supported (this build reads version " +
                                                  std::to_string(checkpoint_format_version) + ")");
            }
            break;
        case 1:
            m_.table_id = u32(f, v);
            break;
        case 4:
            m_.width = u32(f, v);
            break;
        case 5:
            m_.state_width = u32(f, v);
            break;
        case 8:
            m_.dense_begin = v;
            break;
        case 9:
            m_.dense_end = v;
            break;
        case 10:
            m_.clock = v;
            break;
        case top_clock_limit:
            m_.clock_limit = v;
            clock_limit_seen_ = true;
            break;
        case shard_base + 1:
            m_.shards.back().server = u32(f, v);
            break;
        case shard_base + 2:
            m_.shards.back().rows = v;
            break;
        case shard_base + 3:
            m_.shards.back().bytes = v;
            break;
        default:
            wrong(f);
        }
    }

    void text(int f, std::string&& v) {
        auto bounded = [&](std::size_t max_bytes) {
            if (v.size() > max_bytes) {
                fail("member \"" + name_of(f) + "\" is longer than " + std::to_string(max_bytes) +
                     " bytes");
            }
            return std::move(v);
        };
        auto type = [&](const char* what) {
            const auto name = bounded(16);
            const auto t = checkpoint_type_from_name(name);
            if (t == wire::scalar_type::none) {
                throw checkpoint_error(file_, "unknown " + std::string(what) + " \"" + name + "\"");
            }
            return t;
        };
        switch (f) {
        case top_key_type:
            m_.key_type = type("key type");
            break;
        case top_value_type:
            m_.value_type = type("value type");
            break;
        case top_updater:
            m_.updater = bounded(checkpoint_max_name);
            break;
        case shard_file:
            m_.shards.back().file = bounded(checkpoint_max_name);
            break;
        case shard_checksum: {
            const auto sum = parse_hex64(bounded(18));
            if (!sum) {
                fail("checksum is not \"0x\" and up to 16 hex digits");
            }
            m_.shards.back().checksum = *sum;
            break;
        }
        default:
            wrong(f);
        }
    }

    const std::filesystem::path& file_;
    checkpoint_manifest& m_;
    std::vector<frame> frames_;
    int depth_ = 0;
    bool clock_limit_seen_ = false;
};

PETREL_DECL checkpoint_manifest parse_manifest_json(const std::filesystem::path& file,
                                                    std::string_view json) {
    checkpoint_manifest m;
    manifest_sax reader(file, m);
    try {
        nlohmann::json::sax_parse(json.begin(), json.end(), &reader);
    } catch (const manifest_text_error& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    } catch (const nlohmann::json::exception& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    }
    if (!reader.clock_limit_seen()) {
        m.clock_limit = m.clock; // an older manifest: none recorded
    }
    if (m.clock_limit < m.clock) {
        throw checkpoint_error(file, "clock_limit " + std::to_string(m.clock_limit) +
                                         " is below clock " + std::to_string(m.clock));
    }
    return m;
}

PETREL_DECL void write_manifest(const std::filesystem::path& table_dir,
                                const checkpoint_manifest& manifest) {
    checkpoint_manifest m = manifest;
    std::sort(m.shards.begin(), m.shards.end(),
              [](const shard_info& a, const shard_info& b) { return a.server < b.server; });
    if (auto problem = check_manifest(m); !problem.empty()) {
        throw std::invalid_argument("petrel::detail::write_manifest: " + problem);
    }
    const std::string text = manifest_json(m);
    const std::array<std::span<const std::byte>, 1> pieces{
        std::as_bytes(std::span(text.data(), text.size()))};
    write_file_atomically(manifest_path(table_dir), pieces);
}

PETREL_DECL checkpoint_manifest read_manifest(const std::filesystem::path& table_dir) {
    namespace fs = std::filesystem;
    const fs::path file = manifest_path(table_dir);
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (status.type() == fs::file_type::not_found) {
        throw checkpoint_error(file, "missing: the checkpoint of this table is incomplete (its "
                                     "manifest is written last) or was never made");
    }
    if (ec) {
        throw checkpoint_error(file, "cannot read: " + ec.message());
    }
    if (status.type() != fs::file_type::regular) {
        throw checkpoint_error(file, "not a regular file");
    }
    const auto size = fs::file_size(file, ec);
    if (ec) {
        throw checkpoint_error(file, "cannot read: " + ec.message());
    }
    if (size > checkpoint_max_manifest_bytes) {
        throw checkpoint_error(file, "malformed manifest: " + std::to_string(size) +
                                         " bytes, more than 64 MiB");
    }
    const auto bytes = read_file_of_size(file, size);

    const auto m = parse_manifest_json(
        file, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (auto problem = check_manifest(m); !problem.empty()) {
        throw checkpoint_error(file, problem);
    }
    return m;
}

} // namespace petrel::detail

namespace petrel {

PETREL_DECL checkpoint_manifest read_checkpoint(const std::filesystem::path& dir,
                                                std::uint32_t table_id) {
    return detail::read_manifest(detail::table_dir(dir, table_id));
}

} // namespace petrel

#endif // PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP
