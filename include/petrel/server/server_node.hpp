// Petrel: a server node.
#pragma once

#include <petrel/consistency/clock_gate.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/clock_entry.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/transport/connection.hpp>
#include <petrel/transport/transport.hpp>
#include <petrel/wire/compression.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
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
/// All member functions may be called from any thread; requests from many connections
/// are served concurrently when the executor runs on several threads.
class server_node {
public:
    explicit server_node(any_transport transport, server_options opts = {})
        : transport_(std::move(transport)), state_(std::make_shared<state>()) {
        state_->opts = std::move(opts);
        state_->pool = transport_.pool();
        state_->log = transport_.options().log;
        state_->limits = transport_.options().limits;
        state_->departed_all.assign(state_->opts.workers, false);
    }

    server_node(const server_node&) = delete;
    server_node& operator=(const server_node&) = delete;

    /// Stops serving and closes every connection.
    ~server_node() { close(); }

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
    void close() { transport_.close(); }

    /// Worker `worker` takes no further part in any table's clock (it left the job or
    /// failed): nobody waits for it any more. Unknown workers are ignored.
    void depart_worker(std::uint32_t worker) {
        outbox out;
        {
            std::lock_guard lock(state_->mutex);
            state_->depart(worker, nullptr, out);
        }
        state_->send(out);
    }

    /// Keys stored in a table (0 for a table that does not exist).
    [[nodiscard]] std::size_t key_count(std::uint32_t table_id) const {
        std::lock_guard lock(state_->mutex);
        auto it = state_->tables.find(table_id);
        return it == state_->tables.end() || !it->second.table ? 0 : it->second.table->size();
    }

    /// The clocks of a table over the whole key space (empty for a table never named).
    [[nodiscard]] std::vector<clock_entry> clocks(std::uint32_t table_id) const {
        std::lock_guard lock(state_->mutex);
        auto it = state_->tables.find(table_id);
        if (it == state_->tables.end()) {
            return {};
        }
        return it->second.gate.entries(clock_gate<int>::all(), wire::max_clock_entries);
    }

    /// Sets the id written as the sender of replies and naming this server's checkpoint
    /// shards (a job's server learns its id when it joins).
    void set_node_id(std::uint32_t id) {
        std::lock_guard lock(state_->mutex);
        state_->opts.node_id = id;
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
        namespace fs = std::filesystem;
        std::error_code fec;
        if (!fs::is_directory(dir, fec)) {
            throw checkpoint_error(dir, "is not a directory");
        }
        std::map<std::uint32_t, std::unique_ptr<detail::table_base>> loaded;
        for (const auto& entry : fs::directory_iterator(dir)) {
            const std::string name = entry.path().filename().string();
            std::uint32_t id = 0;
            if (!name.starts_with("table-") || !entry.is_directory() ||
                !parse_id(std::string_view(name).substr(6), id)) {
                continue;
            }
            const auto manifest = detail::read_manifest(entry.path());
            const auto where = detail::manifest_path(entry.path());
            if (manifest.table_id != id) {
                throw checkpoint_error(where, "records table " + std::to_string(manifest.table_id) +
                                                  " in the directory of table " +
                                                  std::to_string(id));
            }
            auto table = table_for(manifest, where);
            const std::function<bool(std::uint64_t)> keep = [&owns, id](std::uint64_t k) {
                return !owns || owns(id, k);
            };
            for (const auto& shard : manifest.shards) {
                const auto rows =
                    detail::read_shard(entry.path() / shard.file, manifest, shard, max_shard_bytes);
                try {
                    table->load(rows, keep);
                } catch (const std::out_of_range& e) {
                    throw checkpoint_error(entry.path() / shard.file, e.what());
                }
            }
            loaded.emplace(id, std::move(table));
        }
        if (loaded.empty()) {
            throw checkpoint_error(dir, "holds no table checkpoint (table-<id>/manifest.json)");
        }
        std::lock_guard lock(state_->mutex);
        for (auto& [id, table] : loaded) {
            std::error_code ec;
            table_slot* s = state_->slot(id, ec);
            if (!s) {
                throw checkpoint_error(dir, "table " + std::to_string(id) + ": " + ec.message());
            }
            s->table = std::move(table);
        }
    }

    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

private:
    static bool parse_id(std::string_view text, std::uint32_t& id) {
        if (text.empty() || text.size() > 10) {
            return false;
        }
        std::uint64_t v = 0;
        for (char c : text) {
            if (c < '0' || c > '9') {
                return false;
            }
            v = v * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (v > 0xFFFFFFFFu) {
            return false;
        }
        id = static_cast<std::uint32_t>(v);
        return true;
    }

    /// An empty table for the checkpoint `m`: as declared (and matching it), or sparse and
    /// summing when not declared.
    std::unique_ptr<detail::table_base> table_for(const checkpoint_manifest& m,
                                                  const std::filesystem::path& where) const {
        const auto id = std::to_string(m.table_id);
        const table_registry::entry* declared =
            state_->opts.tables ? state_->opts.tables->find(m.table_id) : nullptr;
        if (!declared) {
            if (m.updater != "sum" || m.state_width != 0 || m.dense) {
                throw checkpoint_error(where, "table " + id + " was saved with update rule '" +
                                                  m.updater +
                                                  "'; declare it in the table_registry");
            }
            wire::message_header h;
            h.key_type = m.key_type;
            h.value_type = m.value_type;
            h.width = m.width;
            return detail::make_table(h);
        }
        auto table = declared->make();
        wire::message_header h;
        h.key_type = m.key_type;
        h.value_type = m.value_type;
        h.width = m.width;
        if (auto ec = table->check(h)) {
            throw checkpoint_error(where, "table " + id +
                                              " does not match its declaration: " + ec.message());
        }
        const auto dense = table->dense_keys();
        const bool same_dense =
            dense ? (m.dense && dense->begin == m.dense_begin && dense->end == m.dense_end)
                  : !m.dense;
        if (table->updater_name() != m.updater || table->state_values() != m.state_width ||
            !same_dense) {
            throw checkpoint_error(where, "table " + id + " was saved with update rule '" +
                                              m.updater + "' (" + std::to_string(m.state_width) +
                                              " state values per key" +
                                              (m.dense ? ", dense" : ", sparse") +
                                              "), which its declaration does not match");
        }
        return table;
    }

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
        bool mean = false; // aggregation::mean for the pushes of a clock
    };

