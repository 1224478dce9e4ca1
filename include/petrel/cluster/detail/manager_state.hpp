// Petrel: a manager's state: the joins, the view and its live members, barriers, the
// scheduler's rounds, the servers joining or leaving and a job being taken over, behind its
// lock. (Included by the manager's implementation files, and header-only by
// `manager_node.hpp`, not by users. Header-only, it includes the manager's bodies at its
// end, once the state is complete, so that it compiles whichever of the two a unit
// includes first.)
#pragma once

#include <petrel/cluster/manager_node.hpp>

#include <petrel/cluster/detail/control.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/declarations.hpp>
#include <petrel/core/detail/log_throttle.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/message.hpp>

#include <asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel {

struct manager_node::state : std::enable_shared_from_this<state> {
    using clock = std::chrono::steady_clock;
    using control_body = detail::control_body;
    using control_op = detail::control_op;

    /// A message to send once the lock is released.
    struct outgoing {
        connection_ptr conn;
        wire::message message;
    };

    struct joining {
        connection_ptr conn;
        wire::message_header request;
        control_body body;
    };

    struct member {
        connection_ptr conn;
        clock::time_point last_seen;
        node_key key{}; // given to the node when it joined; asked for when it registers again
    };

    struct waiting_barrier {
        connection_ptr conn;
        wire::message_header request;
        std::uint64_t seq = 0; // the node's number for the barrier; 0: not numbered
    };

    /// A group's barriers: the one being gathered, and how many the group passed (released
    /// or failed), so that a node whose release was lost with a lost manager is released
    /// when it asks again, and a node's next barrier is never counted in the one before.
    struct barrier_state {
        std::vector<waiting_barrier> waiting;
        std::set<node_id> arrived;
        std::uint64_t passed = 0;
        /// A manager that took the job over does not know `passed`: until the group's
        /// first release it learns it from the numbers the nodes ask with (a node asking
        /// for barrier n passed barrier n - 1).
        bool learning = false;
    };

    /// A block schedule: its rounds so far and the workers waiting for the next one.
    struct schedule_state {
        block_schedule def;
        std::uint64_t next = 0; // the round being gathered
        std::map<node_id, waiting_barrier> waiting;
        std::deque<round_assignment> history;
    };

    enum class phase { idle, registering, standby, confirming, running, finished };

    explicit state(const any_transport& t);

    any_transport transport; // shares the manager's: for connecting to a server's address
    manager_options opts;
    logger log;
    mutable std::mutex mutex;
    detail::log_throttle refused_requests; // the lines for requests a peer may not make
    asio::steady_timer timer;
    phase ph = phase::idle;
    std::string address;
    // Given to the servers only: marks the updates they send each other.
    std::uint64_t secret = random_secret();
    clock::time_point startup_deadline;
    std::vector<joining> joins;
    std::shared_ptr<const membership_view> view;
    std::map<node_id, member> members; // live nodes
    std::map<const connection*, node_id> by_conn;
    // Servers joining the running job, in join order; those whose copies are complete
    // under the planned placement; and the view version that placement was made at.
    std::vector<node_id> entering;
    std::set<node_id> ready;
    std::uint64_t planned_at = 0;
    // The server handing its partitions over to the others before it leaves (a ring
    // without replicas), from the view that plans it until it has left.
    node_id handing = no_node;
    // Servers that left with `retire`, by connection: asked again (their first answer
    // was lost or late), they get the same answer.
    std::map<const connection*, node_id> retired;
    std::array<barrier_state, 3> barriers;
    // Nodes admitted while a group's `passed` was still being learnt, with those groups
    // (bit `index_of(g)`): their barrier numbers count from a guess, so they are gathered
    // as unnumbered.
    std::map<node_id, std::uint8_t> unnumbered;
    std::vector<joining> early_readers; // readers that came before the job formed
    // Nodes that went and may be left out of views, with when this manager first saw
    // them gone (its views are scanned once per version: `gone_scanned`); see
    // `drop_departed`.
    std::map<node_id, clock::time_point> departed;
    std::uint64_t gone_scanned = 0;
    // Taking a job over: the nodes that came back with their views, the newest of
    // those, when the first came, the servers' secret; joins of new nodes wait.
    std::map<node_id, joining> returning;
    std::shared_ptr<const membership_view> newest;
    clock::time_point first_return{};
    std::uint64_t returned_secret = 0;
    std::vector<joining> held_joins;
    // Confirming a takeover: the live servers and workers of the view it answered with,
    // those of them that spoke since over the connections it answered, the requests held
    // until a majority did, and when it gives the job back without one.
    std::size_t voters = 0;
    std::set<node_id> confirmed;
    std::vector<joining> unconfirmed;
    clock::time_point confirm_deadline{};
    std::vector<connection_ptr> closing; // closed by flush(), after what it sends
    // The job's declarations (tables, remote functions): those of the first node that
    // joined with some; and the first refusal for a difference, for a startup failure.
    std::optional<declarations> declared;
    std::string declaration_refused;
    std::map<std::string, schedule_state> schedules;
    // Servers reported unreachable whose addresses the manager is trying.
    std::set<node_id> probing;
    std::vector<std::function<void(std::error_code)>> waiters;
    std::error_code result;
    std::string failure;
    std::vector<std::pair<log_level, std::string>> notes; // written by flush()

