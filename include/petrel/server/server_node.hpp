// Petrel: a server node.
#pragma once

#include <petrel/core/clock_entry.hpp>
#include <petrel/core/config.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/checkpoint_writer.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/compression.hpp>

#include <asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace petrel {

namespace detail {
struct waiting_request;
struct table_slot;
} // namespace detail

struct server_options {
    /// This node's id, written as the sender of its replies.
    std::uint32_t node_id = 0;
    /// The workers whose clocks the tables keep: worker indices 0 .. workers - 1 (a job's
    /// workers by rank). Requests naming another worker are refused.
    std::uint32_t workers = 1;
    /// Bytes of pushes a table may hold back for their clock (`sequential`) before it
    /// refuses more with `errc::backlog_full`.
    std::uint64_t max_held_bytes = std::uint64_t{1} << 30;
    /// Of those, the pushes of one worker: beyond it that worker's pushes are refused
    /// with `errc::backlog_full` while the others' are still held, so that one worker
    /// running ahead (or misbehaving) cannot fill the table's budget and stall the rest.
    /// 0: twice an even share, `2 * max_held_bytes / workers`.
    std::uint64_t max_held_bytes_per_worker = 0;
    /// Pulls and calls a table may keep waiting for slower workers before it refuses more
    /// with `errc::backlog_full`.
    std::size_t max_parked = std::size_t{1} << 16;
    /// Of those, the reads of one connection: beyond it, that connection's reads that
    /// would wait are refused with `errc::backlog_full`, so that one peer cannot fill the
    /// list and stall the others.
    std::size_t max_parked_per_connection = std::size_t{1} << 12;
    /// Tables (table ids) a server holds at most.
    std::size_t max_tables = 4096;
    /// Of those, the tables the requests of one connection create (by naming a table the
    /// server does not hold yet): beyond it they are refused with
    /// `errc::too_many_tables`, so that one peer cannot use up the table ids of the job.
    /// 0: as many as `max_tables`.
    std::size_t max_tables_per_connection = 1024;
    /// Rows (keys) the pushes of one connection create on this server, over all tables:
    /// once its pushes created this many, a push of it that would create more is refused
    /// whole with `errc::too_many_rows` (pushes to rows that exist go on), so that one peer
    /// pushing fresh keys cannot fill the server's memory or a table's 2^32 row numbers.
    /// A push under the limit may pass it by its own keys. A new connection counts afresh.
    /// The rows of other servers (replicas, transfers, hand-overs) are not counted.
    /// 0: no limit. Default: 2^28 (a sixteenth of a table's row numbers).
    std::uint64_t max_rows_per_connection = std::uint64_t{1} << 28;
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
    /// The directory under which saves write their shards (`--checkpoint-root`): a save
    /// names a relative directory without ".." and the shards go to `root/dir`; any
    /// other is refused with `errc::invalid_argument`. Empty: a save's directory is taken
    /// as given, for servers whose clients all run in this process.
    std::filesystem::path checkpoint_root{};
    /// The threads that may apply or read the parts of one large push or pull at once,
    /// the one serving it included: the threads that run the transport's executor. 0: the
    /// threads seen serving requests so far (at most 16), so a server on one thread never
    /// cuts a request into parts.
    std::size_t split_threads = 0;
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
/// are read on the executor's threads and decided one at a time under the server's lock;
/// their rows are applied, read and copied after it, each request holding its table's lock
/// (tables share 64 locks by id), so requests to different tables run at the same time. A
/// worker's unordered push (`eventual`, `bounded_delay`) that goes to no other server, a
/// pull whose clocks are complete and a checkpoint call that is ready when it arrives hold
/// their table's lock shared and run beside each other (each table locks its rows by
/// stripe, so update rules may run on several threads at once, for different keys; a large
/// push or pull is cut into parts that several threads apply or read at once). Ordered
/// pushes and their clocks, replicated pushes, replica updates and remote functions hold
/// their table's lock exclusively: replicated pushes and replica updates are applied, the
/// pushes a clock releases applied, the reads and checkpoint calls it releases read or
/// copied, and remote functions run, after the server's lock, in the order decided. What
/// may touch several tables (copies between servers, hand-overs, a worker leaving every
/// table, a new plan) holds the lock over all tables exclusively, and the server's. No push decided
/// after a checkpoint call is in its copy. Replies are compressed and sent after the locks are
/// released, and checkpoint shards are written by the `checkpoint_writer` on its own thread. Lock
/// order: the lock over all tables (which a request to one table holds shared), then a table's
/// lock, then the server's lock, then a table's rows, then one stripe; the writer's locks are taken
/// alone.
class server_node {
public:
    explicit server_node(any_transport transport, server_options opts = {});

    server_node(const server_node&) = delete;
    server_node& operator=(const server_node&) = delete;

    /// Stops serving and closes every connection.
    ~server_node();

    /// Accepts workers at `address` ("host:port" for TCP, a name for in-process);
    /// returns the address to give them. @throws std::system_error
    std::string listen(std::string_view address);

    /// Stops listening and closes all connections; idempotent.
    void close();

    /// Replicates along the chains of `plan` (if it is newer than the plan followed so
    /// far): every update this server applies as a primary (a worker's push under
    /// `eventual`, the combined pushes of a clock under `sequential` and
    /// `bounded_delay`) goes to the next server of its chain, which applies it and passes
    /// it on, up to the table's replicas (`table_spec::replicas`). A worker's unordered
    /// push is acknowledged once the chain has applied it; ordered pushes are
    /// acknowledged when held, and their clock's combined update is replicated when the
    /// clock completes. Links to servers that left the plan are closed.
    void replicate(replication_plan plan);

