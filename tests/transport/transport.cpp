#include <petrel/transport/transport.hpp>

#include <petrel/transport/inproc_transport.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include "support/cluster.hpp"

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using petrel::test::io_threads;

namespace {

/// What a fake transport was asked to do.
struct calls {
    std::vector<std::string> listened;
    std::vector<std::string> connected;
    int closed = 0;
    int executors = 0;
};

/// A transport that records its calls and connects nowhere.
class fake_transport {
public:
    fake_transport(asio::any_io_executor ex, std::shared_ptr<calls> log,
                   petrel::transport_options opts)
        : ex_(std::move(ex)), log_(std::move(log)), opts_(std::move(opts)) {}

    [[nodiscard]] asio::any_io_executor get_executor() const {
        ++log_->executors;
        return ex_;
    }
    std::string listen(std::string_view address, petrel::connection_handlers h) {
        log_->listened.emplace_back(address);
        if (h.on_message) {
            log_->listened.back() += "+handlers";
        }
        return "bound:" + std::string(address);
    }
    void async_connect(std::string_view address, petrel::connection_handlers,
                       petrel::connect_callback cb) {
        log_->connected.emplace_back(address);
        cb(make_error_code(petrel::errc::no_server_for_key), nullptr);
    }
    void close() { ++log_->closed; }
    [[nodiscard]] const petrel::transport_options& options() const { return opts_; }
    [[nodiscard]] const std::shared_ptr<petrel::buffer_pool>& pool() const { return opts_.pool; }

private:
    asio::any_io_executor ex_;
    std::shared_ptr<calls> log_;
    petrel::transport_options opts_;
};

struct missing_listen {
    asio::any_io_executor get_executor() const;
    void async_connect(std::string_view, petrel::connection_handlers, petrel::connect_callback);
    void close();
    const petrel::transport_options& options() const;
    const std::shared_ptr<petrel::buffer_pool>& pool() const;
};

struct listen_returns_void {
    asio::any_io_executor get_executor() const;
    void listen(std::string_view, petrel::connection_handlers);
    void async_connect(std::string_view, petrel::connection_handlers, petrel::connect_callback);
    void close();
    const petrel::transport_options& options() const;
    const std::shared_ptr<petrel::buffer_pool>& pool() const;
};

struct options_by_value {
    asio::any_io_executor get_executor() const;
    std::string listen(std::string_view, petrel::connection_handlers);
    void async_connect(std::string_view, petrel::connection_handlers, petrel::connect_callback);
    void close();
    petrel::transport_options options() const;
    const std::shared_ptr<petrel::buffer_pool>& pool() const;
};

struct not_movable {
    not_movable(const not_movable&) = delete;
    not_movable& operator=(const not_movable&) = delete;
    asio::any_io_executor get_executor() const;
    std::string listen(std::string_view, petrel::connection_handlers);
    void async_connect(std::string_view, petrel::connection_handlers, petrel::connect_callback);
    void close();
    const petrel::transport_options& options() const;
    const std::shared_ptr<petrel::buffer_pool>& pool() const;
};

template <typename F>
std::future<std::error_code> connect_result(F&& start) {
    auto p = std::make_shared<std::promise<std::error_code>>();
    auto f = p->get_future();
    start([p](std::error_code ec, petrel::connection_ptr c) {
        p->set_value(c ? std::error_code{} : ec);
    });
    return f;
}

} // namespace

TEST_CASE("transport: the concept accepts the library's transports", "[transport]") {
    STATIC_REQUIRE(petrel::transport<petrel::tcp_transport>);
    STATIC_REQUIRE(petrel::transport<petrel::inproc_transport>);
    STATIC_REQUIRE(petrel::transport<petrel::any_transport>);
    STATIC_REQUIRE(petrel::transport<fake_transport>);
}

