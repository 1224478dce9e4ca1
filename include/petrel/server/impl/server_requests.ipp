// Petrel: a server node serving pushes, pulls, clocks and calls, behind the tables' clock gates.
#ifndef PETREL_SERVER_IMPL_SERVER_REQUESTS_IPP
#define PETREL_SERVER_IMPL_SERVER_REQUESTS_IPP

#include <petrel/server/detail/server_state.hpp>

namespace petrel {

PETREL_DECL void server_node::state::on_push(const connection_ptr& c, wire::message&& m,
                                             outbox& out, std::optional<shared_work>* work) {
    const auto h = m.header;
    const auto kind = detail::push_kind_of(h);
    const bool replica = detail::from_server(kind);
    const bool ordered = kind == detail::push_kind::worker_ordered;
    const bool transfer = detail::is_transfer(kind);
    if ((h.encoding & wire::encoding_keys_cached) != 0) {
        // The keys are a list this connection does not hold: the worker resends them.
        out.emplace_back(c, refusal(h, wire::message_kind::push_reply, errc::key_cache_miss));
        return;
    }
    if (replica && h.secret != plan.secret) {
        // Only the job's servers know the secret: a replica update from anyone
        // else (a worker, a stray peer) writes nothing.
        out.emplace_back(c, refusal(h, wire::message_kind::push_reply, errc::not_permitted));
        return;
    }
    if (kind == detail::push_kind::copy_end || kind == detail::push_kind::hand_over) {
        end_of_copy(c, std::move(m), out);
        return;
    }
    std::error_code ec = replica ? std::error_code{} : check_worker(h, ordered);
    if (!ec && !replica && !lost.empty()) {
        ec = errc::data_lost;
    }
    if (!ec && !replica && outdated && plan.version <= *outdated) {
        ec = errc::stale_view; // the chain moved on: wait for the newer view
    }
    if (!ec && !replica && h.view != plan.version && !primary_of(m, opts.node_id)) {
        ec = errc::stale_view; // the worker's view and ours place the keys apart
    }
    if (!ec && !m.lengths().empty()) {
        ec = errc::invalid_argument; // variable-length rows: not supported by tables
    }
    table_slot* s = ec ? nullptr : tables.slot(h.table_id, ec, replica ? nullptr : c.get());
    if (!ec && !replica && out_of_rows(*s, m, c.get())) {
        ec = errc::too_many_rows; // its share of rows, and this push would create more
    }
    if (!ec && ordered &&
        (s->held_bytes + bytes_of(m) > opts.max_held_bytes ||
         s->held_of(h.worker) + bytes_of(m) > held_share())) {
        ec = errc::backlog_full; // the table's budget, or this worker's share of it
    }
    if (!ec && !transfer && duplicate(*s, h)) {
        // Applied (or held) here before: a push resent after a failure.
        auto reply = reply_to(h, wire::message_kind::push_reply);
        if (!replica) {
            reply.header.clocks = s->gate.entries(range_of(h), max_entries());
            reply.header.clock = durable_for(*s, h);
        }
        out.emplace_back(c, std::move(reply));
        return;
    }
    const std::uint32_t origin = replica ? h.receiver : opts.node_id;
    const bool learner = replica && learns_from(origin);
    if (!ec && replica && !learner && h.view != plan.version && !primary_of(m, origin)) {
        // Sent under another view by a server that this server's view no longer
        // makes the primary of these keys: applying it could undo a newer copy.
        ec = errc::stale_view;
    }
    const replication_plan::peer* next =
        ec || ordered || learner ? nullptr : next_hop(origin, s->replicas, ec);
    if (!ec && work) {
        ec = s->table->check(h); // its rows are created when it is applied
        ec = ec ? ec : s->table->check_keys(m);
    } else if (!ec) {
        ec = transfer ? load_rows(*s, m) : accept(*s, m, replica ? nullptr : c.get());
    }
    if (ec) {
        out.emplace_back(c, refusal(h, wire::message_kind::push_reply, ec));
        return;
    }
    applied.remember(h.update_id, primary_of_update(h));
    if (ordered) {
        s->note_held(h.worker, bytes_of(m));
        // Acknowledged now: the held push needs no connection any more.
        s->gate.hold(h.worker, h.clock, range_of(h), waiting{nullptr, std::move(m)});
        if (s->gate.completed(range_of(h)) > h.clock) {
            release(*s, out); // already complete: the others have moved on
        }
    } else if (!transfer) {
        if (!work) {
            apply_reserved(*s, m, out); // in the order it goes on to other servers
        }
        s->applied_limit = std::max(s->applied_limit, h.clock + 1);
    }
    if (transfer) {
        // The rows after the primary's clock h.clock (one clock's rows), or a full
        // copy holding every clock below h.clock: resent pushes of those clocks
        // are already in them.
        auto& r = s->replicated[origin];
        r = std::max(r, kind == detail::push_kind::clock_rows ? h.clock + 1 : h.clock);
    }
    auto reply = reply_to(h, wire::message_kind::push_reply);
    if (!replica) {
        reply.header.clocks = s->gate.entries(range_of(h), max_entries());
        reply.header.clock = durable_for(*s, h);
    }
    if (!replica && !ordered) {
        for (const auto& [to, parts] : moves.learners()) {
            try {
                teach_update(to, m, detail::push_kind::replica_update, taught(to));
            } catch (const std::bad_alloc&) {
                if (log) {
                    log(log_level::error, "petrel server " + std::to_string(opts.node_id) +
                                              ": no memory to send a push to joining server " +
                                              std::to_string(to));
                }
            }
        }
    }
    if (next) {
        // Acknowledged once the rest of the chain has applied it.
        replication.forward(*next, origin, std::move(m), detail::forwarded(kind),
                            [c, reply = std::make_shared<wire::message>(std::move(reply)),
                             weak = self, version = plan.version](std::error_code ec) {
                                if (ec == errc::shut_down) {
                                    // This server is closing before its chain answered: no
                                    // acknowledgement; the worker sends the push again
                                    // elsewhere.
                                    c->close();
                                    return;
                                }
                                bool stale = ec == errc::stale_view;
                                if (auto st = weak.lock(); st && ec) {
                                    locked lock(*st);
                                    if (stale) {
                                        // The chain moved on without this server: it takes
                                        // no more writes until a newer view reaches it.
                                        st->outdated = std::max(st->outdated.value_or(0), version);
                                    }
                                    // A replica that failed does not hold the push back,
                                    // unless this server has meanwhile handed its keys
                                    // over: then the push lives on no copy that lasts.
                                    stale = stale || !st->holds_keys;
                                }
                                if (stale) {
                                    // The worker sends the push to the owner its newer view
                                    // names (which applies it once, by its update id).
                                    reply->header.status = status_of(errc::stale_view);
                                    reply->header.clocks.clear();
                                }
                                c->send(std::move(*reply));
                            });
        return;
    }
    if (work) {
        *work = shared_work{.table = s->table.get(),
                            .request = std::move(m),
                            .reply = out.size(),
                            .primary = primary_of_update(h)};
    }
    out.emplace_back(c, std::move(reply));
}

PETREL_DECL bool server_node::state::primary_of(const wire::message& m, std::uint32_t self) const {
    return (self == opts.node_id && all_mine) || detail::primary_of_keys(plan, m, self);
}

PETREL_DECL std::uint64_t server_node::state::durable(const table_slot& s) const {
    if (!holds_keys || moves.awaiting_hand_over()) {
        // Handed its keys over (nothing applied here lasts), or taking keys over
        // whose last updates are still on their way (what it holds back is not
        // applied yet).
        return 0;
    }
    return s.durable();
}

PETREL_DECL std::uint64_t server_node::state::durable_for(const table_slot& s,
                                                          const wire::message_header& h) const {
    const auto d = durable(s);
    return h.view < placed_at ? std::min(d, s.durable_cap) : d;
}

PETREL_DECL bool server_node::state::duplicate(const table_slot& s,
                                               const wire::message_header& h) const {
    const auto kind = detail::push_kind_of(h);
    const bool resent = (h.flags & wire::flag_resent) != 0 && !detail::from_server(kind);
    if (applied.contains(h.update_id, primary_of_update(h)) ||
        (resent && applied.contains(h.update_id, h.receiver))) {
        return true;
    }
    if (resent && kind == detail::push_kind::worker_ordered) {
        const auto it = s.replicated.find(h.receiver);
        return it != s.replicated.end() && h.clock < it->second;
    }
    return false;
}

PETREL_DECL bool server_node::state::out_of_rows(const table_slot& s, const wire::message& m,
                                                 const connection* by) const {
    if (by == nullptr || opts.max_rows_per_connection == 0) {
        return false;
    }
    const auto it = rows_by.find(by);
    if (it == rows_by.end() || it->second < opts.max_rows_per_connection) {
        return false;
    }
    if (m.header.key_count == 0) {
        return false;
    }
    if (!s.table) {
        return true; // every row would be new
    }
    if (s.table->check(m.header) || s.table->check_keys(m)) {
        return false; // not this table's keys: refused as such after this
    }
    // Looked up only for a connection that used its share: the push may go on to rows
    // that exist.
    return !s.table->holds_all(m);
}

PETREL_DECL void server_node::state::count_rows(const connection* by, std::uint64_t n) {
    if (by != nullptr && n > 0 && opts.max_rows_per_connection != 0) {
        rows_by[by] += n;
    }
}

PETREL_DECL std::error_code server_node::state::accept(table_slot& s, const wire::message& m,
                                                       const connection* by) {
    const bool created = !s.table;
    if (created) {
        s.table = detail::make_table(m.header);
    } else if (auto ec = s.table->check(m.header)) {
        return ec;
    }
    if (auto ec = s.table->check_keys(m)) {
        return ec;
    }
    const std::size_t before = s.table->size();
    try {
        s.table->reserve(m);
    } catch (const std::bad_alloc&) {
        if (created) {
            s.table.reset();
        }
        return errc::out_of_memory;
    }
    count_rows(by, s.table->size() - before);
    return {};
}

PETREL_DECL void server_node::state::on_read(const connection_ptr& c, wire::message&& m,
                                             outbox& out, std::optional<shared_work>* work) {
    const auto& h = m.header;
    const auto reply_kind = h.kind == wire::message_kind::pull ? wire::message_kind::pull_reply
                                                               : wire::message_kind::call_reply;
    std::error_code ec = (h.encoding & wire::encoding_keys_cached) != 0
                             ? make_error_code(errc::key_cache_miss)
                             : check_worker(h, false);
    if (!ec && !lost.empty()) {
        ec = errc::data_lost;
    }
    if (!ec && h.kind == wire::message_kind::pull && h.view != plan.version &&
        !primary_of(m, opts.node_id)) {
        ec = errc::stale_view; // another server holds these keys now
    }
    if (!ec && h.kind == wire::message_kind::call && h.view != 0 && h.view < placed_at) {
        // Sent under a view before this server's keys changed: the caller asked
        // the servers that view named, so its results (a checkpoint's shards)
        // could miss keys or hold some twice.
        ec = errc::stale_view;
    }
    table_slot* s = ec ? nullptr : tables.slot(h.table_id, ec, c.get());
    const bool resyncing = s && h.kind == wire::message_kind::pull && s->resync_holds(h.clock);
    if (!ec && (resyncing || !s->gate.readable(range_of(h), h.clock)) &&
        (s->gate.parked() + s->resync_held.size() >= opts.max_parked ||
         (!resyncing && s->parked_of(c.get()) >= opts.max_parked_per_connection))) {
        ec = errc::backlog_full; // the table's list, or this connection's share of it
    }
    if (ec) {
        out.emplace_back(c, refusal(h, reply_kind, ec));
        return;
    }
    if (resyncing) {
        s->resync_held.push_back(waiting{c, std::move(m)}); // see table_slot
        if (!resync_timer) {
            resync_timer = true;
            arm_resync_timer(opts.replication_timeout -
                             (std::chrono::steady_clock::now() - s->resync_since));
        }
        return;
    }
    if (s->gate.readable(range_of(h), h.clock)) {
        if (work && h.kind == wire::message_kind::call) {
            // The checkpoint call (`shares`): its rows are copied after the lock, the
            // table's rows held from now on.
            out.push_back(call(*s, c, m, true));
            if (out.back().save) {
                *work = shared_work{.table = s->table.get(),
                                    .reply = out.size() - 1,
                                    .snapshot = true,
                                    .table_id = h.table_id,
                                    .keep = primary_rows(),
                                    .rows_held = std::unique_lock(s->table->rows_mutex())};
            }
            return;
        }
        if (!work) {
            respond(*s, c, std::move(m), out);
            return;
        }
        std::byte* target = nullptr;
        out.push_back(answer(*s, c, m, &target));
        if (target) {
            *work = shared_work{.table = s->table.get(),
                                .request = std::move(m),
                                .target = target,
                                .reply = out.size() - 1};
        }
    } else {
        const auto r = range_of(h);
        const auto required = h.clock;
        s->note_parked(c.get());
        s->gate.park(r, required, waiting{c, std::move(m)});
    }
}

PETREL_DECL void server_node::state::on_clock(const connection_ptr& c, const wire::message& m,
                                              outbox& out) {
    const auto& h = m.header;
    std::error_code ec = check_worker(h, true);
    const bool finish = (h.flags & wire::flag_finish) != 0;
    if (!ec && finish && (h.flags & wire::flag_all_tables) != 0) {
        depart(h.worker, nullptr, out);
    } else if (!ec) {
        if (table_slot* s = tables.slot(h.table_id, ec, c.get())) {
            const bool splits = range_of(h) != clock_gate<waiting>::all();
            if (finish) {
                depart(h.worker, s, out);
            } else if (splits && s->gate.clock().range_count() >= max_clock_ranges) {
                ec = errc::backlog_full; // ticks of narrow ranges cannot split forever
            } else {
                if ((h.flags & wire::flag_resent) != 0) {
                    s->resynced(h.worker, h.view); // it resent what it had
                }
                s->gate.tick(h.worker, range_of(h), h.clock);
                release(*s, out);
            }
        }
    }
    if (ec) {
        out.emplace_back(c, refusal(h, wire::message_kind::clock_reply, ec));
        return;
    }
    auto reply = reply_to(h, wire::message_kind::clock_reply);
    if (auto it = tables.find(h.table_id); it != tables.end()) {
        reply.header.clocks = it->second.gate.entries(range_of(h), max_entries());
        reply.header.clock = durable_for(it->second, h);
    }
    out.emplace_back(c, std::move(reply));
}

PETREL_DECL void server_node::state::admit(std::uint32_t worker) {
    if (worker < opts.workers || worker >= max_admitted) {
        return;
    }
    while (opts.workers <= worker) {
        tables.add_worker(opts.workers != worker); // (an index skipped over left before)
        ++opts.workers;
    }
    if (log) {
        log(log_level::info, "petrel server " + std::to_string(opts.node_id) + ": worker " +
                                 std::to_string(worker) + " joined the tables' clocks");
    }
}

PETREL_DECL void server_node::state::depart(std::uint32_t worker, table_slot* only, outbox& out) {
    if (worker >= opts.workers) {
        return;
    }
    if (only) {
        only->depart(worker);
        release(*only, out);
        return;
    }
    tables.depart(worker);
    for (auto& [id, s] : tables) {
        release(s, out);
    }
}

PETREL_DECL void server_node::state::resync_overdue() {
    outbox out;
    {
        locked lock(*this);
        resync_timer = false;
        const auto now = std::chrono::steady_clock::now();
        std::chrono::steady_clock::duration next = opts.replication_timeout;
        for (auto& [id, s] : tables) {
            if (s.resync_pending.empty()) {
                continue;
            }
            if (const auto waited = now - s.resync_since; waited < opts.replication_timeout) {
                // A later takeover: its own time to wait.
                next = std::min(next, opts.replication_timeout - waited);
                resync_timer = resync_timer || !s.resync_held.empty();
                continue;
            }
            if (log) {
                log(log_level::warning,
                    "petrel server " + std::to_string(opts.node_id) + ": table " +
                        std::to_string(id) + ": " + std::to_string(s.resync_pending.size()) +
                        " workers did not say within " +
                        std::to_string(opts.replication_timeout.count()) +
                        " ms that they resent their pushes of the keys this server took "
                        "over; reads of them are answered without waiting longer");
            }
            s.resync_pending.clear();
            release(s, out);
        }
        if (resync_timer) {
            arm_resync_timer(next);
        }
    }
    send(out);
}

PETREL_DECL void server_node::state::arm_resync_timer(std::chrono::steady_clock::duration after) {
    auto t = std::make_shared<asio::steady_timer>(executor, after);
    t->async_wait([t, weak = self](std::error_code) {
        if (auto st = weak.lock()) {
            st->resync_overdue();
        }
    });
}

PETREL_DECL void server_node::state::await_resync(std::uint64_t since) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, s] : tables) {
        s.await_resync(since, opts.workers, now);
    }
}

