// Petrel: checkpoint manifests: their checks, their JSON text, and the manifest file.
#ifndef PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP
#define PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP

#include <petrel/core/log.hpp>
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
#include <stdexcept>
#include <string>
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

/// Refuses text nested deeper than `checkpoint_max_json_depth` and objects naming a
/// member twice, as the text is parsed (before any value is kept).
class manifest_parse_check {
public:
    bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using event_t = nlohmann::json::parse_event_t;
        switch (event) {
        case event_t::object_start:
        case event_t::array_start:
            if (++depth_ > checkpoint_max_json_depth) {
                throw std::length_error("nested deeper than " +
                                        std::to_string(checkpoint_max_json_depth) + " levels");
            }
            if (event == event_t::object_start) {
                keys_.emplace_back();
            }
            break;
        case event_t::object_end:
            keys_.pop_back();
            --depth_;
            break;
        case event_t::array_end:
            --depth_;
            break;
        case event_t::key: {
            auto& seen = keys_.back();
            auto key = parsed.get<std::string>();
            if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
                throw std::length_error("member \"" + printable(key, checkpoint_max_name) +
                                        "\" appears twice");
            }
            seen.push_back(std::move(key));
            break;
        }
        case event_t::value:
            break;
        }
        return true;
    }

private:
    int depth_ = 0;
    std::vector<std::vector<std::string>> keys_; // of each object being parsed
};

/// The members of one JSON object of a manifest, read with the manifest's rules: each
/// known member once, of its type; unknown ones ignored.
class manifest_object {
public:
    manifest_object(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {
        if (!j_.is_object()) {
            fail(where_ + " is not a JSON object");
        }
    }

    [[nodiscard]] std::uint64_t u64(const char* name) const {
        const auto& v = member(name);
        if (!v.is_number_unsigned()) {
            fail("member \"" + std::string(name) + "\" is not an integer in [0, 2^64)");
        }
        return v.get<std::uint64_t>();
    }

    [[nodiscard]] std::uint32_t u32(const char* name) const {
        const auto v = u64(name);
        if (v > std::numeric_limits<std::uint32_t>::max()) {
            fail(std::string(name) + " " + std::to_string(v) + " does not fit in 32 bits");
        }
        return static_cast<std::uint32_t>(v);
    }

    [[nodiscard]] bool boolean(const char* name) const {
        const auto& v = member(name);
        if (!v.is_boolean()) {
            fail("member \"" + std::string(name) + "\" is not true or false");
        }
        return v.get<bool>();
    }

    [[nodiscard]] std::string string(const char* name, std::size_t max_bytes) const {
        const auto& v = member(name);
        if (!v.is_string()) {
            fail("member \"" + std::string(name) + "\" is not a string");
        }
        const auto& s = v.get_ref<const std::string&>();
        if (s.size() > max_bytes) {
            fail("member \"" + std::string(name) + "\" is longer than " +
                 std::to_string(max_bytes) + " bytes");
        }
        return s;
    }

    [[nodiscard]] bool has(const char* name) const { return j_.contains(name); }

    [[nodiscard]] const nlohmann::json& member(const char* name) const {
        const auto at = j_.find(name);
        if (at == j_.end()) {
            fail(where_ + " has no member \"" + name + "\"");
        }
        return *at;
    }

    [[noreturn]] static void fail(const std::string& why) { throw std::length_error(why); }

private:
    const nlohmann::json& j_;
    std::string where_;
};

PETREL_DECL checkpoint_manifest parse_manifest_json(const std::filesystem::path& file,
                                                    std::string_view json) {
    // Malformed text and layout are std::length_error inside, reported as one kind below;
    // a manifest of another version or of unknown types is said so at once.
    auto type = [&](const manifest_object& o, const char* name, std::string_view what) {
        const auto text = o.string(name, 16);
        const auto t = checkpoint_type_from_name(text);
        if (t == wire::scalar_type::none) {
            throw checkpoint_error(file, "unknown " + std::string(what) + " \"" + text + "\"");
        }
        return t;
    };
    try {
        const auto j = nlohmann::json::parse(json.begin(), json.end(), manifest_parse_check{});
        const manifest_object o(j, "the manifest");
        checkpoint_manifest m;
        m.format_version = o.u32("format_version");
        if (m.format_version != checkpoint_format_version) {
            throw checkpoint_error(file, "format version " + std::to_string(m.format_version) +
                                             " is not supported (this build reads version " +
                                             std::to_string(checkpoint_format_version) + ")");
        }
        m.table_id = o.u32("table_id");
        m.key_type = type(o, "key_type", "key type");
        m.value_type = type(o, "value_type", "value type");
        m.width = o.u32("width");
        m.state_width = o.u32("state_width");
        m.updater = o.string("updater", checkpoint_max_name);
        m.dense = o.boolean("dense");
        m.dense_begin = o.u64("dense_begin");
        m.dense_end = o.u64("dense_end");
        m.clock = o.u64("clock");
        // Optional: manifests written before it have none.
        m.clock_limit = o.has("clock_limit") ? o.u64("clock_limit") : m.clock;
        const auto& shards = o.member("shards");
        if (!shards.is_array()) {
            manifest_object::fail("member \"shards\" is not an array");
        }
        if (shards.size() > checkpoint_max_shards) {
            manifest_object::fail("more than 65536 shards");
        }
        m.shards.reserve(shards.size());
        for (const auto& each : shards) {
            const manifest_object s(each, "a shard");
            shard_info info;
            info.file = s.string("file", checkpoint_max_name);
            info.server = s.u32("server");
            info.rows = s.u64("rows");
            info.bytes = s.u64("bytes");
            const auto sum = parse_hex64(s.string("checksum", 18));
            if (!sum) {
                manifest_object::fail("checksum is not \"0x\" and up to 16 hex digits");
            }
            info.checksum = *sum;
            m.shards.push_back(std::move(info));
        }
        if (m.clock_limit < m.clock) {
            throw checkpoint_error(file, "clock_limit " + std::to_string(m.clock_limit) +
                                             " is below clock " + std::to_string(m.clock));
        }
        return m;
    } catch (const nlohmann::json::exception& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    } catch (const std::length_error& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    }
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
