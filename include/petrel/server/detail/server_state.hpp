// Petrel: a server node's state: its tables, its plan and its parts, behind its locks.
// (Included by the server's implementation files, and header-only by `server_node.hpp`, not
// by users. Header-only, it includes the server's bodies at its end, once the state is
// complete, so that it compiles whichever of the two a unit includes first.)
#pragma once

#include <petrel/server/server_node.hpp>

#include <petrel/consistency/clock_gate.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/detail/log_throttle.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/checkpoint_loader.hpp>
#include <petrel/server/detail/change_watch.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/detail/make_table.hpp>
#include <petrel/server/detail/migration.hpp>
#include <petrel/server/detail/part_runner.hpp>
#include <petrel/server/detail/placement.hpp>
#include <petrel/server/detail/push_kind.hpp>
#include <petrel/server/detail/replicator.hpp>
#include <petrel/server/detail/row_copy.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/server/detail/table_locks.hpp>
#include <petrel/server/detail/table_set.hpp>
#include <petrel/server/detail/table_slot.hpp>
#include <petrel/server/detail/thread_census.hpp>
#include <petrel/server/detail/thread_share.hpp>
#include <petrel/server/detail/update_window.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel {

/// A reply to send once the lock is released; an answer to a checkpoint call first
/// has its shard written (`save`).
struct server_node::outgoing {
    outgoing(connection_ptr c, wire::message m) : conn(std::move(c)), message(std::move(m)) {}
    connection_ptr conn;
    wire::message message;
    std::unique_ptr<checkpoint_writer::shard_job> save; // (a pointer: replies stay small)
};

/// Row work decided, and its reply made, under the server's lock and done after it, with
/// the table's lock held (`table_locks`): a worker's unordered push to apply or a pull to
/// read (the table's lock shared), or what a request that holds its table's lock
/// exclusively leaves for after the server's lock (`state::later`): the pushes of a clock
/// to apply, a released pull to read, a parked checkpoint call's snapshot, a remote function,
/// a push that goes on to other servers.
struct server_node::shared_work {
    detail::table_base* table = nullptr;
    wire::message request{};
    std::byte* target = nullptr; // a pull's values, in its reply
    std::size_t reply = 0;       // the reply's place in the outbox
    std::uint32_t primary = 0;   // a push: the primary whose update id it remembered
    std::size_t created = 0;     // a push: the rows applying it created
    // The pushes of one clock, in (worker, arrival) order, to apply together
    // (`table_base::apply_clock`, with `mean`).
    std::vector<wire::message> clock{};
    bool mean = false;
    // A checkpoint call: the snapshot of table `table_id` for the reply's job, taken with
    // the table's rows held (from the decision on, so that no push decided after the call
    // is in it), keeping the rows `keep` accepts (every row when null); without the rows
    // lock when the table's lock is held exclusively.
    bool snapshot = false;
    std::uint32_t table_id = 0;
    std::function<bool(std::uint64_t)> keep{};
    std::unique_lock<std::shared_mutex> rows_held{};
    // A remote function call (`request`), run over the table's rows (`keep`: the primary
    // rows, as `primary_rows` said when it was decided), its result into the reply.
    bool function = false;
    // A push whose rows `accept` reserved: applied whole (`table_base::apply`), which
    // cannot fail, with the table's lock held exclusively.
    bool reserved = false;
};

/// The fewest bytes of values in each part of a push or pull cut into parts.
inline constexpr std::size_t split_least_bytes = std::size_t{256} << 10;

