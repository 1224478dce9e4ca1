// Petrel: what a server agent's operations decide, from what it observes.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>

namespace petrel::detail {

using agent_clock = std::chrono::steady_clock;

/// What a server agent sees when one of its operations decides: its member's view and
/// whether the member failed, and what its server waits for (`server_node::watch`).
struct agent_observation {
    node_id self = no_node;
    std::shared_ptr<const membership_view> view{};
    bool failed = false; // `member::failure()` is not empty
    std::uint64_t plan_version = 0;
    bool chain_whole = true;
    std::uint64_t join_ready = 0;
    std::uint64_t hand_over_ready = 0;
    bool handing_over = false;
    agent_clock::time_point now{};
};

/// What an operation asks of the agent after a decision: to complete it (with `finish`),
/// to report the server ready under a plan version (`member::async_ready`), or to ask
/// the manager to let the server leave (`member::async_retire`).
struct agent_step {
    std::optional<std::error_code> finish{};
    std::uint64_t ready = 0;
    bool retire = false;
};

/// `server_agent::async_take_over`: a server that joined a running job reports each plan
/// under which its copies are complete until the ring makes it a primary.
class take_over_op {
public:
    explicit take_over_op(agent_clock::time_point until) noexcept : until_(until) {}

    [[nodiscard]] agent_step decide(const agent_observation& o) {
        if (o.view && o.view->ring.holds(o.self)) {
            return {.finish = std::error_code{}};
        }
        if (o.failed) {
            return {.finish = make_error_code(errc::node_failed)};
        }
        if (o.now >= until_) {
            return {.finish = make_error_code(errc::timed_out)};
        }
        if (!asking_ && o.join_ready != 0 && o.join_ready != reported_) {
            asking_ = true;
            return {.ready = o.join_ready};
        }
        return {};
    }

    /// The manager answered the report of `version`.
    [[nodiscard]] agent_step answered_ready(std::uint64_t version, std::error_code ec) {
        asking_ = false;
        if (!ec) {
            reported_ = version;
        } else if (ec == errc::shut_down) {
            return {.finish = ec};
        }
        return {};
    }

    [[nodiscard]] agent_clock::time_point deadline() const noexcept { return until_; }

private:
    agent_clock::time_point until_;
    std::uint64_t reported_ = 0;
    bool asking_ = false;
};

/// `server_agent::async_settle`: waits until the server follows view `view` (or a later
/// one) and its copies down its chain are acknowledged.
class settle_op {
public:
    settle_op(std::uint64_t view, agent_clock::time_point until) noexcept
        : view_(view), until_(until) {}

    [[nodiscard]] agent_step decide(const agent_observation& o) const {
        if (o.plan_version >= view_ && o.chain_whole) {
            return {.finish = std::error_code{}};
        }
        if (o.now >= until_) {
            return {.finish = make_error_code(errc::timed_out)};
        }
        return {};
    }

    [[nodiscard]] agent_clock::time_point deadline() const noexcept { return until_; }

private:
    std::uint64_t view_;
    agent_clock::time_point until_;
};

/// `server_agent::async_retire`: asks the manager to let the server leave. With replicas
/// the first answer ends it. Without, the manager plans a hand-over
/// (`errc::in_progress`): the server copies its partitions to their new owners and
/// reports them ready, the manager makes the new owners their primaries, the server
/// hands over its last updates, and then asks again. A view that plans nothing (the plan
/// was dropped or not made yet) is asked about again once; a report the manager no
/// longer knows (`errc::invalid_argument`: a new manager, a failure) is asked about anew.
class retire_op {
public:
    explicit retire_op(std::chrono::milliseconds patience) noexcept : patience_(patience) {}

    /// The first ask.
    [[nodiscard]] agent_step start(const agent_observation& o) {
        asked_at_ = o.view ? o.view->version : 0;
        return ask();
    }

    [[nodiscard]] agent_step decide(const agent_observation& o) {
        if (in_flight_ || !until_) {
            return {};
        }
        if (o.failed) {
            return {.finish = make_error_code(errc::node_failed)};
        }
        if (o.now >= *until_) {
            return {.finish = make_error_code(errc::timed_out)};
        }
        const auto& v = o.view;
        if (v && !v->ring.holds(o.self) && o.plan_version >= v->version && !o.handing_over) {
            return ask(); // its partitions are the others' and its last updates reached them
        }
        if (v && v->ring.holds(o.self) && v->next_ring.empty() && v->version > asked_at_) {
            asked_at_ = v->version;
            reported_ = 0;
            return ask();
        }
        if (o.hand_over_ready != 0 && o.hand_over_ready != reported_) {
            in_flight_ = true;
            return {.ready = o.hand_over_ready};
        }
        return {};
    }

    /// The manager answered an ask. One that was not answered in time is sent again, up
    /// to three times in a row.
    [[nodiscard]] agent_step asked(std::error_code ec, const agent_observation& o) {
        in_flight_ = false;
        if (ec == errc::timed_out && ++timeouts_ < 3) {
            return ask();
        }
        timeouts_ = 0;
        if (ec != errc::in_progress) {
            return {.finish = ec};
        }
        if (!until_) {
            until_ = o.now + patience_;
        }
        return decide(o);
    }

    /// The manager answered the report of `version`.
    [[nodiscard]] agent_step answered_ready(std::uint64_t version, std::error_code ec,
                                            const agent_observation& o) {
        in_flight_ = false;
        if (!ec) {
            reported_ = version;
        } else if (ec == errc::shut_down) {
            return {.finish = ec};
        } else if (ec == errc::invalid_argument) {
            reported_ = 0; // the plan was lost (a failure, a new manager): planned anew
            return ask();
        }
        return decide(o);
    }

    /// When it gives up: none before the manager planned a hand-over.
    [[nodiscard]] std::optional<agent_clock::time_point> deadline() const noexcept {
        return until_;
    }

private:
    agent_step ask() {
        in_flight_ = true;
        return {.retire = true};
    }

    std::chrono::milliseconds patience_;
    std::optional<agent_clock::time_point> until_;
    std::uint64_t asked_at_ = 0;
    std::uint64_t reported_ = 0;
    bool in_flight_ = false;
    int timeouts_ = 0;
};

} // namespace petrel::detail
