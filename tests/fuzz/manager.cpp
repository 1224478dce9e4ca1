// Fuzzes what a manager does with well-formed control messages from several connections:
// the input is records `[connection byte][length: 2 bytes, little-endian][control body]`;
// each body is sent as a control message on one of four in-process connections to a
// fresh manager of a job of one server and two workers, and a length of 0 closes that
// connection instead. Joins of every role, heartbeats, barriers, leaves, data sets,
// rounds, hand-over reports and returns after a takeover all reach the manager's state.
#include <petrel/cluster/manager_node.hpp>

#include <petrel/cluster/detail/control.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/transport/inproc_transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/io_context.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <system_error>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    asio::io_context io;
    petrel::inproc_hub hub;
    petrel::transport_options o;
    o.log = [](petrel::log_level, std::string_view) {};
    petrel::manager_options mo;
    mo.job_id = "fuzz";
    mo.servers = 1;
    mo.workers = 2;
    mo.max_readers = 2;
    petrel::manager_node manager(petrel::inproc_transport(io.get_executor(), hub, o), mo);
    const auto address = manager.listen("");
    petrel::inproc_transport client(io.get_executor(), hub, o);
    std::array<petrel::connection_ptr, 4> conns;
    for (auto& conn : conns) {
        petrel::connection_handlers h;
        h.on_message = [](const petrel::connection_ptr&, petrel::wire::message&& m) {
            if (m.header.kind != petrel::wire::message_kind::control &&
                m.header.kind != petrel::wire::message_kind::control_reply) {
                std::abort(); // a manager sends control messages only
            }
        };
        h.on_close = [](const petrel::connection_ptr&, std::error_code) {};
        client.async_connect(
            address, std::move(h),
            [&conn](std::error_code, petrel::connection_ptr c) { conn = std::move(c); });
    }
    io.poll();
    for (const auto& conn : conns) {
        if (!conn) {
            std::abort();
        }
    }
    std::uint64_t request = 0;
    std::size_t at = 0;
    while (at + 3 <= size) {
        auto& conn = conns[data[at] % conns.size()];
        const std::size_t length = data[at + 1] | std::size_t{data[at + 2]} << 8;
        at += 3;
        if (length == 0) {
            conn->close();
        } else {
            const std::size_t n = std::min(length, size - at);
            petrel::wire::message m;
            m.header.kind = petrel::wire::message_kind::control;
            m.header.request_id = ++request;
            m.set_segment(petrel::wire::values_segment,
                          petrel::shared_bytes::copy_of(
                              std::span(reinterpret_cast<const std::byte*>(data) + at, n)));
            at += n;
            conn->send(std::move(m));
        }
        io.poll();
    }
    io.poll();
    client.close();
    manager.close();
    io.poll();
    return 0;
}
