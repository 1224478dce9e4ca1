// Petrel: a server node.
#pragma once

#include <petrel/consistency/clock_gate.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/clock_entry.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/checkpoint_loader.hpp>
#include <petrel/server/checkpoint_writer.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/detail/migration.hpp>
#include <petrel/server/detail/placement.hpp>
#include <petrel/server/detail/push_kind.hpp>
#include <petrel/server/detail/replicator.hpp>
#include <petrel/server/detail/row_copy.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/server/detail/update_window.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/compression.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel {

struct server_options {
    /// This node's id, written as the sender of its replies.
    std::uint32_t node_id = 0;
    /// The workers whose clocks the tables keep: worker indices 0 .. workers - 1 (a job's
    /// workers by rank). Requests naming another worker are refused.
    std::uint32_t workers = 1;
    /// Bytes of pushes a table may hold back for their clock (`sequential`) before it
    /// refuses more with `errc::backlog_full`.
    std::uint64_t max_held_bytes = std::uint64_t{1} << 30;
    /// Pulls and calls a table may keep waiting for slower workers before it refuses more
    /// with `errc::backlog_full`.
    std::size_t max_parked = std::size_t{1} << 16;
    /// Tables (table ids) a server holds at most.
    std::size_t max_tables = 4096;
    /// The remote functions workers may call (see `kv_store::call`); none when null.
    std::shared_ptr<const function_registry> functions{};
    /// The declared tables (storage, initial values, update rules); tables not declared
    /// are sparse, summing and zero-initialised. None when null.
    std::shared_ptr<const table_registry> tables{};
    /// How pull replies are compressed for workers that ask for it (a store whose
    /// `kv_store_options::compression` is on): snappy where it pays on a link of
    /// `link_gbps` (see `wire::compression_options`). Workers that do not ask get raw
    /// values.
    wire::compression_options compression{.mode = wire::compression_mode::adaptive};
    /// How long the next server of a chain has to acknowledge a replicated update. A
    /// replica that does not answer in time (or fails) does not hold the worker's push
    /// back: it is acknowledged on the copies that have it, and the delay is logged.
    std::chrono::milliseconds replication_timeout{std::chrono::seconds(10)};
    /// Writes the shards of checkpoints (`kv_store::save`) once the server's lock is
    /// released; a writer of its own when null. Servers of one process may share one so
    /// that their saves take turns at the disk.
    std::shared_ptr<checkpoint_writer> checkpoints{};
};

/// The most key ranges with distinct clocks a table keeps; a tick that could split more
/// is refused (`kv_store` ticks the whole key space, which never splits).
inline constexpr std::size_t max_clock_ranges = 4096;

/// A server: holds tables of values by key and answers pushes, pulls and calls.
///
/// A push hands its rows to the table's update rule (keys seen for the first time are
/// inserted with their initial values); a pull returns the rows of its keys, initial
/// values for keys never pushed. A table declared in `server_options::tables` is created
/// as declared (dense or sparse, its types, width, initializer and update rule) when it
/// is first named; any other table is created by its first push with that push's key
/// type, value type (`float` or `double`) and width, summing and starting from zeros.
/// Later requests must match the table or get an error reply. Every request is checked
/// completely before anything is applied: a rejected push changes nothing.
///
/// Each table has a `clock_gate`: workers report their completed clocks, a pull (or
/// call) waits until every live worker has completed the clocks it requires on its key
/// range, and a push marked ordered (`sequential`) is acknowledged at once but applied
/// only when its clock is complete, in worker order. Every reply carries the clocks of
/// its key range.
///
/// @par Example
/// @code
/// asio::io_context io;
/// petrel::server_node server(petrel::tcp_transport(io.get_executor()), {.workers = 4});
/// std::string address = server.listen("127.0.0.1:0");
/// io.run();
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread. Requests from many connections
/// are read on the executor's threads and decided one at a time under the server's lock.
/// A worker's unordered push (`eventual`, `bounded_delay`) that goes to no other server
/// and a pull whose clocks are complete are then applied or read on those threads at the
/// same time, the lock released and the tables' storage shared (each table locks its rows
/// by stripe), so update rules may run on several threads at once, for different keys;
/// everything else (ordered pushes and their clocks, replication, hand-overs, calls) is
/// applied under the lock with the storage held exclusively. Replies are compressed and sent after
/// both are released, and checkpoint shards are written by the `checkpoint_writer` on its own
/// thread. Lock order: the server's lock, then the storage, then a table's rows, then one stripe;
/// the writer's locks are taken alone.
class server_node {
public:
    explicit server_node(any_transport transport, server_options opts = {})
        : transport_(std::move(transport)), state_(std::make_shared<state>()) {
        state_->opts = std::move(opts);
        state_->self = state_;
        state_->pool = transport_.pool();
        state_->executor = transport_.get_executor();
        state_->log = transport_.options().log;
        state_->limits = transport_.options().limits;
        state_->departed_all.assign(state_->opts.workers, false);
        state_->replication =
            detail::replicator(state_->executor, state_->log, state_->opts.replication_timeout);
        if (!state_->opts.checkpoints) {
            state_->opts.checkpoints = std::make_shared<checkpoint_writer>();
        }
    }

    server_node(const server_node&) = delete;
    server_node& operator=(const server_node&) = delete;

    /// Stops serving and closes every connection.
    ~server_node() {
        close();
        locked lock(*state_);
        state_->replication.clear(); // the links hold callbacks that hold the state
    }

    /// Accepts workers at `address` ("host:port" for TCP, a name for in-process);
    /// returns the address to give them. @throws std::system_error
    std::string listen(std::string_view address) {
        std::weak_ptr<state> weak = state_;
        connection_handlers h;
        h.on_message = [weak](const connection_ptr& c, wire::message&& m) {
            if (auto s = weak.lock()) {
                s->handle(c, std::move(m));
            }
        };
        h.on_close = [weak](const connection_ptr& c, std::error_code) {
            if (auto s = weak.lock()) {
                s->forget(c);
            }
        };
        return transport_.listen(address, std::move(h));
    }

    /// Stops listening and closes all connections; idempotent.
    void close() {
        std::vector<std::shared_ptr<detail::request_link>> links;
        {
            locked lock(*state_);
            links = state_->replication.links();
        }
        for (auto& l : links) {
            l->close();
        }
        transport_.close();
    }

    /// Replicates along the chains of `plan` (if it is newer than the plan followed so
    /// far): every update this server applies as a primary (a worker's push under
    /// `eventual`, the combined pushes of a clock under `sequential` and
    /// `bounded_delay`) goes to the next server of its chain, which applies it and passes
    /// it on, up to the table's replicas (`table_spec::replicas`). A worker's unordered
    /// push is acknowledged once the chain has applied it; ordered pushes are
    /// acknowledged when held, and their clock's combined update is replicated when the
    /// clock completes. Links to servers that left the plan are closed.
    void replicate(replication_plan plan) {
        std::vector<std::shared_ptr<detail::request_link>> gone;
        outbox out;
        {
            locked lock(*state_);
            if (plan.version <= state_->plan.version && state_->plan.version != 0) {
                return;
            }
            auto old = std::move(state_->plan);
            state_->plan = std::move(plan);
            gone = state_->replication.follow(state_->plan, state_->opts.node_id, transport_);
            state_->holds_keys =
                !state_->plan.partition_of ||
                std::find(state_->plan.primaries.begin(), state_->plan.primaries.end(),
                          state_->opts.node_id) != state_->plan.primaries.end();
            state_->all_mine =
                std::all_of(state_->plan.primaries.begin(), state_->plan.primaries.end(),
                            [id = state_->opts.node_id](std::uint32_t p) { return p == id; });
            {
                const auto& now = state_->plan.primaries;
                const auto id = state_->opts.node_id;
                bool same = old.primaries.size() == now.size();
                for (std::size_t p = 0; same && p < now.size(); ++p) {
                    same = (old.primaries[p] == id) == (now[p] == id);
                }
                if (!same) {
                    state_->placed_at = state_->plan.version;
                    for (auto& [id, slot] : state_->tables) {
                        slot.durable_cap = state_->durable(slot);
                    }
                }
                bool gained = false;
                for (std::size_t p = 0; !gained && p < now.size() && p < old.primaries.size();
                     ++p) {
                    gained = now[p] == id && old.primaries[p] != id;
                }
                if (gained) {
                    state_->await_resync(old.version + 1);
                }
            }
            state_->follow_chains(old);
            state_->join_moves(old);
            state_->rereplicate(old);
            state_->refuse_moved_reads(old, out);
            state_->resume(out);
        }
        state_->send(out);
        for (auto& l : gone) {
            l->close(make_error_code(errc::node_failed));
        }
    }

