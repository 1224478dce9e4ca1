// Petrel: a server node on its chains: copies, clock rows, the ends of copies.
#ifndef PETREL_SERVER_IMPL_SERVER_REPLICATION_IPP
#define PETREL_SERVER_IMPL_SERVER_REPLICATION_IPP

#include <petrel/server/detail/server_state.hpp>

namespace petrel {

PETREL_DECL const replication_plan::peer* server_node::state::next_hop(std::uint32_t origin,
                                                                       std::uint32_t replicas,
                                                                       std::error_code& ec) const {
    return petrel::next_hop(plan, opts.node_id, origin, replicas, ec);
}

PETREL_DECL void server_node::state::end_of_copy(const connection_ptr& c, wire::message&& m,
                                                 outbox& out) {
    const auto h = m.header;
    const auto kind = detail::push_kind_of(h); // copy_end or hand_over
    if (learns_from(h.receiver)) {
        if (kind == detail::push_kind::hand_over) {
            const bool all = moves.handed_over(h.receiver);
            if (log) {
                log(log_level::info, "petrel server " + std::to_string(opts.node_id) + ": server " +
                                         std::to_string(h.receiver) +
                                         " handed its partitions over");
            }
            if (all) {
                if (moves.take_chain_copy()) {
                    copy_down_chain();
                }
                resume(out);
            }
        } else {
            moves.copy_ended(h.receiver, h.clock);
        }
        tell_watchers();
        out.emplace_back(c, reply_to(h, wire::message_kind::push_reply));
        return;
    }
    std::error_code ec;
    const auto* next = next_hop(h.receiver, 7, ec);
    if (ec) {
        out.emplace_back(c, refusal(h, wire::message_kind::push_reply, ec));
        return;
    }
    syncing.erase(h.receiver);
    auto reply = reply_to(h, wire::message_kind::push_reply);
    if (next) {
        replication.forward(
            *next, h.receiver, std::move(m), kind,
            [c, reply = std::make_shared<wire::message>(std::move(reply))](std::error_code ec) {
                if (ec == errc::shut_down) {
                    c->close(); // closing: the copy is not known to be whole
                    return;
                }
                reply->header.status = status_of(ec == errc::stale_view ? ec : std::error_code{});
                c->send(std::move(*reply));
            });
        return;
    }
    out.emplace_back(c, std::move(reply));
}

PETREL_DECL std::error_code server_node::state::load_rows(table_slot& s, const wire::message& m) {
    const auto& h = m.header;
    if ((h.flags & wire::flag_key_runs) != 0) {
        return errc::invalid_argument;
    }
    if (!s.table) {
        // A table not declared (declared ones exist once named): it sums and keeps
        // no optimizer state, so a row is its values.
        s.table = detail::make_table(h);
    }
    auto& t = *s.table;
    const std::uint32_t state = t.state_values();
    if (h.key_type != t.key_type() || h.value_type != t.value_type()) {
        return h.key_type != t.key_type() ? errc::key_type_mismatch : errc::value_type_mismatch;
    }
    try {
        shard_table rows;
        if (auto ec = detail::rows_of_copy(m, t.width(), state, rows)) {
            return ec;
        }
        t.load(rows, [](std::uint64_t) { return true; });
    } catch (const std::bad_alloc&) {
        return errc::out_of_memory;
    } catch (const std::out_of_range&) {
        return errc::key_out_of_range;
    }
    return {};
}

PETREL_DECL void server_node::state::refuse_moved_reads(const replication_plan& old, outbox& out) {
    const auto self = opts.node_id;
    if (old.version == 0 || !gives_up(old, plan, self)) {
        return;
    }
    for (auto& [id, s] : tables) {
        auto dropped = s.gate.remove_if([&](const waiting& w) {
            const auto kind = w.request.header.kind;
            if (!w.conn || wire::is_push(kind)) {
                return false;
            }
            return kind == wire::message_kind::call ? true : !primary_of(w.request, self);
        });
        for (auto& w : dropped) {
            s.note_unparked(w.conn.get());
            const auto kind = w.request.header.kind == wire::message_kind::pull
                                  ? wire::message_kind::pull_reply
                                  : wire::message_kind::call_reply;
            out.emplace_back(w.conn, refusal(w.request.header, kind, errc::stale_view));
        }
    }
}

PETREL_DECL void server_node::state::follow_chains(const replication_plan& old) {
    const auto self = opts.node_id;
    auto in_chain = [self](const replication_plan& p, std::uint32_t primary) {
        return replicates(p, primary, self);
    };
    if (old.version == 0) {
        return; // the job's first plan: nothing stored yet, every copy is whole
    }
    std::set<std::uint32_t> took_from;
    std::set<std::uint32_t> grew;
    const std::size_t n = std::min(old.primaries.size(), plan.primaries.size());
    for (std::size_t p = 0; p < n; ++p) {
        if (plan.primaries[p] != old.primaries[p]) {
            grew.insert(plan.primaries[p]);
            if (plan.primaries[p] == self) {
                took_from.insert(old.primaries[p]);
            }
        }
    }
    const auto taught = moving_to(old, self);
    for (const auto from : took_from) {
        if (from == self) {
            continue;
        }
        if (taught.count(from) != 0 && moves.taught_by(from)) {
            continue; // it taught this server the partitions it hands over
        }
        if (!in_chain(old, from) || syncing.count(from) != 0) {
            lost += (lost.empty() ? "" : ", ") + std::string("server ") + std::to_string(from);
        }
    }
    if (!lost.empty() && log) {
        log(log_level::error, "petrel server " + std::to_string(self) +
                                  ": took over keys of failed " + lost +
                                  " without a full copy of them: they are lost; "
                                  "requests are refused with data_lost");
    }
    for (const auto& [primary, chain] : plan.chains) {
        if (primary != self && in_chain(plan, primary) &&
            (!in_chain(old, primary) || grew.count(primary) != 0)) {
            syncing.insert(primary);
        }
    }
    std::erase_if(syncing, [&](std::uint32_t p) { return !in_chain(plan, p); });
}

PETREL_DECL void server_node::state::rereplicate(const replication_plan& old, bool force) {
    if (moves.take_chain_copy()) {
        force = true; // deferred for hand-overs that no longer come
    }
    const auto self = opts.node_id;
    auto it = plan.chains.find(self);
    if (it == plan.chains.end() || it->second.size() < 2 || !plan.partition_of) {
        for (auto& [id, s] : tables) {
            s.unacked.clear(); // no copy left to wait for: applied here is all
        }
        return;
    }
    const auto& chain = it->second;
    const bool grew = gains(old, plan, self);
    if (grew && !force && moves.defer_chain_copy()) {
        // Keys taken over from primaries whose last updates are on their way: the
        // copy follows their hand-over.
        return;
    }
    const auto before = chain_ids(old, self);
    const auto now = chain_ids(plan, self);
    bool copied = false;
    const bool changed = force || grew || before != now;
    for (auto& [id, s] : tables) {
        const std::size_t tail = std::min<std::size_t>(s.replicas, chain.size() - 1);
        if (tail == 0 || !s.table) {
            continue;
        }
        const bool same = before.size() >= tail + 1 &&
                          std::equal(now.begin(), now.begin() + tail + 1, before.begin());
        if (same && !grew && !force && old.version != 0) {
            continue;
        }
        try {
            transfer(id, s, chain[1]);
            copied = true;
        } catch (const std::bad_alloc&) {
            if (log) {
                log(log_level::error, "petrel server " + std::to_string(self) +
                                          ": no memory to copy table " + std::to_string(id) +
                                          " to server " + std::to_string(chain[1].id));
            }
        }
    }
    if ((copied || changed) && (old.version != 0 || force)) {
        // The end of the copy: the chain's servers hold this server's keys whole.
        wire::message end;
        end.header.kind = wire::message_kind::push;
        end.header.flags = 0;
        end.header.worker = wire::no_worker;
        ++copying;
        copy_failed = false;
        // The copy holds the rows of every clock applied so far, so it covers the
        // clocks whose own update the chain did not acknowledge (it refused them
        // under a newer view): once it arrives whole, they are durable.
        std::map<std::uint32_t, std::vector<std::uint64_t>> covered;
        for (const auto& [id, s] : tables) {
            if (!s.unacked.empty()) {
                covered[id].assign(s.unacked.begin(), s.unacked.end());
            }
        }
        replication.forward(chain[1], self, std::move(end), detail::push_kind::copy_end,
                            [weak = this->self, covered = std::move(covered)](std::error_code ec) {
                                if (auto st = weak.lock()) {
                                    locked lock(*st);
                                    --st->copying;
                                    st->copy_failed = st->copy_failed || ec;
                                    for (const auto& [id, clocks] : covered) {
                                        auto it = st->tables.find(id);
                                        if (ec || it == st->tables.end()) {
                                            continue;
                                        }
                                        for (const auto c : clocks) {
                                            it->second.acknowledged(c);
                                        }
                                    }
                                    st->tell_watchers();
                                }
                            });
    }
}

PETREL_DECL void server_node::state::transfer(std::uint32_t id, table_slot& s,
                                              const replication_plan::peer& next) {
    transfer(id, s, next,
             [&](std::uint32_t p) { return primary_of_partition(plan, opts.node_id, p); });
}

PETREL_DECL bool server_node::state::replicate_clock(table_slot& s,
                                                     std::span<const wire::message* const> pushes) {
    std::error_code ec;
    const auto* next = next_hop(opts.node_id, s.replicas, ec);
    if (!next && moves.learners().empty()) {
        return false;
    }
    s.table->apply_clock(pushes, s.mean);
    wire::message rows;
    try {
        rows = s.table->rows_of(pushes);
    } catch (const std::bad_alloc&) {
        if (log) {
            log(log_level::error, "petrel server " + std::to_string(opts.node_id) +
                                      ": no memory to replicate clock " +
                                      std::to_string(pushes.front()->header.clock) +
                                      "; it is applied here only");
        }
        return true;
    }
    rows.header.worker = wire::no_worker;
    rows.header.update_id = 0;
    // (sent as detail::push_kind::clock_rows: the rows after clock `clock`)
    const auto clock = rows.header.clock;
    const auto table = rows.header.table_id;
    // Joining servers learn the rows of the partitions that move to them; the clock
    // is durable once they have them too (whatever they answered: one that does
    // not answer does not join).
    for (const auto& [to, parts] : moves.learners()) {
        s.unacked.push_back(clock);
        auto acked = [weak = self, table, clock, failed = taught(to)](std::error_code ec) {
            failed(ec);
            acknowledge(weak, table, clock);
        };
        try {
            teach_update(to, rows, detail::push_kind::clock_rows, acked);
        } catch (const std::bad_alloc&) {
            s.unacked.pop_back();
            if (log) {
                log(log_level::error, "petrel server " + std::to_string(opts.node_id) +
                                          ": no memory to send clock " + std::to_string(clock) +
                                          " to joining server " + std::to_string(to));
            }
        }
    }
    if (!next) {
        return true;
    }
    s.unacked.push_back(clock);
    replication.forward(*next, opts.node_id, std::move(rows), detail::push_kind::clock_rows,
                        [weak = self, table, clock](std::error_code ec) {
                            if (ec == errc::stale_view || ec == errc::shut_down) {
                                // The chain's view no longer makes this server the primary
                                // (or it is closing): the clock stays not durable here, so
                                // its workers keep its pushes and send them to the new
                                // owner.
                                return;
                            }
                            acknowledge(weak, table, clock);
                        });
    return true;
}

PETREL_DECL void server_node::state::acknowledge(const std::weak_ptr<state>& weak,
                                                 std::uint32_t table, std::uint64_t clock) {
    if (auto st = weak.lock()) {
        locked lock(*st);
        if (auto it = st->tables.find(table); it != st->tables.end()) {
            it->second.acknowledged(clock);
        }
    }
}

} // namespace petrel

#endif // PETREL_SERVER_IMPL_SERVER_REPLICATION_IPP
