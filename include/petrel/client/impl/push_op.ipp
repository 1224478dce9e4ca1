// Petrel: the push operation (see <petrel/client/detail/push_op.hpp>).
#ifndef PETREL_CLIENT_IMPL_PUSH_OP_IPP
#define PETREL_CLIENT_IMPL_PUSH_OP_IPP

#include <petrel/client/detail/push_op.hpp>
#include <petrel/client/detail/resender.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/header.hpp>

namespace petrel::detail {

PETREL_DECL std::error_code push_op::cut(const store_core& core, const prepared_request& p,
                                         std::vector<slice>& slices) {
    if (p.error) {
        return p.error;
    }
    if (core.read_only()) {
        return errc::read_only;
    }
    return p.count == 0 ? std::error_code{} : core.cut(p, true, slices);
}

PETREL_DECL void push_op::arrive_one(std::error_code ec) {
    if (arrive(ec)) {
        settle_.complete({}); // even when cancelled: the next tick waits for this
        if (claim()) {
            deliver(error());
        }
    }
}

PETREL_DECL void push_op::send(store_core& core, const std::shared_ptr<push_op>& op,
                               std::vector<slice> slices) {
    auto [t, settle] = core.gate().register_push();
    op->settle_ = std::move(settle);
    const bool ordered = core.settings().policy.ordered;
    for (const auto& s : slices) {
        auto request = make_request(core.blank_request(wire::message_kind::push), s);
        request.header.clock = t;
        if (ordered) {
            request.header.flags |= wire::flag_ordered;
        }
        request.header.update_id = core.next_update_id();
        auto r = core.resends()->make(
            s.server, std::move(request),
            [op, report = core.report_of(s), clk = core.clock(),
             worker = core.id().worker](std::error_code ec, wire::message&& m) {
                if (!ec && m.header.kind != wire::message_kind::push_reply) {
                    ec = errc::bad_message_kind;
                }
                if (!ec) {
                    clk->adopt_start(worker, m.header.clocks); // a worker that joined late
                }
                report(ec);
                op->arrive_one(ec);
            });
        if (ordered) {
            core.resends()->retain(r);
        }
        core.resends()->send(s.link, s.cache, std::move(r));
    }
}

} // namespace petrel::detail

#endif