    /// Whether every copy of this server's rows down its chain (made when its chain
    /// changed) has been acknowledged to its end: its replicas hold its keys whole, so it
    /// may hand them over and leave (`member::async_retire`).
    [[nodiscard]] bool chain_whole() const {
        locked lock(*state_);
        return state_->copying == 0 && !state_->copy_failed;
    }

    /// For a server joining a running job: the version of the plan under which every
    /// primary whose partitions move to it has copied them to it in full (it may then
    /// take them over: `member::async_ready`); 0 while a copy is still on its way, or
    /// when no partition moves to it.
    [[nodiscard]] std::uint64_t join_ready() const {
        locked lock(*state_);
        return state_->moves.join_ready(state_->plan.version);
    }

    /// For a server handing its partitions over before it leaves (a ring without
    /// replicas, `member::async_retire` answered `errc::in_progress`): the version of the
    /// plan under which it copied every partition that moves away from it to its new
    /// owner and the owner acknowledged the copy whole (report it: `member::async_ready`);
    /// 0 while a copy is on its way, or when no partition moves away from it.
    [[nodiscard]] std::uint64_t hand_over_ready() const {
        locked lock(*state_);
        // (An update that did not arrive is copied again before the hand-over.)
        return state_->moves.hand_over_ready(state_->plan.version);
    }

    /// Whether this server sent the end of its ownership (the hand-over) to a server
    /// that took partitions over from it, and that server has not acknowledged it yet.
    [[nodiscard]] bool handing_over() const {
        locked lock(*state_);
        return state_->moves.handing_over();
    }

    /// Whether this server waits for the hand-over of partitions it took over from a
    /// primary that taught it them (it holds workers' requests until then).
    [[nodiscard]] bool awaiting_hand_over() const {
        locked lock(*state_);
        return state_->moves.awaiting_hand_over();
    }

    /// The version of the replication plan this server follows (the job's view it last
    /// took; 0 before the first).
    [[nodiscard]] std::uint64_t plan_version() const {
        locked lock(*state_);
        return state_->plan.version;
    }

    /// Empty when this server may hand its keys over and leave (`member::async_retire`):
    /// its last copy down its chain was acknowledged (`chain_whole`) and every table it
    /// holds rows of as a primary keeps a copy on another server, or the ring has no
    /// replicas (its partitions are then copied to their new owners: `retire_server`).
    /// Otherwise why not.
    [[nodiscard]] std::string hand_over_blocker() const {
        locked lock(*state_);
        const auto& st = *state_;
        if (st.copying != 0) {
            return "its copy down its chain is not acknowledged yet";
        }
        if (st.copy_failed) {
            return "its last copy down its chain failed";
        }
        const auto chain = st.plan.chains.find(st.opts.node_id);
        const std::size_t replicas = chain == st.plan.chains.end() ? 0 : chain->second.size() - 1;
        for (const auto& [id, slot] : st.tables) {
            // Without replicas the partitions are copied to their new owners (every
            // table); with them, a table kept on the primary only would be lost.
            if (st.holds_keys && slot.table && slot.table->size() > 0 && replicas > 0 &&
                slot.replicas == 0) {
                return "table " + std::to_string(id) +
                       " keeps no copy of its rows on another server";
            }
        }
        return {};
    }

    /// Empty, or the failed servers whose keys this server took over without a full copy
    /// of them (more servers failed at once than the tables have replicas): it then
    /// refuses workers' requests with `errc::data_lost` rather than serve a wrong model.
    [[nodiscard]] std::string data_lost() const {
        locked lock(*state_);
        return state_->lost;
    }

    /// The newest clock whose combined update this server applied as a replica of some
    /// primary, plus one (0 when none): how far the replicated clocks of a table got.
    [[nodiscard]] std::uint64_t replicated_clock(std::uint32_t table_id) const {
        locked lock(*state_);
        auto it = state_->tables.find(table_id);
        if (it == state_->tables.end()) {
            return 0;
        }
        std::uint64_t c = 0;
        for (const auto& [origin, clock] : it->second.replicated) {
            c = std::max(c, clock);
        }
        return c;
    }

    /// Every row of a table this server stores (as a primary or a replica), keys
    /// ascending: the rows a checkpoint of the server would write. Empty (rows 0) for a
    /// table it does not hold. @throws std::bad_alloc
    [[nodiscard]] shard_table rows(std::uint32_t table_id) const {
        locked lock(*state_);
        auto it = state_->tables.find(table_id);
        if (it == state_->tables.end() || !it->second.table) {
            shard_table t;
            t.table_id = table_id;
            return t;
        }
        return it->second.table->dump(table_id);
    }

    /// Worker `worker` takes no further part in any table's clock (it left the job or
    /// failed): nobody waits for it any more. Unknown workers are ignored.
    void depart_worker(std::uint32_t worker) {
        outbox out;
        {
            locked lock(*state_);
            state_->depart(worker, nullptr, out);
        }
        state_->send(out);
    }

    /// Worker `worker` joined the running job (a worker index beyond `opts.workers`):
    /// from now on its requests are served, and every table's clock waits for it from
    /// the clock the live workers have completed (`clock_gate::add_worker`), so that it
    /// starts at the current clock. Indices between the known ones and `worker` join as
    /// departed (they left before this server learned of them); a worker already known,
    /// or an index of 2^20 or more, changes nothing.
    void admit_worker(std::uint32_t worker) {
        locked lock(*state_);
        state_->admit(worker);
    }

    /// The workers whose requests this server serves: indices 0 .. workers() - 1.
    [[nodiscard]] std::uint32_t workers() const {
        locked lock(*state_);
        return state_->opts.workers;
    }

    /// Keys stored in a table (0 for a table that does not exist).
    [[nodiscard]] std::size_t key_count(std::uint32_t table_id) const {
        locked lock(*state_);
        auto it = state_->tables.find(table_id);
        return it == state_->tables.end() || !it->second.table ? 0 : it->second.table->size();
    }

    /// The clocks of a table over the whole key space (empty for a table never named).
    [[nodiscard]] std::vector<clock_entry> clocks(std::uint32_t table_id) const {
        locked lock(*state_);
        auto it = state_->tables.find(table_id);
        if (it == state_->tables.end()) {
            return {};
        }
        return it->second.gate.entries(clock_gate<int>::all(), wire::max_clock_entries);
    }

    /// The reads (pulls and calls) of a table parked until slower workers' clocks allow
    /// them; at most `server_options::max_parked`.
    [[nodiscard]] std::size_t parked(std::uint32_t table_id) const {
        locked lock(*state_);
        auto it = state_->tables.find(table_id);
        return it == state_->tables.end()
                   ? 0
                   : it->second.gate.parked() + it->second.resync_held.size();
    }

