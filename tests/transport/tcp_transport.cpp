#include <petrel/transport/tcp_transport.hpp>

#include "support/cluster.hpp"
#include "support/frames.hpp"
#include "support/tls.hpp"

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/strand.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <thread>

using namespace std::chrono_literals;
using petrel::test::io_threads;
using petrel::test::log_capture;
using key_t64 = std::uint64_t;

namespace {

/// A server node on TCP, a worker that pushed known values to it, and a way to reach it
/// with raw sockets.
struct target {
    io_threads io{2};
    log_capture log;
    petrel::server_node server{petrel::tcp_transport(io.executor(), {.log = log.logger()})};
    std::string address = server.listen("127.0.0.1:0");
    asio::ip::tcp::endpoint endpoint{
        asio::ip::make_address("127.0.0.1"),
        static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)))};

    petrel::kv_store<key_t64, float, petrel::eventual> worker() {
        petrel::kv_store_options<key_t64> o;
        o.servers = {address};
        o.request_timeout = 20s;
        return {petrel::tcp_transport(io.executor()), o};
    }

    /// Sends `bytes` on a fresh raw connection; true when the server then closed it.
    bool server_closes_after(const std::vector<std::byte>& bytes) {
        asio::io_context raw;
        asio::ip::tcp::socket s(raw);
        s.connect(endpoint);
        std::error_code ec;
        asio::write(s, asio::buffer(bytes), ec);
        s.shutdown(asio::socket_base::shutdown_send, ec);
        std::array<char, 64> sink{};
        // The server closes the connection: the read ends with EOF or a reset, not a hang.
        auto fut = std::async(std::launch::async, [&] {
            std::error_code rec;
            while (!rec) {
                s.read_some(asio::buffer(sink), rec);
            }
            return rec;
        });
        if (fut.wait_for(10s) != std::future_status::ready) {
            s.close(ec);
            fut.wait();
            return false;
        }
        return true;
    }
};

/// A push's envelope (for a header body of `header` bytes and a payload of `payload`)
/// followed by `extra` bytes of `fill`.
std::vector<std::byte> prefix(std::uint32_t header, std::uint64_t payload, std::size_t extra = 0,
                              std::byte fill = std::byte{0},
                              std::uint8_t major = petrel::wire::protocol_major) {
    auto b = petrel::test::envelope_of(petrel::wire::message_kind::push, header, payload, major);
    b.resize(b.size() + extra, fill);
    return b;
}

/// Reads from `s` until `dec` completes a frame of kind `kind` (others are skipped);
/// gives up after ten seconds (closing `s`) or on an error.
std::optional<petrel::wire::message> read_frame(asio::ip::tcp::socket& s,
                                                petrel::wire::frame_decoder& dec,
                                                petrel::wire::message_kind kind) {
    auto fut = std::async(std::launch::async, [&]() -> std::optional<petrel::wire::message> {
        std::optional<petrel::wire::message> got;
        while (!got) {
            std::error_code ec;
            const auto into = dec.buffer();
            const auto n = s.read_some(asio::buffer(into.data(), into.size()), ec);
            if (ec) {
                return std::nullopt;
            }
            ec = dec.consume(n, [&](petrel::wire::message&& m) {
                if (m.header.kind == kind && !got) {
                    got = std::move(m);
                }
            });
            if (ec) {
                return std::nullopt;
            }
        }
        return got;
    });
    if (fut.wait_for(10s) != std::future_status::ready) {
        std::error_code ec;
        s.close(ec);
    }
    return fut.get();
}

/// Key 7 with `value`, as a push or as the values of a pull's reply.
void key7(petrel::wire::message& m, float value, bool with_key) {
    const std::uint64_t key = 7;
    m.header.range_begin = 7;
    m.header.range_end = 8;
    m.header.key_count = 1;
    if (with_key) {
        m.set_segment(petrel::wire::keys_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(&key, 1))));
    }
    m.set_segment(petrel::wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(&value, 1))));
}

} // namespace

TEST_CASE("tcp_transport: a connection's strand wraps an io_context's executor directly",
          "[transport][tcp]") {
    asio::io_context io;
    const asio::any_io_executor ex = io.get_executor();
    const auto s = petrel::detail::connection_strand(ex);
    using io_strand = asio::strand<asio::io_context::executor_type>;
    using any_strand = asio::strand<asio::any_io_executor>;
    // Held in place by the type-erased executor: its copies allocate nothing.
    REQUIRE(s.target_type() == typeid(io_strand));
    CHECK(s.target<io_strand>()->get_inner_executor() == io.get_executor());
    // Any other executor gets a strand of its own type-erased self.
    asio::thread_pool pool(1);
    const asio::any_io_executor other = pool.get_executor();
    const auto t = petrel::detail::connection_strand(other);
    REQUIRE(t.target_type() == typeid(any_strand));
    CHECK(t.target<any_strand>()->get_inner_executor() == other);
    // Each call is a strand of its own.
    CHECK(petrel::detail::connection_strand(ex) != s);
    pool.join();
}

TEST_CASE("tcp_transport: peers one minor protocol version apart work together",
          "[transport][tcp]") {
    namespace wire = petrel::wire;
    const auto next_minor = static_cast<std::uint8_t>(wire::protocol_minor + 1);
    // A field the next minor version added and this one does not know.
    const unsigned added = wire::detail::header_field_count + 2;
    std::vector<key_t64> keys{7};

    SECTION("a newer worker's push is applied and answered") {
        target t;
        wire::message push;
        push.header.kind = wire::message_kind::push;
        push.header.request_id = 5;
        key7(push, 2.5f, true);
        asio::io_context raw;
        asio::ip::tcp::socket s(raw);
        s.connect(t.endpoint);
        asio::write(
            s, asio::buffer(petrel::test::frame_with_newer_field(push, added, 300, next_minor)));
        wire::frame_decoder dec({}, std::make_shared<petrel::buffer_pool>());
        const auto reply = read_frame(s, dec, wire::message_kind::push_reply);
        REQUIRE(reply);
        CHECK(reply->header.status == 0);
        CHECK(reply->header.request_id == 5);
        CHECK(reply->header.version == wire::protocol_version);
        CHECK(t.worker().pull(keys, asio::use_future).get().values()(0) == 2.5f);
        CHECK_THAT(t.log.all(), !Catch::Contains("invalid frame"));
    }
    SECTION("a newer server's reply completes a pull") {
        io_threads io;
        asio::io_context raw;
        asio::ip::tcp::acceptor acceptor(raw, {asio::ip::make_address("127.0.0.1"), 0});
        petrel::kv_store_options<key_t64> o;
        o.servers = {"127.0.0.1:" + std::to_string(acceptor.local_endpoint().port())};
        o.request_timeout = 20s;
        petrel::kv_store<key_t64, float, petrel::eventual> kv(petrel::tcp_transport(io.executor()),
                                                              o);
        auto pulled = kv.pull(keys, asio::use_future);
        asio::ip::tcp::socket s(raw);
        auto accepted = std::async(std::launch::async, [&] {
            std::error_code ec;
            acceptor.accept(s, ec);
            return ec;
        });
        if (accepted.wait_for(10s) != std::future_status::ready) {
            std::error_code ec;
            acceptor.close(ec);
        }
        REQUIRE_FALSE(accepted.get());
        wire::frame_decoder dec({}, std::make_shared<petrel::buffer_pool>());
        const auto pull = read_frame(s, dec, wire::message_kind::pull);
        REQUIRE(pull);
        auto reply = wire::make_reply(pull->header, wire::message_kind::pull_reply);
        key7(reply, 4.5f, false);
        asio::write(
            s, asio::buffer(petrel::test::frame_with_newer_field(reply, added, 300, next_minor)));
        REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
        CHECK(pulled.get().values()(0) == 4.5f);
    }
}

