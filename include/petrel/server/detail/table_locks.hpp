// Petrel: the locks that give a server's requests their turn at a table's rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>

namespace petrel::detail {

/// The locks that order the work on a server's tables: one for each table id modulo
/// `count` (two tables that share one take turns; nothing else changes), and one over them
/// all.
///
/// A request to one table takes its table's lock before the server's lock and keeps it
/// until its rows are applied or read, after the server's lock is released: exclusively
/// (`alone`) when the order of its row work matters (ordered pushes and clocks, replicated
/// pushes, calls), shared (`beside`) when it may run beside others of its kind (unordered
/// pushes, pulls, checkpoint snapshots). Both hold the lock over all tables shared. Work on
/// other tables goes on meanwhile. Whatever touches several tables (a new plan, copies,
/// hand-overs, timers) holds the lock over all tables exclusively (`all`): one lock, however
/// many tables. Lock order: the lock over all tables, then a table's lock.
class table_locks {
public:
    static constexpr std::size_t count = 64;

    /// Table `table_id`'s lock held exclusively, for the holder's lifetime.
    class alone {
    public:
        alone(const table_locks& l, std::uint32_t table_id)
            : every_(l.every_), table_(l.of(table_id)) {}

    private:
        std::shared_lock<std::shared_mutex> every_;
        std::unique_lock<std::shared_mutex> table_;
    };

    /// Table `table_id`'s lock held shared, until `unlock` or the holder's end.
    class beside {
    public:
        beside(const table_locks& l, std::uint32_t table_id)
            : every_(l.every_), table_(l.of(table_id)) {}
        void unlock() {
            table_.unlock();
            every_.unlock();
        }

    private:
        std::shared_lock<std::shared_mutex> every_;
        std::shared_lock<std::shared_mutex> table_;
    };

    /// Every table's lock: the lock over all tables held exclusively, for the holder's
    /// lifetime.
    class all {
    public:
        explicit all(const table_locks& l) : every_(l.every_) {}

    private:
        std::unique_lock<std::shared_mutex> every_;
    };

private:
    [[nodiscard]] std::shared_mutex& of(std::uint32_t table_id) const noexcept {
        return locks_[table_id % count].mutex;
    }

    struct alignas(64) padded { // one cache line each: no false sharing
        mutable std::shared_mutex mutex;
    };
    alignas(64) mutable std::shared_mutex every_;
    std::array<padded, count> locks_;
};

} // namespace petrel::detail