    /// Sets the id written as the sender of replies and naming this server's checkpoint
    /// shards (a job's server learns its id when it joins).
    void set_node_id(std::uint32_t id) {
        locked lock(*state_);
        state_->opts.node_id = id;
        state_->replication.rename(id);
    }

    /// Loads every table of the checkpoint in `dir` (written by `kv_store::save`), keeping
    /// the rows whose key `owns(table_id, key)` accepts (every row when `owns` is empty), so
    /// that a job may restore onto another number of servers. Each loaded table replaces
    /// the table of its id. Declared tables must match the checkpoint's types, width,
    /// update rule and dense range; tables not declared must have been saved summing.
    /// Call it before workers start pushing.
    ///
    /// All or nothing: every manifest and shard is checked (sizes, checksums, contents)
    /// and every table built before any replaces the server's.
    /// @param max_shard_bytes the most bytes one shard file may take.
    /// @throws checkpoint_error naming the file and the problem; std::bad_alloc
    void restore(const std::filesystem::path& dir,
                 const std::function<bool(std::uint32_t, std::uint64_t)>& owns = {},
                 std::uint64_t max_shard_bytes = std::uint64_t{1} << 40) {
        auto loaded =
            detail::load_checkpoint(dir, state_->opts.tables.get(), owns, max_shard_bytes);
        locked lock(*state_);
        std::vector<table_slot*> slots; // every slot first, so that none is replaced on error
        for (auto& [id, t] : loaded) {
            std::error_code ec;
            slots.push_back(state_->slot(id, ec));
            if (!slots.back()) {
                throw checkpoint_error(dir, "table " + std::to_string(id) + ": " + ec.message());
            }
        }
        auto next = slots.begin();
        for (auto& [id, t] : loaded) {
            table_slot* s = *next++;
            s->table = std::move(t.table);
            // The job goes on from the checkpoint's clock: every worker has completed it,
            // so that clocks (and the next checkpoint's) count from the job's first
            // iteration, whatever restores came before. Workers adopt it from the replies.
            for (std::uint32_t w = 0; w < s->gate.workers(); ++w) {
                s->gate.tick(w, clock_gate<waiting>::all(), t.clock);
            }
            s->applied_limit = std::max(t.clock, t.clock_limit);
        }
    }

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    /// A request waiting in a table's gate, with the connection to answer on.
    struct waiting {
        connection_ptr conn;
        wire::message request;
    };

    /// One table: its storage (created when first named if declared, else by the first
    /// push) and its clocks.
    struct table_slot {
        explicit table_slot(std::size_t workers) : gate(workers) {}
        std::unique_ptr<detail::table_base> table;
        clock_gate<waiting> gate;
        std::uint64_t held_bytes = 0;
        bool mean = false;          // aggregation::mean for the pushes of a clock
        std::uint32_t replicas = 7; // the table's replicas at most (table_spec::replicas)
        // No push of a clock >= this has been applied to the table (a checkpoint's
        // `clock_limit`); from a restored checkpoint, its limit.
        std::uint64_t applied_limit = 0;
        // As a replica: per primary, the newest clock whose combined update arrived, + 1.
        std::map<std::uint32_t, std::uint64_t> replicated;
        // As a primary: the clocks whose rows went down the chain (or to a learner), not
        // yet acknowledged; a clock appears once per server it went to.
        std::deque<std::uint64_t> unacked;
        // The durable clock when this server's keys last changed (`placed_at`): replies to
        // requests sent under an older view say at most this, so that a worker that has
        // not seen the change keeps the pushes of keys that moved away (it resends them).
        std::uint64_t durable_cap = ~std::uint64_t{0};
        // After this server took keys over (view `resync_view`): the workers whose tick
        // sent under that view or later has not come yet. Each sends it after the pushes
        // it resends here, so until all have, a clock read here could miss some of them:
        // ordered reads wait in `resync_held`.
        std::uint64_t resync_view = 0;
        std::chrono::steady_clock::time_point resync_since{};
        std::set<std::uint32_t> resync_pending;
        std::vector<waiting> resync_held;
    };

    /// A reply to send once the lock is released; an answer to a checkpoint call first
    /// has its shard written (`save`).
    struct outgoing {
        outgoing(connection_ptr c, wire::message m) : conn(std::move(c)), message(std::move(m)) {}
        connection_ptr conn;
        wire::message message;
        std::unique_ptr<checkpoint_writer::shard_job> save; // (a pointer: replies stay small)
    };
    using outbox = std::vector<outgoing>;

    /// A worker's unordered push to apply, or a pull to read, once the server's lock is
    /// released (with the storage shared): decided, and its reply made, under the lock.
    struct shared_work {
        detail::table_base* table = nullptr;
        wire::message request;
        std::byte* target = nullptr; // a pull's values, in its reply
        std::size_t reply = 0;       // the reply's place in the outbox
        std::uint32_t primary = 0;   // a push: the primary whose update id it remembered
    };

    struct state {
        server_options opts;
        std::weak_ptr<state> self; // for callbacks that may outlive the server
        replication_plan plan;
        detail::replicator replication; // the links to the plan's other servers
        std::shared_ptr<buffer_pool> pool;
        asio::any_io_executor executor; // for completions that must not run under the lock
        wire::wire_limits limits;
        logger log;
        // Lock order: `mutex`, then `storage`. `mutex` guards this state, but for the rows
        // of the tables, which `storage` guards: held exclusively by whoever holds `mutex`
        // and touches a table (`locked`), and shared by the pushes and pulls that `handle`
        // decides under `mutex` and applies or reads after releasing it (`shared_work`;
        // the tables then lock rows by stripe). Nothing takes `mutex` while it holds
        // `storage` alone.
        mutable std::mutex mutex;
        mutable std::shared_mutex storage;
        std::map<std::uint32_t, table_slot> tables;
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

        /// The primary whose rows push `h` changes: this server for a worker's push or an
        /// update it learns as a joining server, else the replica update's primary.
        std::uint32_t primary_of_update(const wire::message_header& h) const {
            return detail::from_server(h) && !learns_from(h.receiver) ? h.receiver : opts.node_id;
        }
        std::vector<bool> departed_all; // workers gone from every table, also future ones

        /// A reply's status: Petrel's own error codes travel as they are, any other as
        /// errc::remote_error.
        static std::uint32_t status_of(std::error_code ec) noexcept {
            if (!ec) {
                return 0;
            }
            return static_cast<std::uint32_t>(ec.category() == error_category()
                                                  ? ec.value()
                                                  : static_cast<int>(errc::remote_error));
        }

        /// Sends the replies (outside the lock), compressing the values of pull replies
        /// to workers that asked for it, where it pays.
        void send(outbox& out) const {
            for (auto& [c, m, save] : out) {
                if (save) {
                    // Written and answered on the writer's thread.
                    opts.checkpoints->enqueue(
                        std::move(*save), log,
                        [c = c, reply = std::move(m)](checkpoint_writer::outcome done) mutable {
                            finish_save(reply, std::move(done));
                            c->send(std::move(reply));
                        });
                    continue;
                }
                if ((m.header.flags & wire::flag_compress_reply) != 0) {
                    m.header.flags &= static_cast<std::uint8_t>(~wire::flag_compress_reply);
                    if (m.header.status == 0) {
                        wire::compress_segment(m, wire::values_segment, opts.compression, *pool);
                    }
                }
                c->send(std::move(m));
            }
        }

        static clock_gate<waiting>::range_type range_of(const wire::message_header& h) {
            return {h.range_begin, h.range_end};
        }

        static std::uint64_t bytes_of(const wire::message& m) {
            return m.keys().size() + m.values().size();
        }