TEST_CASE("tcp_transport: bad frames close only the sender's connection", "[transport][tcp]") {
    target t;
    auto kv = t.worker();
    std::vector<key_t64> keys{1, 2, 3};
    kv.push(keys, xt::xtensor<float, 1>{1, 2, 3}, asio::use_future).get();

    SECTION("random bytes") {
        std::mt19937 rng(7);
        std::vector<std::byte> junk(4096);
        for (auto& b : junk) {
            b = static_cast<std::byte>(rng());
        }
        CHECK(t.server_closes_after(junk));
    }
    SECTION("a frame claiming 2 GiB of payload is refused before any allocation") {
        CHECK(t.server_closes_after(prefix(40, std::uint64_t{2} << 30)));
    }
    SECTION("a truncated frame followed by end of stream") {
        CHECK(t.server_closes_after(prefix(40, 100, 10)));
    }
    SECTION("a header of garbage") {
        CHECK(t.server_closes_after(prefix(40, 0, 40, std::byte{0x5a})));
    }
    // The server and its data are intact, and other connections keep working.
    auto got = kv.pull(keys, asio::use_future).get();
    CHECK((got.values() == xt::xtensor<float, 1>{1, 2, 3}));
    kv.push(keys, xt::xtensor<float, 1>{1, 1, 1}, asio::use_future).get();
    CHECK(t.worker().pull(keys, asio::use_future).get().values()(2) == 4.0f);
}

