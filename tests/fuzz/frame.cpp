// Fuzzes the frame decoder: a stream of bytes cut into reads of the sizes its first byte
// picks, as a connection's read loop feeds it (holding after every second frame when the
// first byte's bit 6 says so). Every frame it delivers has passed every
// check (header, segments, snappy, key lists), so the payload checks must accept it.
#include <petrel/wire/frame_decoder.hpp>

#include <petrel/core/buffer_pool.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::size_t chunk = 1 + data[0] % 64; // 1..64, or the whole stream when 64
    std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
    petrel::wire::wire_limits limits;
    limits.max_frame_bytes = std::uint64_t{1} << 24;
    limits.max_key_cache_bytes = std::uint64_t{1} << 20;
    petrel::wire::frame_decoder decoder(limits, std::make_shared<petrel::buffer_pool>());
    const bool holding = (data[0] & 0x40) != 0;
    std::size_t delivered = 0;
    std::size_t at = 0;
    while (at < stream.size()) {
        const auto buffer = decoder.buffer();
        if (buffer.empty()) {
            std::abort(); // only a failed decoder has no room, and it returned its error
        }
        const std::size_t n =
            std::min({chunk == 64 ? stream.size() : chunk, buffer.size(), stream.size() - at});
        std::memcpy(buffer.data(), stream.data() + at, n);
        at += n;
        auto check = [&delivered](petrel::wire::message&& m) {
            ++delivered;
            if (petrel::wire::check_payload(m)) {
                std::abort(); // a delivered frame failed a check the decoder makes
            }
        };
        // With bit 6 of the first byte, the decoder holds after every second frame, as a
        // connection whose replies pile up does, and is asked again before the next read.
        auto hold = [&] { return holding && delivered % 2 == 1; };
        auto ec = decoder.consume(n, check, hold);
        while (!ec && decoder.held()) {
            ec = decoder.consume(0, check, hold);
        }
        if (ec) {
            if (ec.category() != petrel::error_category()) {
                std::abort(); // errors are Petrel's stable numbers
            }
            break;
        }
    }
    return 0;
}