        void handle(const connection_ptr& c, wire::message&& m) {
            outbox out;
            bool refused = false;
            std::optional<shared_work> work;
            std::shared_lock<std::shared_mutex> shared_rows; // while `work` runs
            {
                std::lock_guard server(mutex);
                if (shares(c, m.header)) {
                    shared_rows = std::shared_lock(storage);
                    if (m.header.kind == wire::message_kind::push) {
                        on_push(c, std::move(m), out, &work);
                    } else {
                        on_read(c, std::move(m), out, &work);
                    }
                } else {
                    std::lock_guard rows(storage);
                    refused = decide(c, std::move(m), out);
                }
            }
            const bool failed = work && !run(*work, out);
            if (shared_rows.owns_lock()) {
                shared_rows.unlock();
            }
            if (failed) {
                std::lock_guard server(mutex);
                applied.forget(work->request.header.update_id, work->primary);
            }
            send(out);
            if (refused) {
                if (log) {
                    log(log_level::warning,
                        "closing connection with " + c->remote_address() +
                            ": a server takes only pushes, pulls, clocks and calls");
                }
                c->close();
            }
        }

        /// Whether request `h` from `c` is decided with the storage shared and then applied
        /// or read with no lock of the server held: a worker's unordered push, or pull, of
        /// a table that exists, that waits for nothing, and (a push) that goes to no other
        /// server (no chain to forward it down, no joining server to teach it to), so
        /// that the order in which pushes reach the rows matters to no copy.
        bool shares(const connection_ptr& c, const wire::message_header& h) const {
            const bool push = h.kind == wire::message_kind::push;
            if ((push ? detail::push_kind_of(h) != detail::push_kind::worker
                      : h.kind != wire::message_kind::pull || detail::from_server(h)) ||
                waits(h) || holds_back(c)) {
                return false;
            }
            const auto it = tables.find(h.table_id);
            if (it == tables.end() || !it->second.table) {
                return false;
            }
            std::error_code ec;
            return !push || (moves.learners().empty() &&
                             next_hop(opts.node_id, it->second.replicas, ec) == nullptr && !ec);
        }

        /// Applies or reads `w` (the storage shared, no other lock held), and completes its
        /// reply in `out`; false when it could not (no memory: nothing applied, the reply
        /// says so).
        static bool run(shared_work& w, outbox& out) noexcept {
            std::error_code ec;
            if (w.target) {
                try {
                    w.table->read_shared(w.request, w.target);
                } catch (const std::bad_alloc&) {
                    ec = errc::out_of_memory;
                }
            } else {
                ec = w.table->apply_shared(w.request);
            }
            if (!ec) {
                return true;
            }
            auto& reply = out[w.reply].message;
            reply.header.status = status_of(ec);
            reply.header.clocks.clear();
            reply.header.key_count = 0;
            reply.set_segment(wire::values_segment, {});
            return w.target != nullptr; // a pull remembered nothing
        }

        /// Decides request `m` under the lock, the storage held exclusively; true when `c`
        /// sent what a server does not take.
        bool decide(const connection_ptr& c, wire::message&& m, outbox& out) {
            switch (m.header.kind) {
            case wire::message_kind::push:
                if (detail::from_server(m.header) && plan.version != 0 &&
                    m.header.key_list_id != plan.secret) {
                    out.emplace_back(
                        c, refusal(m.header, wire::message_kind::push_reply, errc::not_permitted));
                } else if (waits(m.header) || holds_back(c)) {
                    hold_back(c, std::move(m), out);
                } else {
                    on_push(c, std::move(m), out);
                }
                return false;
            case wire::message_kind::pull:
            case wire::message_kind::call:
                if (waits(m.header) || holds_back(c)) {
                    hold_back(c, std::move(m), out);
                } else {
                    on_read(c, std::move(m), out);
                }
                return false;
            case wire::message_kind::clock:
                if ((m.header.flags & wire::flag_resent) != 0 &&
                    (waits(m.header) || holds_back(c))) {
                    hold_back(c, std::move(m), out); // after the pushes it follows
                } else {
                    on_clock(c, m, out);
                }
                return false;
            case wire::message_kind::push_reply:
            case wire::message_kind::pull_reply:
            case wire::message_kind::control:
            case wire::message_kind::control_reply:
            case wire::message_kind::clock_reply:
            case wire::message_kind::call_reply:
                break;
            }
            return true;
        }

        /// Whether request `h` was sent under a newer view than this server's plan: it
        /// waits for that view (a replica update always; a worker's push or pull once this
        /// server follows a plan at all), so that it is judged by the placement its sender
        /// used rather than refused while the view travels.
        bool ahead(const wire::message_header& h) const {
            if (detail::from_server(h)) {
                return h.view > plan.version; // from a server: it carries the secret
            }
            // A worker's view is at most a few changes ahead; one claiming more is judged
            // by this server's plan at once, so that it cannot park requests for good.
            return plan.version != 0 && h.view > plan.version &&
                   h.view - plan.version <= max_views_ahead;
        }
        static constexpr std::uint64_t max_views_ahead = 64;

        /// Whether request `h` waits: it was sent under a newer view (`ahead`), or it is a
        /// worker's and this server waits for the hand-over of keys it took over.
        bool waits(const wire::message_header& h) const {
            return ahead(h) || (!detail::from_server(h) && moves.awaiting_hand_over());
        }

        /// Whether requests from `c` wait for a newer view (the ones after them wait too,
        /// so that each connection's requests apply in order).
        bool holds_back(const connection_ptr& c) const {
            return std::any_of(held_back.begin(), held_back.end(),
                               [&](const waiting& w) { return w.conn == c; });
        }

        /// Keeps a push or pull until the plan of its view arrives (`resume`).
        void hold_back(const connection_ptr& c, wire::message&& m, outbox& out) {
            if (held_back.size() >= opts.max_parked ||
                held_back_bytes + bytes_of(m) > opts.max_held_bytes) {
                const auto k = m.header.kind;
                out.emplace_back(
                    c, refusal(m.header,
                               k == wire::message_kind::pull    ? wire::message_kind::pull_reply
                               : k == wire::message_kind::call  ? wire::message_kind::call_reply
                               : k == wire::message_kind::clock ? wire::message_kind::clock_reply
                                                                : wire::message_kind::push_reply,
                               errc::backlog_full));
                return;
            }
            held_back_bytes += bytes_of(m);
            held_back.push_back({c, std::move(m)});
        }

        /// Applies the held-back updates that the current plan covers, in arrival order.
        void resume(outbox& out) {
            if (resuming) {
                resume_again = true; // a request applied below unblocked others: once more
                return;
            }
            resuming = true;
            do {
                resume_again = false;
                auto list = std::move(held_back);
                held_back.clear();
                held_back_bytes = 0;
                std::vector<const connection*> blocked;
                for (auto& w : list) {
                    const bool after_blocked =
                        std::find(blocked.begin(), blocked.end(), w.conn.get()) != blocked.end();
                    if (after_blocked || waits(w.request.header)) {
                        blocked.push_back(w.conn.get());
                        held_back_bytes += bytes_of(w.request);
                        held_back.push_back(std::move(w));
                        continue;
                    }
                    if (w.request.header.kind == wire::message_kind::clock) {
                        on_clock(w.conn, w.request, out);
                    } else if (w.request.header.kind != wire::message_kind::push) {
                        on_read(w.conn, std::move(w.request), out);
                    } else {
                        on_push(w.conn, std::move(w.request), out);
                    }
                }
            } while (resume_again);
            resuming = false;
        }

