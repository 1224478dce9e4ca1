#include <petrel/cluster/view.hpp>

#include <petrel/cluster/detail/control.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace {

/// Reads control message `m` with `body` in place of its body.
auto read_with_body(const petrel::wire::message& m, std::vector<std::byte> body) {
    auto c = m;
    auto buf = std::make_shared<std::vector<std::byte>>(std::move(body));
    const std::byte* p = buf->data();
    const std::size_t n = buf->size();
    c.set_segment(petrel::wire::values_segment,
                  petrel::shared_bytes(std::shared_ptr<const void>(buf, p),
                                       std::span<const std::byte>(p, n)));
    return petrel::detail::read_control(c);
}

petrel::membership_view sample() {
    petrel::membership_view v;
    v.job_id = "job-1";
    v.version = 3;
    v.nodes = {
        {0, petrel::node_role::manager, petrel::node_state::alive, "10.0.0.1:9000", 0, 0, {}, {}},
        {1, petrel::node_role::server, petrel::node_state::alive, "10.0.0.1:9100", 0, 0, {}, {}},
        {2,
         petrel::node_role::server,
         petrel::node_state::failed,
         "10.0.0.2:9100",
         1,
         1,
         "no heartbeat for 2000 ms",
         {}},
        {3, petrel::node_role::worker, petrel::node_state::left, "", 2, 0, {}, "train"}};
    v.ring = petrel::ring::balanced({.partitions = 16}, std::vector<petrel::node_id>{1, 2});
    v.next_ring = v.ring.joined(std::vector<petrel::node_id>{1}, std::vector<petrel::node_id>{4});
    return v;
}

} // namespace

TEST_CASE("view: lookups by id and role, failures named", "[cluster][view]") {
    const auto v = sample();
    REQUIRE(v.find(2) != nullptr);
    CHECK(v.find(2)->address == "10.0.0.2:9100");
    CHECK(v.find(7) == nullptr);
    CHECK(v.of_role(petrel::node_role::server).size() == 2);
    CHECK(v.count(petrel::node_role::server, petrel::node_state::alive) == 1);
    CHECK(v.failures() ==
          "server 2 (server #1, rank 1, 10.0.0.2:9100) failed: no heartbeat for 2000 ms\n");
    CHECK(petrel::in_group(petrel::node_role::worker, petrel::group::all));
    CHECK_FALSE(petrel::in_group(petrel::node_role::manager, petrel::group::all));
    CHECK_FALSE(petrel::in_group(petrel::node_role::server, petrel::group::workers));
    // A failed worker fails the job, unless the job drops failed workers.
    auto w = sample();
    w.nodes[3].state = petrel::node_state::failed;
    w.nodes[3].failure = "its connection to the manager was lost";
    CHECK_FALSE(w.replaced(w.nodes[3]));
    CHECK_THAT(w.failures(), Catch::Contains("worker 3"));
    w.drop_failed_workers = true;
    CHECK(w.replaced(w.nodes[3]));
    CHECK(w.failures() == v.failures());
    CHECK_FALSE(w.replaced(w.nodes[1])); // a live node
}

TEST_CASE("view: the servers all left only when every one left, none failed or alive",
          "[cluster][view]") {
    auto v = sample(); // server 1 alive, server 2 failed
    CHECK_FALSE(v.servers_all_left());
    for (auto& n : v.nodes) {
        if (n.role == petrel::node_role::server) {
            n.state = petrel::node_state::left;
        }
    }
    CHECK(v.servers_all_left()); // workers and readers may remain
    v.nodes[1].state = petrel::node_state::failed;
    CHECK_FALSE(v.servers_all_left());
    CHECK_FALSE(petrel::membership_view{}.servers_all_left()); // no servers: not a finished job
}

TEST_CASE("view: a control message round-trips the view", "[cluster][view]") {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::view;
    b.version = 3;
    b.view = sample();
    const auto m = petrel::detail::make_control(b);
    CHECK(m.header.kind == petrel::wire::message_kind::control);
    const auto back = petrel::detail::read_control(m);
    REQUIRE(back.has_value());
    REQUIRE(back->view.has_value());
    CHECK(*back->view == sample());
    CHECK(back->version == 3);
    b.view->drop_failed_workers = true;
    const auto dropping = petrel::detail::read_control(petrel::detail::make_control(b));
    REQUIRE(dropping.has_value());
    CHECK(dropping->view->drop_failed_workers);
}

TEST_CASE("view: a control body carries its class version; a newer one's appended fields are "
          "left unread, an older one is refused",
          "[cluster][view]") {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::view;
    b.version = 3;
    b.text = "hello";
    b.view = sample();
    const auto m = petrel::detail::make_control(b);
    const auto bytes = m.values().span();
    std::uint32_t written = 0;
    REQUIRE(bytes.size() > sizeof written);
    std::memcpy(&written, bytes.data(), sizeof written);
    CHECK(written == petrel::detail::control_body_version);
    REQUIRE(petrel::detail::read_control(m).has_value());
    CHECK(petrel::detail::read_control(m)->read_version == petrel::detail::control_body_version);

    auto read = [&](std::vector<std::byte> body) { return read_with_body(m, std::move(body)); };
    // The next version, with fields of its own after this version's.
    std::vector<std::byte> newer(bytes.begin(), bytes.end());
    const std::uint32_t next = petrel::detail::control_body_version + 1;
    std::memcpy(newer.data(), &next, sizeof next);
    for (int i = 0; i < 12; ++i) {
        newer.push_back(static_cast<std::byte>(0xA0 + i));
    }
    const auto got = read(newer);
    REQUIRE(got.has_value());
    CHECK(got->read_version == next);
    CHECK(got->op == b.op);
    CHECK(got->version == 3);
    CHECK(got->text == "hello");
    REQUIRE(got->view.has_value());
    CHECK(*got->view == sample());
    // The same bytes under this version: trailing bytes, refused.
    std::memcpy(newer.data(), &petrel::detail::control_body_version, sizeof next);
    CHECK_FALSE(read(newer).has_value());
    // An older version than any this node reads.
    std::vector<std::byte> older(bytes.begin(), bytes.end());
    const std::uint32_t none = 0;
    std::memcpy(older.data(), &none, sizeof none);
    CHECK_FALSE(read(older).has_value());
}