PETREL_DECL void server_node::state::release(table_slot& s, outbox& out) {
    auto r = s.gate.release();
    // The pushes come in (clock, worker, arrival) order; each clock's pushes are
    // aggregated per key before the update rule runs.
    const bool replicated = !r.pushes.empty() && sends_rows(s);
    if (replicated) {
        catch_up(out); // its rows go down the chain as applied: after the work before
    }
    std::size_t first = 0; // the clock's first push
    for (std::size_t i = 0; i < r.pushes.size(); ++i) {
        const auto& m = r.pushes[i].request;
        s.note_released(m.header.worker, bytes_of(m));
        if (i + 1 != r.pushes.size() && r.pushes[i + 1].request.header.clock == m.header.clock) {
            continue;
        }
        s.applied_limit = std::max(s.applied_limit, m.header.clock + 1);
        if (replicated || !later) {
            std::vector<const wire::message*> clock_pushes;
            for (std::size_t j = first; j <= i; ++j) {
                clock_pushes.push_back(&r.pushes[j].request);
            }
            if (!replicated || !replicate_clock(s, clock_pushes)) {
                s.table->apply_clock(clock_pushes, s.mean);
            }
        } else {
            shared_work w{.table = s.table.get(), .mean = s.mean};
            for (std::size_t j = first; j <= i; ++j) {
                w.clock.push_back(std::move(r.pushes[j].request));
            }
            later->push_back(std::move(w));
        }
        first = i + 1;
    }
    for (auto& w : r.reads) {
        s.note_unparked(w.conn.get());
        respond(s, w.conn, std::move(w.request), out);
    }
    if (s.resync_pending.empty() && !s.resync_held.empty()) {
        auto held = std::move(s.resync_held);
        s.resync_held.clear();
        for (auto& w : held) {
            on_read(w.conn, std::move(w.request), out); // checked again
        }
    }
}