        /// A connection closed: the reads it parked need no answer. Its held pushes were
        /// acknowledged and stay.
        void forget(const connection_ptr& c) {
            locked lock(*this);
            std::erase_if(held_back, [&](const waiting& w) {
                if (w.conn != c) {
                    return false;
                }
                held_back_bytes -= bytes_of(w.request);
                return true;
            });
            for (auto& [id, slot] : tables) {
                slot.gate.remove_if([&](const waiting& w) {
                    return w.conn == c && w.request.header.kind != wire::message_kind::push;
                });
                std::erase_if(slot.resync_held, [&](const waiting& w) { return w.conn == c; });
            }
        }

        /// The most clock entries a reply may carry: what fits the header limit peers
        /// enforce (each entry takes 28 bytes), at most `wire::max_clock_entries`.
        std::size_t max_entries() const noexcept {
            const std::uint64_t fit =
                limits.max_header_bytes > 512 ? (limits.max_header_bytes - 512) / 28 : 0;
            return static_cast<std::size_t>(std::min<std::uint64_t>(fit, wire::max_clock_entries));
        }

        wire::message reply_to(const wire::message_header& h, wire::message_kind kind) const {
            auto reply = wire::make_reply(h, kind);
            reply.header.sender = opts.node_id;
            reply.header.key_count = 0;
            reply.header.worker = h.worker;
            reply.header.clock = h.clock;
            return reply;
        }

        wire::message refusal(const wire::message_header& h, wire::message_kind kind,
                              std::error_code ec) const {
            auto reply = reply_to(h, kind);
            reply.header.status = status_of(ec);
            return reply;
        }

        std::error_code check_worker(const wire::message_header& h, bool required) const {
            if (h.worker == wire::no_worker) {
                return required ? errc::unknown_worker : std::error_code{};
            }
            return h.worker < opts.workers ? std::error_code{} : errc::unknown_worker;
        }

        /// The table's slot, created (with its clocks) on first mention.
        table_slot* slot(std::uint32_t id, std::error_code& ec) {
            if (auto it = tables.find(id); it != tables.end()) {
                return &it->second;
            }
            if (tables.size() >= opts.max_tables) {
                ec = errc::too_many_tables;
                return nullptr;
            }
            const table_registry::entry* declared = opts.tables ? opts.tables->find(id) : nullptr;
            std::unique_ptr<detail::table_base> storage;
            if (declared) {
                try {
                    storage = declared->make();
                } catch (const std::bad_alloc&) {
                    ec = errc::out_of_memory;
                    return nullptr;
                }
            }
            auto& s = tables.try_emplace(id, opts.workers).first->second;
            s.table = std::move(storage);
            s.mean = declared && declared->spec.aggregate == aggregation::mean;
            if (declared && declared->spec.replicas) {
                s.replicas = *declared->spec.replicas;
            }
            for (std::uint32_t w = 0; w < departed_all.size(); ++w) {
                if (departed_all[w]) {
                    s.gate.depart(w);
                }
            }
            return &s;
        }

        /// Whether server `id` is on some chain of the plan, or joins.
        bool in_plan(std::uint32_t id) const { return peer_of(plan, id) != nullptr; }

        /// Whether this server takes updates from primary `origin` as its learner: it
        /// learns partitions of it, or waits for its hand-over of them.
        bool learns_from(std::uint32_t origin) const { return moves.learns_from(origin); }

        /// Sends learner `to` the keys of update `m` (applied here) that move to it.
        void teach_update(std::uint32_t to, const wire::message& m, detail::push_kind kind,
                          std::function<void(std::error_code)> done) {
            const auto* peer = peer_of(plan, to);
            if (!peer) {
                if (done) {
                    asio::post(executor, [done = std::move(done)] {
                        done(make_error_code(errc::node_failed));
                    });
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

        /// After a new plan, for servers joining: as a primary, copies the partitions that
        /// move to each new learner to it (then ends the copy), and sends the hand-over to
        /// each learner that now is the primary of partitions it taught it; as a learner,
        /// notes which primaries teach it and, once it is their primary, whose hand-over
        /// it waits for. Ordered held pushes of keys that moved away are trimmed to the
        /// keys this server still holds.
        void join_moves(const replication_plan& old) {
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
                                             std::to_string(parts.size()) +
                                             " partitions over to server " + std::to_string(to));
                }
            }
            for (const auto& [to, parts] : next.copies) {
                copy_moving(to, parts, plan.version, copy_attempts);
            }
        }

        static constexpr int copy_attempts = 3;
        static constexpr int handover_attempts = 5;

        /// A completion for something sent to learner `to`: a failure marks it, so that
        /// its partitions are copied again before the hand-over.
        std::function<void(std::error_code)> taught(std::uint32_t to) {
            return [weak = self, to](std::error_code ec) {
                if (auto st = ec ? weak.lock() : nullptr) {
                    locked lock(*st);
                    st->moves.failed(to);
                }
            };
        }

