// Petrel: the worker's side of the consistency models: its clock ticks, the push each
// tick waits for, and the tick each read waits for.
#pragma once

#include <petrel/client/detail/resender.hpp>
#include <petrel/client/detail/send_pipeline.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/core/config.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace petrel::wire {
class key_cache_sender;
} // namespace petrel::wire

namespace petrel::detail {

struct worker_clock;

/// A request ready to go, with what to do with its reply.
struct outgoing {
    std::shared_ptr<request_link> link;
    std::shared_ptr<wire::key_cache_sender> cache;
    wire::message message;
    reply_callback on_reply;
    node_id server = no_node; // resent elsewhere if it fails; sent once when no_node
};

/// What a worker gate knows of its client.
struct worker_gate_options {
    policy_traits policy{};
    bool read_only = false;   // a reader: no ticks, reads wait for nobody
    std::uint32_t worker = 0; // the worker's index, for the clocks servers report
    wire::message tick;       // the client's clock request, without clock or flags
    std::chrono::milliseconds request_timeout{0};
};

/// The worker's side of the consistency models over its shared `worker_clock`: a tick
/// goes once the pushes of its clock and the tick before it have settled; a read waits for
/// the worker's own tick `required_clock(t)`, or fails with it.
///
/// @par Thread Safety
/// All member functions may be called concurrently; the state is the worker clock's,
/// under its lock (after the resender's in the lock order).
class worker_gate {
public:
    PETREL_DECL worker_gate(asio::any_io_executor ex, std::shared_ptr<worker_clock> clock,
                            std::shared_ptr<resender> resends, std::shared_ptr<send_pipeline> pipe,
                            worker_gate_options opts);

    /// The worker's completed iterations on this table.
    [[nodiscard]] PETREL_DECL clock_type current() const;

    /// Ends the worker's iteration (see `kv_store::clock()`).
    [[nodiscard]] PETREL_DECL task<void> clock();

    /// The worker leaves the table's clock: every live server is told.
    [[nodiscard]] PETREL_DECL task<void> finish();

    /// A clock message for every server: `n` completed clocks on every key.
    [[nodiscard]] PETREL_DECL wire::message tick(clock_type n, std::uint8_t flags) const;

    /// The clock of the calling worker now, its read requirement, and the worker's own
    /// tick a read at this clock waits for (invalid when there is none to wait for).
    [[nodiscard]] PETREL_DECL std::pair<clock_type, task<void>> read_gate() const;

    /// Registers a push of the current clock; returns its clock and what to complete when
    /// the push has settled (the next tick waits for it; a completer of no task under a
    /// policy whose ticks wait for no push).
    [[nodiscard]] PETREL_DECL std::pair<clock_type, task_completer<void>> register_push();

    /// Sends `requests` now, or once the worker's own tick `own` has completed; if that
    /// tick failed, sends nothing and calls `fail` with its error. The requests are due by
    /// `deadline` (the call's): if the tick has not completed by then, nothing is sent and
    /// `fail` gets `errc::timed_out`.
    PETREL_DECL void send_when_open(task<void> own, std::vector<outgoing> requests,
                                    std::function<void(std::error_code)> fail,
                                    std::chrono::steady_clock::time_point deadline) const;

    /// `t`, or `errc::timed_out` at `deadline` when `t` has not completed by then.
    [[nodiscard]] PETREL_DECL task<void>
    by_deadline(task<void> t, std::chrono::steady_clock::time_point deadline) const;

private:
    asio::any_io_executor ex_;
    std::shared_ptr<worker_clock> clock_;
    std::shared_ptr<resender> resends_;
    std::shared_ptr<send_pipeline> pipe_;
    worker_gate_options opts_;
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/worker_gate.ipp>
#endif