TEST_CASE("tcp_transport: an invalid frame is reported through the log hook", "[transport][tcp]") {
    target t;
    REQUIRE(t.server_closes_after(prefix(40, 0, 40, std::byte{0x5a})));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (t.log.size() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    CHECK_THAT(t.log.all(), Catch::Contains("invalid frame"));
}

TEST_CASE("tcp_transport: a peer of another major protocol version is refused, naming both",
          "[transport][tcp]") {
    target t;
    const auto next = static_cast<std::uint8_t>(petrel::wire::protocol_major + 1);
    REQUIRE(t.server_closes_after(prefix(4, 0, 4, std::byte{0}, next)));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (t.log.size() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    const std::string expected = "the peer speaks wire protocol " + std::to_string(next) + "." +
                                 std::to_string(petrel::wire::protocol_minor) + ", this node " +
                                 petrel::wire::version_text(petrel::wire::protocol_version);
    CHECK_THAT(t.log.all(), Catch::Contains(expected));
}

TEST_CASE("tcp_transport: listen reports the bound port and refuses bad addresses",
          "[transport][tcp]") {
    io_threads io;
    petrel::tcp_transport t(io.executor());
    const auto a = t.listen("127.0.0.1:0", {});
    CHECK(a.rfind("127.0.0.1:", 0) == 0);
    CHECK(a != "127.0.0.1:0");
    CHECK_THROWS_AS(t.listen("no-port-here", {}), std::system_error);
    CHECK_THROWS_AS(t.listen(a, {}), std::system_error); // taken
    // The error names the address, not only the system's "Address already in use".
    CHECK_THROWS_WITH(t.listen(a, {}), Catch::Contains("cannot listen on " + a));
}

TEST_CASE("tcp_transport: connect to nothing fails, connect to a listener succeeds",
          "[transport][tcp]") {
    io_threads io;
    petrel::tcp_transport server(io.executor());
    petrel::tcp_transport client(io.executor());
    const auto a = server.listen("127.0.0.1:0", {});
    auto c = client.async_connect(a, {}, asio::use_future).get();
    REQUIRE(c);
    CHECK(c->is_open());
    CHECK_THROWS_AS(client.async_connect("127.0.0.1:1", {}, asio::use_future).get(),
                    std::system_error);
    CHECK_THROWS_AS(client.async_connect("bad address", {}, asio::use_future).get(),
                    std::system_error);
}

TEST_CASE("tcp_transport: close ends every connection and lets the io_context finish",
          "[transport][tcp]") {
    asio::io_context io;
    std::atomic<int> closed{0};
    std::atomic<int> received{0};
    auto server = std::make_unique<petrel::tcp_transport>(io.get_executor());
    petrel::tcp_transport client(io.get_executor());
    petrel::connection_handlers h;
    h.on_close = [&](const petrel::connection_ptr&, std::error_code) { ++closed; };
    auto server_handlers = h;
    server_handlers.on_message = [&](const petrel::connection_ptr&, petrel::wire::message&&) {
        if (++received == 3) { // every connection is established on both ends
            server->close();
            client.close();
        }
    };
    const auto a = server->listen("127.0.0.1:0", server_handlers);
    std::vector<petrel::connection_ptr> conns;
    for (int i = 0; i < 3; ++i) {
        client.async_connect(a, h, [&](std::error_code ec, petrel::connection_ptr c) {
            if (ec) {
                client.close(); // fails the checks below; no assertion on this thread
                server->close();
                return;
            }
            conns.push_back(c);
            petrel::wire::message hello;
            hello.header.kind = petrel::wire::message_kind::pull;
            c->send(hello);
        });
    }
    std::thread runner([&] { io.run(); });
    auto done = std::async(std::launch::async, [&] { runner.join(); });
    const bool finished = done.wait_for(20s) == std::future_status::ready;
    if (!finished) {
        io.stop();
        done.wait();
    }
    REQUIRE(finished);
    CHECK(received == 3);
    CHECK(closed == 6); // both ends of three connections, once each
    for (auto& c : conns) {
        CHECK_FALSE(c->is_open());
    }
}

TEST_CASE("tcp_transport: nodes destroyed before their io_context runs leave nothing behind",
          "[transport][tcp]") {
    // Listening and connecting spawn coroutines; destroying their owners before the
    // io_context ever ran must neither crash nor leak work that never ends.
    asio::io_context io;
    {
        petrel::server_node server(petrel::tcp_transport(io.get_executor()));
        const auto address = server.listen("127.0.0.1:0");
        petrel::kv_store_options<key_t64> o;
        o.servers = {address};
        petrel::kv_store<key_t64, float, petrel::eventual> kv(
            petrel::tcp_transport(io.get_executor()), o);
        std::vector<key_t64> keys{1};
        kv.push(keys, xt::xtensor<float, 1>{1.0f}, [](std::error_code) {});
    }
    auto done = std::async(std::launch::async, [&] { io.run(); });
    REQUIRE(done.wait_for(20s) == std::future_status::ready);
}

namespace {

/// A pull of 1000 keys x 16 floats of a table never pushed: 64 KB of zeros per 8 KB
/// request.
std::vector<std::byte> zeros_pull_frame() {
    std::vector<std::uint64_t> keys(1000);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    petrel::wire::message pull;
    pull.header.kind = petrel::wire::message_kind::pull;
    pull.header.width = 16;
    pull.header.key_count = keys.size();
    pull.header.range_end = petrel::key_space_end<std::uint64_t>;
    pull.set_segment(petrel::wire::keys_segment,
                     petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    return petrel::test::frame_of(pull);
}

} // namespace

TEST_CASE("tcp_transport: a peer that never reads its replies cannot grow the server's queue",
          "[transport][tcp]") {
    io_threads io{1};
    petrel::transport_options opts;
    opts.max_send_queue_bytes = 1 << 20;
    petrel::server_node server(petrel::tcp_transport(io.executor(), opts));
    const auto address = server.listen("127.0.0.1:0");
    const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));

    // Without back-pressure the server would read every request and queue all the
    // replies (2000 x 64 KB); with it, it stops reading after about 1 MiB of replies and
    // the client's socket fills up.
    const auto frame = zeros_pull_frame();

    asio::io_context raw;
    asio::ip::tcp::socket s(raw);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    s.non_blocking(true);
    constexpr int attempts = 2000;
    int sent = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    std::size_t offset = 0; // bytes of the current frame already written
    while (sent < attempts && std::chrono::steady_clock::now() < deadline) {
        std::error_code ec;
        const std::size_t n =
            s.write_some(asio::buffer(frame.data() + offset, frame.size() - offset), ec);
        if (ec == asio::error::would_block) {
            // Give the server time to read more, if it still reads at all.
            std::this_thread::sleep_for(20ms);
            std::error_code again;
            const std::size_t m =
                s.write_some(asio::buffer(frame.data() + offset, frame.size() - offset), again);
            if (again == asio::error::would_block) {
                break; // the server stopped reading: back-pressure works
            }
            REQUIRE_FALSE(again);
            offset += m;
        } else {
            REQUIRE_FALSE(ec);
            offset += n;
        }
        if (offset == frame.size()) {
            offset = 0;
            ++sent;
        }
    }
    CHECK(sent < attempts);

    // Other workers are served meanwhile.
    petrel::kv_store_options<key_t64> o;
    o.servers = {address};
    o.request_timeout = 20s;
    petrel::kv_store<key_t64, float, petrel::eventual> kv(petrel::tcp_transport(io.executor()), o);
    std::vector<key_t64> k{5};
    kv.push(k, xt::xtensor<float, 1>{2.0f}, asio::use_future).get();
    CHECK(kv.pull(k, asio::use_future).get().values()(0) == 2.0f);
    std::error_code ignored;
    s.close(ignored);
}

TEST_CASE("tcp_transport: a message handler that throws closes only its connection",
          "[transport][tcp]") {
    io_threads io{1};
    log_capture log;
    std::atomic<int> closed{0};
    std::error_code close_code;
    petrel::connection_handlers throwing;
    throwing.on_message = [](const petrel::connection_ptr&, petrel::wire::message&&) {
        throw std::runtime_error("handler refuses");
    };
    throwing.on_close = [&](const petrel::connection_ptr&, std::error_code ec) {
        close_code = ec;
        ++closed;
    };
    petrel::tcp_transport server(io.executor(), {.log = log.logger()});
    petrel::tcp_transport client(io.executor());
    const auto a = server.listen("127.0.0.1:0", throwing);
    auto c = client.async_connect(a, {}, asio::use_future).get();
    petrel::wire::message hello;
    hello.header.kind = petrel::wire::message_kind::pull;
    c->send(hello);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (closed == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    REQUIRE(closed == 1);
    CHECK(close_code == petrel::errc::handler_failed);
    CHECK_THAT(log.all(), Catch::Contains("handler refuses"));
}

namespace {

/// Two transports on `io` with secrets `server_secret` and `client_secret` (empty: none),
/// the server's messages and log recorded.
struct secured_pair {
    secured_pair(io_threads& io, std::string server_secret, std::string client_secret,
                 petrel::tls_files server_tls = {}, petrel::tls_files client_tls = {})
        : server(io.executor(), {.log = server_log.logger(),
                                 .secret = std::move(server_secret),
                                 .handshake_timeout = 2s,
                                 .auth_failure_delay = 50ms,
                                 .tls = std::move(server_tls)}),
          client(io.executor(), {.log = client_log.logger(),
                                 .secret = std::move(client_secret),
                                 .tls = std::move(client_tls)}) {
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr& c, petrel::wire::message&& m) {
            ++received;
            c->send(std::move(m)); // echo
            if (close_after_echo) {
                c->close(); // what was sent before leaves first
            }
        };
        address = server.listen("127.0.0.1:0", h);
    }

    /// Connects (to `to`, the server's address when empty), sends one message carrying
    /// `payload` (a multiple of 4 bytes) and waits for its echo; the connect's error, or
    /// `errc::connection_closed` when the connection closed first, or
    /// `errc::malformed_payload` when the echo carries other bytes, otherwise.
    std::error_code round_trip(const std::string& payload = "", std::string to = "") {
        // The handlers outlive this call (the connection closes later): they share the
        // outcome.
        struct outcome_state {
            std::promise<std::error_code> echoed;
            std::atomic<bool> once{false};
            void settle(std::error_code ec) {
                if (!once.exchange(true)) {
                    echoed.set_value(ec);
                }
            }
        };
        auto state = std::make_shared<outcome_state>();
        petrel::connection_handlers h;
        h.on_message = [state, payload](const petrel::connection_ptr&, petrel::wire::message&& m) {
            const auto got = m.segments[petrel::wire::values_segment];
            const bool same =
                got.size() == payload.size() &&
                (payload.empty() || std::memcmp(got.data(), payload.data(), got.size()) == 0);
            state->settle(same ? std::error_code{} : petrel::errc::malformed_payload);
        };
        h.on_close = [state](const petrel::connection_ptr&, std::error_code) {
            state->settle(petrel::errc::connection_closed);
        };
        std::promise<std::pair<std::error_code, petrel::connection_ptr>> connected;
        client.async_connect(to.empty() ? address : to, h,
                             [&](std::error_code e, petrel::connection_ptr c) {
                                 connected.set_value({e, std::move(c)});
                             });
        auto [ec, c] = connected.get_future().get();
        if (ec) {
            return ec;
        }
        petrel::wire::message m;
        m.header.kind = petrel::wire::message_kind::pull;
        if (!payload.empty()) {
            // The values of the range [0, n) as a pull's reply: floats, the payload's bytes.
            m.header.kind = petrel::wire::message_kind::pull_reply;
            m.header.range_end = payload.size() / sizeof(float);
            m.header.key_count = m.header.range_end;
            m.set_segment(petrel::wire::values_segment,
                          petrel::shared_bytes::copy_of(std::as_bytes(std::span(payload))));
        }
        c->send(std::move(m));
        auto outcome = state->echoed.get_future();
        if (outcome.wait_for(10s) != std::future_status::ready) {
            return petrel::errc::timed_out;
        }
        return outcome.get();
    }

    /// Whether the server logs a line containing `text` within 10 s.
    bool server_logged(const std::string& text) {
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (server_log.all().find(text) == std::string::npos) {
            if (std::chrono::steady_clock::now() > until) {
                return false;
            }
            std::this_thread::sleep_for(10ms);
        }
        return true;
    }

    log_capture server_log;
    log_capture client_log;
    petrel::tcp_transport server;
    petrel::tcp_transport client;
    std::string address;
    std::atomic<int> received{0};
    std::atomic<bool> close_after_echo{false};
};

} // namespace

TEST_CASE("tcp_transport: with a secret, only peers that know it exchange messages",
          "[transport][tcp][auth]") {
    io_threads io;
    SECTION("the same secret on both ends") {
        secured_pair p(io, "job secret 1", "job secret 1");
        CHECK_FALSE(p.round_trip());
        CHECK(p.received == 1);
        CHECK(p.server_log.size() == 0);
    }
    SECTION("a wrong secret: the connect fails, nothing reaches the server, which logs it") {
        secured_pair p(io, "job secret 1", "job secret 2");
        CHECK(p.round_trip() == petrel::errc::auth_failed);
        CHECK(p.received == 0);
        CHECK_THAT(p.server_log.all(), Catch::Contains("refused a connection from 127.0.0.1"));
    }
    SECTION("a server without a secret refuses a client that sends a hello") {
        secured_pair p(io, "", "job secret 1");
        CHECK(p.round_trip() == petrel::errc::auth_failed);
        CHECK(p.received == 0);
    }
    SECTION("a client without a secret: its frames never reach the server") {
        secured_pair p(io, "job secret 1", "");
        CHECK(p.round_trip() == petrel::errc::connection_closed);
        CHECK(p.received == 0);
        // The client reads the server's hello where a frame belongs, and says why.
        CHECK_THAT(p.client_log.all(), Catch::Contains("job's secret"));
        // The client may close before the server has read what it sent: wait for the line.
        CHECK(p.server_logged("refused a connection"));
    }
}

namespace {

/// A relay on the path between a client and a server that keeps every byte it carries, as
/// an eavesdropper on the network would: connections to `address()` go on to `to`.
class tapped_relay {
public:
    explicit tapped_relay(const std::string& to)
        : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}),
          to_port_(static_cast<std::uint16_t>(std::stoi(to.substr(to.rfind(':') + 1)))) {
        accepting_ = std::thread([this] {
            std::error_code ec;
            for (;;) {
                auto in = std::make_shared<asio::ip::tcp::socket>(io_);
                acceptor_.accept(*in, ec);
                if (ec || stopping_) {
                    return;
                }
                auto out = std::make_shared<asio::ip::tcp::socket>(io_);
                out->connect({asio::ip::make_address("127.0.0.1"), to_port_}, ec);
                std::lock_guard lock(mutex_);
                sockets_.push_back(in);
                sockets_.push_back(out);
                if (!ec) {
                    pumps_.emplace_back([this, in, out] { pump(*in, *out); });
                    pumps_.emplace_back([this, in, out] { pump(*out, *in); });
                }
            }
        });
    }
    tapped_relay(const tapped_relay&) = delete;
    tapped_relay& operator=(const tapped_relay&) = delete;
    ~tapped_relay() {
        std::error_code ignored;
        stopping_ = true;
        asio::ip::tcp::socket poke(io_); // wakes the blocking accept
        poke.connect(acceptor_.local_endpoint(), ignored);
        accepting_.join();
        acceptor_.close(ignored);
        std::vector<std::thread> pumps;
        {
            std::lock_guard lock(mutex_);
            for (auto& sock : sockets_) {
                sock->shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
            }
            pumps.swap(pumps_);
        }
        for (auto& t : pumps) {
            t.join();
        }
    }

    [[nodiscard]] std::string address() const {
        return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }
    /// Everything carried so far, both ways.
    [[nodiscard]] std::string seen() {
        std::lock_guard lock(mutex_);
        return seen_;
    }

private:
    void pump(asio::ip::tcp::socket& from, asio::ip::tcp::socket& to) {
        std::array<char, 65536> buf{};
        std::error_code ec;
        for (;;) {
            const std::size_t n = from.read_some(asio::buffer(buf), ec);
            if (ec) {
                break;
            }
            {
                std::lock_guard lock(mutex_);
                seen_.append(buf.data(), n);
            }
            asio::write(to, asio::buffer(buf.data(), n), ec);
            if (ec) {
                break;
            }
        }
        to.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    }

    asio::io_context io_;
    asio::ip::tcp::acceptor acceptor_;
    std::uint16_t to_port_;
    std::atomic<bool> stopping_{false};
    std::mutex mutex_;
    std::string seen_;
    std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets_;
    std::vector<std::thread> pumps_;
    std::thread accepting_;
};

