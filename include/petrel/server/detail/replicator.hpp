// Petrel: a server's links to the other servers of its chains, and the updates it sends.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/detail/push_kind.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel::detail {

/// The sending side of a server's replication: a link to every other server of its plan
/// (the servers of its chains and the joining ones), and the updates it sends them (replica
/// updates, the rows of a clock, copies, their ends and hand-overs), each stamped as a
/// server's (its push kind, this server as sender, the plan's view and secret).
///
/// Not thread-safe: the server calls it under its lock, so that updates leave in the order
/// they were applied. Completions run on the links' executor, never inside a call.
class replicator {
public:
    using link_ptr = std::shared_ptr<request_link>;
    using done_callback = std::function<void(std::error_code)>;

    replicator() = default;
    /// @param timeout how long a server has to acknowledge an update.
    replicator(asio::any_io_executor executor, logger log, std::chrono::milliseconds timeout)
        : executor_(std::move(executor)), log_(std::move(log)), timeout_(timeout) {}

    /// Follows `plan` as server `self`: links (through `transport`) to each server of it not
    /// linked yet. Returns the links to servers no longer in it, to close once the caller's
    /// lock is released. @throws std::bad_alloc
    std::vector<link_ptr> follow(const replication_plan& plan, std::uint32_t self,
                                 const any_transport& transport) {
        self_ = self;
        version_ = plan.version;
        secret_ = plan.secret;
        std::vector<link_ptr> gone;
        for (auto it = links_.begin(); it != links_.end();) {
            if (!peer_of(plan, it->first)) {
                gone.push_back(std::move(it->second));
                it = links_.erase(it);
            } else {
                ++it;
            }
        }
        auto link_to = [&](const replication_plan::peer& peer) {
            if (peer.id != self && !links_.count(peer.id)) {
                links_.emplace(peer.id,
                               std::make_shared<request_link>(transport, peer.address, timeout_));
            }
        };
        for (const auto& [primary, chain] : plan.chains) {
            for (const auto& peer : chain) {
                link_to(peer);
            }
        }
        for (const auto& peer : plan.learners) {
            link_to(peer);
        }
        return gone;
    }

    /// This server's id, written as the sender of its updates.
    void rename(std::uint32_t self) noexcept { self_ = self; }

    /// Whether this server holds a link to server `id`.
    [[nodiscard]] bool linked(std::uint32_t id) const { return links_.count(id) != 0; }

    /// Every link, to close when the server closes.
    [[nodiscard]] std::vector<link_ptr> links() const {
        std::vector<link_ptr> out;
        for (const auto& [id, l] : links_) {
            out.push_back(l);
        }
        return out;
    }

    /// Drops every link (they hold callbacks that may hold the server).
    void clear() noexcept { links_.clear(); }

    /// Sends `update` (of kind `kind`, an update this server applied) to `next` on the
    /// chain of primary `origin`, and calls `done` once `next` has applied it, or with the
    /// error that ended the wait (logged: the update lives on fewer copies;
    /// `errc::stale_view` when `next` no longer takes this server's updates: this
    /// server's view is out of date; `errc::node_failed` when `next` is not linked).
    void forward(const replication_plan::peer& next, std::uint32_t origin, wire::message update,
                 push_kind kind, done_callback done) {
        const auto found = links_.find(next.id);
        if (found == links_.end()) {
            if (log_) {
                log_(log_level::error, "petrel server " + std::to_string(self_) +
                                           ": no link to server " + std::to_string(next.id));
            }
            if (done) {
                // Not here: `done` may take the lock this call is made under.
                asio::post(executor_,
                           [done = std::move(done)] { done(make_error_code(errc::node_failed)); });
            }
            return;
        }
        auto& h = update.header;
        h.kind = kind_of(kind);
        h.flags = flags_of(kind, h.flags);
        h.sender = self_;
        h.receiver = origin;
        h.view = version_;
        h.status = 0;
        h.encoding = 0;
        h.secret = secret_; // from a server of the job
        h.key_list_id = 0;
        h.key_list_digest = 0;
        if (kind != push_kind::replica_update) {
            h.update_id = 0; // rows replace, whoever pushed them
        }
        h.clocks.clear();
        update.segments[wire::lengths_segment] = {};
        h.segment_bytes[wire::lengths_segment] = 0;
        found->second->request(std::move(update), [done = std::move(done), log = log_, self = self_,
                                                   to = next.id, table = h.table_id,
                                                   kind](std::error_code ec, wire::message&&) {
            if (ec && log) {
                log(log_level::warning,
                    "petrel server " + std::to_string(self) + ": server " + std::to_string(to) +
                        " did not apply " + std::string(name_of(kind)) + " of table " +
                        std::to_string(table) + " (" + ec.message() + ")" +
                        (ec == errc::stale_view ? "" : "; it lives on fewer copies"));
            }
            if (done) {
                done(ec);
            }
        });
    }

private:
    asio::any_io_executor executor_; // for completions that must not run in a call
    logger log_;
    std::chrono::milliseconds timeout_{std::chrono::seconds(10)};
    std::uint32_t self_ = 0;
    std::uint64_t version_ = 0; // the plan's, written as the view of every update
    std::uint64_t secret_ = 0;  // the plan's, carried by every update
    std::map<std::uint32_t, link_ptr> links_;
};

} // namespace petrel::detail
