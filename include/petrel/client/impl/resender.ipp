// Petrel: requests that outlive their server (see <petrel/client/detail/resender.hpp>).
#ifndef PETREL_CLIENT_IMPL_RESENDER_IPP
#define PETREL_CLIENT_IMPL_RESENDER_IPP

#include <petrel/client/detail/fan_in.hpp>
#include <petrel/client/detail/resender.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/key_cache.hpp>

#include <asio/error.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <string>

namespace petrel::detail {

PETREL_DECL void resilient::settle(std::error_code ec, wire::message&& reply) {
    auto done = std::exchange(on_reply, reply_callback{});
    outcome.store(ec ? 2 : 1);
    if (done) {
        done(ec, std::move(reply));
    }
}

namespace resender_divide {

/// The pieces of `m` (see `divide`); throws `std::bad_alloc`.
inline division pieces(const route_table& t, const wire::message& m) {
    division out;
    const auto& h = m.header;
    const bool push = h.kind == wire::message_kind::push;
    const std::size_t row = push ? std::size_t{h.width} * wire::size_of(h.value_type) : 0;
    const std::size_t ks = wire::size_of(h.key_type);
    if (ks == 0) {
        return out;
    }
    const auto values = m.values().span();
    // Key runs become a key list: each piece lists its keys.
    std::vector<std::byte> expanded;
    auto keys = m.keys().span();
    if ((h.flags & wire::flag_key_runs) != 0) {
        const std::size_t pairs = keys.size() / ks / 2;
        for (std::size_t i = 0; i < pairs; ++i) {
            std::uint64_t b = 0;
            std::uint64_t e = 0;
            std::memcpy(&b, keys.data() + (2 * i) * ks, ks);
            std::memcpy(&e, keys.data() + (2 * i + 1) * ks, ks);
            for (std::uint64_t k = b; k < e; ++k) {
                const auto at = expanded.size();
                expanded.resize(at + ks);
                std::memcpy(expanded.data() + at, &k, ks); // little-endian
            }
        }
        keys = expanded;
    }
    const std::size_t n = keys.size() / ks;
    const auto routed = route(t, key_source::list(keys, h.key_type));
    const auto slots = routed.used();
    for (const auto slot : slots) {
        if (!t.alive(slot)) {
            return {};
        }
    }
    out.piece_of_key.resize(n);
    for (const auto slot : slots) {
        std::vector<std::byte> kb;
        std::vector<std::byte> vb;
        kb.reserve(routed.counts[slot] * ks);
        const auto piece = static_cast<std::uint32_t>(out.pieces.size());
        for (const auto& ru : routed.runs[slot]) {
            kb.insert(kb.end(), keys.begin() + static_cast<std::ptrdiff_t>(ru.first * ks),
                      keys.begin() + static_cast<std::ptrdiff_t>((ru.first + ru.count) * ks));
            for (std::size_t i = ru.first; i < ru.first + ru.count; ++i) {
                if (push && (i + 1) * row <= values.size()) {
                    vb.insert(vb.end(), values.begin() + static_cast<std::ptrdiff_t>(i * row),
                              values.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
                }
                out.piece_of_key[i] = piece;
            }
        }
        std::uint64_t first = 0;
        std::uint64_t last = 0;
        std::memcpy(&first, kb.data(), ks);
        std::memcpy(&last, kb.data() + kb.size() - ks, ks);
        wire::message p;
        p.header = h;
        p.header.flags &= static_cast<std::uint8_t>(~wire::flag_key_runs);
        p.header.key_count = routed.counts[slot];
        p.header.range_begin = first;
        p.header.range_end = last + 1;
        p.header.view = t.view->version;
        p.set_segment(wire::keys_segment, shared_bytes::copy_of(kb));
        if (push) {
            p.set_segment(wire::values_segment, shared_bytes::copy_of(vb));
        }
        out.pieces.emplace_back(slot, std::move(p));
    }
    return out;
}

} // namespace resender_divide

PETREL_DECL division divide(const route_table& t, const wire::message& m) {
    try {
        return resender_divide::pieces(t, m);
    } catch (const std::bad_alloc&) {
        return {}; // fails like keys nobody holds
    }
}

PETREL_DECL resender::resender(asio::any_io_executor ex, std::shared_ptr<send_pipeline> pipe,
                               std::shared_ptr<worker_clock> clock, resender_options opts)
    : ex_(std::move(ex)), pipe_(std::move(pipe)), clock_(std::move(clock)), opts_(std::move(opts)) {
}

PETREL_DECL void resender::install(std::shared_ptr<const route_table> t) {
    std::lock_guard lock(mutex_);
    if (table_ && table_->view->version >= t->view->version) {
        return;
    }
    if (!table_) {
        told_.insert(t->servers.begin(), t->servers.end()); // they hear every tick
    }
    table_ = std::move(t);
}

PETREL_DECL std::shared_ptr<const route_table> resender::table() const {
    std::lock_guard lock(mutex_);
    return table_;
}

PETREL_DECL std::shared_ptr<resilient>
resender::make(node_id server, wire::message m, reply_callback on_reply,
               std::optional<std::chrono::steady_clock::time_point> deadline) const {
    auto r = std::make_shared<resilient>();
    r->server = server;
    r->message = std::move(m);
    r->on_reply = std::move(on_reply);
    r->deadline = deadline ? *deadline : std::chrono::steady_clock::now() + pipe_->request_timeout;
    return r;
}

PETREL_DECL void resender::send(const std::shared_ptr<request_link>& link,
                                const std::shared_ptr<wire::key_cache_sender>& cache,
                                std::shared_ptr<resilient> r) {
    const auto deadline = r->deadline; // each send waits only for what is left of it
    send_request(
        pipe_, link, cache, r->message,
        [weak = weak_from_this(), r,
         weak_link = std::weak_ptr<request_link>(link)](std::error_code ec, wire::message&& reply) {
            if (auto self = weak.lock()) {
                self->on_reply(r, weak_link, ec, std::move(reply));
            } else {
                r->settle(ec, std::move(reply));
            }
        },
        deadline);
}

PETREL_DECL void resender::on_reply(const std::shared_ptr<resilient>& r,
                                    const std::weak_ptr<request_link>& link, std::error_code ec,
                                    wire::message&& reply) {
    // The connection dropped or could not be made (a system error), the view declared the
    // server failed, the server's chain moved on without it (its view is out of date), or
    // the server does not know this worker yet: a worker that joined a running job hears
    // of its view before every server does, and a server admits its index only then.
    const bool dropped = ec == errc::connection_closed || ec == errc::node_failed ||
                         ec == errc::stale_view || ec == errc::unknown_worker ||
                         (ec && ec.category() != error_category());
    const bool durable = opts_.policy.ordered && !ec &&
                         (reply.header.kind == wire::message_kind::push_reply ||
                          reply.header.kind == wire::message_kind::clock_reply);
    bool gone = false;
    if (durable) {
        forget_durable(r->server, reply.header.clock);
        gone = left_view(r->server, r->message.header.view);
    }
    if (ec == errc::node_failed) {
        // Its link gave up connecting (not the view): say which server it is, once; the
        // view decides what becomes of its requests.
        if (const auto l = link.lock(); l && !l->closed() && l->first_unreachable_report()) {
            report_unreachable(r->server);
        }
    }
    if (dropped && park(r, ec)) {
        return;
    }
    r->settle(ec, std::move(reply));
    if (gone) {
        // Acknowledged by a server the view already took out (it left while this push was
        // on its way), or under an older view (its keys may have moved): the push is
        // retained, and now resent if so.
        review_all();
    }
}

PETREL_DECL void resender::retain(const std::shared_ptr<resilient>& r) {
    std::lock_guard lock(mutex_);
    retained_.push_back(r);
}

PETREL_DECL task<void> resender::broadcast(const std::shared_ptr<const route_table>& t,
                                           wire::message request,
                                           std::function<void(const wire::message&)> seen) {
    // Servers the view declared failed (their links are closed) are skipped.
    std::vector<task<void>> answers;
    for (std::size_t i = 0; t && i < t->slots(); ++i) {
        const auto* n = t->view->find(t->servers[i]);
        if (n && n->state != node_state::alive) {
            continue;
        }
        auto [answer, completer] = make_task<void>();
        send(t->links[i], nullptr,
             make(t->servers[i], request,
                  [answered = std::move(completer), seen](std::error_code ec,
                                                          wire::message&& reply) {
                      if (!ec && reply.header.kind != wire::message_kind::clock_reply) {
                          ec = errc::bad_message_kind;
                      }
                      if (!ec && seen) {
                          seen(reply);
                      }
                      answered.complete(ec);
                  }));
        answers.push_back(std::move(answer));
    }
    return when_all(answers); // complete at once when there is nobody to tell
}

PETREL_DECL std::shared_ptr<const route_table> resender::note_tick(clock_type n) {
    std::lock_guard lock(mutex_);
    {
        std::lock_guard clk(clock_->mutex);
        clock_->sent = std::max(clock_->sent, n);
    }
    return table_;
}

PETREL_DECL bool resender::left_view(node_id server, std::uint64_t version) const {
    std::lock_guard lock(mutex_);
    const auto* n = table_ ? table_->view->find(server) : nullptr;
    return (n && n->state != node_state::alive) || (table_ && table_->view->version > version);
}

PETREL_DECL void resender::forget_durable(node_id server, clock_type clock) {
    // Pushes sent under a view older than the current one are kept until
    // `resend_retained` has looked at them: their keys may have moved away from `server`,
    // which then reports nothing about them.
    std::lock_guard lock(mutex_);
    const std::uint64_t now = table_ ? table_->view->version : 0;
    std::erase_if(retained_, [&](const std::shared_ptr<resilient>& r) {
        return r->server == server && r->message.header.clock < clock &&
               r->message.header.view >= now;
    });
}

PETREL_DECL void resender::report_unreachable(node_id server) const {
    const auto t = table();
    const auto* n = t ? t->view->find(server) : nullptr;
    const std::string seen = (n ? n->describe() : "server " + std::to_string(server)) +
                             " refuses connections or does not answer";
    if (opts_.log) {
        opts_.log(log_level::error,
                  "petrel worker " + std::to_string(opts_.self) + ": " + seen + "; its requests " +
                      (opts_.membership ? "wait for the job's view to say where its keys live "
                                          "(the manager is told), at most until their deadline"
                                        : "fail with node_failed"));
    }
    if (opts_.membership) {
        asio::post(ex_, [m = opts_.membership, server, seen] {
            m->async_report_unreachable(server, seen, [](std::error_code) {});
        });
    }
}

PETREL_DECL bool resender::park(const std::shared_ptr<resilient>& r, std::error_code why) {
    const auto now = std::chrono::steady_clock::now();
    std::weak_ptr<resender> weak = weak_from_this();
    {
        std::lock_guard lock(mutex_);
        if (closed_ || now >= r->deadline) {
            return false;
        }
        r->parked_at = now;
        r->dropped_by = why;
        parked_.push_back(r);
        // However the view goes, the request ends by its deadline (`review` stops this
        // timer when the request leaves `parked_`).
        r->due = std::make_shared<asio::steady_timer>(ex_, r->deadline);
        r->due->async_wait([due = r->due, weak](std::error_code ec) {
            if (ec != asio::error::operation_aborted) {
                review_weak(weak);
            }
        });
    }
    asio::post(ex_, [weak] { review_weak(weak); }); // the view may already say
    auto timer = std::make_shared<asio::steady_timer>(ex_, drop_grace);
    timer->async_wait([timer, weak](std::error_code) { review_weak(weak); });
    return true;
}

PETREL_DECL void resender::review_weak(const std::weak_ptr<resender>& weak) {
    if (auto self = weak.lock()) {
        self->review_all();
    }
}

PETREL_DECL void resender::review_all() {
    // Decided together under one lock, as one view sees them: a tick marked as following
    // the resent pushes is decided with them, and sent after them by the same thread.
    actions todo;
    {
        std::lock_guard lock(mutex_);
        todo = review();
        if (opts_.policy.ordered) {
            auto more = resend_retained();
            todo.insert(todo.end(), more.begin(), more.end());
        }
        auto ticks = sync_ticks();
        todo.insert(todo.end(), ticks.begin(), ticks.end());
    }
    for (auto& a : todo) {
        a();
    }
}

PETREL_DECL std::function<void()> resender::send_later(const route_table& where, std::size_t slot,
                                                       std::shared_ptr<resilient> r, bool cached) {
    return [self = shared_from_this(), link = where.links[slot],
            cache = cached ? where.caches[slot] : nullptr,
            r = std::move(r)] { self->send(link, cache, r); };
}

PETREL_DECL resender::actions resender::review() {
    // Called under the lock (`review_all`).
    actions out;
    const auto now = std::chrono::steady_clock::now();
    const auto where = table_;
    std::vector<std::shared_ptr<resilient>> keep;
    auto finish = [&out](const std::shared_ptr<resilient>& r, std::error_code ec) {
        out.push_back([r, ec] { r->settle(ec, wire::message{}); });
    };
    // Why a request whose server is gone cannot go on: the job finished (a reader still
    // attached, say), or a server failed.
    const errc lost =
        where && where->view->servers_all_left() ? errc::job_finished : errc::node_failed;
    for (auto& r : parked_) {
        const auto* n = where ? where->view->find(r->server) : nullptr;
        const bool gone = n && n->state != node_state::alive;
        const auto kind = r->message.header.kind;
        // Refused by a live server under an older view: its keys moved (a server joined,
        // or keys were handed over), so it goes where this view places them.
        const bool moved = !gone && where && r->dropped_by == errc::stale_view &&
                           kind != wire::message_kind::clock &&
                           r->message.header.view < where->view->version;
        if (closed_) {
            finish(r, make_error_code(errc::shut_down));
        } else if (gone && kind == wire::message_kind::clock) {
            // A tick needs no resend: every server gets its own.
            out.push_back([r] {
                wire::message reply;
                reply.header.kind = wire::message_kind::clock_reply;
                r->settle(std::error_code{}, std::move(reply));
            });
        } else if (gone || moved) {
            if (kind == wire::message_kind::call || now >= r->deadline) {
                // A call names a key range its server checked under its view: the caller
                // asks again under the new one.
                finish(r, make_error_code(moved ? errc::stale_view : lost));
                continue;
            }
            const auto slot = single_owner(*where, key_source::of(r->message));
            const bool resent = gone && kind == wire::message_kind::push;
            if (!slot) {
                auto parts = divide(*where, r->message);
                if (parts.pieces.empty()) {
                    finish(r, make_error_code(lost)); // nobody holds some keys
                    continue;
                }
                auto sends = send_divided(*where, r, std::move(parts), resent);
                out.insert(out.end(), sends.begin(), sends.end());
                continue;
            }
            auto& h = r->message.header;
            if (resent) {
                h.flags |= wire::flag_resent;
                h.receiver = r->server;
            }
            h.view = where->view->version;
            r->server = where->servers[*slot];
            out.push_back(send_later(*where, *slot, r));
        } else if (now >= r->deadline) {
            finish(r, r->dropped_by);
        } else if (now - r->parked_at >= drop_grace && where) {
            const auto it = std::find(where->servers.begin(), where->servers.end(), r->server);
            // Without a job no view will ever say the server failed: one more try. In a job
            // the view decides, even for a server whose address refuses connections (the
            // manager may yet move its keys to their replicas).
            if (it == where->servers.end() || (!opts_.membership && r->retried)) {
                finish(r, r->dropped_by);
                continue;
            }
            r->retried = true;
            out.push_back(
                send_later(*where, static_cast<std::size_t>(it - where->servers.begin()), r));
        } else {
            keep.push_back(r);
        }
    }
    // The requests that left `parked_` no longer wait for their deadline there.
    std::vector<const resilient*> still;
    for (const auto& r : keep) {
        still.push_back(r.get());
    }
    std::sort(still.begin(), still.end());
    for (const auto& r : parked_) {
        if (r->due && !std::binary_search(still.begin(), still.end(), r.get())) {
            r->due->cancel();
            r->due.reset();
        }
    }
    parked_ = std::move(keep);
    return out;
}

PETREL_DECL resender::actions resender::resend_retained() {
    // After a view change: the retained pushes of servers the view declared failed go to
    // the new owners of their keys (marked resent, so that a clock the new owner already
    // holds is not applied twice); so do the keys of a retained push that moved to another
    // server while its own server stays (a server joined). Called under the lock.
    actions out;
    const auto where = table_;
    if (!where || closed_) {
        return out;
    }
    std::erase_if(retained_, [](const std::shared_ptr<resilient>& r) {
        return r->outcome.load() == 2; // the push failed: its caller was told so
    });
    std::vector<std::shared_ptr<resilient>> kept;
    auto resend = [&](const std::shared_ptr<resilient>& r, std::size_t slot, wire::message m) {
        auto again = std::make_shared<resilient>();
        again->server = where->servers[slot];
        again->message = std::move(m);
        again->message.header.flags |= wire::flag_resent;
        again->message.header.receiver = r->server;
        again->message.header.view = where->view->version;
        again->deadline = std::chrono::steady_clock::now() + pipe_->request_timeout;
        kept.push_back(again);
        out.push_back(send_later(*where, slot, again));
    };
    for (auto& r : retained_) {
        const auto* n = where->view->find(r->server);
        const bool alive = !n || n->state == node_state::alive;
        if (r->outcome.load() == 0 || (alive && r->message.header.view >= where->view->version)) {
            kept.push_back(r); // in flight (resent when it fails), or placed by this view
            continue;
        }
        const auto own = std::find(where->servers.begin(), where->servers.end(), r->server);
        const auto slot = single_owner(*where, key_source::of(r->message));
        if (slot && alive && where->servers[*slot] == r->server) {
            r->message.header.view = where->view->version; // its keys stayed
            kept.push_back(r);
            continue;
        }
        if (slot) {
            resend(r, *slot, r->message);
            continue;
        }
        auto parts = divide(*where, r->message);
        if (parts.pieces.empty()) {
            kept.push_back(r); // nobody holds some of its keys: the job fails on them
            continue;
        }
        for (auto& [s, m] : parts.pieces) {
            if (alive && own != where->servers.end() &&
                s == static_cast<std::size_t>(own - where->servers.begin())) {
                // The keys its server still holds: kept there, as acknowledged.
                auto stay = std::make_shared<resilient>();
                stay->server = r->server;
                stay->message = std::move(m);
                stay->deadline = r->deadline;
                stay->outcome.store(1);
                kept.push_back(stay);
            } else {
                resend(r, s, std::move(m));
            }
        }
    }
    retained_ = std::move(kept);
    return out;
}

PETREL_DECL resender::actions resender::sync_ticks() {
    // The live servers this client has not told its clock yet (they joined the running
    // job) get the newest tick sent so far, after the pushes resent to them. Ordered
    // clients, when the ring changed, send it to every live server, marked as sent after
    // the resent pushes (`wire::flag_resent`): a server that took keys over answers reads
    // of them once every live worker's has come. Called under the lock.
    actions out;
    const auto where = table_;
    if (!where || closed_ || opts_.read_only) {
        return out;
    }
    clock_type sent = 0;
    {
        std::lock_guard clk(clock_->mutex);
        sent = clock_->sent;
    }
    bool mark = false;
    if (opts_.policy.ordered) {
        mark = !(marked_ring_ == where->view->ring);
        if (mark) {
            marked_ring_ = where->view->ring;
        }
    }
    for (std::size_t i = 0; i < where->slots(); ++i) {
        const auto* n = where->view->find(where->servers[i]);
        const bool first = n && told_.insert(n->id).second;
        if (!n || n->state != node_state::alive || !(mark || (first && sent != 0))) {
            continue;
        }
        auto m = opts_.tick;
        m.header.clock = sent;
        m.header.flags = mark ? std::uint8_t{wire::flag_resent} : std::uint8_t{0};
        m.header.view = where->view->version;
        out.push_back(send_later(
            *where, i, make(n->id, std::move(m), [](std::error_code, wire::message&&) {}), false));
    }
    return out;
}

PETREL_DECL resender::actions resender::send_divided(const route_table& where,
                                                     const std::shared_ptr<resilient>& r,
                                                     division parts, bool resent) {
    // Settles `r` once every piece has been answered: with the first error, or with the
    // last reply (a push) or the pieces' rows put back in the order of its keys (a pull).
    // Ordered pushes retain the pieces instead of `r`. Called under the lock.
    struct gather : fan_in {
        using fan_in::fan_in;
        std::shared_ptr<resilient> whole;
        std::vector<wire::message> replies; // each written by its piece, before it arrives
        std::vector<std::uint32_t> piece_of_key;
    };
    auto g = std::make_shared<gather>(parts.pieces.size());
    g->whole = r;
    g->replies.resize(parts.pieces.size());
    g->piece_of_key = std::move(parts.piece_of_key);
    actions out;
    const bool ordered_push = r->message.header.kind == wire::message_kind::push &&
                              (r->message.header.flags & wire::flag_ordered) != 0;
    if (ordered_push) {
        std::erase(retained_, r);
    }
    for (std::size_t i = 0; i < parts.pieces.size(); ++i) {
        auto& [slot, m] = parts.pieces[i];
        auto sub = std::make_shared<resilient>();
        sub->server = where.servers[slot];
        sub->message = std::move(m);
        if (resent) {
            sub->message.header.flags |= wire::flag_resent;
            sub->message.header.receiver = r->server;
        }
        sub->deadline = r->deadline;
        sub->on_reply = [g, i](std::error_code ec, wire::message&& reply) {
            g->replies[i] = std::move(reply);
            if (!g->arrive(ec)) {
                return;
            }
            if (const auto error = g->error()) {
                g->whole->settle(error, wire::message{});
                return;
            }
            auto first = std::move(g->replies.front());
            if (first.header.kind != wire::message_kind::pull_reply) {
                g->whole->settle({}, std::move(first));
                return;
            }
            // The rows back in the order of the request's keys.
            const std::size_t row =
                std::size_t{first.header.width} * wire::size_of(first.header.value_type);
            g->replies.front() = std::move(first);
            std::vector<std::size_t> at(g->replies.size(), 0);
            std::vector<std::byte> rows(g->piece_of_key.size() * row);
            for (std::size_t k = 0; k < g->piece_of_key.size(); ++k) {
                const auto p = g->piece_of_key[k];
                const auto v = g->replies[p].values().span();
                if ((at[p] + 1) * row > v.size()) {
                    g->whole->settle(make_error_code(errc::value_count_mismatch), wire::message{});
                    return;
                }
                std::memcpy(rows.data() + k * row, v.data() + at[p] * row, row);
                ++at[p];
            }
            wire::message merged;
            merged.header = g->replies.front().header;
            merged.header.key_count = g->piece_of_key.size();
            merged.header.clocks.clear();
            for (const auto& rep : g->replies) {
                merged.header.clocks.insert(merged.header.clocks.end(), rep.header.clocks.begin(),
                                            rep.header.clocks.end());
            }
            merged.set_segment(wire::values_segment, shared_bytes::copy_of(rows));
            g->whole->settle({}, std::move(merged));
        };
        if (ordered_push) {
            retained_.push_back(sub);
        }
        out.push_back(send_later(where, slot, sub));
    }
    return out;
}

PETREL_DECL void resender::close() {
    std::vector<std::shared_ptr<resilient>> parked;
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
        parked.swap(parked_);
        retained_.clear();
    }
    for (auto& r : parked) {
        r->settle(make_error_code(errc::shut_down), wire::message{});
    }
}

PETREL_DECL std::size_t resender::parked() const {
    std::lock_guard lock(mutex_);
    return parked_.size();
}

PETREL_DECL std::size_t resender::retained() const {
    std::lock_guard lock(mutex_);
    return retained_.size();
}

} // namespace petrel::detail

#endif
