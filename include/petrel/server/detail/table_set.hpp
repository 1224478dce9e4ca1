// Petrel: a server's tables by id, each with its clocks, and the workers they count.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/server/detail/table_slot.hpp>
#include <petrel/server/table_registry.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel::detail {

/// A server's tables, by id: each table's storage and clocks (`table_slot`), created when
/// first named (a declared table with the storage its registry entry makes, any other
/// without storage until its first push), at most `max_tables`, of which the requests of
/// one connection create at most `max_per_connection`. It also keeps the workers
/// the clocks count, so that a table created later counts the same workers and holds
/// nobody back for a worker that left every table. The server guards it with its lock.
class table_set {
public:
    using map_type = std::map<std::uint32_t, table_slot>;
    using iterator = map_type::iterator;
    using const_iterator = map_type::const_iterator;

    table_set() = default;

    /// Tables whose clocks count workers 0 .. `workers` - 1. `max_per_connection` 0: as
    /// many as `max_tables`.
    table_set(std::uint32_t workers, std::size_t max_tables,
              std::shared_ptr<const table_registry> declared, std::size_t max_per_connection = 0)
        : departed_(workers, false), max_tables_(max_tables),
          max_per_connection_(max_per_connection == 0 ? max_tables : max_per_connection),
          declared_(std::move(declared)) {}

    [[nodiscard]] iterator begin() noexcept { return tables_.begin(); }
    [[nodiscard]] iterator end() noexcept { return tables_.end(); }
    [[nodiscard]] const_iterator begin() const noexcept { return tables_.begin(); }
    [[nodiscard]] const_iterator end() const noexcept { return tables_.end(); }
    [[nodiscard]] iterator find(std::uint32_t id) { return tables_.find(id); }
    [[nodiscard]] const_iterator find(std::uint32_t id) const { return tables_.find(id); }
    [[nodiscard]] std::size_t size() const noexcept { return tables_.size(); }

    /// The workers the clocks count.
    [[nodiscard]] std::uint32_t workers() const noexcept {
        return static_cast<std::uint32_t>(departed_.size());
    }

    /// Table `id`, created with its clocks on first mention; null, with `ec` set
    /// (`too_many_tables`, `out_of_memory`), when it cannot be. `by`: the connection whose
    /// request names it, which creates at most `max_per_connection` tables; null for what
    /// the server itself creates (restored checkpoints, its peers' copies).
    [[nodiscard]] table_slot* slot(std::uint32_t id, std::error_code& ec,
                                   const connection* by = nullptr) {
        if (auto it = tables_.find(id); it != tables_.end()) {
            return &it->second;
        }
        if (tables_.size() >= max_tables_ || (by && created_by(by) >= max_per_connection_)) {
            ec = errc::too_many_tables;
            return nullptr;
        }
        const table_registry::entry* declared = declared_ ? declared_->find(id) : nullptr;
        std::unique_ptr<table_base> storage;
        if (declared) {
            try {
                storage = declared->make();
            } catch (const std::bad_alloc&) {
                ec = errc::out_of_memory;
                return nullptr;
            }
        }
        auto& s = tables_.try_emplace(id, workers()).first->second;
        if (by) {
            ++created_by_[by];
        }
        s.table = std::move(storage);
        s.mean = declared && declared->spec.aggregate == aggregation::mean;
        if (declared && declared->spec.replicas) {
            s.replicas = *declared->spec.replicas;
        }
        for (std::uint32_t w = 0; w < departed_.size(); ++w) {
            if (departed_[w]) {
                s.gate.depart(w);
            }
        }
        return &s;
    }

    /// Tables the requests of connection `c` created.
    [[nodiscard]] std::size_t created_by(const connection* c) const {
        const auto it = created_by_.find(c);
        return it == created_by_.end() ? 0 : it->second;
    }

    /// Connection `c` closed: its tables stay, and a connection of its peer made later
    /// (or another at its address) starts counting afresh; `max_tables` bounds them all.
    void forget(const connection* c) { created_by_.erase(c); }

    /// The next worker index joins every table's clock, present and future; `gone`: as
    /// one that left already (an index skipped over).
    void add_worker(bool gone) {
        for (auto& [id, s] : tables_) {
            s.gate.add_worker(gone);
        }
        departed_.push_back(gone);
    }

    /// Worker `worker` (one the clocks count) takes no further part in any table's clock,
    /// present or future: nobody waits for it, nor for its resync. The caller releases
    /// what each table held for it.
    void depart(std::uint32_t worker) {
        if (worker >= departed_.size()) {
            return;
        }
        departed_[worker] = true;
        for (auto& [id, s] : tables_) {
            s.depart(worker);
        }
    }

private:
    map_type tables_;
    std::vector<bool> departed_; // per worker: gone from every table, also future ones
    std::size_t max_tables_ = 0;
    std::size_t max_per_connection_ = 0;
    std::unordered_map<const connection*, std::size_t> created_by_;
    std::shared_ptr<const table_registry> declared_;
};

} // namespace petrel::detail
