// Fuzzes what a restore reads from disk: manifests (JSON), shard files and their
// snappy-compressed payloads. The first byte picks which; a file refused is an exception
// the loader reports, never a crash or an allocation beyond the limits.
#include <petrel/server/checkpoint.hpp>

#include <petrel/server/detail/checkpoint_file.hpp>
#include <petrel/server/detail/checkpoint_format.hpp>
#include <petrel/server/detail/checkpoint_manifest_io.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <span>
#include <string_view>
#include <vector>

namespace {

petrel::checkpoint_manifest manifest_of(std::uint8_t shape) {
    petrel::checkpoint_manifest m;
    m.key_type = (shape & 1) != 0 ? petrel::wire::scalar_type::u32 : petrel::wire::scalar_type::u64;
    m.value_type =
        (shape & 2) != 0 ? petrel::wire::scalar_type::f64 : petrel::wire::scalar_type::f32;
    m.width = 1 + (shape >> 2) % 4;
    m.state_width = (shape & 16) != 0 ? m.width : 0;
    m.updater = m.state_width != 0 ? "adagrad" : "sum";
    m.dense = (shape & 32) != 0;
    m.dense_end = m.dense ? 1000 : 0;
    return m;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) {
        return 0;
    }
    const std::span bytes(reinterpret_cast<const std::byte*>(data) + 2, size - 2);
    try {
        switch (data[0] % 3) {
        case 0: {
            const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            const auto m = petrel::detail::parse_manifest_json("manifest.json", text);
            (void)petrel::detail::check_manifest(m);
            break;
        }
        case 1: {
            auto m = manifest_of(data[1]);
            petrel::shard_info expected;
            expected.file = "shard-0.bin";
            expected.bytes = bytes.size();
            m.shards.push_back(expected);
            const auto t = petrel::detail::parse_shard("shard-0.bin", bytes, m, expected,
                                                       std::uint64_t{1} << 24);
            (void)petrel::detail::check_shard_table(t);
            break;
        }
        default: {
            const std::uint64_t uncompressed = std::uint64_t{data[1]} << 6;
            if (petrel::detail::check_payload(bytes, uncompressed).empty()) {
                std::vector<std::byte> out(uncompressed);
                (void)petrel::detail::uncompress_payload(bytes, out);
            }
            break;
        }
        }
    } catch (const std::bad_alloc&) {
        __builtin_trap(); // every size is checked before anything is allocated
    } catch (const std::exception&) {
        // refused, with a message the loader reports
    }
    return 0;
}
