// Petrel: a server node teaching joining servers its moving partitions, and handing them over.
#ifndef PETREL_SERVER_IMPL_SERVER_MIGRATION_IPP
#define PETREL_SERVER_IMPL_SERVER_MIGRATION_IPP

#include <petrel/server/detail/server_state.hpp>

namespace petrel {

PETREL_DECL void server_node::state::teach_update(std::uint32_t to, const wire::message& m,
                                                  detail::push_kind kind,
                                                  std::function<void(std::error_code)> done) {
    const auto* peer = peer_of(plan, to);
    if (!peer) {
        if (done) {
            asio::post(executor,
                       [done = std::move(done)] { done(make_error_code(errc::node_failed)); });
        }
        return;
    }
    auto part = detail::filtered(m, [&](std::uint64_t k) {
        const auto p = plan.partition_of(k);
        return p < plan.next_primaries.size() && p < plan.primaries.size() &&
               plan.primaries[p] == opts.node_id && plan.next_primaries[p] == to;
    });
    if (part.header.key_count == 0) {
        if (done) {
            asio::post(executor, [done = std::move(done)] { done({}); });
        }
        return;
    }
    replication.forward(*peer, opts.node_id, std::move(part), kind, std::move(done));
}

PETREL_DECL void server_node::state::join_moves(const replication_plan& old) {
    const auto self = opts.node_id;
    // Trim held pushes of keys that moved away (their workers resend those keys
    // to the new owner, as the durable clock told them nothing of them).
    if (gives_up(old, plan, self) && old.version != 0 && holds_keys) {
        for (auto& [id, s] : tables) {
            trim_held(s);
        }
    }
    auto next = moves.follow(old, plan, self);
    for (const auto& [to, parts, copy_again] : next.hand_overs) {
        if (copy_again) {
            // Something it was sent did not arrive: the rows again, as they are now.
            copy_moving(to, parts, 0, 0);
        }
        hand_over(to, parts, handover_attempts);
        if (log) {
            log(log_level::info, "petrel server " + std::to_string(self) + ": handed " +
                                     std::to_string(parts.size()) + " partitions over to server " +
                                     std::to_string(to));
        }
    }
    for (const auto& [to, parts] : next.copies) {
        copy_moving(to, parts, plan.version, copy_attempts);
    }
}

PETREL_DECL void server_node::state::copy_moving(std::uint32_t to,
                                                 const std::vector<std::uint32_t>& parts,
                                                 std::uint64_t plan_version, int attempts) {
    const auto* peer = peer_of(plan, to);
    if (!peer) {
        return;
    }
    const auto self_id = opts.node_id;
    std::set<std::uint32_t> moving(parts.begin(), parts.end());
    for (auto& [id, s] : tables) {
        if (!s.table) {
            continue;
        }
        try {
            transfer(
                id, s, *peer, [&](std::uint32_t p) { return moving.count(p) != 0; }, taught(to));
        } catch (const std::bad_alloc&) {
            moves.failed(to);
            if (log) {
                log(log_level::error, "petrel server " + std::to_string(self_id) +
                                          ": no memory to copy table " + std::to_string(id) +
                                          " to joining server " + std::to_string(to));
            }
        }
    }
    if (plan_version == 0) {
        return;
    }
    wire::message end;
    end.header.kind = wire::message_kind::push;
    end.header.flags = 0; // (the kind says what it is)
    end.header.worker = wire::no_worker;
    end.header.clock = plan_version; // the plan this copy was made for
    replication.forward(*peer, self_id, std::move(end), detail::push_kind::copy_end,
                        [weak = self, to, parts, plan_version, attempts](std::error_code ec) {
                            auto st = weak.lock();
                            if (!st) {
                                return;
                            }
                            locked lock(*st);
                            if (st->moves.copy_answered(to, parts, plan_version, !ec) &&
                                attempts > 0) {
                                st->copy_moving(to, parts, plan_version, attempts - 1);
                            }
                            st->tell_watchers();
                        });
}

PETREL_DECL void server_node::state::hand_over(std::uint32_t to,
                                               const std::vector<std::uint32_t>& parts,
                                               int attempts) {
    const auto* peer = peer_of(plan, to);
    if (!peer) {
        moves.hand_over_dropped(to); // it left the plan: nobody waits for it
        return;
    }
    wire::message end;
    end.header.kind = wire::message_kind::push;
    end.header.flags = 0;
    end.header.worker = wire::no_worker;
    replication.forward(*peer, opts.node_id, std::move(end), detail::push_kind::hand_over,
                        [weak = self, to, parts, attempts](std::error_code ec) {
                            auto st = weak.lock();
                            if (!st) {
                                return;
                            }
                            locked lock(*st);
                            st->moves.hand_over_answered(to, !ec, attempts == 0);
                            if (ec && attempts > 0) {
                                // Not handed over yet, so it still learns: what it was sent
                                // and did not get (the same connection failed) goes again
                                // first.
                                if (st->moves.take_failed(to)) {
                                    st->copy_moving(to, parts, 0, 0);
                                }
                                st->hand_over(to, parts, attempts - 1);
                            } else if (ec && st->log) {
                                st->log(log_level::error,
                                        "petrel server " + std::to_string(st->opts.node_id) +
                                            ": the hand-over to server " + std::to_string(to) +
                                            " failed (" + ec.message() + ")");
                            }
                            st->tell_watchers();
                        });
}

PETREL_DECL void server_node::state::trim_held(table_slot& s) {
    std::vector<waiting> keep;
    auto moved = s.gate.remove_if([&](const waiting& w) {
        return !w.conn && wire::is_push(w.request.header.kind) &&
               !primary_of(w.request, opts.node_id);
    });
    for (auto& w : moved) {
        s.note_released(w.request.header.worker, bytes_of(w.request));
        wire::message part;
        try {
            part = detail::filtered(w.request, [&](std::uint64_t k) {
                const auto p = plan.partition_of(k);
                return primary_of_partition(plan, opts.node_id, p);
            });
        } catch (const std::bad_alloc&) {
            // Kept whole (its moved keys are applied here too, to rows nobody
            // reads, and resent by its workers to the new owner).
            s.note_held(w.request.header.worker, bytes_of(w.request));
            const auto h = w.request.header;
            s.gate.hold(h.worker, h.clock, range_of(h), std::move(w));
            continue;
        }
        if (part.header.key_count == 0) {
            continue;
        }
        s.note_held(part.header.worker, bytes_of(part));
        const auto h = part.header;
        s.gate.hold(h.worker, h.clock, range_of(h), waiting{nullptr, std::move(part)});
    }
}

PETREL_DECL std::function<void(std::error_code)> server_node::state::taught(std::uint32_t to) {
    return [weak = self, to](std::error_code ec) {
        if (auto st = ec ? weak.lock() : nullptr) {
            locked lock(*st);
            st->moves.failed(to);
            st->tell_watchers();
        }
    };
}

} // namespace petrel

#endif // PETREL_SERVER_IMPL_SERVER_MIGRATION_IPP