    static std::uint64_t random_secret();
    static node_key random_key();

    /// Logs at once: only where no lock is held.
    void say_now(log_level level, const std::string& text) const;

    /// Queues a log line; flush() writes it once the lock is released, so that a
    /// logger may call back into the manager.
    void report(log_level level, const std::string& text);

    void start();

    void set_address(const std::string& bound);

    void add_waiter(std::function<void(std::error_code)> w);

    void shut_down();

    // ---- messages -----------------------------------------------------------------------

    void on_message(const connection_ptr& c, wire::message&& m);
    /// Under `mutex`: a control request from `c` that it may make.
    void dispatch(const connection_ptr& c, const wire::message_header& h, control_body b,
                  std::vector<outgoing>& out,
                  std::vector<std::function<void(std::error_code)>>& done);

    void on_close(const connection_ptr& c);

    static wire::message refusal(const wire::message_header& request, errc e, std::string text);
    /// Under `mutex`: answers `what` (a request a peer may not make) with
    /// `errc::not_permitted` and `why`, and logs it (a line a second at most).
    void refuse_logged(const connection_ptr& c, const wire::message_header& h,
                       std::string_view what, const std::string& why, std::vector<outgoing>& out);

    // ---- joins and forming the job ------------------------------------------------------

    void on_join(const connection_ptr& c, const wire::message_header& h, control_body b,
                 std::vector<outgoing>& out);

    /// Everyone is here: number the nodes, place the keys, answer every join.
    void form_job(std::vector<outgoing>& out);

    [[nodiscard]] std::size_t live_count(node_role r) const;

    /// A worker or reader joins the running job: a new id, a new view (with the data
    /// of its group rebalanced), and the answer to its join.
    void admit(const connection_ptr& c, const wire::message_header& h, control_body b,
               std::vector<outgoing>& out);

    // ---- heartbeats and leaving ---------------------------------------------------------

    void on_heartbeat(const connection_ptr& c, const wire::message_header& h,
                      std::vector<outgoing>& out);

    /// A node is done and leaves; with `failure`, it failed (its training function
    /// threw, say) and is declared failed with that reason, as on a missed heartbeat.
    void on_leave(const connection_ptr& c, const wire::message_header& h,
                  const std::string& failure, std::vector<outgoing>& out,
                  std::vector<std::function<void(std::error_code)>>& done);

    // ---- failures, the end --------------------------------------------------------------

    void fail_node(node_id id, const std::string& why, std::vector<outgoing>& out,
                   std::vector<std::function<void(std::error_code)>>& done);

    /// Sends the view to every live node but `skip` (which gets it in its answer).
    void broadcast(std::vector<outgoing>& out, node_id skip = no_node);

    void check_finished(std::vector<std::function<void(std::error_code)>>& done);