/// A payload an eavesdropper must not read: a recognisable text, repeated.
std::string marked_payload(std::size_t bytes) {
    const std::string mark = "a gradient for the job's eyes only; ";
    std::string out;
    while (out.size() < bytes) {
        out += mark;
    }
    out.resize(bytes);
    return out;
}

} // namespace

TEST_CASE("tcp_transport: with TLS, nodes whose certificates the job's authority signed exchange "
          "messages, and the network carries none of their bytes in the clear",
          "[transport][tcp][tls][security]") {
    io_threads io;
    const auto node = petrel::test::tls_of();
    SECTION("TLS and the secret: small and large messages, byte for byte") {
        secured_pair p(io, "job secret 1", "job secret 1", node, node);
        CHECK_FALSE(p.round_trip());
        CHECK_FALSE(p.round_trip("four"));
        CHECK_FALSE(p.round_trip(marked_payload(5 << 20)));
        CHECK(p.received == 3);
        CHECK(p.server_log.all() == "");
    }
    SECTION("TLS alone") {
        secured_pair p(io, "", "", node, node);
        CHECK_FALSE(p.round_trip(marked_payload(1000)));
    }
    SECTION("a message sent right before close() arrives, small or large") {
        secured_pair p(io, "job secret 1", "job secret 1", node, node);
        p.close_after_echo = true;
        for (int i = 0; i < 5; ++i) {
            CHECK_FALSE(p.round_trip(marked_payload(64)));
            CHECK_FALSE(p.round_trip(marked_payload(3 << 20)));
        }
    }
    SECTION("an eavesdropper on the path sees none of the payload under TLS, all of it without") {
        const auto payload = marked_payload(256 << 10);
        const std::string mark = payload.substr(0, 36);
        {
            secured_pair p(io, "job secret 1", "job secret 1", node, node);
            tapped_relay tap(p.address);
            CHECK_FALSE(p.round_trip(payload, tap.address()));
            CHECK(tap.seen().size() > 2 * payload.size()); // both ways
            CHECK(tap.seen().find(mark) == std::string::npos);
        }
        {
            secured_pair p(io, "job secret 1", "job secret 1");
            tapped_relay tap(p.address);
            CHECK_FALSE(p.round_trip(payload, tap.address()));
            CHECK(tap.seen().find(mark) != std::string::npos);
        }
    }
}