PETREL_DECL bool server_node::state::sends_rows(const table_slot& s) const {
    std::error_code ec;
    return next_hop(opts.node_id, s.replicas, ec) != nullptr || !moves.learners().empty();
}

PETREL_DECL void server_node::state::respond(table_slot& s, const connection_ptr& c,
                                             wire::message&& m, outbox& out) {
    if (!later) {
        out.push_back(answer(s, c, m));
        return;
    }
    if (m.header.kind == wire::message_kind::call) {
        if (!is_checkpoint_call(m)) {
            // A remote function runs after the lock, in turn with the row work before it.
            auto reply = reply_to(m.header, wire::message_kind::call_reply);
            reply.header.clocks = s.gate.entries(range_of(m.header), max_entries());
            out.emplace_back(c, std::move(reply));
            later->push_back(shared_work{.table = s.table.get(),
                                         .request = std::move(m),
                                         .reply = out.size() - 1,
                                         .keep = primary_rows(),
                                         .function = true});
            return;
        }
        out.push_back(call(s, c, m, true));
        if (out.back().save && s.table) {
            later->push_back(shared_work{.table = s.table.get(),
                                         .reply = out.size() - 1,
                                         .snapshot = true,
                                         .table_id = m.header.table_id,
                                         .keep = primary_rows()});
        }
        return;
    }
    std::byte* target = nullptr;
    out.push_back(answer(s, c, m, &target));
    if (target) {
        later->push_back(shared_work{.table = s.table.get(),
                                     .request = std::move(m),
                                     .target = target,
                                     .reply = out.size() - 1});
    }
}