TEST_CASE("transport: the concept rejects types that lack part of the interface", "[transport]") {
    STATIC_REQUIRE_FALSE(petrel::transport<int>);
    STATIC_REQUIRE_FALSE(petrel::transport<std::string>);
    STATIC_REQUIRE_FALSE(petrel::transport<missing_listen>);
    STATIC_REQUIRE_FALSE(petrel::transport<listen_returns_void>);
    STATIC_REQUIRE_FALSE(petrel::transport<options_by_value>);
    STATIC_REQUIRE_FALSE(petrel::transport<not_movable>);
    STATIC_REQUIRE_FALSE(petrel::transport<petrel::tcp_transport*>);
}

TEST_CASE("transport: any_transport is built only from transports", "[transport]") {
    STATIC_REQUIRE(std::is_constructible_v<petrel::any_transport, petrel::inproc_transport>);
    STATIC_REQUIRE(std::is_constructible_v<petrel::any_transport, petrel::tcp_transport>);
    STATIC_REQUIRE(std::is_convertible_v<fake_transport, petrel::any_transport>);
    STATIC_REQUIRE_FALSE(std::is_constructible_v<petrel::any_transport, int>);
    STATIC_REQUIRE_FALSE(std::is_constructible_v<petrel::any_transport, missing_listen>);
    STATIC_REQUIRE(std::is_copy_constructible_v<petrel::any_transport>);
}

TEST_CASE("transport: any_transport forwards every call to the wrapped transport", "[transport]") {
    asio::io_context io;
    auto log = std::make_shared<calls>();
    petrel::transport_options o;
    o.pool = std::make_shared<petrel::buffer_pool>();
    o.limits.max_header_bytes = 777;
    petrel::any_transport t = fake_transport(io.get_executor(), log, o);

    CHECK(t.get_executor() == asio::any_io_executor(io.get_executor()));
    CHECK(log->executors == 1);

    petrel::connection_handlers h;
    h.on_message = [](const petrel::connection_ptr&, petrel::wire::message&&) {};
    CHECK(t.listen("somewhere", h) == "bound:somewhere");
    CHECK(t.listen("elsewhere", {}) == "bound:elsewhere");
    CHECK(log->listened == std::vector<std::string>{"somewhere+handlers", "elsewhere"});

    std::error_code got;
    bool called = false;
    t.async_connect("peer", {}, [&](std::error_code ec, petrel::connection_ptr c) {
        called = true;
        got = ec;
        CHECK_FALSE(c);
    });
    CHECK(called);
    CHECK(got == petrel::errc::no_server_for_key);
    CHECK(log->connected == std::vector<std::string>{"peer"});

    CHECK(&t.options() != &o); // the wrapped transport's own copy
    CHECK(t.options().limits.max_header_bytes == 777);
    CHECK(t.pool() == o.pool);

    t.close();
    CHECK(log->closed == 1);

    // Copies share the one wrapped transport.
    petrel::any_transport copy = t;
    copy.close();
    CHECK(log->closed == 2);
    CHECK(&copy.options() == &t.options());
}

TEST_CASE("transport: any_transport over an inproc hub listens, connects and closes",
          "[transport]") {
    io_threads io;
    petrel::inproc_hub hub;
    petrel::transport_options so;
    so.limits.max_frame_bytes = 4096;
    petrel::any_transport server = petrel::inproc_transport(io.executor(), hub, so);
    petrel::any_transport client = petrel::inproc_transport(io.executor(), hub);

    CHECK(server.options().limits.max_frame_bytes == 4096);
    REQUIRE(server.pool());
    REQUIRE(client.pool());
    CHECK(server.pool() != client.pool()); // each made its own
    CHECK(server.get_executor() == io.executor());

    const auto name = server.listen("any-server", {});
    CHECK(name == "any-server");
    CHECK_THROWS_AS(client.listen("any-server", {}), std::system_error);

    auto ok = connect_result([&](auto cb) { client.async_connect(name, {}, std::move(cb)); });
    REQUIRE(ok.wait_for(10s) == std::future_status::ready);
    CHECK(ok.get() == std::error_code{});

    server.close();
    CHECK_THROWS_AS(server.listen("again", {}), std::system_error);
    auto refused = connect_result([&](auto cb) { client.async_connect(name, {}, std::move(cb)); });
    REQUIRE(refused.wait_for(10s) == std::future_status::ready);
    CHECK(refused.get() == std::errc::connection_refused);
}