TEST_CASE("tcp_transport: a TLS listener refuses a peer without a certificate of the job's "
          "authority, or without TLS, and logs why",
          "[transport][tcp][tls][security]") {
    io_threads io;
    const auto node = petrel::test::tls_of();
    SECTION("a stranger's certificate: the connect fails with tls_failed") {
        secured_pair p(io, "job secret 1", "job secret 1", node,
                       petrel::test::tls_of("stranger", "other_ca"));
        CHECK(p.round_trip() == petrel::errc::tls_failed);
        CHECK(p.received == 0);
        CHECK(p.server_logged("refused a connection from 127.0.0.1"));
    }
    SECTION("a stranger that trusts the job's authority: refused by the listener") {
        secured_pair p(io, "job secret 1", "job secret 1", node,
                       petrel::test::tls_of("stranger", "ca"));
        CHECK(p.round_trip() == petrel::errc::tls_failed);
        CHECK(p.received == 0);
        CHECK(p.server_logged("certificate"));
    }
    SECTION("a peer without TLS, with the secret: nothing reaches the listener") {
        secured_pair p(io, "job secret 1", "job secret 1", node, {});
        CHECK(p.round_trip());
        CHECK(p.received == 0);
        CHECK(p.server_logged("refused a connection from 127.0.0.1"));
    }
    SECTION("a peer without TLS or secret: its frames never reach the listener") {
        secured_pair p(io, "", "", node, {});
        CHECK(p.round_trip());
        CHECK(p.received == 0);
        CHECK(p.server_logged("refused a connection from 127.0.0.1"));
    }
    SECTION("a TLS peer at a listener without TLS: refused, and the listener says the peer "
            "speaks TLS") {
        secured_pair p(io, "", "", {}, node);
        CHECK(p.round_trip());
        CHECK(p.received == 0);
        CHECK(p.server_logged("TLS"));
    }
}

TEST_CASE("tcp_transport: refusals are logged a line a second at most", "[transport][tcp][auth]") {
    io_threads io;
    secured_pair p(io, "job secret 1", "job secret 2");
    for (int i = 0; i < 5; ++i) {
        CHECK(p.round_trip() == petrel::errc::auth_failed);
    }
    CHECK(p.received == 0);
    CHECK(p.server_log.size() < 5);
}

TEST_CASE("tcp_transport: a peer that connects and says nothing is closed after the handshake "
          "timeout, and close() ends handshakes under way",
          "[transport][tcp][auth]") {
    io_threads io;
    secured_pair p(io, "job secret 1", "job secret 1");
    const auto port =
        static_cast<std::uint16_t>(std::stoi(p.address.substr(p.address.rfind(':') + 1)));
    asio::io_context raw;
    auto silent_closed = [&](std::chrono::seconds limit) {
        asio::ip::tcp::socket s(raw);
        s.connect({asio::ip::make_address("127.0.0.1"), port});
        auto fut = std::async(std::launch::async, [&] {
            std::array<char, 64> sink{};
            std::error_code ec;
            while (!ec) {
                s.read_some(asio::buffer(sink), ec); // the server's hello, then the close
            }
        });
        const bool closed = fut.wait_for(limit) == std::future_status::ready;
        std::error_code ignored;
        s.close(ignored);
        fut.wait();
        return closed;
    };
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(silent_closed(10s)); // handshake_timeout is 2 s here
    CHECK(std::chrono::steady_clock::now() - t0 >= 1900ms);

    asio::ip::tcp::socket s(raw);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    std::this_thread::sleep_for(100ms);
    const auto t1 = std::chrono::steady_clock::now();
    p.server.close();
    std::array<char, 64> sink{};
    std::error_code ec;
    while (!ec) {
        s.read_some(asio::buffer(sink), ec);
    }
    CHECK(std::chrono::steady_clock::now() - t1 < 1500ms); // not the handshake timeout
}

TEST_CASE("tcp_transport: close() ends a connect whose handshake waits for a silent peer",
          "[transport][tcp][auth]") {
    io_threads io;
    asio::io_context raw;
    asio::ip::tcp::acceptor silent(raw, {asio::ip::make_address("127.0.0.1"), 0});
    petrel::tcp_transport client(io.executor(),
                                 {.secret = "job secret 1", .handshake_timeout = 20s});
    std::promise<std::error_code> done;
    client.async_connect("127.0.0.1:" + std::to_string(silent.local_endpoint().port()), {},
                         [&](std::error_code ec, petrel::connection_ptr) { done.set_value(ec); });
    asio::ip::tcp::socket peer(raw);
    silent.accept(peer); // and says nothing
    std::this_thread::sleep_for(100ms);
    const auto t0 = std::chrono::steady_clock::now();
    client.close();
    auto outcome = done.get_future();
    REQUIRE(outcome.wait_for(5s) == std::future_status::ready); // not the 20 s timeout
    CHECK(outcome.get());
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("tcp_transport: a listener keeps a bounded number of connections, from one address "
          "and in all; a connection that closes frees its place",
          "[transport][tcp][security]") {
    io_threads io;
    for (const bool secured : {false, true}) {
        INFO((secured ? "with a secret" : "without a secret"));
        log_capture log;
        petrel::transport_options o{.log = log.logger(),
                                    .handshake_timeout = 20s,
                                    .max_accepted_connections = 4,
                                    .max_connections_per_address = 3};
        if (secured) {
            o.secret = "job secret 1";
        }
        petrel::tcp_transport server(io.executor(), o);
        const auto address = server.listen("127.0.0.1:0", {});
        const asio::ip::tcp::endpoint endpoint{
            asio::ip::make_address("127.0.0.1"),
            static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)))};
        asio::io_context raw;
        // A connection from `from` (any 127.x.y.z is this host's).
        auto open = [&](const char* from) {
            auto s = std::make_unique<asio::ip::tcp::socket>(raw);
            s->open(asio::ip::tcp::v4());
            s->bind({asio::ip::make_address(from), 0});
            s->connect(endpoint);
            s->non_blocking(true);
            return s;
        };
        // Whether the server closes `s` within `wait` (a hello it sends is read past).
        auto closed = [](asio::ip::tcp::socket& s, std::chrono::milliseconds wait) {
            const auto until = std::chrono::steady_clock::now() + wait;
            std::array<char, 64> sink{};
            while (std::chrono::steady_clock::now() < until) {
                std::error_code ec;
                s.read_some(asio::buffer(sink), ec);
                if (ec == asio::error::would_block) {
                    std::this_thread::sleep_for(10ms);
                } else if (ec) {
                    return true;
                }
            }
            return false;
        };
        std::vector<std::unique_ptr<asio::ip::tcp::socket>> kept;
        for (int i = 0; i < 3; ++i) {
            kept.push_back(open("127.0.0.1"));
        }
        auto fourth = open("127.0.0.1");
        CHECK(closed(*fourth, 5000ms)); // a fourth from one address
        CHECK_THAT(log.all(), Catch::Contains("max_connections_per_address"));
        kept.push_back(open("127.0.0.2")); // another address: the fourth in all
        auto fifth = open("127.0.0.3");
        CHECK(closed(*fifth, 5000ms)); // a fifth in all
        for (auto& s : kept) {
            CHECK_FALSE(closed(*s, 100ms));
        }
        // One closes: its place is free again once the server saw it go.
        kept.front()->close();
        kept.erase(kept.begin());
        bool taken = false;
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (!taken && std::chrono::steady_clock::now() < until) {
            auto again = open("127.0.0.1");
            taken = !closed(*again, 200ms);
            if (taken) {
                kept.push_back(std::move(again));
            } else {
                std::this_thread::sleep_for(50ms); // refused at once: not seen to go yet
            }
        }
        CHECK(taken);
        server.close();
    }
}

namespace {

/// A listener with `opts` that counts what it receives and records how its one
/// connection ended; and a raw socket connected to it, writing bytes as a test says.
struct slow_peer {
    explicit slow_peer(petrel::transport_options opts) : server(io.executor(), with_log(opts)) {
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr&, petrel::wire::message&&) {
            ++received;
        };
        h.on_close = [this](const petrel::connection_ptr&, std::error_code ec) {
            closed_at = std::chrono::steady_clock::now();
            closed.set_value(ec);
        };
        const auto address = server.listen("127.0.0.1:0", std::move(h));
        const auto port =
            static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
        socket.connect({asio::ip::make_address("127.0.0.1"), port});
        started = std::chrono::steady_clock::now();
    }
    ~slow_peer() {
        std::error_code ignored;
        socket.close(ignored);
        server.close();
    }
    slow_peer(const slow_peer&) = delete;
    slow_peer& operator=(const slow_peer&) = delete;