    /// Replies to send once the lock is released.
    using outbox = std::vector<std::pair<connection_ptr, wire::message>>;

    struct state {
        server_options opts;
        std::shared_ptr<buffer_pool> pool;
        wire::wire_limits limits;
        logger log;
        mutable std::mutex mutex;
        std::map<std::uint32_t, table_slot> tables;
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
            for (auto& [c, m] : out) {
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
            {
                std::lock_guard lock(mutex);
                switch (m.header.kind) {
                case wire::message_kind::push:
                    on_push(c, std::move(m), out);
                    break;
                case wire::message_kind::pull:
                case wire::message_kind::call:
                    on_read(c, std::move(m), out);
                    break;
                case wire::message_kind::clock:
                    on_clock(c, m, out);
                    break;
                case wire::message_kind::push_reply:
                case wire::message_kind::pull_reply:
                case wire::message_kind::control:
                case wire::message_kind::control_reply:
                case wire::message_kind::clock_reply:
                case wire::message_kind::call_reply:
                    refused = true;
                    break;
                }
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

        /// A connection closed: the reads it parked need no answer. Its held pushes were
        /// acknowledged and stay.
        void forget(const connection_ptr& c) {
            std::lock_guard lock(mutex);
            for (auto& [id, slot] : tables) {
                slot.gate.remove_if([&](const waiting& w) {
                    return w.conn == c && w.request.header.kind != wire::message_kind::push;
                });
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
            for (std::uint32_t w = 0; w < departed_all.size(); ++w) {
                if (departed_all[w]) {
                    s.gate.depart(w);
                }
            }
            return &s;
        }

        void on_push(const connection_ptr& c, wire::message&& m, outbox& out) {
            const auto h = m.header;
            const bool ordered = (h.flags & wire::flag_ordered) != 0;
            if ((h.encoding & wire::encoding_keys_cached) != 0) {
                // The keys are a list this connection does not hold: the worker resends them.
                out.emplace_back(c,
                                 refusal(h, wire::message_kind::push_reply, errc::key_cache_miss));
                return;
            }
            std::error_code ec = check_worker(h, ordered);
            if (!ec && !m.lengths().empty()) {
                ec = errc::invalid_argument; // variable-length rows: not supported by tables
            }
            table_slot* s = ec ? nullptr : slot(h.table_id, ec);
            if (!ec && ordered && s->held_bytes + bytes_of(m) > opts.max_held_bytes) {
                ec = errc::backlog_full;
            }
            if (!ec) {
                ec = accept(*s, m);
            }
            if (ec) {
                out.emplace_back(c, refusal(h, wire::message_kind::push_reply, ec));
                return;
            }
            if (ordered) {
                s->held_bytes += bytes_of(m);
                // Acknowledged now: the held push needs no connection any more.
                s->gate.hold(h.worker, h.clock, range_of(h), waiting{nullptr, std::move(m)});
                if (s->gate.completed(range_of(h)) > h.clock) {
                    release(*s, out); // already complete: the others have moved on
                }
            } else {
                s->table->apply(m);
            }
            auto reply = reply_to(h, wire::message_kind::push_reply);
            reply.header.clocks = s->gate.entries(range_of(h), max_entries());
            out.emplace_back(c, std::move(reply));
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

        void on_read(const connection_ptr& c, wire::message&& m, outbox& out) {
            const auto& h = m.header;
            const auto reply_kind = h.kind == wire::message_kind::pull
                                        ? wire::message_kind::pull_reply
                                        : wire::message_kind::call_reply;
            std::error_code ec = (h.encoding & wire::encoding_keys_cached) != 0
                                     ? make_error_code(errc::key_cache_miss)
                                     : check_worker(h, false);
            table_slot* s = ec ? nullptr : slot(h.table_id, ec);
            if (!ec && !s->gate.readable(range_of(h), h.clock) &&
                s->gate.parked() >= opts.max_parked) {
                ec = errc::backlog_full;
            }
            if (ec) {
                out.emplace_back(c, refusal(h, reply_kind, ec));
                return;
            }
            if (s->gate.readable(range_of(h), h.clock)) {
                out.emplace_back(c, answer(*s, m));
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
            }
            out.emplace_back(c, std::move(reply));
        }

        /// `worker` leaves the clock of table `only` (of every table, now and later, when
        /// null).
        void depart(std::uint32_t worker, table_slot* only, outbox& out) {
            if (worker >= opts.workers) {
                return;
            }
            if (only) {
                only->gate.depart(worker);
                release(*only, out);
                return;
            }
            departed_all[worker] = true;
            for (auto& [id, s] : tables) {
                s.gate.depart(worker);
                release(s, out);
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
                    s.table->apply_clock(clock_pushes, s.mean);
                    clock_pushes.clear();
                }
            }
            for (auto& w : r.reads) {
                out.emplace_back(w.conn, answer(s, w.request));
            }
        }

        /// The reply to a pull or call whose clocks are satisfied.
        wire::message answer(table_slot& s, const wire::message& m) {
            const auto& h = m.header;
            if (h.kind == wire::message_kind::call) {
                return call(s, m);
            }
            auto reply = reply_to(h, wire::message_kind::pull_reply);
            if (auto ec = pull(s, m, reply)) {
                return refusal(h, wire::message_kind::pull_reply, ec);
            }
            reply.header.key_count = h.key_count;
            reply.header.clocks = s.gate.entries(range_of(h), max_entries());
            reply.header.flags |= h.flags & wire::flag_compress_reply; // compressed in send()
            return reply;
        }

        std::error_code pull(table_slot& s, const wire::message& m, wire::message& reply) {
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
            } else {
                s.table->read(m, out.data());
            }
            reply.set_segment(wire::values_segment, out.share(0, bytes));
            return {};
        }

        /// The built-in checkpoint call: writes this server's rows of the table (a
        /// consistent cut: the call waited for its clock like a pull) to its shard file in
        /// the directory named by the arguments; answers with the shard's record.
        std::error_code save(table_slot& s, const wire::message_header& h,
                             std::span<const std::byte> args, std::vector<std::byte>& result,
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
            try {
                shard_table t;
                if (s.table) {
                    t = s.table->dump(h.table_id);
                } else {
                    // Never pushed here: an empty shard of the request's types.
                    t.table_id = h.table_id;
                    t.key_type = h.key_type;
                    t.value_type = h.value_type;
                    t.width = h.width;
                    t.updater = "sum";
                }
                detail::saved_shard out;
                const auto file =
                    detail::table_dir(dir, h.table_id) / detail::shard_file_name(opts.node_id);
                out.shard = detail::write_shard(file, opts.node_id, t);
                out.state_width = t.state_width;
                out.updater = t.updater;
                if (s.table) {
                    if (const auto d = s.table->dense_keys()) {
                        out.dense = true;
                        out.dense_begin = d->begin;
                        out.dense_end = d->end;
                    }
                }
                detail::append_binary(result, out);
            } catch (const std::bad_alloc&) {
                throw;
            } catch (const std::exception& e) {
                message = e.what();
                if (log) {
                    log(log_level::error, "petrel server " + std::to_string(opts.node_id) +
                                              ": checkpoint failed: " + message);
                }
                return errc::checkpoint_failed;
            }
            return {};
        }

        wire::message call(table_slot& s, const wire::message& m) {
            const auto& h = m.header;
            auto reply = reply_to(h, wire::message_kind::call_reply);
            std::vector<std::byte> result;
            std::string message;
            std::error_code ec = errc::unknown_function;
            detail::decoded_call decoded;
            std::string why;
            if (!detail::decode_call(m.values().span(), decoded, why) &&
                decoded.name == detail::checkpoint_call) {
                ec = save(s, h, decoded.args, result, message);
            } else if (opts.functions) {
                try {
                    ec =
                        opts.functions->invoke(m.values().span(), s.table.get(), h.key_type,
                                               h.value_type, h.width, range_of(h), result, message);
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
                return reply;
            }
            reply.set_segment(wire::values_segment, shared_bytes::copy_of(result));
            reply.header.clocks = s.gate.entries(range_of(h), max_entries());
            return reply;
        }
    };

    any_transport transport_;
    std::shared_ptr<state> state_;
};

} // namespace petrel
