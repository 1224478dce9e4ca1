// Fuzzes a remote call's body: its name, then arguments of several types as a server's
// functions read them, and the checkpoint call's directory as a server resolves it.
#include <petrel/wire/remote_call.hpp>

#include <petrel/server/detail/checkpoint_format.hpp>

#include <cereal/types/map.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span body(reinterpret_cast<const std::byte*>(data), size);
    petrel::detail::decoded_call call;
    std::string why;
    if (petrel::detail::decode_call(body, call, why)) {
        return 0;
    }
    std::string dir;
    if (!petrel::detail::decode_binary(call.args, dir, why)) {
        std::filesystem::path where;
        (void)petrel::detail::resolve_checkpoint_dir("/checkpoints", dir, where, why);
        (void)petrel::detail::resolve_checkpoint_dir({}, dir, where, why);
    }
    std::tuple<std::uint64_t, std::vector<double>, std::map<std::string, float>> args;
    (void)petrel::detail::decode_binary(call.args, args, why);
    std::vector<std::vector<std::uint32_t>> nested;
    (void)petrel::detail::decode_binary(call.args, nested, why);
    return 0;
}