PETREL_DECL auto server_node::state::answer(table_slot& s, const connection_ptr& c,
                                            const wire::message& m, std::byte** target)
    -> outgoing {
    const auto& h = m.header;
    if (h.kind == wire::message_kind::call) {
        return call(s, c, m);
    }
    auto reply = reply_to(h, wire::message_kind::pull_reply);
    if (auto ec = pull(s, m, reply, target)) {
        return {c, refusal(h, wire::message_kind::pull_reply, ec)};
    }
    reply.header.key_count = h.key_count;
    reply.header.clocks = s.gate.entries(range_of(h), max_entries());
    reply.header.flags |= h.flags & wire::flag_compress_reply; // compressed in send()
    return {c, std::move(reply)};
}

PETREL_DECL std::error_code server_node::state::pull(table_slot& s, const wire::message& m,
                                                     wire::message& reply, std::byte** target) {
    const auto& h = m.header;
    // The header passed wire validation, so this product does not overflow.
    const std::uint64_t bytes = h.key_count * h.width * wire::size_of(h.value_type);
    if (wire::padded(bytes) > limits.max_frame_bytes) {
        return errc::frame_too_large; // the reply would exceed what peers accept
    }
    // The table's types and width are checked before the reply is allocated.
    if (s.table) {
        if (auto ec = s.table->check(h)) {
            return ec;
        }
        if (auto ec = s.table->check_keys(m)) {
            return ec;
        }
    }
    pooled_buffer out = pool->acquire(bytes);
    if (!s.table) {
        std::memset(out.data(), 0, bytes);
    } else if (target) {
        *target = out.data(); // read after the lock
    } else {
        s.table->read(m, out.data());
    }
    reply.set_segment(wire::values_segment, out.share(0, bytes));
    return {};
}

