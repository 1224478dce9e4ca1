// Petrel: the pull operation (see <petrel/client/detail/pull_op.hpp>).
#ifndef PETREL_CLIENT_IMPL_PULL_OP_IPP
#define PETREL_CLIENT_IMPL_PULL_OP_IPP

#include <petrel/client/detail/pull_op.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/header.hpp>

#include <cstring>

namespace petrel::detail {

PETREL_DECL pull_op::pull_op(std::size_t slices, const prepared_request& p, std::byte* into,
                             const store_identity& id, buffer_pool& pool)
    : fan_in(slices), keys_(p.keys), into_(into), width_(id.width), row_(id.row_bytes()),
      value_type_(id.value_type), one_(into == nullptr && slices == 1) {
    if (into == nullptr && slices > 1) {
        gathered_ = pool.acquire(p.count * row_);
    }
}

PETREL_DECL std::error_code pull_op::cut(const store_core& core, const prepared_request& p,
                                         std::vector<slice>& slices) {
    if (p.error) {
        return p.error;
    }
    return p.count == 0 ? std::error_code{} : core.cut(p, false, slices);
}

PETREL_DECL void pull_op::arrive_one(const std::vector<key_run>& runs, std::size_t count,
                                     std::error_code ec, const wire::message& m) {
    if (!ec && (m.header.kind != wire::message_kind::pull_reply || m.header.key_count != count ||
                m.header.width != width_ || m.header.value_type != value_type_ ||
                m.values().size() != count * row_)) {
        ec = errc::value_count_mismatch;
    }
    if (!ec && one_) {
        single_ = m.values();
    } else if (!ec) {
        auto copy = [&](std::byte* to) {
            std::size_t at = 0;
            for (const auto& ru : runs) {
                std::memcpy(to + ru.first * row_, m.values().data() + at * row_, ru.count * row_);
                at += ru.count;
            }
        };
        if (into_ != nullptr) {
            if_live([&] { copy(into_); }); // the caller's memory is only ours while pending
        } else {
            copy(gathered_.data());
        }
    }
    if (into_ == nullptr && !ec) {
        if_live(
            [&] { clocks_.insert(clocks_.end(), m.header.clocks.begin(), m.header.clocks.end()); });
    }
    if (!arrive(ec) || !claim()) {
        return; // not the last, or cancelled
    }
    if (const auto error = this->error(); error || into_ != nullptr) {
        deliver(error, {});
        return;
    }
    deliver({}, pull_result{keys_, one_ ? single_ : gathered_.share(), width_, std::move(clocks_)});
}

PETREL_DECL void pull_op::send(store_core& core, const std::shared_ptr<pull_op>& op,
                               std::vector<slice> slices,
                               std::chrono::steady_clock::time_point deadline) {
    auto [required, own] = core.gate().read_gate();
    std::vector<outgoing> requests;
    requests.reserve(slices.size());
    for (auto& s : slices) {
        auto request = make_request(core.blank_request(wire::message_kind::pull), s);
        request.header.clock = required;
        requests.push_back({s.link, s.cache, std::move(request),
                            [op, runs = std::move(s.runs), count = s.count,
                             report = core.report_of(s), clk = core.clock(),
                             worker = core.id().worker](std::error_code ec, wire::message&& m) {
                                report(ec);
                                if (!ec) {
                                    clk->adopt_start(worker, m.header.clocks); // joined late
                                }
                                op->arrive_one(runs, count, ec, m);
                            },
                            s.server});
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
