// Petrel: a member's state: its link to the manager, its view and subscribers, the requests
// parked for a manager that takes over, behind its lock.
// (Included by the member's implementation files, and header-only by `member.hpp`, not by
// users. Header-only, it includes the member's bodies at its end, once the state is
// complete, so that it compiles whichever of the two a unit includes first.)
#pragma once

#include <petrel/cluster/member.hpp>

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace petrel {

struct member::state : std::enable_shared_from_this<state> {
    state(const any_transport& t, member_options o);

    /// A control request waiting for the manager that takes the job over.
    struct parked_request {
        detail::control_body body;
        std::chrono::milliseconds timeout;
        detail::reply_callback done;
    };

    member_options opts;
    logger log;
    any_transport transport;
    std::shared_ptr<detail::request_link> link; // to the manager; replaced on a rejoin
    // The link a registration with a manager that may have taken over waits on (see
    // rejoin()); closed with the node.
    std::shared_ptr<detail::request_link> rejoining;
    mutable std::mutex mutex;
    asio::steady_timer timer;
    node_id id = no_node;
    std::uint64_t secret = 0;
    node_key key{}; // from the join reply: shown when registering again
    // The barriers this node asked for, by group (`all`, `servers`, `workers`), counted on
    // from those its groups had passed when it joined: each barrier carries its number.
    std::array<std::uint64_t, 3> barriers_asked{};
    view_ptr view;
    std::map<std::size_t, view_callback> subscribers;
    std::map<std::size_t, std::function<void()>> failure_subscribers;
    std::size_t next_subscription = 0;
    std::string failure;
    bool heartbeating = false;
    bool closed = false;
    // The manager was lost: until `orphan_deadline` the node looks for one (see
    // rejoin()), and calls to the manager wait in `parked`. `epoch` counts the
    // managers this node was registered with: a late answer on an older link is
    // ignored.
    bool orphaned = false;
    clock::time_point orphan_deadline{};
    std::vector<parked_request> parked;
    std::uint64_t epoch = 0;

    /// A link to a manager at `address`, whose notifications (views) come here.
    std::shared_ptr<detail::request_link> make_link(const std::string& address);

    std::shared_ptr<detail::request_link> current_link() const;

    [[nodiscard]] std::string name() const;

    void report(log_level level, const std::string& text);

    /// The text a failed reply carries, or the error's message.
    static std::string reason(std::error_code ec, const wire::message& reply);

    // ---- join --------------------------------------------------------------------

    /// What this node says about itself when it registers.
    [[nodiscard]] detail::control_body join_body() const;

    void join(done_fn done);

    void attempt(done_fn done, clock::time_point deadline, bool reached);

    void joined(std::error_code ec, wire::message&& m, done_fn done, clock::time_point deadline);

    /// A view is usable when it has a ring and every ring owner is one of its servers.
    static bool valid(const membership_view& v);

    // ---- views ---------------------------------------------------------------------

    void on_notify(wire::message&& m);

    /// Takes `v` if it is newer than the view held, and tells the subscribers.
    void adopt(membership_view&& incoming);

    /// Adopts the view a reply carries; returns the newest view, or null when the
    /// reply carries no valid view.
    view_ptr adopt_reply(const wire::message& m);

    node_id current_id() const;

    // ---- heartbeats ------------------------------------------------------------------

    void schedule_heartbeat();

    void beat();

    std::uint64_t epoch_now() const;

    /// The manager is gone for good (or declared this node failed): every wait ends.
    void lost(errc e, const std::string& why);

    // ---- a lost manager ------------------------------------------------------------

    /// The manager stopped answering: look for one that takes the job over, for the
    /// grace time (none: the manager is lost at once). Pushes and pulls do not need
    /// the manager and go on meanwhile.
    void orphan(const std::string& why);

    bool is_orphaned() const;

    /// Where a manager may be: the root, then each standby address.
    std::vector<std::string> manager_addresses() const;

    /// Registers again, with this node's id and view, at the `attempt`-th address (in
    /// turn): a manager that took the job over answers once it has its view.
    void rejoin(std::size_t attempt);

    /// The registration on `l` was answered (or failed): the node no longer keeps it.
    void done_rejoining(const std::shared_ptr<detail::request_link>& l);

    /// A manager took this node back: follow it, and send it what waited.
    void rejoined(const std::shared_ptr<detail::request_link>& l, wire::message&& m);

    /// Sends a control request to the manager; when the manager is lost it waits for
    /// the one that takes the job over (within the grace time) and goes there.
    void send(detail::control_body b, std::chrono::milliseconds timeout,
              detail::reply_callback done);

    /// The connection to the manager dropped under a request: keep it for the
    /// manager that takes over, if this node looks for one. Returns whether it did.
    bool park(detail::control_body& b, std::chrono::milliseconds timeout,
              detail::reply_callback& done);

    // ---- barrier and leave --------------------------------------------------------------

    /// Sends a request and hands its reply on; a failure's text is remembered.
    void exchange(const detail::control_body& b, std::chrono::milliseconds timeout,
                  std::function<void(std::error_code, wire::message&&)> done);

    void call(const detail::control_body& b, std::chrono::milliseconds timeout, done_fn done);

    /// Leaves; with `failure`, as a failed node (see `async_fail`).
    void leave(done_fn done, std::string failure = {});

    void retire(done_fn done);

    void remember(const std::string& why);

    bool is_closed() const;

    void close(std::error_code ec);
};

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/cluster/impl/member.ipp>
#endif