PETREL_DECL std::error_code server_node::state::save(
    table_slot& s, const wire::message_header& h, std::span<const std::byte> args,
    std::unique_ptr<checkpoint_writer::shard_job>& job, std::string& message, bool defer) {
    std::string dir;
    if (auto ec = detail::decode_binary(args, dir, message)) {
        return ec;
    }
    std::filesystem::path where;
    if (auto ec = detail::resolve_checkpoint_dir(opts.checkpoint_root, dir, where, message)) {
        return ec;
    }
    if (s.table && s.table->check(h)) {
        return s.table->check(h);
    }
    job = std::make_unique<checkpoint_writer::shard_job>();
    auto& j = *job;
    j.file = detail::table_dir(where, h.table_id) / detail::shard_file_name(opts.node_id);
    j.server = opts.node_id;
    if (s.table) {
        if (!defer) {
            snapshot(j, *s.table, h.table_id, primary_rows());
        }
    } else {
        // Never pushed here: an empty shard of the request's types.
        auto& t = j.rows;
        t.table_id = h.table_id;
        t.key_type = h.key_type;
        t.value_type = h.value_type;
        t.width = h.width;
        t.updater = "sum";
        j.record.state_width = t.state_width;
        j.record.updater = t.updater;
    }
    j.record.clock_limit = s.applied_limit;
    if (s.table) {
        if (const auto d = s.table->dense_keys()) {
            j.record.dense = true;
            j.record.dense_begin = d->begin;
            j.record.dense_end = d->end;
        }
    }
    return {};
}