    petrel::transport_options with_log(petrel::transport_options o) {
        o.log = log.logger();
        return o;
    }

    void write(std::span<const std::byte> bytes) {
        asio::write(socket, asio::buffer(bytes.data(), bytes.size()));
    }

    /// Sends `bytes` in pieces of `piece` bytes, `pause` apart, until all are sent or the
    /// connection ended.
    void trickle(std::span<const std::byte> bytes, std::size_t piece,
                 std::chrono::milliseconds pause) {
        for (std::size_t at = 0; at < bytes.size(); at += piece) {
            const auto n = std::min(piece, bytes.size() - at);
            std::error_code ignored;
            asio::write(socket, asio::buffer(bytes.data() + at, n), ignored);
            if (end(pause)) {
                return;
            }
        }
    }

    /// How the connection ended, within `within`; nullopt while it is open.
    std::optional<std::error_code> end(std::chrono::milliseconds within) {
        if (ending.wait_for(within) != std::future_status::ready) {
            return std::nullopt;
        }
        return ending.get();
    }

    // What the handlers touch is declared before the io threads, so that it outlives
    // every handler that may still run.
    log_capture log;
    std::atomic<int> received{0};
    std::promise<std::error_code> closed;
    std::shared_future<std::error_code> ending = closed.get_future().share();
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point closed_at;
    io_threads io{1};
    petrel::tcp_transport server;
    asio::io_context raw;
    asio::ip::tcp::socket socket{raw};
};

/// A pull of `n_keys` keys: a header and a payload of 8 bytes a key.
std::vector<std::byte> pull_frame(std::size_t n_keys = 250) {
    std::vector<std::uint64_t> keys(n_keys);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    petrel::wire::message pull;
    pull.header.kind = petrel::wire::message_kind::pull;
    pull.header.width = 1;
    pull.header.key_count = keys.size();
    pull.header.range_end = petrel::key_space_end<std::uint64_t>;
    pull.set_segment(petrel::wire::keys_segment,
                     petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    return petrel::test::frame_of(pull);
}

} // namespace

TEST_CASE("tcp_transport: a peer that sends a frame too slowly is closed, one within the "
          "deadlines is served",
          "[transport][tcp][security]") {
    const auto frame = pull_frame();
    const std::size_t payload = 2000;
    REQUIRE(frame.size() > payload);
    const std::size_t head = frame.size() - payload;
    SECTION("a header that stops half way") {
        slow_peer p({.frame_timeout = 300ms});
        p.write(std::span(frame).first(head / 2));
        const auto ec = p.end(10s);
        INFO(p.log.all());
        REQUIRE(ec);
        CHECK(*ec == petrel::errc::timed_out);
        CHECK(p.closed_at - p.started >= 250ms);
        CHECK(p.received == 0);
        CHECK_THAT(p.log.all(), Catch::Contains("a frame arrives too slowly"));
    }
    SECTION("a payload trickled slower than min_receive_rate") {
        // 2000 bytes at 4000 a second or faster: due 200 ms + 500 ms after the first byte.
        // Sent at 200 bytes a second, they would take 10 s.
        slow_peer p({.frame_timeout = 200ms, .min_receive_rate = 4000});
        p.write(std::span(frame).first(head));
        p.trickle(std::span(frame).subspan(head), 10, 50ms);
        const auto ec = p.end(5s);
        REQUIRE(ec);
        CHECK(*ec == petrel::errc::timed_out);
        CHECK(p.closed_at - p.started >= 600ms);
        CHECK(p.closed_at - p.started < 5s);
        CHECK(p.received == 0);
    }
    SECTION("a frame sent in pieces within the deadlines, then nothing: served, kept open") {
        slow_peer p({.frame_timeout = 2000ms, .min_receive_rate = 4000});
        p.trickle(frame, 600, 100ms);
        // Between frames no deadline runs (idle_timeout is 0).
        CHECK_FALSE(p.end(2500ms));
        CHECK(p.received == 1);
    }
}

TEST_CASE("tcp_transport: an accepted connection on which nothing arrives for idle_timeout is "
          "closed; one that keeps sending is not",
          "[transport][tcp][security]") {
    const auto frame = pull_frame();
    SECTION("silent after a frame") {
        slow_peer p({.idle_timeout = 300ms});
        p.write(frame);
        const auto ec = p.end(10s);
        REQUIRE(ec);
        CHECK(*ec == petrel::errc::timed_out);
        CHECK(p.received == 1);
        CHECK_THAT(p.log.all(), Catch::Contains("nothing arrived within idle_timeout"));
    }
    SECTION("a frame every 100 ms for a second") {
        slow_peer p({.idle_timeout = 300ms});
        for (int i = 0; i < 10; ++i) {
            p.write(frame);
            std::this_thread::sleep_for(100ms);
        }
        CHECK_FALSE(p.end(0ms));
        CHECK(p.received == 10);
    }
}

TEST_CASE("tcp_transport: accepted connections share one budget for the payloads they receive; "
          "a frame that waits for its share is not the slow one",
          "[transport][tcp][security]") {
    // A's payload (60,000 bytes) and B's (8,000) do not fit in 65,000 together. Deadlines:
    // A's frame 1 s + 3 s at 20,000 bytes a second; B's 1 s + 0.4 s.
    const auto frame_a = pull_frame(7500);
    const auto frame_b = pull_frame(1000);
    std::mutex mutex;
    std::vector<std::uint64_t> got; // key counts, in the order received
    std::vector<std::error_code> closes;
    log_capture log;
    io_threads io{1};
    petrel::tcp_transport server(io.executor(), {.log = log.logger(),
                                                 .frame_timeout = 1000ms,
                                                 .min_receive_rate = 20000,
                                                 .max_receiving_bytes = 65000});
    petrel::connection_handlers h;
    h.on_message = [&](const petrel::connection_ptr&, petrel::wire::message&& m) {
        std::lock_guard lock(mutex);
        got.push_back(m.header.key_count);
    };
    h.on_close = [&](const petrel::connection_ptr&, std::error_code ec) {
        std::lock_guard lock(mutex);
        closes.push_back(ec);
    };
    const auto address = server.listen("127.0.0.1:0", std::move(h));
    const asio::ip::tcp::endpoint to{
        asio::ip::make_address("127.0.0.1"),
        static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)))};
    asio::io_context raw;
    asio::ip::tcp::socket a(raw);
    asio::ip::tcp::socket b(raw);
    a.connect(to);
    b.connect(to);
    auto received = [&] {
        std::lock_guard lock(mutex);
        return got;
    };
    auto wait_for = [&](std::size_t n, std::chrono::milliseconds within) {
        const auto until = std::chrono::steady_clock::now() + within;
        while (received().size() < n && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(10ms);
        }
        return received();
    };

    // A sends its header and half its payload: its share is taken.
    const std::size_t half = frame_a.size() / 2;
    asio::write(a, asio::buffer(frame_a.data(), half));
    std::this_thread::sleep_for(100ms);
    // B sends its whole frame: it waits for A's share.
    const auto b_sent = std::chrono::steady_clock::now();
    asio::write(b, asio::buffer(frame_b));
    std::this_thread::sleep_for(500ms);
    CHECK(received().empty());

    SECTION("A's frame completes: both are received, A's first") {
        asio::write(a, asio::buffer(frame_a.data() + half, frame_a.size() - half));
        CHECK(wait_for(2, 5s) == std::vector<std::uint64_t>{7500, 1000});
        std::lock_guard lock(mutex);
        CHECK(closes.empty());
    }
    SECTION("A stops: it is closed at its deadline; then B's frame is received and B is "
            "kept, though it waited longer than its own deadline") {
        CHECK(wait_for(1, 10s) == std::vector<std::uint64_t>{1000});
        CHECK(std::chrono::steady_clock::now() - b_sent > 2s);
        std::this_thread::sleep_for(300ms);
        std::lock_guard lock(mutex);
        REQUIRE(closes.size() == 1);
        CHECK(closes[0] == petrel::errc::timed_out);
    }
    std::error_code ignored;
    a.close(ignored);
    b.close(ignored);
    server.close();
}

TEST_CASE("tcp_transport: accepted connections keep their peers' key lists within one budget "
          "together; a list that does not fit is not kept and its reference arrives unresolved",
          "[transport][tcp][security]") {
    using petrel::wire::key_cache_receiver;
    using petrel::wire::key_list_digest;
    // Room for one list of 70 keys (560 bytes and the receiver's bookkeeping).
    const std::uint64_t cost = 70 * 8 + key_cache_receiver::entry_overhead;
    std::vector<std::uint64_t> keys(70);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const auto digest = key_list_digest(std::as_bytes(std::span(keys)));
    const auto store = petrel::test::frame_of(petrel::test::cached_push(keys, {1, digest, false}));
    const auto refer = petrel::test::frame_of(petrel::test::cached_push(keys, {1, digest, true}));

    std::mutex mutex;
    std::vector<std::pair<int, bool>> got; // (peer, keys resolved), in the order received
    std::map<petrel::connection*, int> peers;
    std::size_t closes = 0;
    io_threads io{1};
    petrel::tcp_transport server(io.executor(), {.max_cached_key_bytes = cost + 100});
    petrel::connection_handlers h;
    h.on_message = [&](const petrel::connection_ptr& c, petrel::wire::message&& m) {
        std::lock_guard lock(mutex);
        const int peer = peers.try_emplace(c.get(), static_cast<int>(peers.size())).first->second;
        got.emplace_back(peer, (m.header.encoding & petrel::wire::encoding_keys_cached) == 0 &&
                                   m.header.key_count == m.keys().size() / 8);
    };
    h.on_close = [&](const petrel::connection_ptr&, std::error_code) {
        std::lock_guard lock(mutex);
        ++closes;
    };
    const auto address = server.listen("127.0.0.1:0", std::move(h));
    const asio::ip::tcp::endpoint to{
        asio::ip::make_address("127.0.0.1"),
        static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)))};
    auto wait_until = [&](auto done) {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until) {
            {
                std::lock_guard lock(mutex);
                if (done()) {
                    return true;
                }
            }
            std::this_thread::sleep_for(5ms);
        }
        return false;
    };
    asio::io_context raw;
    asio::ip::tcp::socket a(raw);
    asio::ip::tcp::socket b(raw);
    a.connect(to);
    b.connect(to);

    // A's list takes the budget; its reference resolves.
    asio::write(a, asio::buffer(store));
    asio::write(a, asio::buffer(refer));
    REQUIRE(wait_until([&] { return got.size() == 2; }));
    // B's list does not fit: B holds nothing of its own to give up, so it is not kept.
    asio::write(b, asio::buffer(store));
    asio::write(b, asio::buffer(refer));
    REQUIRE(wait_until([&] { return got.size() == 4; }));
    {
        std::lock_guard lock(mutex);
        CHECK(got ==
              std::vector<std::pair<int, bool>>{{0, true}, {0, true}, {1, true}, {1, false}});
    }
    // A goes: its list's bytes come back, and B's next list is kept.
    std::error_code ignored;
    a.close(ignored);
    REQUIRE(wait_until([&] { return closes == 1; }));
    asio::write(b, asio::buffer(store));
    asio::write(b, asio::buffer(refer));
    REQUIRE(wait_until([&] { return got.size() == 6; }));
    {
        std::lock_guard lock(mutex);
        CHECK(got[4] == std::pair<int, bool>{1, true});
        CHECK(got[5] == std::pair<int, bool>{1, true});
    }
    b.close(ignored);
    server.close();
}

TEST_CASE("tcp_transport: back-pressure holds the frames of one read once the replies queued "
          "for a peer that does not read pass the limit",
          "[transport][tcp][security]") {
    // 4000 small requests in one burst, each answered with 64 KiB; the peer never reads.
    // One read takes in well over a thousand of them: checked only between reads, the
    // server would queue them all (about 250 MiB). Checked before each frame it handles
    // about 1 MiB / 64 KiB of them beyond what the kernel's buffers hold.
    log_capture log;
    const auto big = petrel::shared_bytes::copy_of(std::vector<std::byte>(64 << 10));
    std::atomic<int> handled{0};
    io_threads io{1}; // after what its handlers touch, which outlives them
    petrel::transport_options opts;
    opts.log = log.logger();
    opts.max_send_queue_bytes = 1 << 20;
    petrel::tcp_transport server(io.executor(), opts);
    petrel::connection_handlers h;
    h.on_message = [&](const petrel::connection_ptr& c, petrel::wire::message&& m) {
        ++handled;
        auto reply = petrel::wire::make_reply(m.header, petrel::wire::message_kind::clock_reply);
        reply.set_segment(petrel::wire::values_segment, big);
        c->send(std::move(reply));
    };
    h.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    const auto address = server.listen("127.0.0.1:0", std::move(h));
    const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));

    petrel::wire::message tick;
    tick.header.kind = petrel::wire::message_kind::clock;
    tick.header.range_begin = 0;
    tick.header.range_end = 1;
    const auto one = petrel::test::frame_of(tick);
    std::vector<std::byte> burst;
    for (int i = 0; i < 4000; ++i) {
        burst.insert(burst.end(), one.begin(), one.end());
    }
    asio::io_context raw;
    asio::ip::tcp::socket s(raw);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    s.set_option(asio::socket_base::receive_buffer_size(64 << 10));
    s.non_blocking(true);
    std::size_t written = 0;
    const auto until = std::chrono::steady_clock::now() + 3s;
    while (written < burst.size() && std::chrono::steady_clock::now() < until) {
        std::error_code ec;
        written += s.write_some(asio::buffer(burst.data() + written, burst.size() - written), ec);
        if (ec == asio::error::would_block) {
            std::this_thread::sleep_for(10ms);
        } else {
            REQUIRE_FALSE(ec);
        }
    }
    INFO("frame " << one.size() << " bytes, " << written << " of " << burst.size() << " written");
    REQUIRE(written >= 1000 * one.size()); // the server read a good deal of the burst
    std::this_thread::sleep_for(500ms);
    CHECK(handled > 0);
    CHECK(handled < 400);
    std::error_code ignored;
    s.close(ignored);
    server.close();
}