struct server_node::state {
    server_options opts;
    std::weak_ptr<state> self; // for callbacks that may outlive the server
    replication_plan plan;
    detail::replicator replication; // the links to the plan's other servers
    std::shared_ptr<buffer_pool> pool;
    asio::any_io_executor executor; // for completions that must not run under the lock
    // The threads seen running requests: how many may apply the parts of one large
    // request unless `server_options::split_threads` says.
    detail::thread_census<16> threads_seen;
    // The row work being done now (`run`), which shares those threads: a large request is
    // cut for the threads the rest leaves.
    mutable detail::thread_share applying;
    wire::wire_limits limits;
    logger log;
    // The lines for requests a peer may not make (guarded by `refusals_mutex`, which is
    // taken alone).
    std::mutex refusals_mutex;
    detail::log_throttle refused_requests;
    // Lock order: `table_locks` (the lock over all tables, then a table's), then `mutex`,
    // then a table's rows lock, then one stripe. `mutex` guards this state, but for the
    // rows of the tables, which their table's lock guards. A request to one table
    // (`handle`) holds that table's lock from before `mutex` until its row work is done,
    // after `mutex` is released: shared for the pushes, pulls and checkpoint snapshots
    // that `shares` lets run beside each other (the tables then lock rows by stripe, and
    // a snapshot holds its table's rows lock from its decision on), exclusively for the
    // rest, whose row work `later` collects. Whatever may touch several tables holds
    // the lock over all tables exclusively, then `mutex` (`locked`). Nothing takes a
    // lock of `table_locks` while it holds `mutex`.
    mutable std::mutex mutex;
    detail::table_locks table_locks;
    // While `handle` decides a request to one table, holding that table's lock
    // exclusively: where `release` and `respond` leave the row work they would do under
    // `mutex` (a clock's pushes to apply, released pulls to read, a parked checkpoint
    // call's snapshot), for `handle` to do in order after `mutex` and before the table's
    // lock. Null otherwise: the work is done at once.
    std::vector<shared_work>* later = nullptr;
    detail::table_set tables; // each table with its clocks; the workers they count
    // Rows the pushes of each connection created (`server_options::max_rows_per_connection`),
    // forgotten when it closes.
    std::unordered_map<const connection*, std::uint64_t> rows_by;
    std::vector<waiting> held_back; // requests sent under a newer view than ours
    bool resync_timer = false;      // reads wait for resync ticks (see table_slot)
    // Primaries whose chain this server joined (or whose keys grew) and whose copy has
    // not arrived in full yet.
    std::set<std::uint32_t> syncing;
    // Why this server refuses workers: it took over keys it held no full copy of.
    std::string lost;
    // Whether the plan makes this server the primary of some keys (a server that
    // handed its keys over, or left, reports no clock durable).
    bool holds_keys = true;
    // Whether the plan makes this server the primary of every key (placement checks
    // then pass at once).
    bool all_mine = true;
    // The plan version from which this server is the primary of the keys it is now.
    std::uint64_t placed_at = 0;
    // Partitions moving to joining servers, from this server or to it.
    detail::migration moves;
    // Inside `resume`, and whether a request it applied asked for another pass.
    bool resuming = false;
    bool resume_again = false;
    // Bytes of the requests in `held_back`.
    std::uint64_t held_back_bytes = 0;
    // Copies down this server's chain whose end the chain has not acknowledged yet,
    // and whether the last one failed.
    std::size_t copying = 0;
    bool copy_failed = false;
    // The plan version a replica refused as outdated: no writes until a newer one.
    std::optional<std::uint64_t> outdated;
    // The update ids of the pushes applied or held here, so that a resent push
    // applies once.
    detail::update_window applied;

    /// What a server's membership waits for: `watchers` (`server_node::watch`) are told
    /// when it changes.
    struct membership_status {
        std::uint64_t plan = 0;
        bool chain_whole = true;
        std::uint64_t join_ready = 0;
        std::uint64_t hand_over_ready = 0;
        bool handing_over = false;
        bool operator==(const membership_status&) const = default;
    };
    detail::change_watch<membership_status> watchers;

    /// The membership status now. Under the lock.
    membership_status status() const;

    /// Posts a call of every watcher when the status changed since it was last told.
    /// Under the lock, after whatever may have changed it.
    void tell_watchers();

    /// The primary whose rows push `h` changes: this server for a worker's push or an
    /// update it learns as a joining server, else the replica update's primary.
    std::uint32_t primary_of_update(const wire::message_header& h) const;

    /// A reply's status: Petrel's own error codes travel as they are, any other as
    /// errc::remote_error.
    static std::uint32_t status_of(std::error_code ec) noexcept;

    /// Sends the replies (outside the lock), compressing the values of pull replies
    /// to workers that asked for it, where it pays.
    void send(outbox& out) const;

    static clock_gate<waiting>::range_type range_of(const wire::message_header& h);

    static std::uint64_t bytes_of(const wire::message& m);

    void handle(const connection_ptr& c, wire::message&& m);

