// Petrel: checkpoint manifests: their checks, their JSON text, and the manifest file.
#ifndef PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP
#define PETREL_SERVER_IMPL_CHECKPOINT_MANIFEST_IO_IPP

#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_file.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/server/detail/checkpoint_manifest_io.hpp>
#include <petrel/server/detail/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
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
    std::string out = "{\n";
    auto field = [&](std::string_view indent, std::string_view name) {
        out += indent;
        append_json_string(out, name);
        out += ": ";
    };
    auto number = [&](std::string_view indent, std::string_view name, std::uint64_t v) {
        field(indent, name);
        out += std::to_string(v);
        out += ",\n";
    };
    auto text = [&](std::string_view indent, std::string_view name, std::string_view v) {
        field(indent, name);
        append_json_string(out, v);
        out += ",\n";
    };
    number("    ", "format_version", m.format_version);
    number("    ", "table_id", m.table_id);
    text("    ", "key_type", checkpoint_type_name(m.key_type));
    text("    ", "value_type", checkpoint_type_name(m.value_type));
    number("    ", "width", m.width);
    number("    ", "state_width", m.state_width);
    text("    ", "updater", m.updater);
    field("    ", "dense");
    out += m.dense ? "true,\n" : "false,\n";
    number("    ", "dense_begin", m.dense_begin);
    number("    ", "dense_end", m.dense_end);
    number("    ", "clock", m.clock);
    number("    ", "clock_limit", std::max(m.clock_limit, m.clock));
    field("    ", "shards");
    out += m.shards.empty() ? "[" : "[\n";
    for (std::size_t i = 0; i < m.shards.size(); ++i) {
        const auto& s = m.shards[i];
        out += "        {\n";
        text("            ", "file", s.file);
        number("            ", "server", s.server);
        number("            ", "rows", s.rows);
        number("            ", "bytes", s.bytes);
        field("            ", "checksum");
        append_json_string(out, hex64(s.checksum));
        out += i + 1 < m.shards.size() ? "\n        },\n" : "\n        }\n    ";
    }
    out += "]\n}\n";
    return out;
}

PETREL_DECL checkpoint_manifest parse_manifest_json(const std::filesystem::path& file,
                                                    std::string_view json) {
    json_reader r(json);
    checkpoint_manifest m;
    // Bit i: member i of `names` was read.
    auto once = [&r](std::uint32_t& seen, std::span<const std::string_view> names,
                     std::string_view key) -> std::size_t {
        const auto at =
            static_cast<std::size_t>(std::find(names.begin(), names.end(), key) - names.begin());
        if (at < names.size()) {
            if ((seen >> at & 1u) != 0) {
                r.fail("member \"" + std::string(key) + "\" appears twice");
            }
            seen |= 1u << at;
        }
        return at;
    };
    auto missing = [&r](std::uint32_t seen, std::span<const std::string_view> names,
                        std::string_view where) {
        for (std::size_t i = 0; i < names.size(); ++i) {
            if ((seen >> i & 1u) == 0) {
                r.fail(std::string(where) + " has no member \"" + std::string(names[i]) + "\"");
            }
        }
    };
    auto u32 = [&r](std::string_view name) {
        const auto v = r.u64();
        if (v > std::numeric_limits<std::uint32_t>::max()) {
            r.fail(std::string(name) + " " + std::to_string(v) + " does not fit in 32 bits");
        }
        return static_cast<std::uint32_t>(v);
    };
    auto type = [&](std::string_view what) {
        const auto name = r.string(16);
        const auto t = checkpoint_type_from_name(name);
        if (t == wire::scalar_type::none) {
            throw checkpoint_error(file, "unknown " + std::string(what) + " \"" + name + "\"");
        }
        return t;
    };
    static constexpr std::array<std::string_view, 12> fields{
        "format_version", "table_id", "key_type",    "value_type", "width", "state_width",
        "updater",        "dense",    "dense_begin", "dense_end",  "clock", "shards"};
    static constexpr std::array<std::string_view, 5> shard_fields{"file", "server", "rows", "bytes",
                                                                  "checksum"};
    std::uint32_t seen = 0;
    std::optional<std::uint64_t> clock_limit; // optional: older manifests have none
    r.object([&](std::string_view key) {
        if (key == "clock_limit") {
            if (clock_limit) {
                r.fail("member \"clock_limit\" appears twice");
            }
            clock_limit = r.u64();
            return;
        }
        switch (once(seen, fields, key)) {
        case 0:
            m.format_version = u32(key);
            if (m.format_version != checkpoint_format_version) {
                throw checkpoint_error(file, "format version " + std::to_string(m.format_version) +
                                                 " is not supported (this build reads version " +
                                                 std::to_string(checkpoint_format_version) + ")");
            }
            break;
        case 1:
            m.table_id = u32(key);
            break;
        case 2:
            m.key_type = type("key type");
            break;
        case 3:
            m.value_type = type("value type");
            break;
        case 4:
            m.width = u32(key);
            break;
        case 5:
            m.state_width = u32(key);
            break;
        case 6:
            m.updater = r.string(checkpoint_max_name);
            break;
        case 7:
            m.dense = r.boolean();
            break;
        case 8:
            m.dense_begin = r.u64();
            break;
        case 9:
            m.dense_end = r.u64();
            break;
        case 10:
            m.clock = r.u64();
            break;
        case 11:
            r.array([&] {
                if (m.shards.size() == checkpoint_max_shards) {
                    r.fail("more than 65536 shards");
                }
                shard_info s;
                std::uint32_t shard_seen = 0;
                r.object([&](std::string_view name) {
                    switch (once(shard_seen, shard_fields, name)) {
                    case 0:
                        s.file = r.string(checkpoint_max_name);
                        break;
                    case 1:
                        s.server = u32(name);
                        break;
                    case 2:
                        s.rows = r.u64();
                        break;
                    case 3:
                        s.bytes = r.u64();
                        break;
                    case 4: {
                        const auto v = parse_hex64(r.string(18));
                        if (!v) {
                            r.fail("checksum is not \"0x\" and up to 16 hex digits");
                        }
                        s.checksum = *v;
                        break;
                    }
                    default:
                        r.skip();
                    }
                });
                missing(shard_seen, shard_fields, "a shard");
                m.shards.push_back(std::move(s));
            });
            break;
        default:
            r.skip();
        }
    });
    missing(seen, fields, "the manifest");
    r.finish();
    m.clock_limit = clock_limit.value_or(m.clock);
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

    checkpoint_manifest m;
    try {
        m = parse_manifest_json(
            file, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (const json_error& e) {
        throw checkpoint_error(file, std::string("malformed manifest: ") + e.what());
    }
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
