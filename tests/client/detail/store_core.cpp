#include <petrel/client/detail/store_core.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/store_cores.hpp"

#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using petrel::errc;
using petrel::test::core_over_two;
using petrel::test::io_threads;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

TEST_CASE("store_core: settings without a job are checked when the store is made", "[client]") {
    io_threads io;
    auto make = [&](std::vector<std::string> servers, std::size_t width) {
        detail::store_settings s;
        s.servers = std::move(servers);
        s.id.width = width;
        return std::make_unique<detail::store_core>(petrel::tcp_transport(io.executor()), s);
    };
    CHECK_THROWS_WITH(make({}, 1), Catch::Contains("no servers given"));
    CHECK_THROWS_WITH(make({"127.0.0.1:1", "127.0.0.1:1"}, 1),
                      Catch::Contains("server 127.0.0.1:1 is listed twice"));
    CHECK_THROWS_WITH(make({"127.0.0.1:1"}, std::size_t{1} << 33),
                      Catch::Contains("width must be at least 1"));
    auto core = make({"127.0.0.1:1", "127.0.0.1:2"}, 0);
    CHECK(core->id().width == 1); // 0: one value per key
    REQUIRE(core->view());
    CHECK(core->view()->of_role(petrel::node_role::server).size() == 2);
    core->close();
    core->close(); // idempotent
}

TEST_CASE("store_core: requests carry the store's table, node, worker and types", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 4);
    const auto m = t.core.blank_request(wire::message_kind::pull);
    CHECK(m.header.kind == wire::message_kind::pull);
    CHECK(m.header.sender == 7);
    CHECK(m.header.table_id == 3);
    CHECK(m.header.worker == 0);
    CHECK(m.header.key_type == wire::scalar_type::u64);
    CHECK(m.header.value_type == wire::scalar_type::f32);
    CHECK(m.header.width == 4);
    CHECK(t.core.id().row_bytes() == 16);
    CHECK(t.core.next_update_id() != t.core.next_update_id());
}

TEST_CASE("store_core: a range request lists its keys only when asked, and never the largest",
          "[client]") {
    core_over_two t;
    auto p = t.core.prepare_range({10, 14}, true);
    REQUIRE_FALSE(p.error);
    CHECK(p.count == 4);
    REQUIRE(p.keys.size() == 4 * sizeof(std::uint64_t));
    CHECK(p.keys.as<std::uint64_t>()[3] == 13);
    CHECK(t.core.prepare_range({10, 14}, false).keys.empty());
    const std::uint64_t top = petrel::key_space_end<std::uint64_t>;
    CHECK(t.core.prepare_range({top - 2, top}, false).error == errc::key_out_of_range);
    CHECK_FALSE(t.core.prepare_range({top, top}, false).error); // empty
    CHECK(t.core.prepare_range({0, top - 1}, true).error == errc::frame_too_large);
    std::vector<detail::slice> slices;
    CHECK_FALSE(t.core.cut(t.core.prepare_range({0, 1000}, false), false, slices));
    CHECK(slices.size() == 2);
}

TEST_CASE("store_core: refused requests are logged with their reason", "[client]") {
    petrel::test::log_capture logs;
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 2, {}, false, logs.logger());
    detail::prepared_request p;
    p.error = errc::value_count_mismatch;
    const std::vector<std::size_t> shape{6, 3};
    p.why = t.core.shape_error(shape, 2);
    CHECK(p.why == "values of shape [6, 3] for 2 keys; expected [2, 2] (or [4]): "
                   "kv_store_options::width is 2");
    t.core.check(p, "push");
    CHECK_THAT(logs.all(), Catch::Contains("petrel worker 7: push refused"));
    CHECK_THAT(logs.all(), Catch::Contains("values of shape [6, 3]"));
    detail::prepared_request quiet;
    quiet.error = errc::keys_not_sorted; // no reason beyond the code: not logged
    const auto before = logs.size();
    t.core.check(quiet, "pull");
    CHECK(logs.size() == before);
}