    void finish(std::error_code ec, std::vector<std::function<void(std::error_code)>>& done);

    void flush(std::vector<outgoing>& out, std::vector<std::function<void(std::error_code)>>& done);

    // ---- the clock ----------------------------------------------------------------------

    void arm();

    void on_tick();

    void startup_failed(std::vector<outgoing>& out,
                        std::vector<std::function<void(std::error_code)>>& done);

    // ---- barriers -----------------------------------------------------------------------

    void on_barrier(const connection_ptr& c, const wire::message_header& h, group g,
                    std::uint64_t seq, std::vector<outgoing>& out);

    /// The reply that releases a node from a barrier of group `g` it asked for with `h`.
    [[nodiscard]] wire::message barrier_release(group g, const wire::message_header& h) const;

    /// The barriers of `b` up to `seq` are over (released, or failed for everyone).
    static void passed_to(barrier_state& b, std::uint64_t seq) noexcept;

    /// Every failed node of group `g`, described; empty when none failed.
    [[nodiscard]] std::string failed_in(group g) const;

    void try_release(group g, std::vector<outgoing>& out);

    static std::size_t index_of(group g) noexcept;

    // ---- nodes that went ----------------------------------------------------------------

    /// Whether `n` of the view may be left out of views once gone for
    /// `manager_options::departed_grace` (see there).
    [[nodiscard]] bool may_depart(const node_info& n) const;

    /// Leaves the nodes gone for `manager_options::departed_grace` out of a new view;
    /// running only.
    void drop_departed(clock::time_point now, std::vector<outgoing>& out);

    /// The index of the next node of role `r`: one past the highest in the view (nodes
    /// that went may have left it, so a count could repeat one).
    [[nodiscard]] std::uint32_t next_index(node_role r) const;

    // ---- the scheduler ------------------------------------------------------------------

    /// Rebalances the data sets of group `g` over its live members in view `v`.
    static void reschedule(membership_view& v, const std::string& g);

    /// Logs the share of every live member of `g` in each data set of `g`.
    void log_shares(const std::string& g);

    /// The live member on `c` of a worker group, or nullptr.
    const node_info* group_member(const connection_ptr& c) const;

    void on_assign(const connection_ptr& c, const wire::message_header& h,
                   std::optional<data_set> d, std::vector<outgoing>& out);

    void on_round(const connection_ptr& c, const wire::message_header& h,
                  std::optional<block_schedule> def, std::vector<outgoing>& out);

    wire::message round_reply(const wire::message_header& h, round_assignment r) const;

    /// Starts the next round once every live member of the schedule's group asked.
    void try_release_round(schedule_state& st, std::vector<outgoing>& out);

    /// A group changed: its data sets are rebalanced (done by the caller on the new
    /// view), its shares logged and its rounds no longer wait for departed members.
    void group_changed(const std::string& g, std::vector<outgoing>& out);

    // ---- servers joining and leaving the running job ------------------------------------

    [[nodiscard]] bool is_joining(node_id id) const;

    /// Plans the placement that gives the joining servers their share
    /// (`membership_view::next_ring`) in view `v`, or none when nobody joins (or they
    /// cannot be placed). A changed plan waits for new reports from every joiner.
    void plan_joins(membership_view& v);

    /// A joining server's copies are complete under view `version`: once every joining
    /// server's are, the planned placement becomes the ring.
    void on_ready(const connection_ptr& c, const wire::message_header& h, std::uint64_t version,
                  std::vector<outgoing>& out);

    /// The server handing its partitions over copied them all to their new owners
    /// under view `version`: the next view makes those their primaries. The server
    /// then sends them its last updates and the end of its ownership, and asks to
    /// leave again (`on_retire`).
    void handed_over(const connection_ptr& c, const wire::message_header& h, std::uint64_t version,
                     std::vector<outgoing>& out);

