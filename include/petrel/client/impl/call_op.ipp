// Petrel: the call operation (see <petrel/client/detail/call_op.hpp>).
#ifndef PETREL_CLIENT_IMPL_CALL_OP_IPP
#define PETREL_CLIENT_IMPL_CALL_OP_IPP

#include <petrel/client/detail/call_op.hpp>
#include <petrel/client/detail/slices.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/wire/header.hpp>

#include <algorithm>
#include <string>

namespace petrel::detail {

PETREL_DECL void call_op::arrive_one(std::size_t i, std::error_code ec, const wire::message& r,
                                     const logger& log, std::uint32_t self) {
    if (!ec && r.header.kind != wire::message_kind::call_reply) {
        ec = errc::bad_message_kind;
    }
    if (ec && r.header.kind == wire::message_kind::call_reply && log && !r.values().empty()) {
        const auto text = r.values().span();
        log(log_level::error, "petrel worker " + std::to_string(self) + ": remote function: " +
                                  std::string(reinterpret_cast<const char*>(text.data()),
                                              std::min<std::size_t>(text.size(), 1024)));
    }
    if (!ec) {
        answers_[i] = r.values(); // this server's own entry: no other reply writes it
    }
    if (!arrive(ec) || !claim()) {
        return; // not the last, or cancelled
    }
    if (const auto error = this->error()) {
        deliver(error, {});
    } else {
        deliver({}, std::move(answers_));
    }
}

PETREL_DECL void call_op::send(store_core& core, const std::shared_ptr<call_op>& op,
                               const prepared_call& c, const route_table& where,
                               const std::vector<std::size_t>& slots,
                               std::chrono::steady_clock::time_point deadline) {
    auto [required, own] = core.gate().read_gate();
    std::vector<outgoing> requests;
    requests.reserve(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
        wire::message m = core.blank_request(wire::message_kind::call);
        auto& h = m.header;
        h.range_begin = c.range.begin;
        h.range_end = c.range.end;
        h.clock = required;
        h.view = where.view->version;
        m.set_segment(wire::values_segment, c.body);
        slice s;
        s.server = where.servers[slots[i]];
        s.view = where.view;
        requests.push_back({where.links[slots[i]], nullptr, std::move(m),
                            [op, i, report = core.report_of(s), log = core.log(),
                             self = core.id().node](std::error_code ec, wire::message&& r) {
                                report(ec);
                                op->arrive_one(i, ec, r, log, self);
                            }});
    }
    core.gate().send_when_open(
        std::move(own), std::move(requests),
        [op](std::error_code ec) {
            if (op->claim()) {
                op->deliver(ec, {});
            }
        },
        deadline);
}

} // namespace petrel::detail

#endif
