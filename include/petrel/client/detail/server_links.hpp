// Petrel: a client's links to the servers of its views, and the views it follows.
#pragma once

#include <petrel/client/detail/resender.hpp>
#include <petrel/client/detail/router.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/transport.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace petrel::wire {
class key_cache_sender;
} // namespace petrel::wire

namespace petrel::detail {

class request_link;

/// How a client reaches its servers.
struct server_links_options {
    node_id self = no_node; // the client's node, in log lines
    std::chrono::milliseconds request_timeout{0};
    bool key_caching = false;
    std::size_t key_cache_bytes = 0;
};

/// One link (and, with key caching, one key cache) per server a client's views name, kept
/// across views, and the adoption of each new view: the route table it gives is installed
/// in the client's resender.
///
/// Lock order: this lock comes before the resender's (`adopt` installs the table under it).
///
/// @par Thread Safety
/// All member functions may be called concurrently.
class server_links {
public:
    PETREL_DECL server_links(any_transport transport, server_links_options opts, logger log,
                             std::shared_ptr<resender> resends);

    /// Switches to view `v` when it is newer than the resender's: links for servers not
    /// seen before, and the links of servers the view declares failed closed with
    /// `errc::node_failed` (logged once), after the lock is released. Does not review the
    /// resender's parked requests (the caller does, once no lock is held).
    PETREL_DECL void adopt(std::shared_ptr<const membership_view> v);

    /// Closes every link; links made for later views are closed at once.
    PETREL_DECL void close();

private:
    any_transport transport_;
    server_links_options opts_;
    logger log_;
    std::shared_ptr<resender> resends_;

    std::mutex mutex_; // guards the fields below
    bool closed_ = false;
    std::map<node_id, std::shared_ptr<request_link>> links_;
    std::map<node_id, std::shared_ptr<wire::key_cache_sender>> caches_;
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/server_links.ipp>
#endif
