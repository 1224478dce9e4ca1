#include <petrel/transport/detail/request_link.hpp>

#include "support/cluster.hpp"
#include "support/text.hpp"
#include "support/tls.hpp"

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::count_of;
using petrel::test::io_threads;
using petrel::test::log_capture;
namespace wire = petrel::wire;

namespace {

using steady = std::chrono::steady_clock;

/// "127.0.0.1:<port>" where nothing listens: a port the kernel handed out and took back.
std::string refusing_address() {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    const auto port = a.local_endpoint().port();
    a.close();
    return "127.0.0.1:" + std::to_string(port);
}

/// A request the test peer answers.
wire::message ping() {
    wire::message m;
    m.header.kind = wire::message_kind::clock;
    m.header.range_begin = 0;
    m.header.range_end = 1;
    return m;
}

/// Handlers that answer every request with a reply of the same id.
petrel::connection_handlers answering() {
    petrel::connection_handlers h;
    h.on_message = [](const petrel::connection_ptr& c, wire::message&& m) {
        c->send(wire::make_reply(m.header, wire::message_kind::clock_reply));
    };
    h.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    return h;
}

/// How one request ended, and when.
struct outcome {
    std::error_code error;
    steady::duration took{};
};

/// Sends one request on `link` and waits (at most 20 s) for its end.
outcome ask_link(petrel::detail::request_link& link) {
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    const auto start = steady::now();
    link.request(ping(), [done](std::error_code ec, wire::message&&) { done->set_value(ec); });
    REQUIRE(f.wait_for(20s) == std::future_status::ready);
    return {f.get(), steady::now() - start};
}

} // namespace

TEST_CASE("request_link: an address that keeps refusing fails its requests with node_failed "
          "within seconds, and the log names it",
          "[transport]") {
    io_threads io(2);
    log_capture log;
    const auto address = refusing_address();
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), address, 30s,
        petrel::detail::request_link_options{.unreachable_after =
                                                 petrel::detail::default_unreachable_after});
    // Several requests wait together; all end with the first verdict.
    auto second = std::make_shared<std::promise<std::error_code>>();
    link->request(ping(), [second](std::error_code ec, wire::message&&) { second->set_value(ec); });
    const auto first = ask_link(*link);
    INFO(log.all());
    CHECK(first.error == errc::node_failed);
    CHECK(first.took >= 1s); // connecting was tried for a while (2 s)...
    CHECK(first.took < 10s); // ...not for the request's 30 s
    auto f = second->get_future();
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    CHECK(f.get() == errc::node_failed);
    CHECK(link->unreachable());
    CHECK(link->in_flight() == 0);
    const auto text = log.all();
    CHECK(count_of(text, "petrel: " + address + " refuses connections (") == 1);
    CHECK(count_of(text, "its requests fail with node_failed") == 1);

    // A later request tries once more, and fails at once when the address still refuses.
    const auto later = ask_link(*link);
    CHECK(later.error == errc::node_failed);
    CHECK(later.took < 1500ms);
    CHECK(count_of(log.all(), "its requests fail with node_failed") == 1); // said once
    link->close();
}

TEST_CASE("request_link: a peer that starts listening within the window is reached",
          "[transport]") {
    io_threads io(2);
    log_capture log;
    const auto address = refusing_address();
    petrel::tcp_transport server(io.executor(), {.log = log.logger()});
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), address, 30s,
        petrel::detail::request_link_options{.unreachable_after =
                                                 petrel::detail::default_unreachable_after});
    std::thread late([&] {
        std::this_thread::sleep_for(500ms);
        server.listen(address, answering());
    });
    const auto got = ask_link(*link);
    late.join();
    INFO(log.all());
    CHECK_FALSE(got.error);
    CHECK(got.took >= 400ms); // it waited for the listener...
    CHECK(got.took < 10s);    // ...but not for a deadline
    CHECK_FALSE(link->unreachable());
    CHECK(log.all().find("its requests fail with node_failed") == std::string::npos);
    CHECK_FALSE(ask_link(*link).error); // and the link works on
    link->close();
    server.close();
}

TEST_CASE("request_link: a link that treated its peer as failed works again once it listens",
          "[transport]") {
    io_threads io(2);
    log_capture log;
    const auto address = refusing_address();
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), address, 30s,
        petrel::detail::request_link_options{.unreachable_after = 300ms});
    const auto first = ask_link(*link);
    CHECK(first.error == errc::node_failed);
    CHECK(first.took < 10s);
    REQUIRE(link->unreachable());
    petrel::tcp_transport server(io.executor(), {.log = log.logger()});
    server.listen(address, answering());
    const auto again = ask_link(*link);
    INFO(log.all());
    CHECK_FALSE(again.error);
    CHECK_FALSE(link->unreachable());
    CHECK(log.all().find(address + " accepts connections again") != std::string::npos);
    link->close();
    server.close();
}