    /// Whether request `h` may touch the rows of several tables, or of a table other
    /// than its own (a server's copy or hand-over; a worker leaving every table; a kind a
    /// server does not take): decided under `locked`. A replica update is not: it holds
    /// its table's lock alone, as a worker's push that goes down a chain does.
    static bool touches_all(const wire::message_header& h);

    /// Whether request `h` may be one that `shares` lets share its table.
    static bool may_share(const wire::message_header& h);

    /// Whether request `m` from `c` is decided with its table's lock shared and then
    /// applied, read or copied with no other lock of the server held: a worker's
    /// unordered push, pull or checkpoint call of a table that exists, that waits for
    /// nothing, and (a push) that goes to no other server (no chain to forward it down,
    /// no joining server to teach it to), so that the order in which pushes reach the
    /// rows matters to no copy.
    bool shares(const connection_ptr& c, const wire::message& m) const;

    /// Whether `m` is the checkpoint call.
    static bool is_checkpoint_call(const wire::message& m);

    /// `handle` for a request that `shares` its table: true when it did (the request is
    /// then consumed), false with `m` untouched when it must hold its table alone.
    bool handle_shared(const connection_ptr& c, wire::message& m, outbox& out);

    /// `handle` for a request to one table that holds the table alone: decided under
    /// `mutex`, its row work done after it (`later`); true when `c` sent what a server
    /// does not take.
    bool handle_alone(const connection_ptr& c, wire::message&& m, outbox& out);

    /// Does `w` now (under `mutex`), or leaves it for after `mutex` when `later` is set.
    void now_or_later(shared_work&& w, outbox& out);

    /// Applies push `m` to `s`, whose rows `accept` reserved: after `mutex` when `later` is
    /// set (in turn with the row work before it), else now. Cannot fail.
    void apply_reserved(table_slot& s, const wire::message& m, outbox& out) noexcept;

    /// Does the row work left in `later` so far, under `mutex`: before row work that
    /// cannot be left for later (a clock's rows sent down a chain or to a joining server).
    void catch_up(outbox& out);

    /// Applies, reads or copies `w` (its table's lock held, the server's not), and
    /// completes its reply in `out`; false when a push could not be applied (no memory:
    /// nothing applied, the reply says so). A push or pull of at least twice `split_least_bytes` of
    /// values is cut into parts of contiguous keys (`split_request`) that the server's threads
    /// apply or read at once (`run_parts`: this thread and up to `split_threads() - 1`
    /// others, fewer while other threads are doing row work: `applying`).
    bool run(shared_work& w, outbox& out) const noexcept;
    /// Applies or reads `w`, cut into parts for up to `threads` threads when it is large.
    /// @throws std::bad_alloc (a pull; nothing read)
    std::error_code apply_or_read(shared_work& w, std::size_t threads) const;

    /// The threads that may apply or read the parts of one large request:
    /// `server_options::split_threads`, else the threads seen running requests (at most 16).
    std::size_t split_threads() const noexcept;

    /// Decides request `m` under the lock, its table's lock (or every table's) held
    /// exclusively; true when `c` sent what a server does not take.
    bool decide(const connection_ptr& c, wire::message&& m, outbox& out);

    /// Whether request `h` was sent under a newer view than this server's plan: it
    /// waits for that view (a replica update always; a worker's push or pull once this
    /// server follows a plan at all), so that it is judged by the placement its sender
    /// used rather than refused while the view travels.
    bool ahead(const wire::message_header& h) const;
    static constexpr std::uint64_t max_views_ahead = 64;

    /// Whether request `h` waits: it was sent under a newer view (`ahead`), or it is a
    /// worker's and this server waits for the hand-over of keys it took over.
    bool waits(const wire::message_header& h) const;

    /// Whether requests from `c` wait for a newer view (the ones after them wait too,
    /// so that each connection's requests apply in order).
    bool holds_back(const connection_ptr& c) const;

    /// Keeps a push or pull until the plan of its view arrives (`resume`).
    void hold_back(const connection_ptr& c, wire::message&& m, outbox& out);

    /// Applies the held-back updates that the current plan covers, in arrival order.
    void resume(outbox& out);

    /// A connection closed: the reads it parked need no answer. Its held pushes were
    /// acknowledged and stay.
    void forget(const connection_ptr& c);

