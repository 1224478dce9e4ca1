// Fuzzes a connection's handshake: a peer sends the input (its hello, its proof, or
// anything) over a real loopback connection to an end that runs `authenticate` as the
// acceptor or the initiator (the first byte says which). Whatever the bytes, the
// handshake ends, refused, without a proof of the secret.
#include <petrel/transport/detail/handshake.hpp>

#include <petrel/core/error.hpp>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <system_error>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    static asio::io_context io;
    static asio::ip::tcp::acceptor acceptor(
        io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    // A connected pair over loopback. A signal (libFuzzer's timers) may interrupt a
    // connect: it is made again, and the acceptor's end is the one whose peer is ours
    // (an interrupted attempt may have left a connection behind).
    asio::ip::tcp::socket peer(io);
    std::error_code ec;
    do {
        peer.close(ec);
        peer.connect(acceptor.local_endpoint(), ec);
    } while (ec == asio::error::interrupted);
    if (ec) {
        return 0; // the host's resources (ports), not the input
    }
    asio::ip::tcp::socket accepted(io);
    for (;;) {
        accepted.close(ec);
        acceptor.accept(accepted, ec);
        if (ec == asio::error::interrupted) {
            continue;
        }
        if (ec) {
            return 0;
        }
        std::error_code a;
        std::error_code b;
        if (accepted.remote_endpoint(a) == peer.local_endpoint(b) && !a && !b) {
            break;
        }
    }
    petrel::detail::tcp_stream end(std::move(accepted));
    std::error_code ignored;
    asio::write(peer, asio::buffer(data + 1, size - 1), ignored);
    peer.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    std::optional<std::error_code> result;
    asio::co_spawn(io,
                   petrel::detail::authenticate(end, "a secret of the fuzzed job",
                                                (data[0] & 1) != 0, std::chrono::seconds(5)),
                   [&](std::exception_ptr e, std::error_code ec) {
                       if (e) {
                           std::rethrow_exception(e);
                       }
                       result = ec;
                   });
    io.restart();
    io.run();
    if (!result || !*result) {
        __builtin_trap(); // it must end, and no input proves a secret it does not hold
    }
    return 0;
}