    /// Whether every copy of this server's rows down its chain (made when its chain
    /// changed) has been acknowledged to its end: its replicas hold its keys whole, so it
    /// may hand them over and leave (`member::async_retire`).
    [[nodiscard]] bool chain_whole() const;

    /// For a server joining a running job: the version of the plan under which every
    /// primary whose partitions move to it has copied them to it in full (it may then
    /// take them over: `member::async_ready`); 0 while a copy is still on its way, or
    /// when no partition moves to it.
    [[nodiscard]] std::uint64_t join_ready() const;

    /// For a server handing its partitions over before it leaves (a ring without
    /// replicas, `member::async_retire` answered `errc::in_progress`): the version of the
    /// plan under which it copied every partition that moves away from it to its new
    /// owner and the owner acknowledged the copy whole (report it: `member::async_ready`);
    /// 0 while a copy is on its way, or when no partition moves away from it.
    [[nodiscard]] std::uint64_t hand_over_ready() const;

    /// Whether this server sent the end of its ownership (the hand-over) to a server
    /// that took partitions over from it, and that server has not acknowledged it yet.
    [[nodiscard]] bool handing_over() const;

    /// Whether this server waits for the hand-over of partitions it took over from a
    /// primary that taught it them (it holds workers' requests until then).
    [[nodiscard]] bool awaiting_hand_over() const;

    /// The version of the replication plan this server follows (the job's view it last
    /// took; 0 before the first).
    [[nodiscard]] std::uint64_t plan_version() const;

    /// Calls `cb` on the server's executor, with no lock of the server held, whenever
    /// what a server's membership waits for changed: `plan_version`, `chain_whole`,
    /// `join_ready`, `hand_over_ready` or `handing_over` (`server_agent` follows them).
    /// Calls may come late and several at once: read the values anew in each. Returns a
    /// handle for `unwatch`.
    std::size_t watch(std::function<void()> cb);

    /// Ends a watch; a call already posted may still come.
    void unwatch(std::size_t handle);

    /// Empty when this server may hand its keys over and leave (`member::async_retire`):
    /// its last copy down its chain was acknowledged (`chain_whole`) and every table it
    /// holds rows of as a primary keeps a copy on another server, or the ring has no
    /// replicas (its partitions are then copied to their new owners:
    /// `server_agent::async_retire`).
    /// Otherwise why not.
    [[nodiscard]] std::string hand_over_blocker() const;

    /// Empty, or the failed servers whose keys this server took over without a full copy
    /// of them (more servers failed at once than the tables have replicas): it then
    /// refuses workers' requests with `errc::data_lost` rather than serve a wrong model.
    [[nodiscard]] std::string data_lost() const;

    /// The newest clock whose combined update this server applied as a replica of some
    /// primary, plus one (0 when none): how far the replicated clocks of a table got.
    [[nodiscard]] std::uint64_t replicated_clock(std::uint32_t table_id) const;

    /// Every row of a table this server stores (as a primary or a replica), keys
    /// ascending: the rows a checkpoint of the server would write. Empty (rows 0) for a
    /// table it does not hold. @throws std::bad_alloc
    [[nodiscard]] shard_table rows(std::uint32_t table_id) const;

    /// Worker `worker` takes no further part in any table's clock (it left the job or
    /// failed): nobody waits for it any more. Unknown workers are ignored.
    void depart_worker(std::uint32_t worker);

    /// Worker `worker` joined the running job (a worker index beyond `opts.workers`):
    /// from now on its requests are served, and every table's clock waits for it from
    /// the clock the live workers have completed (`clock_gate::add_worker`), so that it
    /// starts at the current clock. Indices between the known ones and `worker` join as
    /// departed (they left before this server learned of them); a worker already known,
    /// or an index of 2^20 or more, changes nothing.
    void admit_worker(std::uint32_t worker);

    /// The workers whose requests this server serves: indices 0 .. workers() - 1.
    [[nodiscard]] std::uint32_t workers() const;

    /// Keys stored in a table (0 for a table that does not exist).
    [[nodiscard]] std::size_t key_count(std::uint32_t table_id) const;

    /// The clocks of a table over the whole key space (empty for a table never named).
    [[nodiscard]] std::vector<clock_entry> clocks(std::uint32_t table_id) const;

    /// The reads (pulls and calls) of a table parked until slower workers' clocks allow
    /// them; at most `server_options::max_parked`.
    [[nodiscard]] std::size_t parked(std::uint32_t table_id) const;

    /// Sets the id written as the sender of replies and naming this server's checkpoint
    /// shards (a job's server learns its id when it joins).
    void set_node_id(std::uint32_t id);

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
                 std::uint64_t max_shard_bytes = std::uint64_t{1} << 40);

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    using waiting = detail::waiting_request;
    using table_slot = detail::table_slot;
    struct outgoing;
    using outbox = std::vector<outgoing>;
    struct shared_work;
    struct state;
    struct locked;

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel

// Header-only: the state, which includes the bodies once it is complete.
#if PETREL_HEADER_ONLY
#include <petrel/server/detail/server_state.hpp>
#endif
