#include <petrel/cluster/detail/control.hpp>

#include <catch2/catch.hpp>

using petrel::node_role;
using petrel::detail::control_body;
using petrel::detail::control_op;
using petrel::detail::read_only_may_send;

TEST_CASE("control: a read-only peer may join as a new reader, send heartbeats and leave",
          "[cluster][security]") {
    control_body b;
    b.op = control_op::join;
    b.role = node_role::reader;
    CHECK(read_only_may_send(b));
    SECTION("a join as a known node's id is a re-registration") {
        b.id = 3;
        CHECK_FALSE(read_only_may_send(b));
    }
    SECTION("a join in any other role") {
        for (const auto role : {node_role::worker, node_role::server, node_role::manager}) {
            b.role = role;
            CHECK_FALSE(read_only_may_send(b));
        }
    }
    SECTION("heartbeats and its own leave; no other operation") {
        for (int op = 1; op <= static_cast<int>(control_op::unreachable); ++op) {
            b.op = static_cast<control_op>(op);
            INFO(op);
            CHECK(read_only_may_send(b) ==
                  (b.op == control_op::join || b.op == control_op::heartbeat ||
                   b.op == control_op::leave));
        }
    }
}
