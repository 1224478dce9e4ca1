#include <petrel/client/detail/slices.hpp>

#include "support/bytes.hpp"
#include "support/cluster.hpp"
#include "support/route_tables.hpp"

#include <petrel/core/error.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

using petrel::errc;
using petrel::test::io_threads;
using petrel::test::job;
using petrel::test::log_capture;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

using petrel::test::bytes_of;

namespace {

bool inside(const petrel::shared_bytes& part, const petrel::shared_bytes& whole) {
    return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

} // namespace

TEST_CASE("slices: a key list is cut by server; one run shares the request's buffers, several "
          "are gathered",
          "[client][slices]") {
    io_threads io(1);
    job j(io, {"127.0.0.1:1", "127.0.0.1:2"});
    const auto t = j.view(1, {1, 2}, {1, 2}, {1, 2}); // 4 partitions, stripes of 64 keys
    std::vector<std::uint32_t> keys(256);
    std::iota(keys.begin(), keys.end(), 0U);
    std::vector<float> rows(keys.size() * 2);
    std::iota(rows.begin(), rows.end(), 0.0F);
    detail::slice_source in{bytes_of(keys), bytes_of(rows),         std::nullopt,
                            keys.size(),    wire::scalar_type::u32, 2 * sizeof(float)};
    petrel::buffer_pool pool;
    std::vector<detail::slice> out;
    REQUIRE_FALSE(detail::cut_slices(*t, in, true, pool, std::uint64_t{1} << 30, out));
    REQUIRE(out.size() == 2);
    std::size_t total = 0;
    for (const auto& s : out) {
        const auto ks = s.keys.as<std::uint32_t>();
        const auto vs = s.values.as<float>();
        REQUIRE(ks.size() == s.count);
        REQUIRE(vs.size() == 2 * s.count);
        CHECK_FALSE(s.key_runs);
        CHECK(s.view == t->view);
        for (std::size_t i = 0; i < ks.size(); ++i) {
            CHECK(t->view->ring.owner(ks[i]) == s.server);
            CHECK(vs[2 * i] == static_cast<float>(2 * ks[i])); // each key keeps its row
        }
        // Without a copy exactly when the server's keys are one run.
        CHECK(inside(s.keys, in.keys) == (s.runs.size() == 1));
        CHECK(inside(s.values, in.values) == (s.runs.size() == 1));
        total += s.count;
        // Its request: the slice's range, keys and rows.
        wire::message blank;
        blank.header.kind = wire::message_kind::push;
        blank.header.key_type = wire::scalar_type::u32;
        const auto m = detail::make_request(blank, s);
        CHECK(m.header.range_begin == ks.front());
        CHECK(m.header.range_end == ks.back() + 1U);
        CHECK(m.header.key_count == s.count);
        CHECK(m.header.view == 1);
        CHECK(m.values().size() == s.values.size());
    }
    CHECK(total == keys.size());
}

TEST_CASE("slices: a range is sent as key runs; a slice over the frame limit is refused",
          "[client][slices]") {
    io_threads io(1);
    job j(io, {"127.0.0.1:1", "127.0.0.1:2"});
    const auto t = j.view(1, {1, 2}, {1, 2}, {1, 2});
    petrel::buffer_pool pool;
    detail::slice_source in;
    in.range = petrel::key_range<std::uint64_t>{10, 300};
    in.count = 290;
    in.key_type = wire::scalar_type::u64;
    in.row_bytes = sizeof(float);
    std::vector<detail::slice> out;
    REQUIRE_FALSE(detail::cut_slices(*t, in, false, pool, std::uint64_t{1} << 30, out));
    std::size_t total = 0;
    for (const auto& s : out) {
        CHECK(s.key_runs);
        CHECK(s.values.empty());
        const auto pairs = s.keys.as<std::uint64_t>();
        REQUIRE(pairs.size() == 2 * s.runs.size());
        std::size_t n = 0;
        for (std::size_t i = 0; i < pairs.size(); i += 2) {
            CHECK(pairs[i] < pairs[i + 1]);
            for (auto k = pairs[i]; k < pairs[i + 1]; ++k) {
                CHECK(t->view->ring.owner(k) == s.server);
            }
            n += pairs[i + 1] - pairs[i];
        }
        CHECK(n == s.count);
        wire::message blank;
        blank.header.kind = wire::message_kind::pull;
        blank.header.key_type = wire::scalar_type::u64;
        const auto m = detail::make_request(blank, s);
        CHECK((m.header.flags & wire::flag_key_runs) != 0);
        CHECK(m.header.range_begin == pairs.front());
        CHECK(m.header.range_end == pairs.back());
        total += s.count;
    }
    CHECK(total == 290);
    out.clear();
    CHECK(detail::cut_slices(*t, in, false, pool, 64, out) == errc::frame_too_large);
}

TEST_CASE("slices: keys of one stripe make one slice without a walk, the same as the walk's",
          "[client][slices]") {
    io_threads io(1);
    job j(io, {"127.0.0.1:1", "127.0.0.1:2"});
    const auto t = j.view(1, {1, 2}, {1, 2}, {1, 2}); // stripes of 64 keys
    petrel::buffer_pool pool;
    const std::vector<std::uint64_t> keys{130, 131, 190};
    const std::vector<float> rows{1.0F, 2.0F, 3.0F};
    detail::slice_source in{bytes_of(keys), bytes_of(rows),         std::nullopt,
                            keys.size(),    wire::scalar_type::u64, sizeof(float)};
    std::vector<detail::slice> out;
    REQUIRE_FALSE(detail::cut_slices(*t, in, true, pool, std::uint64_t{1} << 30, out));
    REQUIRE(out.size() == 1);
    const auto& s = out[0];
    CHECK(s.server == t->view->ring.owner(130));
    CHECK(s.link == t->links[s.server - 1]);
    CHECK(s.count == 3);
    REQUIRE(s.runs.size() == 1);
    CHECK(s.runs[0].first == 0);
    CHECK(s.runs[0].count == 3);
    CHECK(s.keys.data() == in.keys.data()); // the request's own buffers
    CHECK(s.values.data() == in.values.data());
    CHECK(s.keys.size() == in.keys.size());
    CHECK(s.values.size() == in.values.size());
    // A range in one stripe: one run of pairs.
    detail::slice_source r;
    r.range = petrel::key_range<std::uint64_t>{200, 250};
    r.count = 50;
    r.key_type = wire::scalar_type::u64;
    r.row_bytes = sizeof(float);
    out.clear();
    REQUIRE_FALSE(detail::cut_slices(*t, r, false, pool, std::uint64_t{1} << 30, out));
    REQUIRE(out.size() == 1);
    CHECK(out[0].key_runs);
    CHECK(out[0].count == 50);
    CHECK(out[0].server == t->view->ring.owner(200));
    const auto pairs = out[0].keys.as<std::uint64_t>();
    REQUIRE(pairs.size() == 2);
    CHECK(pairs[0] == 200);
    CHECK(pairs[1] == 250);
    // The frame limit holds on this path too.
    out.clear();
    CHECK(detail::cut_slices(*t, in, true, pool, 16, out) == errc::frame_too_large);
    CHECK(out.empty());
}

TEST_CASE("slices: a failure report names the server of a lost connection, and says nothing of "
          "refusals",
          "[client][slices]") {
    io_threads io(1);
    job j(io, {"127.0.0.1:1"});
    const auto t = j.view(1, {1}, {1}, {1});
    log_capture log;
    detail::slice s;
    s.server = 1;
    s.view = t->view;
    s.link = t->links[0];
    const auto report = detail::failure_report::of(s, log.logger(), 4);
    report(make_error_code(errc::value_count_mismatch));
    report({});
    CHECK(log.size() == 0);
    report(make_error_code(errc::connection_closed));
    REQUIRE(log.size() == 1);
    CHECK(log.all().find("petrel worker 4: a request to server 1") != std::string::npos);
}
