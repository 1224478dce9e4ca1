// Petrel: a server node: its interface, and the routing of requests by kind.
#ifndef PETREL_SERVER_IMPL_SERVER_NODE_IPP
#define PETREL_SERVER_IMPL_SERVER_NODE_IPP

#include <petrel/server/detail/server_state.hpp>

namespace petrel {

PETREL_DECL server_node::server_node(any_transport transport, server_options opts)
    : transport_(std::move(transport)), state_(std::make_shared<state>()) {
    state_->opts = std::move(opts);
    state_->self = state_;
    state_->pool = transport_.pool();
    state_->executor = transport_.get_executor();
    state_->log = transport_.options().log;
    state_->limits = transport_.options().limits;
    state_->tables = detail::table_set(state_->opts.workers, state_->opts.max_tables,
                                       state_->opts.tables, state_->opts.max_tables_per_connection);
    state_->replication =
        detail::replicator(state_->executor, state_->log, state_->opts.replication_timeout);
    if (!state_->opts.checkpoints) {
        state_->opts.checkpoints = std::make_shared<checkpoint_writer>();
    }
}

PETREL_DECL server_node::~server_node() {
    close();
    locked lock(*state_);
    state_->replication.clear(); // the links hold callbacks that hold the state
}

PETREL_DECL std::string server_node::listen(std::string_view address) {
    std::weak_ptr<state> weak = state_;
    connection_handlers h;
    h.on_message = [weak](const connection_ptr& c, wire::message&& m) {
        if (auto s = weak.lock()) {
            s->handle(c, std::move(m));
        }
    };
    h.on_close = [weak](const connection_ptr& c, std::error_code) {
        if (auto s = weak.lock()) {
            s->forget(c);
        }
    };
    return transport_.listen(address, std::move(h));
}

PETREL_DECL void server_node::close() {
    std::vector<std::shared_ptr<detail::request_link>> links;
    {
        locked lock(*state_);
        links = state_->replication.links();
    }
    for (auto& l : links) {
        l->close();
    }
    transport_.close();
}

PETREL_DECL void server_node::replicate(replication_plan plan) {
    std::vector<std::shared_ptr<detail::request_link>> gone;
    outbox out;
    {
        locked lock(*state_);
        if (plan.version <= state_->plan.version && state_->plan.version != 0) {
            return;
        }
        auto old = std::move(state_->plan);
        state_->plan = std::move(plan);
        gone = state_->replication.follow(state_->plan, state_->opts.node_id, transport_);
        state_->holds_keys = !state_->plan.partition_of ||
                             std::find(state_->plan.primaries.begin(), state_->plan.primaries.end(),
                                       state_->opts.node_id) != state_->plan.primaries.end();
        state_->all_mine =
            std::all_of(state_->plan.primaries.begin(), state_->plan.primaries.end(),
                        [id = state_->opts.node_id](std::uint32_t p) { return p == id; });
        {
            const auto& now = state_->plan.primaries;
            const auto id = state_->opts.node_id;
            bool same = old.primaries.size() == now.size();
            for (std::size_t p = 0; same && p < now.size(); ++p) {
                same = (old.primaries[p] == id) == (now[p] == id);
            }
            if (!same) {
                state_->placed_at = state_->plan.version;
                for (auto& [id, slot] : state_->tables) {
                    slot.durable_cap = state_->durable(slot);
                }
            }
            bool gained = false;
            for (std::size_t p = 0; !gained && p < now.size() && p < old.primaries.size(); ++p) {
                gained = now[p] == id && old.primaries[p] != id;
            }
            if (gained) {
                state_->await_resync(old.version + 1);
            }
        }
        state_->follow_chains(old);
        state_->join_moves(old);
        state_->rereplicate(old);
        state_->refuse_moved_reads(old, out);
        state_->resume(out);
        state_->tell_watchers();
    }
    state_->send(out);
    for (auto& l : gone) {
        l->close(make_error_code(errc::node_failed));
    }
}

PETREL_DECL bool server_node::chain_whole() const {
    locked lock(*state_);
    return state_->status().chain_whole;
}

PETREL_DECL std::uint64_t server_node::join_ready() const {
    locked lock(*state_);
    return state_->status().join_ready;
}

PETREL_DECL std::uint64_t server_node::hand_over_ready() const {
    locked lock(*state_);
    // (An update that did not arrive is copied again before the hand-over.)
    return state_->status().hand_over_ready;
}

PETREL_DECL bool server_node::handing_over() const {
    locked lock(*state_);
    return state_->status().handing_over;
}

PETREL_DECL bool server_node::awaiting_hand_over() const {
    locked lock(*state_);
    return state_->moves.awaiting_hand_over();
}

PETREL_DECL std::uint64_t server_node::plan_version() const {
    locked lock(*state_);
    return state_->plan.version;
}

PETREL_DECL std::size_t server_node::watch(std::function<void()> cb) {
    locked lock(*state_);
    return state_->watchers.add(std::move(cb));
}

PETREL_DECL void server_node::unwatch(std::size_t handle) {
    locked lock(*state_);
    state_->watchers.remove(handle);
}

PETREL_DECL server_node::state::membership_status server_node::state::status() const {
    return {.plan = plan.version,
            .chain_whole = copying == 0 && !copy_failed,
            .join_ready = moves.join_ready(plan.version),
            .hand_over_ready = moves.hand_over_ready(plan.version),
            .handing_over = moves.handing_over()};
}

PETREL_DECL void server_node::state::tell_watchers() {
    watchers.note(status(), executor);
}

PETREL_DECL std::string server_node::hand_over_blocker() const {
    locked lock(*state_);
    const auto& st = *state_;
    if (st.copying != 0) {
        return "its copy down its chain is not acknowledged yet";
    }
    if (st.copy_failed) {
        return "its last copy down its chain failed";
    }
    const auto chain = st.plan.chains.find(st.opts.node_id);
    const std::size_t replicas = chain == st.plan.chains.end() ? 0 : chain->second.size() - 1;
    for (const auto& [id, slot] : st.tables) {
        // Without replicas the partitions are copied to their new owners (every
        // table); with them, a table kept on the primary only would be lost.
        if (st.holds_keys && slot.table && slot.table->size() > 0 && replicas > 0 &&
            slot.replicas == 0) {
            return "table " + std::to_string(id) + " keeps no copy of its rows on another server";
        }
    }
    return {};
}

PETREL_DECL std::string server_node::data_lost() const {
    locked lock(*state_);
    return state_->lost;
}

PETREL_DECL std::uint64_t server_node::replicated_clock(std::uint32_t table_id) const {
    locked lock(*state_);
    auto it = state_->tables.find(table_id);
    if (it == state_->tables.end()) {
        return 0;
    }
    std::uint64_t c = 0;
    for (const auto& [origin, clock] : it->second.replicated) {
        c = std::max(c, clock);
    }
    return c;
}

PETREL_DECL shard_table server_node::rows(std::uint32_t table_id) const {
    locked lock(*state_);
    auto it = state_->tables.find(table_id);
    if (it == state_->tables.end() || !it->second.table) {
        shard_table t;
        t.table_id = table_id;
        return t;
    }
    return it->second.table->dump(table_id);
}

PETREL_DECL void server_node::depart_worker(std::uint32_t worker) {
    outbox out;
    {
        locked lock(*state_);
        state_->depart(worker, nullptr, out);
    }
    state_->send(out);
}

PETREL_DECL void server_node::admit_worker(std::uint32_t worker) {
    locked lock(*state_);
    state_->admit(worker);
}

PETREL_DECL std::uint32_t server_node::workers() const {
    locked lock(*state_);
    return state_->opts.workers;
}

PETREL_DECL std::size_t server_node::key_count(std::uint32_t table_id) const {
    locked lock(*state_);
    auto it = state_->tables.find(table_id);
    return it == state_->tables.end() || !it->second.table ? 0 : it->second.table->size();
}

PETREL_DECL std::vector<clock_entry> server_node::clocks(std::uint32_t table_id) const {
    locked lock(*state_);
    auto it = state_->tables.find(table_id);
    if (it == state_->tables.end()) {
        return {};
    }
    return it->second.gate.entries(clock_gate<int>::all(), wire::max_clock_entries);
}

PETREL_DECL std::size_t server_node::parked(std::uint32_t table_id) const {
    locked lock(*state_);
    auto it = state_->tables.find(table_id);
    return it == state_->tables.end() ? 0
                                      : it->second.gate.parked() + it->second.resync_held.size();
}

PETREL_DECL void server_node::set_node_id(std::uint32_t id) {
    locked lock(*state_);
    state_->opts.node_id = id;
    state_->replication.rename(id);
}

PETREL_DECL void server_node::restore(const std::filesystem::path& dir,
                                      const std::function<bool(std::uint32_t, std::uint64_t)>& owns,
                                      std::uint64_t max_shard_bytes) {
    auto loaded = detail::load_checkpoint(dir, state_->opts.tables.get(), owns, max_shard_bytes);
    locked lock(*state_);
    std::vector<table_slot*> slots; // every slot first, so that none is replaced on error
    for (auto& [id, t] : loaded) {
        std::error_code ec;
        slots.push_back(state_->tables.slot(id, ec));
        if (!slots.back()) {
            throw checkpoint_error(dir, "table " + std::to_string(id) + ": " + ec.message());
        }
    }
    auto next = slots.begin();
    for (auto& [id, t] : loaded) {
        table_slot* s = *next++;
        s->table = std::move(t.table);
        // The job goes on from the checkpoint's clock: every worker has completed it,
        // so that clocks (and the next checkpoint's) count from the job's first
        // iteration, whatever restores came before. Workers adopt it from the replies.
        for (std::uint32_t w = 0; w < s->gate.workers(); ++w) {
            s->gate.tick(w, clock_gate<waiting>::all(), t.clock);
        }
        s->applied_limit = std::max(t.clock, t.clock_limit);
    }
}

PETREL_DECL std::uint32_t
server_node::state::primary_of_update(const wire::message_header& h) const {
    return detail::from_server(h) && !learns_from(h.receiver) ? h.receiver : opts.node_id;
}

PETREL_DECL std::uint32_t server_node::state::status_of(std::error_code ec) noexcept {
    if (!ec) {
        return 0;
    }
    return static_cast<std::uint32_t>(
        ec.category() == error_category() ? ec.value() : static_cast<int>(errc::remote_error));
}

PETREL_DECL void server_node::state::send(outbox& out) const {
    for (auto& [c, m, save] : out) {
        if (save) {
            // Written and answered on the writer's thread.
            opts.checkpoints->enqueue(
                std::move(*save), log,
                [c = c, reply = std::move(m)](checkpoint_writer::outcome done) mutable {
                    finish_save(reply, std::move(done));
                    c->send(std::move(reply));
                });
            continue;
        }
        if ((m.header.flags & wire::flag_compress_reply) != 0) {
            m.header.flags &= static_cast<std::uint8_t>(~wire::flag_compress_reply);
            if (m.header.status == 0) {
                wire::compress_segment(m, wire::values_segment, opts.compression, *pool);
            }
        }
        c->send(std::move(m));
    }
}

PETREL_DECL auto server_node::state::range_of(const wire::message_header& h)
    -> clock_gate<waiting>::range_type {
    return {h.range_begin, h.range_end};
}

PETREL_DECL std::uint64_t server_node::state::bytes_of(const wire::message& m) {
    return m.keys().size() + m.values().size();
}

PETREL_DECL void server_node::state::handle(const connection_ptr& c, wire::message&& m) {
    threads_seen.note();
    outbox out;
    bool refused = false;
    if (c->peer_access() == access::read_only && !wire::read_only_may_send(m.header.kind)) {
        // A reader's credential reads: whatever would change a row or a clock is refused
        // before it is looked at.
        std::string line;
        {
            std::lock_guard lock(refusals_mutex);
            line = refused_requests.line(
                "petrel server " + std::to_string(opts.node_id) + ": refused a request of kind " +
                    std::to_string(static_cast<unsigned>(m.header.kind)) + " from " +
                    c->remote_address() + ": a reader's credential reads only",
                std::chrono::steady_clock::now());
        }
        if (!line.empty() && log) {
            log(log_level::warning, line);
        }
        c->send(refusal(m.header, wire::reply_kind_of(m.header.kind), errc::not_permitted));
        return;
    }
    if (touches_all(m.header)) {
        locked lock(*this);
        refused = decide(c, std::move(m), out);
    } else if (!may_share(m.header) || !handle_shared(c, m, out)) {
        refused = handle_alone(c, std::move(m), out);
    }
    send(out);
    if (refused) {
        if (log) {
            log(log_level::warning, "closing connection with " + c->remote_address() +
                                        ": a server takes only pushes, pulls, clocks and calls");
        }
        c->close();
    }
}

PETREL_DECL bool server_node::state::handle_shared(const connection_ptr& c, wire::message& m,
                                                   outbox& out) {
    std::optional<shared_work> work;
    detail::table_locks::beside table(table_locks, m.header.table_id); // until `work` is done
    {
        std::lock_guard server(mutex);
        if (!shares(c, m)) {
            return false;
        }
        if (wire::is_push(m.header.kind)) {
            on_push(c, std::move(m), out, &work);
        } else {
            on_read(c, std::move(m), out, &work);
        }
    }
    const bool failed = work && !run(*work, out);
    table.unlock();
    // (A closed connection's count is gone: not counted again.)
    const bool created = work && work->created > 0 && c->is_open();
    if (failed || created) {
        std::lock_guard server(mutex);
        if (failed) {
            applied.forget(work->request.header.update_id, work->primary);
        }
        if (created) {
            count_rows(c.get(), work->created);
        }
    }
    return true;
}

PETREL_DECL bool server_node::state::handle_alone(const connection_ptr& c, wire::message&& m,
                                                  outbox& out) {
    std::vector<shared_work> deferred;
    const detail::table_locks::alone table(table_locks,
                                           m.header.table_id); // until `deferred` is done
    bool refused = false;
    {
        std::lock_guard server(mutex);
        struct leave_later {
            std::vector<shared_work>*& later;
            ~leave_later() { later = nullptr; }
        } reset{later};
        later = &deferred;
        refused = decide(c, std::move(m), out);
    }
    for (auto& w : deferred) {
        run(w, out); // each answers its own failure
    }
    return refused;
}

PETREL_DECL bool server_node::state::touches_all(const wire::message_header& h) {
    switch (h.kind) {
    case wire::message_kind::push:
    case wire::message_kind::replica_update:
        return false; // its own table's rows
    case wire::message_kind::row_transfer:
    case wire::message_kind::hand_over:
        return true; // copies and hand-overs may go on to requests held for any table
    case wire::message_kind::pull:
    case wire::message_kind::call:
        return false;
    case wire::message_kind::clock:
        return (h.flags & wire::flag_finish) != 0 && (h.flags & wire::flag_all_tables) != 0;
    default:
        return true; // refused: no table is touched
    }
}

PETREL_DECL bool server_node::state::may_share(const wire::message_header& h) {
    return h.kind == wire::message_kind::push
               ? detail::push_kind_of(h) == detail::push_kind::worker
               : h.kind == wire::message_kind::pull || h.kind == wire::message_kind::call;
}

PETREL_DECL bool server_node::state::shares(const connection_ptr& c, const wire::message& m) const {
    const auto& h = m.header;
    const bool push = h.kind == wire::message_kind::push;
    const bool call = h.kind == wire::message_kind::call;
    if ((push ? detail::push_kind_of(h) != detail::push_kind::worker
              : h.kind != wire::message_kind::pull && !call) ||
        waits(h) || holds_back(c)) {
        return false;
    }
    const auto it = tables.find(h.table_id);
    if (it == tables.end() || !it->second.table) {
        return false;
    }
    if (call) {
        // Only the checkpoint call: it reads the table; remote functions may change it.
        return is_checkpoint_call(m);
    }
    std::error_code ec;
    return !push || (moves.learners().empty() &&
                     next_hop(opts.node_id, it->second.replicas, ec) == nullptr && !ec);
}

PETREL_DECL bool server_node::state::is_checkpoint_call(const wire::message& m) {
    detail::decoded_call decoded;
    std::string why;
    return !detail::decode_call(m.values().span(), decoded, why) &&
           decoded.name == detail::checkpoint_call;
}

PETREL_DECL void server_node::state::now_or_later(shared_work&& w, outbox& out) {
    if (later) {
        later->push_back(std::move(w));
    } else {
        run(w, out);
    }
}

PETREL_DECL void server_node::state::apply_reserved(table_slot& s, const wire::message& m,
                                                    outbox& out) noexcept {
    if (later) {
        try {
            later->push_back(shared_work{.table = s.table.get(), .request = m, .reserved = true});
            return;
        } catch (const std::bad_alloc&) {
            catch_up(out); // then now, in turn
        }
    }
    s.table->apply(m);
}

PETREL_DECL void server_node::state::catch_up(outbox& out) {
    if (!later) {
        return;
    }
    for (auto& w : *later) {
        run(w, out);
    }
    later->clear();
}

PETREL_DECL bool server_node::state::run(shared_work& w, outbox& out) const noexcept {
    // Held while this thread does the row work, whatever its kind: a large request applied
    // meanwhile is cut for the threads left.
    const auto share = applying.take(split_threads());
    std::error_code ec;
    if (w.reserved) {
        w.table->apply(w.request);
        return true;
    }
    if (!w.clock.empty()) {
        // Cannot fail: without memory for the list, the pushes go one by one, as
        // `apply_clock` does without memory for the sums.
        try {
            std::vector<const wire::message*> pushes;
            pushes.reserve(w.clock.size());
            for (const auto& m : w.clock) {
                pushes.push_back(&m);
            }
            w.table->apply_clock(pushes, w.mean);
        } catch (const std::bad_alloc&) {
            for (const auto& m : w.clock) {
                const wire::message* one = &m;
                w.table->apply_clock({&one, 1}, w.mean);
            }
        }
        return true;
    }
    if (w.function) {
        auto& reply = out[w.reply].message;
        std::vector<std::byte> result;
        std::string message;
        try {
            const auto ec = invoke(w.table, w.request, w.keep, result, message);
            call_result(reply, ec, result, message);
        } catch (const std::bad_alloc&) {
            message.clear();
            call_result(reply, errc::out_of_memory, {}, message); // allocates nothing
        }
        return true;
    }
    if (w.snapshot) {
        auto& o = out[w.reply];
        try {
            snapshot(*o.save, *w.table, w.table_id, w.keep);
        } catch (const std::bad_alloc&) {
            o.save.reset();
            ec = errc::out_of_memory;
        }
        if (w.rows_held.owns_lock()) {
            w.rows_held.unlock();
        }
        if (!ec) {
            return true;
        }
        o.message.header.status = status_of(ec);
        o.message.header.clocks.clear();
        return true; // nothing remembered
    }
    try {
        ec = apply_or_read(w, share.threads());
    } catch (const std::bad_alloc&) {
        ec = errc::out_of_memory;
    }
    if (!ec) {
        return true;
    }
    auto& reply = out[w.reply].message;
    reply.header.status = status_of(ec);
    reply.header.clocks.clear();
    reply.header.key_count = 0;
    reply.set_segment(wire::values_segment, {});
    return w.target != nullptr; // a pull remembered nothing
}

PETREL_DECL std::error_code server_node::state::apply_or_read(shared_work& w,
                                                              std::size_t threads) const {
    const auto& h = w.request.header;
    const std::size_t parts =
        detail::part_count(h.key_count, std::size_t{h.width} * wire::size_of(h.value_type), threads,
                           split_least_bytes);
    if (parts <= 1) {
        if (!w.target) {
            return w.table->apply_shared(w.request, w.created);
        }
        w.table->read_shared(w.request, w.target);
        return {};
    }
    const auto split = detail::split_request(w.request, parts);
    const detail::part_runner run_on_threads =
        [this, threads](std::size_t n, const std::function<void(std::size_t)>& f) {
            detail::run_parts(executor, n, threads - 1, f);
        };
    if (!w.target) {
        return w.table->apply_split(split, run_on_threads, w.created);
    }
    w.table->read_split(split, w.target, run_on_threads);
    return {};
}

PETREL_DECL std::size_t server_node::state::split_threads() const noexcept {
    return std::clamp<std::size_t>(
        opts.split_threads != 0 ? opts.split_threads : threads_seen.count(), 1, 16);
}

PETREL_DECL bool server_node::state::decide(const connection_ptr& c, wire::message&& m,
                                            outbox& out) {
    switch (m.header.kind) {
    case wire::message_kind::push:
    case wire::message_kind::replica_update:
    case wire::message_kind::row_transfer:
    case wire::message_kind::hand_over:
        if (detail::from_server(m.header) && plan.version != 0 && m.header.secret != plan.secret) {
            out.emplace_back(
                c, refusal(m.header, wire::message_kind::push_reply, errc::not_permitted));
        } else if (waits(m.header) || holds_back(c)) {
            hold_back(c, std::move(m), out);
        } else {
            on_push(c, std::move(m), out);
        }
        return false;
    case wire::message_kind::pull:
    case wire::message_kind::call:
        if (waits(m.header) || holds_back(c)) {
            hold_back(c, std::move(m), out);
        } else {
            on_read(c, std::move(m), out);
        }
        return false;
    case wire::message_kind::clock:
        if ((m.header.flags & wire::flag_resent) != 0 && (waits(m.header) || holds_back(c))) {
            hold_back(c, std::move(m), out); // after the pushes it follows
        } else {
            on_clock(c, m, out);
        }
        return false;
    case wire::message_kind::push_reply:
    case wire::message_kind::pull_reply:
    case wire::message_kind::control:
    case wire::message_kind::control_reply:
    case wire::message_kind::clock_reply:
    case wire::message_kind::call_reply:
        break;
    }
    return true;
}

PETREL_DECL bool server_node::state::ahead(const wire::message_header& h) const {
    if (detail::from_server(h)) {
        return h.view > plan.version; // from a server: it carries the secret
    }
    // A worker's view is at most a few changes ahead; one claiming more is judged
    // by this server's plan at once, so that it cannot park requests for good.
    return plan.version != 0 && h.view > plan.version && h.view - plan.version <= max_views_ahead;
}

PETREL_DECL bool server_node::state::waits(const wire::message_header& h) const {
    return ahead(h) || (!detail::from_server(h) && moves.awaiting_hand_over());
}

PETREL_DECL bool server_node::state::holds_back(const connection_ptr& c) const {
    return std::any_of(held_back.begin(), held_back.end(),
                       [&](const waiting& w) { return w.conn == c; });
}

PETREL_DECL void server_node::state::hold_back(const connection_ptr& c, wire::message&& m,
                                               outbox& out) {
    if (held_back.size() >= opts.max_parked ||
        held_back_bytes + bytes_of(m) > opts.max_held_bytes) {
        const auto k = m.header.kind;
        out.emplace_back(c,
                         refusal(m.header,
                                 k == wire::message_kind::pull    ? wire::message_kind::pull_reply
                                 : k == wire::message_kind::call  ? wire::message_kind::call_reply
                                 : k == wire::message_kind::clock ? wire::message_kind::clock_reply
                                                                  : wire::message_kind::push_reply,
                                 errc::backlog_full));
        return;
    }
    held_back_bytes += bytes_of(m);
    held_back.push_back({c, std::move(m)});
}

PETREL_DECL void server_node::state::resume(outbox& out) {
    if (resuming) {
        resume_again = true; // a request applied below unblocked others: once more
        return;
    }
    resuming = true;
    do {
        resume_again = false;
        auto list = std::move(held_back);
        held_back.clear();
        held_back_bytes = 0;
        std::vector<const connection*> blocked;
        for (auto& w : list) {
            const bool after_blocked =
                std::find(blocked.begin(), blocked.end(), w.conn.get()) != blocked.end();
            if (after_blocked || waits(w.request.header)) {
                blocked.push_back(w.conn.get());
                held_back_bytes += bytes_of(w.request);
                held_back.push_back(std::move(w));
                continue;
            }
            if (w.request.header.kind == wire::message_kind::clock) {
                on_clock(w.conn, w.request, out);
            } else if (!wire::is_push(w.request.header.kind)) {
                on_read(w.conn, std::move(w.request), out);
            } else {
                on_push(w.conn, std::move(w.request), out);
            }
        }
    } while (resume_again);
    resuming = false;
}

PETREL_DECL void server_node::state::forget(const connection_ptr& c) {
    locked lock(*this);
    std::erase_if(held_back, [&](const waiting& w) {
        if (w.conn != c) {
            return false;
        }
        held_back_bytes -= bytes_of(w.request);
        return true;
    });
    for (auto& [id, slot] : tables) {
        slot.gate.remove_if(
            [&](const waiting& w) { return w.conn == c && !wire::is_push(w.request.header.kind); });
        slot.parked_by.erase(c.get());
        std::erase_if(slot.resync_held, [&](const waiting& w) { return w.conn == c; });
    }
    tables.forget(c.get());
    rows_by.erase(c.get());
}

PETREL_DECL std::uint64_t server_node::state::held_share() const noexcept {
    if (opts.max_held_bytes_per_worker != 0) {
        return opts.max_held_bytes_per_worker;
    }
    const std::uint64_t workers = std::max<std::uint64_t>(opts.workers, 1);
    return opts.max_held_bytes / workers * 2;
}

PETREL_DECL std::size_t server_node::state::max_entries() const noexcept {
    const std::uint64_t fit =
        limits.max_header_bytes > 512 ? (limits.max_header_bytes - 512) / 28 : 0;
    return static_cast<std::size_t>(std::min<std::uint64_t>(fit, wire::max_clock_entries));
}

PETREL_DECL wire::message server_node::state::reply_to(const wire::message_header& h,
                                                       wire::message_kind kind) const {
    auto reply = wire::make_reply(h, kind);
    reply.header.sender = opts.node_id;
    reply.header.key_count = 0;
    reply.header.worker = h.worker;
    reply.header.clock = h.clock;
    return reply;
}

PETREL_DECL wire::message server_node::state::refusal(const wire::message_header& h,
                                                      wire::message_kind kind,
                                                      std::error_code ec) const {
    auto reply = reply_to(h, kind);
    reply.header.status = status_of(ec);
    return reply;
}

PETREL_DECL std::error_code server_node::state::check_worker(const wire::message_header& h,
                                                             bool required) const {
    if (h.worker == wire::no_worker) {
        return required ? errc::unknown_worker : std::error_code{};
    }
    return h.worker < opts.workers ? std::error_code{} : errc::unknown_worker;
}

} // namespace petrel

#include <petrel/server/impl/server_migration.ipp>
#include <petrel/server/impl/server_replication.ipp>
#include <petrel/server/impl/server_requests.ipp>

#endif // PETREL_SERVER_IMPL_SERVER_NODE_IPP