    /// The most clock entries a reply may carry: what fits the header limit peers
    /// enforce (each entry takes 28 bytes), at most `wire::max_clock_entries`.
    std::size_t max_entries() const noexcept;
    /// The bytes of held pushes one worker may have in a table
    /// (`server_options::max_held_bytes_per_worker`, or twice its even share).
    std::uint64_t held_share() const noexcept;

    wire::message reply_to(const wire::message_header& h, wire::message_kind kind) const;

    wire::message refusal(const wire::message_header& h, wire::message_kind kind,
                          std::error_code ec) const;

    std::error_code check_worker(const wire::message_header& h, bool required) const;

    /// Whether this server takes updates from primary `origin` as its learner: it
    /// learns partitions of it, or waits for its hand-over of them.
    bool learns_from(std::uint32_t origin) const { return moves.learns_from(origin); }

    /// Sends learner `to` the keys of update `m` (applied here) that move to it.
    void teach_update(std::uint32_t to, const wire::message& m, detail::push_kind kind,
                      std::function<void(std::error_code)> done);

    /// After a new plan, for servers joining: as a primary, copies the partitions that
    /// move to each new learner to it (then ends the copy), and sends the hand-over to
    /// each learner that now is the primary of partitions it taught it; as a learner,
    /// notes which primaries teach it and, once it is their primary, whose hand-over
    /// it waits for. Ordered held pushes of keys that moved away are trimmed to the
    /// keys this server still holds.
    void join_moves(const replication_plan& old);

    static constexpr int copy_attempts = 3;
    static constexpr int handover_attempts = 5;

    /// A completion for something sent to learner `to`: a failure marks it, so that
    /// its partitions are copied again before the hand-over.
    std::function<void(std::error_code)> taught(std::uint32_t to);

    /// Copies the rows of partitions `parts` to learner `to`, then (for a plan's copy,
    /// `plan_version` not 0) the end of the copy, sent again up to `attempts` times
    /// while `to` still learns the same partitions.
    void copy_moving(std::uint32_t to, const std::vector<std::uint32_t>& parts,
                     std::uint64_t plan_version, int attempts);

    /// Tells learner `to` that this server sent its last update of the partitions it
    /// taught it (sent again up to `attempts` times while `to` is in the plan).
    void hand_over(std::uint32_t to, const std::vector<std::uint32_t>& parts, int attempts);

    /// Drops from the held pushes of `s` the keys this server is no longer the primary
    /// of (a push left without keys goes).
    void trim_held(table_slot& s);

    /// The server after this one on the chain of primary `origin` (see
    /// `petrel::next_hop`).
    const replication_plan::peer* next_hop(std::uint32_t origin, std::uint32_t replicas,
                                           std::error_code& ec) const;

    /// A push: applied here, or (with `work`: `shares` said so) decided here and
    /// applied by the caller after the lock.
    void on_push(const connection_ptr& c, wire::message&& m, outbox& out,
                 std::optional<shared_work>* work = nullptr);

    /// Whether server `self` is the primary of every key of `m` in this server's plan
    /// (always without a plan). Checked when the sender's view is not the plan's: a
    /// server that handed keys over (or left) refuses requests for them with
    /// `errc::stale_view`, and the worker sends them where its newer view says; a
    /// replica refuses updates of keys whose primary moved.
    bool primary_of(const wire::message& m, std::uint32_t self) const;

    /// The table's durable clock: every push of the clocks below it is applied here and
    /// on the table's replicas. Written as the `clock` of push and clock replies, so
    /// that workers keep their ordered pushes until then (and resend them elsewhere if
    /// this server fails first).
    std::uint64_t durable(const table_slot& s) const;

    /// The durable clock to tell the sender of request `h`: capped for a request sent
    /// under a view before this server's keys last changed (see `durable_cap`).
    std::uint64_t durable_for(const table_slot& s, const wire::message_header& h) const;

    /// The end of a primary's copy down its chain: this server holds its keys whole.
    /// From a primary this server learns from: the end of its copy of the moving
    /// partitions, or (`push_kind::hand_over`) its hand-over of them.
    void end_of_copy(const connection_ptr& c, wire::message&& m, outbox& out);