TEST_CASE("view: a control body of version 3 carries the node's key and barrier numbers; one "
          "of version 2 is read without the numbers, one of version 1 without the key too",
          "[cluster][view][security]") {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::join;
    b.id = 4;
    b.text = "hello";
    b.key = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    b.barrier_seq = 7;
    b.passed_barriers = {1, 2, 3};
    const auto m = petrel::detail::make_control(b);
    const auto got = petrel::detail::read_control(m);
    REQUIRE(got.has_value());
    CHECK(got->read_version == 3);
    CHECK(got->key == b.key);
    CHECK(got->barrier_seq == 7);
    CHECK(got->passed_barriers == b.passed_barriers);
    // Version 2 wrote everything but the four barrier numbers; version 1 not the key
    // either.
    const auto bytes = m.values().span();
    REQUIRE(bytes.size() > 48);
    auto older = [&](std::uint32_t version, std::size_t without) {
        std::vector<std::byte> body(bytes.begin(),
                                    bytes.end() - static_cast<std::ptrdiff_t>(without));
        std::memcpy(body.data(), &version, sizeof version);
        return read_with_body(m, body);
    };
    const auto v2 = older(2, 32);
    REQUIRE(v2.has_value());
    CHECK(v2->read_version == 2);
    CHECK(v2->key == b.key);
    CHECK(v2->barrier_seq == 0);
    CHECK(v2->passed_barriers == std::array<std::uint64_t, 3>{});
    const auto v1 = older(1, 48);
    REQUIRE(v1.has_value());
    CHECK(v1->read_version == 1);
    CHECK(v1->id == 4);
    CHECK(v1->text == "hello");
    CHECK(v1->key == petrel::node_key{});
    // A body of version 3 cut to version 2's length is refused.
    CHECK_FALSE(older(3, 32).has_value());
}

TEST_CASE("view: corrupt control bodies are refused, never over-allocated",
          "[cluster][view][security]") {
    petrel::detail::control_body b;
    b.op = petrel::detail::control_op::view;
    b.view = sample();
    const auto good = petrel::detail::make_control(b);
    const auto bytes = good.values().span();

    auto with = [&](std::vector<std::byte> body) { return read_with_body(good, std::move(body)); };
    std::vector<std::byte> copy(bytes.begin(), bytes.end());
    CHECK(with(copy).has_value());

    // Every truncation fails cleanly.
    for (std::size_t n = 0; n < copy.size(); n += 7) {
        CHECK_FALSE(with(std::vector<std::byte>(copy.begin(), copy.begin() + n)).has_value());
    }
    // Trailing bytes are refused.
    auto longer = copy;
    longer.push_back(std::byte{0});
    CHECK_FALSE(with(longer).has_value());
    // An unknown operation is refused (the op follows the body's 4-byte class version).
    auto bad_op = copy;
    bad_op[4] = std::byte{99};
    CHECK_FALSE(with(bad_op).has_value());
    // A huge text length is refused before anything is allocated: the job id's length
    // follows the class version and the fixed fields (op, role, rank, local, group, id,
    // version, secret = 31 bytes).
    auto huge = copy;
    const std::uint32_t big = 0xFFFFFFF0u;
    std::memcpy(huge.data() + 4 + 31, &big, sizeof big);
    CHECK_FALSE(with(huge).has_value());
    // A planned ring of another shape than the ring is refused.
    auto odd = b;
    odd.view->next_ring =
        petrel::ring::balanced({.partitions = 8}, std::vector<petrel::node_id>{1, 2});
    CHECK_FALSE(petrel::detail::read_control(petrel::detail::make_control(odd)).has_value());
    // A worker failure policy other than 0 or 1 is refused: the only byte that differs
    // between a view that drops failed workers and one that does not.
    auto dropping = b;
    dropping.view->drop_failed_workers = true;
    const auto other = petrel::detail::make_control(dropping);
    const auto other_bytes = other.values().span();
    REQUIRE(other_bytes.size() == copy.size());
    std::size_t at = copy.size();
    for (std::size_t i = 0; i < copy.size(); ++i) {
        if (other_bytes[i] != copy[i]) {
            CHECK(at == copy.size()); // just one
            at = i;
        }
    }
    REQUIRE(at < copy.size());
    auto policy = copy;
    policy[at] = std::byte{2};
    CHECK_FALSE(with(policy).has_value());
    policy[at] = std::byte{1};
    CHECK(with(policy).has_value());
    // So is any other flag byte other than 0 or 1: whether a view follows (after the
    // fixed fields and four empty texts, 4 bytes each) and whether declarations do (the
    // byte before the 16 of the node's key and the 32 of the barrier numbers).
    constexpr std::size_t has_view = 4 + 31 + 4 * 4;
    const std::size_t has_declared = copy.size() - 1 - sizeof(petrel::node_key) - 32;
    REQUIRE(copy[has_view] == std::byte{1});
    REQUIRE(copy[has_declared] == std::byte{0});
    for (const auto flag : {has_view, has_declared}) {
        auto odd_flag = copy;
        odd_flag[flag] = std::byte{0x65};
        CHECK_FALSE(with(odd_flag).has_value());
    }
}