PETREL_DECL void server_node::state::snapshot(checkpoint_writer::shard_job& job,
                                              const detail::table_base& table,
                                              std::uint32_t table_id,
                                              const std::function<bool(std::uint64_t)>& keep) {
    job.rows = table.dump(table_id);
    if (keep) {
        detail::keep_rows_if(job.rows, keep); // replicas' copies are their primaries' to save
    }
    job.record.state_width = job.rows.state_width;
    job.record.updater = job.rows.updater;
}

PETREL_DECL std::function<bool(std::uint64_t)> server_node::state::primary_rows() const {
    if (!plan.partition_of || plan.primaries.empty()) {
        return {};
    }
    return [partition_of = plan.partition_of, primaries = plan.primaries,
            self = opts.node_id](std::uint64_t key) {
        const auto p = partition_of(key);
        return p < primaries.size() && primaries[p] == self;
    };
}

PETREL_DECL void server_node::state::finish_save(wire::message& reply,
                                                 checkpoint_writer::outcome done) {
    if (done.error) {
        reply.header.status = status_of(done.error);
        reply.header.clocks.clear();
        if (done.message.size() > 4096) {
            done.message.resize(4096);
        }
        reply.set_segment(wire::values_segment,
                          shared_bytes::copy_of(std::as_bytes(std::span(done.message))));
        return;
    }
    reply.set_segment(wire::values_segment, shared_bytes::copy_of(done.result));
}