    /// Whether push `h` was applied here before: its update id was seen for the same
    /// primary (for a resent push also as an update of its old server `h.receiver`),
    /// or it is an ordered push resent from server `h.receiver` whose clock this server
    /// already received combined from that server as its replica.
    bool duplicate(const table_slot& s, const wire::message_header& h) const;

    /// Stores the rows of a transfer (`detail::is_transfer`) in the table, replacing
    /// what was there: all or nothing.
    std::error_code load_rows(table_slot& s, const wire::message& m);

    /// After a new plan that took partitions from this server: the reads parked here
    /// for keys it no longer holds would wait for clocks its workers no longer send it;
    /// they get `errc::stale_view`, and the workers send them to the new owners.
    void refuse_moved_reads(const replication_plan& old, outbox& out);

    /// After a new plan: marks the primaries whose copy this server now waits for (it
    /// joined their chain, or their keys grew), and notes data lost when this server
    /// took over partitions of a primary of which it held no full copy.
    void follow_chains(const replication_plan& old);

    /// After a new plan: when this server's chain has new members or this server
    /// became the primary of more partitions, every row it is the primary of is copied
    /// down its chain (in pieces of at most `detail::copy_message_bytes`), ahead of any later
    /// update on the same links, so that each replica again holds what the primary
    /// holds.
    void rereplicate(const replication_plan& old, bool force = false);

    /// Copies every row this server is the primary of down its chain again (after the
    /// hand-overs of keys it took over from primaries that taught it them).
    void copy_down_chain() { rereplicate(plan, true); }

    /// Sends the rows of table `id` whose primary is this server to `next`, in pieces.
    void transfer(std::uint32_t id, table_slot& s, const replication_plan::peer& next);

    /// Sends the rows of table `id` in the partitions `send(partition)` accepts.
    template <typename Send>
    void transfer(std::uint32_t id, table_slot& s, const replication_plan::peer& next, Send send,
                  const std::function<void(std::error_code)>& done = {}) {
        const auto self = opts.node_id;
        const shard_table all = s.table->dump(id);
        const std::uint64_t applied = s.gate.completed(clock_gate<waiting>::all());
        const auto sent = detail::copy_rows(
            all, applied, [&](std::uint64_t key) { return send(plan.partition_of(key)); },
            [&](wire::message m) {
                replication.forward(next, self, std::move(m), detail::push_kind::copy_rows, done);
            });
        if (log && sent > 0) {
            log(log_level::info, "petrel server " + std::to_string(self) + ": copying " +
                                     std::to_string(sent) + " rows of table " + std::to_string(id) +
                                     " to server " + std::to_string(next.id));
        }
    }

    /// As a primary with replicas: applies the pushes of one complete clock, then
    /// sends the rows they changed (values and optimizer state) down the chain, so
    /// that the replicas receive one update per clock, not every worker's push, and
    /// hold bitwise what the primary holds. False when the table is not replicated
    /// here.
    bool replicate_clock(table_slot& s, std::span<const wire::message* const> pushes);

    /// One server acknowledged the rows of `clock` of table `table`.
    static void acknowledge(const std::weak_ptr<state>& weak, std::uint32_t table,
                            std::uint64_t clock);

    /// Creates the table if needed, checks the push against it and creates its new
    /// rows, so that applying it later cannot fail, counting them for `by` (the sender's
    /// connection; null for another server's). All or nothing.
    std::error_code accept(table_slot& s, const wire::message& m, const connection* by);

    /// Whether a push of `by` into table `s` must be refused: `by` created its share of
    /// rows (`max_rows_per_connection`) and the push would create more.
    bool out_of_rows(const table_slot& s, const wire::message& m, const connection* by) const;
    /// Counts `n` rows created by the pushes of `by` (null: none to count).
    void count_rows(const connection* by, std::uint64_t n);

    /// A pull or call: answered (or parked until its clocks complete); with `work`
    /// (`shares` said so) a pull's rows are read, or a checkpoint call's snapshot taken,
    /// by the caller after the lock.
    void on_read(const connection_ptr& c, wire::message&& m, outbox& out,
                 std::optional<shared_work>* work = nullptr);

    void on_clock(const connection_ptr& c, const wire::message& m, outbox& out);

    static constexpr std::uint32_t max_admitted = std::uint32_t{1} << 20;