namespace {

/// A listener answering each request with 64 KiB, whose peers either never read (each
/// sends a burst of 4000 requests) or read everything: what the node's budget for queued
/// replies does.
struct reply_flood {
    explicit reply_flood(std::uint64_t budget) {
        opts.log = log.logger();
        opts.max_send_queue_bytes = 64 << 20; // far above the budget
        opts.max_queued_reply_bytes = budget;
        opts.frame_timeout = 1500ms;
        server.emplace(io.executor(), opts);
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr& c, petrel::wire::message&& m) {
            ++handled;
            auto reply =
                petrel::wire::make_reply(m.header, petrel::wire::message_kind::clock_reply);
            reply.set_segment(petrel::wire::values_segment, big);
            c->send(std::move(reply));
        };
        h.on_close = [](const petrel::connection_ptr&, std::error_code) {};
        const auto address = server->listen("127.0.0.1:0", std::move(h));
        port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
        petrel::wire::message tick;
        tick.header.kind = petrel::wire::message_kind::clock;
        tick.header.range_begin = 0;
        tick.header.range_end = 1;
        one = petrel::test::frame_of(tick);
    }
    ~reply_flood() {
        std::error_code ignored;
        for (auto& s : sockets) {
            s.close(ignored);
        }
        server->close();
    }

    /// A peer that sends `n` requests (as many as the server takes within 2 s) and reads
    /// nothing.
    void stalled_peer(int n) {
        auto& s = sockets.emplace_back(raw);
        s.connect({asio::ip::make_address("127.0.0.1"), port});
        s.set_option(asio::socket_base::receive_buffer_size(64 << 10));
        s.non_blocking(true);
        std::vector<std::byte> burst;
        for (int i = 0; i < n; ++i) {
            burst.insert(burst.end(), one.begin(), one.end());
        }
        std::size_t written = 0;
        const auto until = std::chrono::steady_clock::now() + 2s;
        while (written < burst.size() && std::chrono::steady_clock::now() < until) {
            std::error_code ec;
            written +=
                s.write_some(asio::buffer(burst.data() + written, burst.size() - written), ec);
            if (ec) {
                std::this_thread::sleep_for(10ms);
            }
        }
    }

    /// A peer that sends `n` requests and reads the replies: whether all of them came within
    /// 10 s.
    bool reading_peer(int n) {
        asio::ip::tcp::socket s(raw);
        s.connect({asio::ip::make_address("127.0.0.1"), port});
        for (int i = 0; i < n; ++i) {
            asio::write(s, asio::buffer(one));
        }
        s.non_blocking(true);
        const std::size_t want = static_cast<std::size_t>(n) * big.size();
        std::size_t got = 0;
        std::vector<std::byte> in(1 << 20);
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (got < want && std::chrono::steady_clock::now() < until) {
            std::error_code ec;
            got += s.read_some(asio::buffer(in), ec);
            if (ec == asio::error::would_block) {
                std::this_thread::sleep_for(1ms);
            } else if (ec) {
                return false;
            }
        }
        return got >= want;
    }

    log_capture log;
    const petrel::shared_bytes big =
        petrel::shared_bytes::copy_of(std::vector<std::byte>(64 << 10));
    std::atomic<int> handled{0};
    io_threads io{1}; // after what its handlers touch, which outlives them
    petrel::transport_options opts;
    std::optional<petrel::tcp_transport> server;
    std::uint16_t port = 0;
    std::vector<std::byte> one;
    asio::io_context raw;
    std::vector<asio::ip::tcp::socket> sockets;
};

} // namespace

TEST_CASE("tcp_transport: the replies queued for all peers stay within the node's budget; "
          "peers that do not read hold back themselves, not the others",
          "[transport][tcp][security]") {
    // Three peers that never read each send 4000 requests, each answered with 64 KiB. Each
    // may queue 64 MiB: without the node's budget they make it queue several times 2 MiB;
    // with a budget of 2 MiB each stops being served beyond its share.
    int without_budget = 0;
    {
        reply_flood f(0);
        for (int i = 0; i < 3; ++i) {
            f.stalled_peer(4000);
        }
        std::this_thread::sleep_for(300ms);
        without_budget = f.handled;
    }
    reply_flood f(2 << 20);
    for (int i = 0; i < 3; ++i) {
        f.stalled_peer(4000);
    }
    std::this_thread::sleep_for(300ms);
    const int with_budget = f.handled;
    INFO("handled without the budget " << without_budget << ", with it " << with_budget);
    CHECK(with_budget * 2 < without_budget);
    // Meanwhile a peer that reads is served in full, twice (its queue drains as it reads).
    CHECK(f.reading_peer(100));
    CHECK(f.reading_peer(100));
    CHECK(f.handled >= with_budget + 200);
    // And the stalled peers are closed once their frame_timeout passed, and logged.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (f.log.all().find("takes none of the replies") == std::string::npos &&
           std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(20ms);
    }
    CHECK_THAT(f.log.all(), Catch::Contains("takes none of the replies"));
}

TEST_CASE("tcp_transport: an accepted connection whose peer takes none of its replies is "
          "closed after frame_timeout; a peer that reads slowly is kept",
          "[transport][tcp][security]") {
    io_threads io{1};
    log_capture log;
    petrel::transport_options opts;
    opts.log = log.logger();
    opts.max_send_queue_bytes = 1 << 20;
    opts.frame_timeout = 1500ms;
    petrel::server_node server(petrel::tcp_transport(io.executor(), opts));
    const auto address = server.listen("127.0.0.1:0");
    const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    const auto frame = zeros_pull_frame();
    const std::string stalled = "takes none of the replies queued for it";

    asio::io_context raw;
    asio::ip::tcp::socket s(raw);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    s.non_blocking(true);
    // Sends requests for `for_how_long`, as fast as the server takes them; `read_some`
    // reads up to 64 KiB of replies every 5 ms (slower than the server answers: its queue
    // stays above the limit), or nothing. Returns whether the server closed the
    // connection.
    auto drive = [&](std::chrono::milliseconds for_how_long, bool read_some) {
        std::vector<std::byte> in(64 << 10);
        std::size_t offset = 0;
        auto next_read = std::chrono::steady_clock::now();
        const auto until = std::chrono::steady_clock::now() + for_how_long;
        while (std::chrono::steady_clock::now() < until) {
            std::error_code ec;
            const std::size_t n =
                s.write_some(asio::buffer(frame.data() + offset, frame.size() - offset), ec);
            if (!ec) {
                offset = (offset + n) % frame.size();
            } else if (ec != asio::error::would_block) {
                return true; // reset by the server
            }
            if (read_some && std::chrono::steady_clock::now() >= next_read) {
                s.read_some(asio::buffer(in), ec);
                if (ec && ec != asio::error::would_block) {
                    return true;
                }
                next_read += 5ms;
            }
            if (ec == asio::error::would_block) {
                std::this_thread::sleep_for(5ms);
            }
        }
        return false;
    };
    SECTION("a peer that reads slowly keeps its connection, its replies coming") {
        CHECK_FALSE(drive(3s, true));
        CHECK_THAT(log.all(), !Catch::Contains(stalled));
    }
    SECTION("a peer that stops reading is closed, and logged") {
        CHECK_FALSE(drive(1s, true));
        drive(6s, false);
        CHECK_THAT(log.all(), Catch::Contains(stalled));
    }
    std::error_code ignored;
    s.close(ignored);
}
