// Petrel: the worker's side of the consistency models (see
// <petrel/client/detail/worker_gate.hpp>).
#ifndef PETREL_CLIENT_IMPL_WORKER_GATE_IPP
#define PETREL_CLIENT_IMPL_WORKER_GATE_IPP

#include <petrel/client/detail/deadline_race.hpp>
#include <petrel/client/detail/worker_gate.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>

#include <mutex>

namespace petrel::detail {

PETREL_DECL worker_gate::worker_gate(asio::any_io_executor ex, std::shared_ptr<worker_clock> clock,
                                     std::shared_ptr<resender> resends,
                                     std::shared_ptr<send_pipeline> pipe, worker_gate_options opts)
    : ex_(std::move(ex)), clock_(std::move(clock)), resends_(std::move(resends)),
      pipe_(std::move(pipe)), opts_(std::move(opts)) {}

PETREL_DECL clock_type worker_gate::current() const {
    std::lock_guard lock(clock_->mutex);
    return clock_->current;
}

PETREL_DECL wire::message worker_gate::tick(clock_type n, std::uint8_t flags) const {
    wire::message m = opts_.tick;
    m.header.flags = flags;
    m.header.clock = n;
    return m;
}

PETREL_DECL task<void> worker_gate::clock() {
    const auto deadline = std::chrono::steady_clock::now() + opts_.request_timeout;
    auto [tick_task, done] = make_task<void>(ex_);
    if (opts_.read_only) {
        done.complete(make_error_code(errc::read_only));
        return tick_task;
    }
    std::vector<task<void>> deps;
    clock_type n = 0;
    clock_type base = 0; // the adopted job clock `n` counts from
    bool first = false;
    {
        std::lock_guard lock(clock_->mutex);
        n = ++clock_->current;
        base = clock_->base;
        first = !clock_->started.exchange(true, std::memory_order_acq_rel);
        deps = std::move(clock_->pushes);
        clock_->pushes.clear();
        if (clock_->last_tick.valid()) {
            // Follow the last tick once it has completed, successfully or not: a tick
            // carries an absolute count, so one lost tick (a timeout, a failed server)
            // does not stop the clock for good.
            auto [settled, settle] = make_task<void>();
            clock_->last_tick.on_complete(
                [settle = std::move(settle)](std::error_code) { settle.complete({}); });
            deps.push_back(std::move(settled));
        }
        clock_->last_tick = tick_task;
        // Reads at this clock and later depend on tick required_clock(n) or newer.
        clock_->ticks.erase(clock_->ticks.begin(),
                            clock_->ticks.lower_bound(required_clock(opts_.policy, n)));
        if (opts_.policy.waits) {
            clock_->ticks.emplace(n, tick_task);
        }
    }
    if (first) {
        // Nothing told this worker its clock yet: a worker that joined the running job
        // learns the job's from the servers before its first tick (see
        // `worker_clock::adopt_first_tick`). A failed question changes nothing.
        auto [asked, settle] = make_task<void>();
        resends_
            ->broadcast(resends_->table(), tick(0, 0),
                        [clk = clock_, worker = opts_.worker](const wire::message& m) {
                            clk->adopt_first_tick(worker, m.header.clocks);
                        })
            .on_complete([settle = std::move(settle)](std::error_code) { settle.complete({}); });
        deps.push_back(std::move(asked));
    }
    after(when_all(std::move(deps)), [resends = resends_, where = resends_->table(), clk = clock_,
                                      counted = n - base, request = tick(n, 0)]() mutable {
        {
            std::lock_guard lock(clk->mutex); // counted before or after an adopted start
            request.header.clock = counted + clk->base;
        }
        // The servers of the view at the time of sending: one that joined since the call
        // was told of the clocks sent before it (`sync_ticks`), and gets this one.
        if (auto now = resends->note_tick(request.header.clock)) {
            where = std::move(now);
        }
        request.header.view = where ? where->view->version : 0;
        return resends->broadcast(where, std::move(request));
    }).on_complete([done = std::move(done)](std::error_code ec) mutable { done.complete(ec); });
    // The ticks follow each other (and the reads wait) by the tick task itself; the caller
    // waits no longer than its deadline.
    return by_deadline(std::move(tick_task), deadline);
}

PETREL_DECL task<void> worker_gate::finish() {
    if (opts_.read_only) {
        auto [t, done] = make_task<void>(ex_);
        done.complete(make_error_code(errc::read_only));
        return t;
    }
    return resends_->broadcast(resends_->table(), tick(0, wire::flag_finish));
}

PETREL_DECL std::pair<clock_type, task<void>> worker_gate::read_gate() const {
    if (opts_.read_only) {
        return {0, {}}; // a reader waits for nobody: it reads the newest completed clock
    }
    std::lock_guard lock(clock_->mutex);
    const clock_type r = required_clock(opts_.policy, clock_->current);
    task<void> own;
    if (r > 0) {
        if (auto it = clock_->ticks.find(r); it != clock_->ticks.end() && !it->second.ready()) {
            own = it->second;
        } else if (it != clock_->ticks.end() && it->second.error()) {
            own = it->second; // failed: the read fails with it
        }
    }
    return {r, std::move(own)};
}

PETREL_DECL std::pair<clock_type, task_completer<void>> worker_gate::register_push() {
    if (!opts_.policy.waits) {
        // No tick waits for pushes: nothing to complete.
        std::lock_guard lock(clock_->mutex);
        return {clock_->current, task_completer<void>{}};
    }
    auto [settled, settle] = make_task<void>();
    std::lock_guard lock(clock_->mutex);
    // Settled pushes need no waiting: keep the list short when clock() is rare.
    std::erase_if(clock_->pushes, [](const task<void>& p) { return p.ready(); });
    clock_->pushes.push_back(std::move(settled));
    return {clock_->current, std::move(settle)};
}

PETREL_DECL void worker_gate::send_when_open(task<void> own, std::vector<outgoing> requests,
                                             std::function<void(std::error_code)> fail,
                                             std::chrono::steady_clock::time_point deadline) const {
    auto send = [pipe = pipe_, resends = resends_, deadline](std::vector<outgoing>& rs) {
        for (auto& r : rs) {
            if (r.server == no_node) {
                send_request(pipe, r.link, r.cache, std::move(r.message), std::move(r.on_reply),
                             deadline);
            } else {
                resends->send(
                    r.link, r.cache,
                    resends->make(r.server, std::move(r.message), std::move(r.on_reply), deadline));
            }
        }
    };
    if (!own.valid()) {
        send(requests);
        return;
    }
    if (own.ready()) {
        if (auto ec = own.error()) {
            fail(ec);
        } else {
            send(requests);
        }
        return;
    }
    auto held = std::make_shared<std::vector<outgoing>>(std::move(requests));
    auto race = std::make_shared<deadline_race>(ex_);
    deadline_race::arm(race, deadline, [held, fail] {
        held->clear(); // (their callbacks hold the operation's state)
        fail(make_error_code(errc::timed_out));
    });
    own.on_complete([held, send, race, fail = std::move(fail)](std::error_code ec) {
        if (!race->decide()) {
            return; // the deadline came first
        }
        race->cancel();
        if (ec) {
            fail(ec);
        } else {
            send(*held);
        }
    });
}

PETREL_DECL task<void>
worker_gate::by_deadline(task<void> t, std::chrono::steady_clock::time_point deadline) const {
    if (t.ready()) {
        return t;
    }
    auto [out, done] = make_task<void>(ex_);
    auto race = std::make_shared<deadline_race>(ex_);
    deadline_race::arm(race, deadline,
                       [expire = done] { expire.complete(make_error_code(errc::timed_out)); });
    t.on_complete([race, finish = std::move(done)](std::error_code ec) {
        if (race->decide()) {
            race->cancel();
            finish.complete(ec);
        }
    });
    return out;
}

} // namespace petrel::detail

#endif
