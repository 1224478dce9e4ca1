#include <petrel/server/detail/push_kind.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string_view>

namespace {

using petrel::detail::push_kind;
namespace wire = petrel::wire;

wire::message_header header(std::uint8_t flags, std::uint64_t keys,
                            wire::message_kind kind = wire::message_kind::push) {
    wire::message_header h;
    h.kind = kind;
    h.flags = flags;
    h.key_count = keys;
    return h;
}

} // namespace

TEST_CASE("push_kind: every kind reads back as itself, key runs kept", "[server]") {
    for (auto k :
         {push_kind::worker, push_kind::worker_ordered, push_kind::replica_update,
          push_kind::clock_rows, push_kind::copy_rows, push_kind::copy_end, push_kind::hand_over}) {
        CAPTURE(petrel::detail::name_of(k));
        const bool empty = k == push_kind::copy_end || k == push_kind::hand_over;
        for (std::uint8_t extra : {std::uint8_t{0}, std::uint8_t{wire::flag_key_runs}}) {
            const auto flags = petrel::detail::flags_of(
                k, static_cast<std::uint8_t>(extra | wire::flag_compress_reply | wire::flag_resent |
                                             wire::flag_ordered));
            CHECK((flags & wire::flag_key_runs) == extra);
            CHECK((flags & (wire::flag_compress_reply | wire::flag_resent)) == 0);
            const auto h = header(flags, empty ? 0 : 5, petrel::detail::kind_of(k));
            CHECK(wire::is_push(h.kind));
            CHECK(petrel::detail::push_kind_of(h) == k);
            CHECK(petrel::detail::from_server(h) == petrel::detail::from_server(k));
            CHECK(wire::is_server_update(h.kind) == petrel::detail::from_server(k));
        }
    }
}

TEST_CASE("push_kind: a worker's pushes, and what a server forwards for them", "[server]") {
    CHECK(petrel::detail::push_kind_of(header(0, 3)) == push_kind::worker);
    CHECK(petrel::detail::push_kind_of(header(wire::flag_key_runs, 3)) == push_kind::worker);
    CHECK(petrel::detail::push_kind_of(header(wire::flag_ordered, 3)) == push_kind::worker_ordered);
    // No flag makes a worker's push a server's update: only the message kind does.
    for (unsigned f = 0; f < 256; ++f) {
        const auto h = header(static_cast<std::uint8_t>(f), 0);
        CHECK_FALSE(petrel::detail::from_server(h));
        CHECK_FALSE(petrel::detail::from_server(petrel::detail::push_kind_of(h)));
    }
    CHECK_FALSE(petrel::detail::from_server(push_kind::worker));
    CHECK(petrel::detail::forwarded(push_kind::worker) == push_kind::replica_update);
    CHECK(petrel::detail::forwarded(push_kind::copy_rows) == push_kind::copy_rows);
    CHECK(petrel::detail::is_transfer(push_kind::hand_over));
    CHECK_FALSE(petrel::detail::is_transfer(push_kind::replica_update));
    // Rows of a full copy with no keys are its end; a row transfer with `ordered`, the
    // rows of a clock (also of none).
    CHECK(petrel::detail::push_kind_of(header(0, 0, wire::message_kind::row_transfer)) ==
          push_kind::copy_end);
    CHECK(petrel::detail::push_kind_of(header(0, 4, wire::message_kind::row_transfer)) ==
          push_kind::copy_rows);
    CHECK(petrel::detail::push_kind_of(header(
              wire::flag_ordered, 0, wire::message_kind::row_transfer)) == push_kind::clock_rows);
}

TEST_CASE("push_kind: each kind has a name of its own for log lines", "[server]") {
    std::set<std::string_view> names;
    for (auto k :
         {push_kind::worker, push_kind::worker_ordered, push_kind::replica_update,
          push_kind::clock_rows, push_kind::copy_rows, push_kind::copy_end, push_kind::hand_over}) {
        const auto name = petrel::detail::name_of(k);
        CHECK_FALSE(name.empty());
        CHECK(names.insert(name).second);
    }
}