        /// Copies the rows of partitions `parts` to learner `to`, then (for a plan's copy,
        /// `plan_version` not 0) the end of the copy, sent again up to `attempts` times
        /// while `to` still learns the same partitions.
        void copy_moving(std::uint32_t to, const std::vector<std::uint32_t>& parts,
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
                        id, s, *peer, [&](std::uint32_t p) { return moving.count(p) != 0; },
                        taught(to));
                } catch (const std::bad_alloc&) {
                    moves.failed(to);
                    if (log) {
                        log(log_level::error, "petrel server " + std::to_string(self_id) +
                                                  ": no memory to copy table " +
                                                  std::to_string(id) + " to joining server " +
                                                  std::to_string(to));
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
            replication.forward(
                *peer, self_id, std::move(end), detail::push_kind::copy_end,
                [weak = self, to, parts, plan_version, attempts](std::error_code ec) {
                    auto st = weak.lock();
                    if (!st) {
                        return;
                    }
                    locked lock(*st);
                    if (st->moves.copy_answered(to, parts, plan_version, !ec) && attempts > 0) {
                        st->copy_moving(to, parts, plan_version, attempts - 1);
                    }
                });
        }

        /// Tells learner `to` that this server sent its last update of the partitions it
        /// taught it (sent again up to `attempts` times while `to` is in the plan).
        void hand_over(std::uint32_t to, const std::vector<std::uint32_t>& parts, int attempts) {
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
                                    if (!ec) {
                                        return;
                                    }
                                    if (attempts > 0) {
                                        // Not handed over yet, so it still learns: what it was sent
                                        // and did not get (the same connection failed) goes again
                                        // first.
                                        if (st->moves.take_failed(to)) {
                                            st->copy_moving(to, parts, 0, 0);
                                        }
                                        st->hand_over(to, parts, attempts - 1);
                                    } else if (st->log) {
                                        st->log(
                                            log_level::error,
                                            "petrel server " + std::to_string(st->opts.node_id) +
                                                ": the hand-over to server " + std::to_string(to) +
                                                " failed (" + ec.message() + ")");
                                    }
                                });
        }

        /// Drops from the held pushes of `s` the keys this server is no longer the primary
        /// of (a push left without keys goes).
        void trim_held(table_slot& s) {
            std::vector<waiting> keep;
            auto moved = s.gate.remove_if([&](const waiting& w) {
                return !w.conn && w.request.header.kind == wire::message_kind::push &&
                       !primary_of(w.request, opts.node_id);
            });
            for (auto& w : moved) {
                s.held_bytes -= bytes_of(w.request);
                wire::message part;
                try {
                    part = detail::filtered(w.request, [&](std::uint64_t k) {
                        const auto p = plan.partition_of(k);
                        return primary_of_partition(plan, opts.node_id, p);
                    });
                } catch (const std::bad_alloc&) {
                    // Kept whole (its moved keys are applied here too, to rows nobody
                    // reads, and resent by its workers to the new owner).
                    s.held_bytes += bytes_of(w.request);
                    const auto h = w.request.header;
                    s.gate.hold(h.worker, h.clock, range_of(h), std::move(w));
                    continue;
                }
                if (part.header.key_count == 0) {
                    continue;
                }
                s.held_bytes += bytes_of(part);
                const auto h = part.header;
                s.gate.hold(h.worker, h.clock, range_of(h), waiting{nullptr, std::move(part)});
            }
        }

        /// The server after this one on the chain of primary `origin` (see
        /// `petrel::next_hop`).
        const replication_plan::peer* next_hop(std::uint32_t origin, std::uint32_t replicas,
                                               std::error_code& ec) const {
            return petrel::next_hop(plan, opts.node_id, origin, replicas, ec);
        }

        /// A push: applied here, or (with `work`: `shares` said so) decided here and
        /// applied by the caller after the lock.
        void on_push(const connection_ptr& c, wire::message&& m, outbox& out,
                     std::optional<shared_work>* work = nullptr) {
            const auto h = m.header;
            const auto kind = detail::push_kind_of(h);
            const bool replica = detail::from_server(kind);
            const bool ordered = kind == detail::push_kind::worker_ordered;
            const bool transfer = detail::is_transfer(kind);
            if ((h.encoding & wire::encoding_keys_cached) != 0) {
                // The keys are a list this connection does not hold: the worker resends them.
                out.emplace_back(c,
                                 refusal(h, wire::message_kind::push_reply, errc::key_cache_miss));
                return;
            }
            if (replica && h.key_list_id != plan.secret) {
                // Only the job's servers know the secret: a replica update from anyone
                // else (a worker, a stray peer) writes nothing.
                out.emplace_back(c,
                                 refusal(h, wire::message_kind::push_reply, errc::not_permitted));
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
            table_slot* s = ec ? nullptr : slot(h.table_id, ec);
            if (!ec && ordered && s->held_bytes + bytes_of(m) > opts.max_held_bytes) {
                ec = errc::backlog_full;
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
                ec = transfer ? load_rows(*s, m) : accept(*s, m);
            }
            if (ec) {
                out.emplace_back(c, refusal(h, wire::message_kind::push_reply, ec));
                return;
            }
            applied.remember(h.update_id, primary_of_update(h));
            if (ordered) {
                s->held_bytes += bytes_of(m);
                // Acknowledged now: the held push needs no connection any more.
                s->gate.hold(h.worker, h.clock, range_of(h), waiting{nullptr, std::move(m)});
                if (s->gate.completed(range_of(h)) > h.clock) {
                    release(*s, out); // already complete: the others have moved on
                }
            } else if (!transfer) {
                if (!work) {
                    s->table->apply(m);
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
                            log(log_level::error,
                                "petrel server " + std::to_string(opts.node_id) +
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
                                                st->outdated =
                                                    std::max(st->outdated.value_or(0), version);
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

        /// Whether server `self` is the primary of every key of `m` in this server's plan
        /// (always without a plan). Checked when the sender's view is not the plan's: a
        /// server that handed keys over (or left) refuses requests for them with
        /// `errc::stale_view`, and the worker sends them where its newer view says; a
        /// replica refuses updates of keys whose primary moved.
        bool primary_of(const wire::message& m, std::uint32_t self) const {
            return (self == opts.node_id && all_mine) || detail::primary_of_keys(plan, m, self);
        }

        /// The table's durable clock: every push of the clocks below it is applied here and
        /// on the table's replicas. Written as the `clock` of push and clock replies, so
        /// that workers keep their ordered pushes until then (and resend them elsewhere if
        /// this server fails first).
        std::uint64_t durable(const table_slot& s) const {
            if (!holds_keys || moves.awaiting_hand_over()) {
                // Handed its keys over (nothing applied here lasts), or taking keys over
                // whose last updates are still on their way (what it holds back is not
                // applied yet).
                return 0;
            }
            const auto done = s.gate.completed(clock_gate<waiting>::all());
            // Clocks resent late (applied after later ones) make the queue unordered.
            return s.unacked.empty()
                       ? done
                       : std::min(done, *std::min_element(s.unacked.begin(), s.unacked.end()));
        }

        /// The durable clock to tell the sender of request `h`: capped for a request sent
        /// under a view before this server's keys last changed (see `durable_cap`).
        std::uint64_t durable_for(const table_slot& s, const wire::message_header& h) const {
            const auto d = durable(s);
            return h.view < placed_at ? std::min(d, s.durable_cap) : d;
        }

        /// The end of a primary's copy down its chain: this server holds its keys whole.
        /// From a primary this server learns from: the end of its copy of the moving
        /// partitions, or (`push_kind::hand_over`) its hand-over of them.
        void end_of_copy(const connection_ptr& c, wire::message&& m, outbox& out) {
            const auto h = m.header;
            const auto kind = detail::push_kind_of(h); // copy_end or hand_over
            if (learns_from(h.receiver)) {
                if (kind == detail::push_kind::hand_over) {
                    const bool all = moves.handed_over(h.receiver);
                    if (log) {
                        log(log_level::info, "petrel server " + std::to_string(opts.node_id) +
                                                 ": server " + std::to_string(h.receiver) +
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
                    [c, reply =
                            std::make_shared<wire::message>(std::move(reply))](std::error_code ec) {
                        if (ec == errc::shut_down) {
                            c->close(); // closing: the copy is not known to be whole
                            return;
                        }
                        reply->header.status =
                            status_of(ec == errc::stale_view ? ec : std::error_code{});
                        c->send(std::move(*reply));
                    });
                return;
            }
            out.emplace_back(c, std::move(reply));
        }

        /// Whether push `h` was applied here before: its update id was seen for the same
        /// primary (for a resent push also as an update of its old server `h.receiver`),
        /// or it is an ordered push resent from server `h.receiver` whose clock this server
        /// already received combined from that server as its replica.
        bool duplicate(const table_slot& s, const wire::message_header& h) const {
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

        /// Stores the rows of a transfer (`detail::is_transfer`) in the table, replacing
        /// what was there: all or nothing.
        std::error_code load_rows(table_slot& s, const wire::message& m) {
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
                return h.key_type != t.key_type() ? errc::key_type_mismatch
                                                  : errc::value_type_mismatch;
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

        /// After a new plan that took partitions from this server: the reads parked here
        /// for keys it no longer holds would wait for clocks its workers no longer send it;
        /// they get `errc::stale_view`, and the workers send them to the new owners.
        void refuse_moved_reads(const replication_plan& old, outbox& out) {
            const auto self = opts.node_id;
            if (old.version == 0 || !gives_up(old, plan, self)) {
                return;
            }
            for (auto& [id, s] : tables) {
                auto dropped = s.gate.remove_if([&](const waiting& w) {
                    const auto kind = w.request.header.kind;
                    if (!w.conn || kind == wire::message_kind::push) {
                        return false;
                    }
                    return kind == wire::message_kind::call ? true : !primary_of(w.request, self);
                });
                for (auto& w : dropped) {
                    const auto kind = w.request.header.kind == wire::message_kind::pull
                                          ? wire::message_kind::pull_reply
                                          : wire::message_kind::call_reply;
                    out.emplace_back(w.conn, refusal(w.request.header, kind, errc::stale_view));
                }
            }
        }

        /// After a new plan: marks the primaries whose copy this server now waits for (it
        /// joined their chain, or their keys grew), and notes data lost when this server
        /// took over partitions of a primary of which it held no full copy.
        void follow_chains(const replication_plan& old) {
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
                    lost +=
                        (lost.empty() ? "" : ", ") + std::string("server ") + std::to_string(from);
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

        /// After a new plan: when this server's chain has new members or this server
        /// became the primary of more partitions, every row it is the primary of is copied
        /// down its chain (in pieces of at most `detail::copy_message_bytes`), ahead of any later
        /// update on the same links, so that each replica again holds what the primary
        /// holds.
        void rereplicate(const replication_plan& old, bool force = false) {
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
                        log(log_level::error,
                            "petrel server " + std::to_string(self) + ": no memory to copy table " +
                                std::to_string(id) + " to server " + std::to_string(chain[1].id));
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
                replication.forward(
                    chain[1], self, std::move(end), detail::push_kind::copy_end,
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
                                auto& q = it->second.unacked;
                                for (const auto c : clocks) {
                                    if (auto at = std::find(q.begin(), q.end(), c); at != q.end()) {
                                        q.erase(at);
                                    }
                                }
                            }
                        }
                    });
            }
        }

        /// Copies every row this server is the primary of down its chain again (after the
        /// hand-overs of keys it took over from primaries that taught it them).
        void copy_down_chain() { rereplicate(plan, true); }

        /// Sends the rows of table `id` whose primary is this server to `next`, in pieces.
        void transfer(std::uint32_t id, table_slot& s, const replication_plan::peer& next) {
            transfer(id, s, next,
                     [&](std::uint32_t p) { return primary_of_partition(plan, opts.node_id, p); });
        }

        /// Sends the rows of table `id` in the partitions `send(partition)` accepts.
        template <typename Send>
        void transfer(std::uint32_t id, table_slot& s, const replication_plan::peer& next,
                      Send send, const std::function<void(std::error_code)>& done = {}) {
            const auto self = opts.node_id;
            const shard_table all = s.table->dump(id);
            const std::uint64_t applied = s.gate.completed(clock_gate<waiting>::all());
            const auto sent = detail::copy_rows(
                all, applied, [&](std::uint64_t key) { return send(plan.partition_of(key)); },
                [&](wire::message m) {
                    replication.forward(next, self, std::move(m), detail::push_kind::copy_rows,
                                        done);
                });
            if (log && sent > 0) {
                log(log_level::info, "petrel server " + std::to_string(self) + ": copying " +
                                         std::to_string(sent) + " rows of table " +
                                         std::to_string(id) + " to server " +
                                         std::to_string(next.id));
            }
        }

        /// As a primary with replicas: applies the pushes of one complete clock, then
        /// sends the rows they changed (values and optimizer state) down the chain, so
        /// that the replicas receive one update per clock, not every worker's push, and
        /// hold bitwise what the primary holds. False when the table is not replicated
        /// here.
        bool replicate_clock(table_slot& s, std::span<const wire::message* const> pushes) {
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
                                                  ": no memory to send clock " +
                                                  std::to_string(clock) + " to joining server " +
                                                  std::to_string(to));
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

        /// One server acknowledged the rows of `clock` of table `table`.
        static void acknowledge(const std::weak_ptr<state>& weak, std::uint32_t table,
                                std::uint64_t clock) {
            if (auto st = weak.lock()) {
                locked lock(*st);
                if (auto it = st->tables.find(table); it != st->tables.end()) {
                    auto& q = it->second.unacked;
                    if (auto at = std::find(q.begin(), q.end(), clock); at != q.end()) {
                        q.erase(at);
                    }
                }
            }
        }

        /// Creates the table if needed, checks the push against it and creates its new
        /// rows, so that applying it later cannot fail. All or nothing.
        std::error_code accept(table_slot& s, const wire::message& m) {
            const bool created = !s.table;
            if (created) {
                s.table = detail::make_table(m.header);
            } else if (auto ec = s.table->check(m.header)) {
                return ec;
            }
            if (auto ec = s.table->check_keys(m)) {
                return ec;
            }
            try {
                s.table->reserve(m);
            } catch (const std::bad_alloc&) {
                if (created) {
                    s.table.reset();
                }
                return errc::out_of_memory;
            }
            return {};
        }

        /// A pull or call: answered (or parked until its clocks complete); with `work`
        /// (`shares` said so) a pull's rows are read by the caller after the lock.
        void on_read(const connection_ptr& c, wire::message&& m, outbox& out,
                     std::optional<shared_work>* work = nullptr) {
            const auto& h = m.header;
            const auto reply_kind = h.kind == wire::message_kind::pull
                                        ? wire::message_kind::pull_reply
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
            table_slot* s = ec ? nullptr : slot(h.table_id, ec);
            const bool resyncing = s && h.kind == wire::message_kind::pull && h.clock != 0 &&
                                   !s->resync_pending.empty();
            if (!ec && (resyncing || !s->gate.readable(range_of(h), h.clock)) &&
                s->gate.parked() + (s ? s->resync_held.size() : 0) >= opts.max_parked) {
                ec = errc::backlog_full;
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
                std::byte* target = nullptr;
                out.push_back(answer(*s, c, m, work ? &target : nullptr));
                if (target) {
                    *work = shared_work{.table = s->table.get(),
                                        .request = std::move(m),
                                        .target = target,
                                        .reply = out.size() - 1};
                }
            } else {
                const auto r = range_of(h);
                const auto required = h.clock;
                s->gate.park(r, required, waiting{c, std::move(m)});
            }
        }

        void on_clock(const connection_ptr& c, const wire::message& m, outbox& out) {
            const auto& h = m.header;
            std::error_code ec = check_worker(h, true);
            const bool finish = (h.flags & wire::flag_finish) != 0;
            if (!ec && finish && (h.flags & wire::flag_all_tables) != 0) {
                depart(h.worker, nullptr, out);
            } else if (!ec) {
                if (table_slot* s = slot(h.table_id, ec)) {
                    const bool splits = range_of(h) != clock_gate<waiting>::all();
                    if (finish) {
                        depart(h.worker, s, out);
                    } else if (splits && s->gate.clock().range_count() >= max_clock_ranges) {
                        ec = errc::backlog_full; // ticks of narrow ranges cannot split forever
                    } else {
                        if ((h.flags & wire::flag_resent) != 0 && h.view >= s->resync_view) {
                            s->resync_pending.erase(h.worker); // it resent what it had
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

        static constexpr std::uint32_t max_admitted = std::uint32_t{1} << 20;

        void admit(std::uint32_t worker) {
            if (worker < opts.workers || worker >= max_admitted) {
                return;
            }
            while (opts.workers <= worker) {
                const bool gone = opts.workers != worker;
                for (auto& [id, s] : tables) {
                    s.gate.add_worker(gone);
                }
                departed_all.push_back(gone);
                ++opts.workers;
            }
            if (log) {
                log(log_level::info, "petrel server " + std::to_string(opts.node_id) + ": worker " +
                                         std::to_string(worker) + " joined the tables' clocks");
            }
        }

        /// `worker` leaves the clock of table `only` (of every table, now and later, when
        /// null).
        void depart(std::uint32_t worker, table_slot* only, outbox& out) {
            if (worker >= opts.workers) {
                return;
            }
            if (only) {
                only->gate.depart(worker);
                only->resync_pending.erase(worker);
                release(*only, out);
                return;
            }
            departed_all[worker] = true;
            for (auto& [id, s] : tables) {
                s.gate.depart(worker);
                s.resync_pending.erase(worker);
                release(s, out);
            }
        }

        /// Workers whose resync ticks did not come within a replication timeout are waited
        /// for no longer: the reads held for them are answered.
        void resync_overdue() {
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
                    if (const auto waited = now - s.resync_since;
                        waited < opts.replication_timeout) {
                        // A later takeover: its own time to wait.
                        next = std::min(next, opts.replication_timeout - waited);
                        resync_timer = resync_timer || !s.resync_held.empty();
                        continue;
                    }
                    if (log) {
                        log(log_level::warning,
                            "petrel server " + std::to_string(opts.node_id) + ": table " +
                                std::to_string(id) + ": " +
                                std::to_string(s.resync_pending.size()) +
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

        /// Calls resync_overdue() after `after`.
        void arm_resync_timer(std::chrono::steady_clock::duration after) {
            auto t = std::make_shared<asio::steady_timer>(executor, after);
            t->async_wait([t, weak = self](std::error_code) {
                if (auto st = weak.lock()) {
                    st->resync_overdue();
                }
            });
        }

        /// This server took keys over under a view from `since` on: every table's ordered
        /// reads wait for a resync tick sent under such a view from each live worker (see
        /// `table_slot`), at most a replication timeout.
        void await_resync(std::uint64_t since) {
            for (auto& [id, s] : tables) {
                s.resync_view = since;
                s.resync_since = std::chrono::steady_clock::now();
                s.resync_pending.clear();
                for (std::uint32_t w = 0; w < opts.workers; ++w) {
                    if (!s.gate.departed(w)) {
                        s.resync_pending.insert(w);
                    }
                }
            }
        }

        /// Applies the pushes whose clock is complete, then answers the reads that may
        /// now be answered.
        void release(table_slot& s, outbox& out) {
            auto r = s.gate.release();
            // The pushes come in (clock, worker, arrival) order; each clock's pushes are
            // aggregated per key before the update rule runs.
            std::vector<const wire::message*> clock_pushes;
            for (std::size_t i = 0; i < r.pushes.size(); ++i) {
                const auto& m = r.pushes[i].request;
                clock_pushes.push_back(&m);
                s.held_bytes -= bytes_of(m);
                if (i + 1 == r.pushes.size() ||
                    r.pushes[i + 1].request.header.clock != m.header.clock) {
                    if (!replicate_clock(s, clock_pushes)) {
                        s.table->apply_clock(clock_pushes, s.mean);
                    }
                    s.applied_limit = std::max(s.applied_limit, m.header.clock + 1);
                    clock_pushes.clear();
                }
            }
            for (auto& w : r.reads) {
                out.push_back(answer(s, w.conn, w.request));
            }
            if (s.resync_pending.empty() && !s.resync_held.empty()) {
                auto held = std::move(s.resync_held);
                s.resync_held.clear();
                for (auto& w : held) {
                    on_read(w.conn, std::move(w.request), out); // checked again
                }
            }
        }

        /// The reply to a pull or call whose clocks are satisfied, for connection `c`.
        /// With `target`, a pull's rows are not read: `*target` says where they go.
        outgoing answer(table_slot& s, const connection_ptr& c, const wire::message& m,
                        std::byte** target = nullptr) {
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

        std::error_code pull(table_slot& s, const wire::message& m, wire::message& reply,
                             std::byte** target = nullptr) {
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

        /// The built-in checkpoint call, under the lock: the snapshot of this server's
        /// rows of the table (a consistent cut: the call waited for its clock like a pull)
        /// and the shard file in the directory named by the arguments, for the writer
        /// (`finish_save`, once the lock is released).
        std::error_code save(table_slot& s, const wire::message_header& h,
                             std::span<const std::byte> args,
                             std::unique_ptr<checkpoint_writer::shard_job>& job,
                             std::string& message) {
            std::string dir;
            if (auto ec = detail::decode_binary(args, dir, message)) {
                return ec;
            }
            if (dir.empty()) {
                message = "the checkpoint directory is empty";
                return errc::invalid_argument;
            }
            if (s.table && s.table->check(h)) {
                return s.table->check(h);
            }
            job = std::make_unique<checkpoint_writer::shard_job>();
            auto& j = *job;
            j.file = detail::table_dir(dir, h.table_id) / detail::shard_file_name(opts.node_id);
            j.server = opts.node_id;
            auto& t = j.rows;
            if (s.table) {
                t = s.table->dump(h.table_id);
                detail::keep_rows_of(plan, opts.node_id,
                                     t); // replicas' copies are their primaries' to save
            } else {
                // Never pushed here: an empty shard of the request's types.
                t.table_id = h.table_id;
                t.key_type = h.key_type;
                t.value_type = h.value_type;
                t.width = h.width;
                t.updater = "sum";
            }
            j.record.clock_limit = s.applied_limit;
            j.record.state_width = t.state_width;
            j.record.updater = t.updater;
            if (s.table) {
                if (const auto d = s.table->dense_keys()) {
                    j.record.dense = true;
                    j.record.dense_begin = d->begin;
                    j.record.dense_end = d->end;
                }
            }
            return {};
        }

        /// Completes a checkpoint call's reply once its shard is written: the shard's
        /// record, or the failure and why.
        static void finish_save(wire::message& reply, checkpoint_writer::outcome done) {
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

        outgoing call(table_slot& s, const connection_ptr& c, const wire::message& m) {
            const auto& h = m.header;
            auto reply = reply_to(h, wire::message_kind::call_reply);
            std::vector<std::byte> result;
            std::string message;
            std::error_code ec = errc::unknown_function;
            detail::decoded_call decoded;
            std::string why;
            std::unique_ptr<checkpoint_writer::shard_job> job;
            if (!detail::decode_call(m.values().span(), decoded, why) &&
                decoded.name == detail::checkpoint_call) {
                try {
                    ec = save(s, h, decoded.args, job, message);
                } catch (const std::bad_alloc&) {
                    ec = errc::out_of_memory;
                }
            } else if (opts.functions) {
                // A function sees the rows this server holds as a primary: the results of
                // all servers then cover the table once, whatever its replicas.
                std::function<bool(std::uint64_t)> primary_rows;
                if (plan.partition_of && !plan.primaries.empty()) {
                    primary_rows = [this](std::uint64_t key) {
                        const auto p = plan.partition_of(key);
                        return primary_of_partition(plan, opts.node_id, p);
                    };
                }
                try {
                    ec = opts.functions->invoke(m.values().span(), s.table.get(), h.key_type,
                                                h.value_type, h.width, range_of(h), result, message,
                                                primary_rows);
                    if (!ec && primary_rows) {
                        // Then once over the rows held as a replica, its result dropped:
                        // a function that changes rows changes every copy alike.
                        std::vector<std::byte> dropped;
                        std::string why;
                        const std::function<bool(std::uint64_t)> replica_rows =
                            [&primary_rows](std::uint64_t key) { return !primary_rows(key); };
                        if (const auto failed = opts.functions->invoke(
                                m.values().span(), s.table.get(), h.key_type, h.value_type, h.width,
                                range_of(h), dropped, why, replica_rows);
                            failed && log) {
                            log(log_level::warning,
                                "petrel server " + std::to_string(opts.node_id) +
                                    ": a remote function failed on the rows held as a replica: " +
                                    (why.empty() ? failed.message() : why));
                        }
                    }
                } catch (const std::bad_alloc&) {
                    ec = errc::out_of_memory;
                }
            }
            if (!ec && result.size() > wire::max_control_bytes) {
                ec = errc::frame_too_large; // the worker would refuse the reply
            }
            if (message.size() > 4096) {
                message.resize(4096);
            }
            if (ec) {
                reply.header.status = status_of(ec);
                if (!message.empty()) {
                    reply.set_segment(wire::values_segment,
                                      shared_bytes::copy_of(std::as_bytes(std::span(message))));
                }
                return {c, std::move(reply)};
            }
            reply.header.clocks = s.gate.entries(range_of(h), max_entries());
            outgoing o{c, std::move(reply)};
            if (job) {
                o.save = std::move(job); // its result comes from the write
            } else {
                o.message.set_segment(wire::values_segment, shared_bytes::copy_of(result));
            }
            return o;
        }
    };

    /// The server's lock, then its storage exclusively: every table to itself.
    struct locked {
        explicit locked(const state& s) : server(s.mutex), rows(s.storage) {}
        std::lock_guard<std::mutex> server;
        std::lock_guard<std::shared_mutex> rows;
    };

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel
