// Petrel: the locks that give a server's requests their turn at a table's rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <shared_mutex>

namespace petrel::detail {

/// The locks that order the work on a server's tables, one for each table id modulo
/// `count` (two tables that share one take turns; nothing else changes).
///
/// A request to one table takes its table's lock before the server's lock and keeps it
/// until its rows are applied or read, after the server's lock is released: exclusively
/// when the order of its row work matters (ordered pushes and clocks, replicated pushes,
/// calls), shared when it may run beside others of its kind (unordered pushes, pulls,
/// checkpoint snapshots). Work on other tables goes on meanwhile. Whatever touches
/// several tables (a new plan, copies, hand-overs, timers) takes them all, in ascending
/// order (`all`), then the server's lock.
class table_locks {
public:
    static constexpr std::size_t count = 64;

    [[nodiscard]] std::shared_mutex& of(std::uint32_t table_id) const noexcept {
        return locks_[table_id % count].mutex;
    }

    /// Every lock held exclusively, taken in ascending order, for its lifetime.
    class all {
    public:
        explicit all(const table_locks& l) : locks_(l) {
            for (auto& m : locks_.locks_) {
                m.mutex.lock();
            }
        }
        ~all() {
            for (auto it = locks_.locks_.rbegin(); it != locks_.locks_.rend(); ++it) {
                it->mutex.unlock();
            }
        }
        all(const all&) = delete;
        all& operator=(const all&) = delete;

    private:
        const table_locks& locks_;
    };

private:
    struct alignas(64) padded { // one cache line each: no false sharing
        mutable std::shared_mutex mutex;
    };
    std::array<padded, count> locks_;
};

} // namespace petrel::detail