    void admit(std::uint32_t worker);

    /// `worker` leaves the clock of table `only` (of every table, now and later, when
    /// null).
    void depart(std::uint32_t worker, table_slot* only, outbox& out);

    /// Workers whose resync ticks did not come within a replication timeout are waited
    /// for no longer: the reads held for them are answered.
    void resync_overdue();

    /// Calls resync_overdue() after `after`.
    void arm_resync_timer(std::chrono::steady_clock::duration after);

    /// This server took keys over under a view from `since` on: every table's ordered
    /// reads wait for a resync tick sent under such a view from each live worker (see
    /// `table_slot`), at most a replication timeout.
    void await_resync(std::uint64_t since);

    /// Applies the pushes whose clock is complete, then answers the reads that may
    /// now be answered (or leaves both to `later`).
    void release(table_slot& s, outbox& out);

    /// Whether a clock's pushes to `s` go to other servers once applied (down a chain, or
    /// to joining servers).
    bool sends_rows(const table_slot& s) const;

    /// Answers read `m` (a pull or call whose clocks are complete) into `out`: at once, or
    /// with `later` set, its rows read (a pull), copied (a checkpoint call) or handed to
    /// its remote function after the lock, in turn with the row work left before it.
    void respond(table_slot& s, const connection_ptr& c, wire::message&& m, outbox& out);

    /// The reply to a pull or call whose clocks are satisfied, for connection `c`.
    /// With `target`, a pull's rows are not read: `*target` says where they go.
    outgoing answer(table_slot& s, const connection_ptr& c, const wire::message& m,
                    std::byte** target = nullptr);

    std::error_code pull(table_slot& s, const wire::message& m, wire::message& reply,
                         std::byte** target = nullptr);

    /// The built-in checkpoint call, under the lock: the snapshot of this server's
    /// rows of the table (a consistent cut: the call waited for its clock like a pull)
    /// and the shard file in the directory named by the arguments, for the writer
    /// (`finish_save`, once the lock is released).
    /// With `defer`, the snapshot is left to the caller (`snapshot`, after the lock).
    std::error_code save(table_slot& s, const wire::message_header& h,
                         std::span<const std::byte> args,
                         std::unique_ptr<checkpoint_writer::shard_job>& job, std::string& message,
                         bool defer = false);

    /// The rows of a checkpoint's job: those of `table` (`table_id`) that `keep` accepts
    /// (every row when null). The table must be the caller's alone. @throws std::bad_alloc
    static void snapshot(checkpoint_writer::shard_job& job, const detail::table_base& table,
                         std::uint32_t table_id, const std::function<bool(std::uint64_t)>& keep);

    /// Whether a key's row is this server's as a primary, as a function that outlives the
    /// lock (null without a plan: every row is).
    std::function<bool(std::uint64_t)> primary_rows() const;

    /// Completes a checkpoint call's reply once its shard is written: the shard's
    /// record, or the failure and why.
    static void finish_save(wire::message& reply, checkpoint_writer::outcome done);

    /// With `defer`, a checkpoint call's snapshot is left to the caller (see `save`).
    outgoing call(table_slot& s, const connection_ptr& c, const wire::message& m,
                  bool defer = false);

    /// Runs remote function call `m` over `table` (null: never pushed here): over the
    /// rows `primary_rows` accepts for the result, then over the others with the result
    /// dropped (all rows once when null). `errc::unknown_function` without functions.
    std::error_code invoke(detail::table_base* table, const wire::message& m,
                           const std::function<bool(std::uint64_t)>& primary_rows,
                           std::vector<std::byte>& result, std::string& message) const;

    /// Completes a call's reply with `result`, or with failure `ec` and `message`
    /// (at most 4 KiB of it); a result over `wire::max_control_bytes` is refused.
    /// @throws std::bad_alloc
    static void call_result(wire::message& reply, std::error_code ec,
                            std::span<const std::byte> result, std::string& message);
};

/// Every table's lock, then the server's lock: every table to itself.
struct server_node::locked {
    explicit locked(const state& s) : tables(s.table_locks), server(s.mutex) {}
    detail::table_locks::all tables;
    std::lock_guard<std::mutex> server;
};

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/server/impl/server_node.ipp>
#endif
