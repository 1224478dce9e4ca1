// Petrel: a client's links to its servers (see <petrel/client/detail/server_links.hpp>).
#ifndef PETREL_CLIENT_IMPL_SERVER_LINKS_IPP
#define PETREL_CLIENT_IMPL_SERVER_LINKS_IPP

#include <petrel/client/detail/server_links.hpp>
#include <petrel/core/error.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/key_cache.hpp>

#include <string>
#include <utility>
#include <vector>

namespace petrel::detail {

PETREL_DECL server_links::server_links(any_transport transport, server_links_options opts,
                                       logger log, std::shared_ptr<resender> resends)
    : transport_(std::move(transport)), opts_(opts), log_(std::move(log)),
      resends_(std::move(resends)) {}

PETREL_DECL void server_links::adopt(std::shared_ptr<const membership_view> v) {
    std::vector<std::shared_ptr<request_link>> failed;
    std::vector<std::shared_ptr<request_link>> gone; // of servers the view no longer names
    std::vector<std::string> notes;
    auto t = std::make_shared<route_table>();
    t->view = v;
    {
        std::lock_guard lock(mutex_);
        if (const auto now = resends_->table(); now && now->view->version >= v->version) {
            return;
        }
        std::map<node_id, std::uint32_t> slot_of;
        for (const auto* n : v->of_role(node_role::server)) {
            auto& link = links_[n->id];
            if (!link) {
                // A server whose address keeps refusing connections is treated as failed.
                link = std::make_shared<request_link>(
                    transport_, n->address, opts_.request_timeout,
                    request_link_options{.unreachable_after = default_unreachable_after});
                if (closed_) {
                    failed.push_back(link); // closed with node_failed: the client is closed
                }
            }
            if (n->state == node_state::failed && !link->closed()) {
                notes.push_back("petrel worker " + std::to_string(opts_.self) + ": " +
                                n->describe() + " failed: " + n->failure +
                                (v->ring.holds(n->id)
                                     ? "; its requests fail with node_failed"
                                     : "; its requests go to the servers that took over its "
                                       "keys"));
                failed.push_back(link);
            }
            slot_of[n->id] = static_cast<std::uint32_t>(t->links.size());
            t->links.push_back(link);
            auto& cache = caches_[n->id];
            if (!cache && opts_.key_caching) {
                cache = std::make_shared<wire::key_cache_sender>(opts_.key_cache_bytes);
            }
            t->caches.push_back(cache);
            t->servers.push_back(n->id);
        }
        for (auto it = links_.begin(); it != links_.end();) {
            if (slot_of.count(it->first) == 0) {
                gone.push_back(it->second);
                caches_.erase(it->first);
                it = links_.erase(it);
            } else {
                ++it;
            }
        }
        const auto& r = v->ring;
        t->partition_slot.resize(r.options().partitions);
        for (std::uint32_t i = 0; i < r.options().partitions; ++i) {
            t->partition_slot[i] = slot_of.at(r.owners(i)[0]);
        }
        resends_->install(std::move(t));
    }
    for (const auto& note : notes) {
        if (log_) {
            log_(log_level::error, note);
        }
    }
    for (const auto& l : failed) {
        l->close(make_error_code(errc::node_failed));
    }
    for (const auto& l : gone) {
        l->close(make_error_code(errc::node_failed)); // it went: no request waits on it
    }
}

PETREL_DECL void server_links::close() {
    std::vector<std::shared_ptr<request_link>> links;
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
        for (auto& [id, l] : links_) {
            links.push_back(l);
        }
    }
    for (auto& l : links) {
        l->close();
    }
}

} // namespace petrel::detail

#endif