    /// Server `n` asks to leave and its partitions have no other copy, in a ring
    /// without replicas: the view plans their hand-over to the servers `live`
    /// (`ring::handed_over`, in `next_ring`), and the server is told to copy them
    /// (`errc::in_progress`). Asked again before it has, the same answer; one server
    /// at a time, and not while servers join.
    void plan_hand_over(const connection_ptr& c, const wire::message_header& h, const node_info& n,
                        const std::vector<node_id>& live, std::vector<outgoing>& out);

    /// A server leaves gracefully: its partitions move to their replicas as on a
    /// failure (`ring::failover`), but only when every one of them has another live
    /// copy; otherwise it is refused and the server stays.
    void on_retire(const connection_ptr& c, const wire::message_header& h,
                   std::vector<outgoing>& out,
                   std::vector<std::function<void(std::error_code)>>& done);

    /// Moves the partitions of failed server `id` to their replicas in `v` (see
    /// `ring::failover`); says what happened, for the log.
    std::string fail_over(membership_view& v, node_id id);

    // ---- servers that nodes cannot reach ------------------------------------------------

    /// A node cannot connect to `server` (`seen`: what it saw): answered at once; the
    /// manager then tries the server's address itself (`probe`), once at a time.
    void on_unreachable(const connection_ptr& c, const wire::message_header& h, node_id server,
                        const std::string& seen, std::vector<outgoing>& out);

    /// Connects to `address` of `server`, and closes the connection once made; a
    /// refusal, or no connection within `probe_timeout`, fails the server. Called
    /// without the lock.
    void probe(node_id server, const std::string& address, const std::string& who);

    void probed(node_id server, const std::string& address, const std::string& who,
                std::error_code ec);

    // ---- taking a job over --------------------------------------------------------------

    /// A node that lost its manager registers again with its id and view: with a
    /// manager taking the job over, it counts towards the takeover; with the job's
    /// own manager, a node that is still live gets its registration moved to this
    /// connection, and one declared failed is told so (it may rejoin as a new node).
    void on_return(const connection_ptr& c, const wire::message_header& h, control_body b,
                   std::vector<outgoing>& out);

    /// Confirming: a node of the proposed view comes back (again, or for the first time):
    /// it joins the members with the first key it shows and is answered.
    void confirming_return(const connection_ptr& c, const wire::message_header& h,
                           const control_body& b, std::vector<outgoing>& out);

    wire::message return_reply(const wire::message_header& h, node_id id, node_role role) const;
    /// With ranked certificates, whether `c`'s certificate names `rank`; if not, the
    /// request is refused (`errc::not_permitted`) and logged.
    bool rank_shown(const connection_ptr& c, const wire::message_header& h, std::uint32_t rank,
                    std::vector<outgoing>& out);
    /// Why a registration of node `id` again without its key is refused.
    static std::string key_needed(node_id id);

    /// Answers the nodes that came back once every live node of the newest view did, or
    /// a heartbeat timeout after the first with a majority (`propose`); gives up on
    /// those that came after four without one.
    void try_take_over(std::vector<outgoing>& out);

    /// Answers each node that came back with the newest view + 1, and waits for a
    /// majority of its live servers and workers to confirm (phase confirming).
    void propose(std::vector<outgoing>& out);

    /// Confirming: a request of `c`. Counts its node as confirmed; holds what is not a
    /// heartbeat until the takeover is confirmed. False when it is to be handled now.
    bool hold_unconfirmed(const connection_ptr& c, const wire::message_header& h, control_body& b);

    /// Confirming: takes the job over once a majority confirmed; gives it back once the
    /// heartbeat timeout passed without one.
    void try_confirm(std::vector<outgoing>& out,
                     std::vector<std::function<void(std::error_code)>>& done);

    /// The job is this manager's: nodes that did not come back fail; held joins and
    /// requests are handled.
    void take_over(std::vector<outgoing>& out,
                   std::vector<std::function<void(std::error_code)>>& done);

    /// No majority confirmed: closes the connections of the nodes it answered (they look
    /// for a manager again) and waits as a standby.
    void step_down(std::vector<outgoing>& out,
                   std::vector<std::function<void(std::error_code)>>& done);
};

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/cluster/impl/manager_node.ipp>
#endif