TEST_CASE("request_link: a peer that accepts no connection is treated as failed too",
          "[transport]") {
    // A listener whose queue of connections to accept is full: the kernel drops further
    // connection requests, so connecting hangs (as to an address that drops packets).
    asio::io_context raw;
    asio::ip::tcp::acceptor full(raw);
    const asio::ip::tcp::endpoint any{asio::ip::make_address("127.0.0.1"), 0};
    full.open(any.protocol());
    full.bind(any);
    full.listen(0);
    const auto endpoint = full.local_endpoint();
    std::vector<std::unique_ptr<asio::ip::tcp::socket>> fillers;
    for (int i = 0; i < 4; ++i) {
        fillers.push_back(std::make_unique<asio::ip::tcp::socket>(raw));
        fillers.back()->async_connect(endpoint, [](std::error_code) {});
    }
    raw.run_for(300ms);

    io_threads io(2);
    log_capture log;
    const auto address = "127.0.0.1:" + std::to_string(endpoint.port());
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), address, 30s,
        petrel::detail::request_link_options{.unreachable_after = 500ms});
    const auto got = ask_link(*link);
    INFO(log.all());
    CHECK(got.error == errc::node_failed);
    CHECK(got.took < 5s); // the transport's own connect timeout is 10 s
    CHECK(log.all().find("petrel: " + address + " does not answer connection attempts") !=
          std::string::npos);
    link->close();
}

namespace {

/// A listener on 127.0.0.1 that closes every connection it accepts at once, without a
/// word: another process holding a failed peer's port.
class closing_listener {
public:
    closing_listener() : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
        accept();
        runner_ = std::thread([this] { io_.run(); });
    }
    ~closing_listener() {
        asio::post(io_, [this] { acceptor_.close(); });
        runner_.join();
    }
    closing_listener(const closing_listener&) = delete;
    closing_listener& operator=(const closing_listener&) = delete;

    [[nodiscard]] std::string address() const {
        return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }
    std::atomic<int> accepted{0};

private:
    void accept() {
        acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket s) {
            if (ec) {
                return;
            }
            ++accepted;
            s.close();
            accept();
        });
    }

    asio::io_context io_;
    asio::ip::tcp::acceptor acceptor_;
    std::thread runner_;
};

} // namespace

TEST_CASE("request_link: with a secret, a port whose listener closes connections before the "
          "handshake is an unreachable peer, not a refused secret",
          "[transport][auth]") {
    io_threads io(2);
    log_capture log;
    closing_listener other;
    const petrel::transport_options opts{.log = log.logger(),
                                         .secret = "the job's secret, 32 bytes long."};
    SECTION("with unreachable_after: tried again, then treated as failed") {
        auto link = std::make_shared<petrel::detail::request_link>(
            petrel::tcp_transport(io.executor(), opts), other.address(), 30s,
            petrel::detail::request_link_options{.unreachable_after = 500ms});
        const auto got = ask_link(*link);
        INFO(log.all());
        CHECK(got.error == errc::node_failed);
        CHECK(got.took < 10s);
        CHECK(other.accepted >= 2); // tried more than once
        CHECK(count_of(log.all(), "petrel: " + other.address() +
                                      " closes connections before the handshake") == 1);
        link->close();
    }
    SECTION("by default: the closed connection's error at once") {
        auto link = std::make_shared<petrel::detail::request_link>(
            petrel::tcp_transport(io.executor(), opts), other.address(), 30s);
        const auto got = ask_link(*link);
        CHECK(got.error == errc::connection_closed);
        CHECK(got.took < 1500ms);
        link->close();
    }
}

TEST_CASE("request_link: by default a refused connection fails the waiting requests with its "
          "error at once",
          "[transport]") {
    // What callers that retry by themselves rely on (a member joining a root that starts
    // late).
    io_threads io(2);
    log_capture log;
    auto link = std::make_shared<petrel::detail::request_link>(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), refusing_address(), 30s);
    const auto got = ask_link(*link);
    CHECK(got.error == asio::error::connection_refused);
    CHECK(got.took < 1500ms);
    CHECK_FALSE(link->unreachable());
    CHECK(log.all().find("its requests fail with node_failed") == std::string::npos);
    link->close();
}

TEST_CASE("request_link: a store's requests to a server that refuses connections fail with "
          "node_failed within seconds, and its log names the server",
          "[transport]") {
    io_threads io(2);
    log_capture log;
    const auto address = refusing_address();
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {address};
    o.request_timeout = 30s;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor(), {.log = log.logger()}), o);
    const std::vector<std::uint64_t> keys{1, 2, 3};
    const std::vector<float> values{1, 2, 3};
    const auto start = steady::now();
    auto pushed = kv.push(keys, std::span<const float>(values), asio::use_future);
    auto pulled = kv.pull(keys, asio::use_future);
    REQUIRE(pushed.wait_for(20s) == std::future_status::ready);
    REQUIRE(pulled.wait_for(20s) == std::future_status::ready);
    const auto took = steady::now() - start;
    INFO(log.all());
    CHECK(took < 10s); // not the request timeout (30 s)
    try {
        pushed.get();
        FAIL("the push succeeded");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::node_failed);
    }
    try {
        pulled.get();
        FAIL("the pull succeeded");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::node_failed);
    }
    const auto text = log.all();
    CHECK(count_of(text, "petrel: " + address + " refuses connections (") == 1);
    CHECK(text.find("server 1 (server #0, rank 0, " + address + ")") != std::string::npos);
    kv.close();
}