PETREL_DECL auto server_node::state::call(table_slot& s, const connection_ptr& c,
                                          const wire::message& m, bool defer) -> outgoing {
    const auto& h = m.header;
    auto reply = reply_to(h, wire::message_kind::call_reply);
    reply.header.clocks = s.gate.entries(range_of(h), max_entries());
    std::string message;
    detail::decoded_call decoded;
    std::string why;
    if (!detail::decode_call(m.values().span(), decoded, why) &&
        decoded.name == detail::checkpoint_call) {
        std::unique_ptr<checkpoint_writer::shard_job> job;
        std::error_code ec;
        try {
            ec = save(s, h, decoded.args, job, message, defer);
        } catch (const std::bad_alloc&) {
            ec = errc::out_of_memory;
        }
        if (ec) {
            call_result(reply, ec, {}, message);
            return {c, std::move(reply)};
        }
        outgoing o{c, std::move(reply)};
        o.save = std::move(job); // its result comes from the write
        return o;
    }
    std::vector<std::byte> result;
    const auto ec = invoke(s.table.get(), m, primary_rows(), result, message);
    call_result(reply, ec, result, message);
    return {c, std::move(reply)};
}

PETREL_DECL std::error_code
server_node::state::invoke(detail::table_base* table, const wire::message& m,
                           const std::function<bool(std::uint64_t)>& primary_rows,
                           std::vector<std::byte>& result, std::string& message) const {
    if (!opts.functions) {
        return errc::unknown_function;
    }
    const auto& h = m.header;
    try {
        // A function sees the rows this server holds as a primary: the results of all
        // servers then cover the table once, whatever its replicas.
        const auto ec = opts.functions->invoke(m.values().span(), table, h.key_type, h.value_type,
                                               h.width, range_of(h), result, message, primary_rows);
        if (ec || !primary_rows) {
            return ec;
        }
        // Then once over the rows held as a replica, its result dropped: a function that
        // changes rows changes every copy alike.
        std::vector<std::byte> dropped;
        std::string why;
        const std::function<bool(std::uint64_t)> replica_rows = [&primary_rows](std::uint64_t key) {
            return !primary_rows(key);
        };
        if (const auto failed =
                opts.functions->invoke(m.values().span(), table, h.key_type, h.value_type, h.width,
                                       range_of(h), dropped, why, replica_rows);
            failed && log) {
            log(log_level::warning, "petrel server " + std::to_string(opts.node_id) +
                                        ": a remote function failed on the rows held as a "
                                        "replica: " +
                                        (why.empty() ? failed.message() : why));
        }
        return {};
    } catch (const std::bad_alloc&) {
        return errc::out_of_memory;
    }
}

PETREL_DECL void server_node::state::call_result(wire::message& reply, std::error_code ec,
                                                 std::span<const std::byte> result,
                                                 std::string& message) {
    if (!ec && result.size() > wire::max_control_bytes) {
        ec = errc::frame_too_large; // the worker would refuse the reply
    }
    if (message.size() > 4096) {
        message.resize(4096);
    }
    if (ec) {
        reply.header.status = status_of(ec);
        reply.header.clocks.clear();
        if (!message.empty()) {
            reply.set_segment(wire::values_segment,
                              shared_bytes::copy_of(std::as_bytes(std::span(message))));
        }
        return;
    }
    reply.set_segment(wire::values_segment, shared_bytes::copy_of(result));
}

} // namespace petrel

#endif // PETREL_SERVER_IMPL_SERVER_REQUESTS_IPP
