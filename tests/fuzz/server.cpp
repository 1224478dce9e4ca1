// Fuzzes what a server does with well-formed messages: a stream of frames (cut as the
// frame harness cuts it) goes through the frame decoder, and every message it delivers is
// sent to a fresh server over an in-process connection, which handles it as it would one
// from the network: pushes, pulls, clocks and calls of any header the decoder lets
// through, on undeclared tables and on declared ones (a dense table, an adagrad table).
// The built-in checkpoint call is left out (it writes files; the call harness fuzzes its
// directory).
#include <petrel/server/server_node.hpp>

#include <petrel/core/buffer_pool.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/server/updater.hpp>
#include <petrel/transport/inproc_transport.hpp>
#include <petrel/wire/frame_decoder.hpp>
#include <petrel/wire/remote_call.hpp>

#include <asio/io_context.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <system_error>

namespace {

std::shared_ptr<const petrel::table_registry> declared_tables() {
    static const auto tables = [] {
        petrel::table_registry t;
        t.add<std::uint64_t, float>(1, {.width = 4}, petrel::adagrad{});
        t.add<std::uint32_t, double>(2, {.dense = petrel::key_range<std::uint64_t>{0, 1024}});
        return std::make_shared<const petrel::table_registry>(std::move(t));
    }();
    return tables;
}

bool is_checkpoint_call(const petrel::wire::message& m) {
    if (m.header.kind != petrel::wire::message_kind::call) {
        return false;
    }
    petrel::detail::decoded_call call;
    std::string why;
    return !petrel::detail::decode_call(m.values().span(), call, why) &&
           call.name == petrel::detail::checkpoint_call;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::size_t chunk = 1 + data[0] % 64;
    std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data) + 1, size - 1);

    asio::io_context io;
    petrel::inproc_hub hub;
    petrel::transport_options o;
    o.log = [](petrel::log_level, std::string_view) {};
    o.limits.max_frame_bytes = std::uint64_t{1} << 24;
    o.limits.max_key_cache_bytes = std::uint64_t{1} << 20;
    petrel::server_options so;
    so.node_id = 1;
    so.workers = 2;
    so.max_held_bytes = std::uint64_t{1} << 24;
    so.max_parked = 64;
    so.max_parked_per_connection = 16;
    so.max_tables = 8;
    so.tables = declared_tables();
    so.split_threads = 1; // io runs on this thread alone
    petrel::server_node server(petrel::inproc_transport(io.get_executor(), hub, o), so);
    const auto address = server.listen("");
    petrel::inproc_transport client(io.get_executor(), hub, o);
    petrel::connection_handlers h;
    h.on_message = [](const petrel::connection_ptr&, petrel::wire::message&& m) {
        if (!petrel::wire::is_reply(m.header.kind)) {
            std::abort(); // a server answers with replies only
        }
    };
    h.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    petrel::connection_ptr conn;
    client.async_connect(address, std::move(h), [&conn](std::error_code, petrel::connection_ptr c) {
        conn = std::move(c);
    });
    io.poll();
    if (!conn) {
        std::abort();
    }

    petrel::wire::frame_decoder decoder(o.limits, std::make_shared<petrel::buffer_pool>());
    std::size_t at = 0;
    while (at < stream.size()) {
        const auto buffer = decoder.buffer();
        const std::size_t n =
            std::min({chunk == 64 ? stream.size() : chunk, buffer.size(), stream.size() - at});
        std::memcpy(buffer.data(), stream.data() + at, n);
        at += n;
        const auto ec = decoder.consume(n, [&](petrel::wire::message&& m) {
            if (!is_checkpoint_call(m)) {
                conn->send(std::move(m));
            }
        });
        io.poll();
        if (ec) {
            break;
        }
    }
    io.poll();
    client.close();
    server.close();
    io.poll();
    return 0;
}