TEST_CASE("request_link: an observer sees each reply before its callback, and no failure",
          "[transport]") {
    struct watcher final : petrel::detail::reply_observer {
        void observe(const wire::message& r) noexcept override {
            std::lock_guard lock(mutex);
            seen.push_back(r.header.request_id);
        }
        std::vector<std::uint64_t> copy() {
            std::lock_guard lock(mutex);
            return seen;
        }
        std::mutex mutex;
        std::vector<std::uint64_t> seen;
    };
    io_threads io(2);
    petrel::tcp_transport server(io.executor());
    const auto address = server.listen("127.0.0.1:0", answering());
    auto link = std::make_shared<petrel::detail::request_link>(petrel::tcp_transport(io.executor()),
                                                               address, 10s);
    auto w = std::make_shared<watcher>();
    for (int i = 0; i < 3; ++i) {
        auto done = std::make_shared<std::promise<std::pair<std::uint64_t, std::size_t>>>();
        auto f = done->get_future();
        link->request(
            ping(),
            [done, w](std::error_code ec, wire::message&& r) {
                const auto seen = w->copy();
                done->set_value(
                    {ec ? 0 : r.header.request_id,
                     seen.empty() || seen.back() != r.header.request_id ? 0 : seen.size()});
            },
            10s, w);
        REQUIRE(f.wait_for(20s) == std::future_status::ready);
        const auto [id, seen] = f.get();
        CHECK(id != 0);
        CHECK(seen == static_cast<std::size_t>(i + 1)); // this reply, seen before the callback
    }
    CHECK_FALSE(ask_link(*link).error); // a request without an observer: not shown to it
    CHECK(w->copy().size() == 3);
    link->close();
    server.close();

    // Requests that wait with the observer and end without a reply are not shown to it:
    // one past its deadline (a peer that never answers), one whose connection drops.
    auto ends_without_reply = [&](petrel::connection_handlers h, std::chrono::milliseconds t) {
        petrel::tcp_transport peer(io.executor());
        const auto at = peer.listen("127.0.0.1:0", std::move(h));
        auto l = std::make_shared<petrel::detail::request_link>(
            petrel::tcp_transport(io.executor()), at, 10s);
        auto ended = std::make_shared<std::promise<std::error_code>>();
        auto got = ended->get_future();
        l->request(
            ping(), [ended](std::error_code ec, wire::message&&) { ended->set_value(ec); }, t, w);
        REQUIRE(got.wait_for(20s) == std::future_status::ready);
        const auto ec = got.get();
        l->close();
        peer.close();
        return ec;
    };
    petrel::connection_handlers silent;
    silent.on_message = [](const petrel::connection_ptr&, wire::message&&) {};
    silent.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    CHECK(ends_without_reply(silent, 100ms) == errc::timed_out);
    petrel::connection_handlers hanging_up;
    hanging_up.on_message = [](const petrel::connection_ptr& c, wire::message&&) { c->close(); };
    hanging_up.on_close = [](const petrel::connection_ptr&, std::error_code) {};
    CHECK(ends_without_reply(hanging_up, 10s) == errc::connection_closed);
    CHECK(w->copy().size() == 3);
}

TEST_CASE("request_link: under TLS, a peer that shows another certificate name than the one "
          "asked for is sent nothing",
          "[transport][tls][security]") {
    io_threads io(2);
    log_capture log;
    std::atomic<int> received{0};
    petrel::transport_options listener_options{.log = log.logger()};
    listener_options.tls = petrel::test::tls_of("rank-1");
    petrel::tcp_transport listener(io.executor(), listener_options);
    auto h = answering();
    h.on_message = [&received](const petrel::connection_ptr& c, wire::message&& m) {
        ++received;
        c->send(wire::make_reply(m.header, wire::message_kind::clock_reply));
    };
    const auto at = listener.listen("127.0.0.1:0", h);
    petrel::transport_options client_options{.log = log.logger()};
    client_options.tls = petrel::test::tls_of("rank-0");
    auto expecting = [&](const std::string& name) {
        return std::make_shared<petrel::detail::request_link>(
            petrel::tcp_transport(io.executor(), client_options), at, 5s,
            petrel::detail::request_link_options{.peer_name = name});
    };
    auto wrong = expecting("rank-0");
    CHECK(ask_link(*wrong).error == errc::not_permitted);
    CHECK(received == 0);
    CHECK_THAT(log.all(), Catch::Contains("shows the certificate of 'rank-1', not of 'rank-0': "
                                          "nothing was sent to it"));
    auto right = expecting("rank-1");
    CHECK_FALSE(ask_link(*right).error);
    CHECK(received == 1);
    auto any = expecting("");
    CHECK_FALSE(ask_link(*any).error);
    wrong->close();
    right->close();
    any->close();
    listener.close();
}
