// Petrel: a table's storage as the server sees it, whatever its key and value types.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/request_split.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <system_error>

namespace petrel::detail {

/// Runs the parts of one request: `run(n, f)` calls `f(i)` once for every `i` in [0, n),
/// on one thread or several at once, and returns when every call has returned (see
/// `run_parts`).
using part_runner = std::function<void(std::size_t, const std::function<void(std::size_t)>&)>;

/// A table's storage, whatever its key and value types.
///
/// Pushes are applied in two steps: `reserve` creates the rows of keys not stored yet
/// (the only step that allocates; all or nothing), then `apply` (one push) or
/// `apply_clock` (the pushes of one clock, aggregated per key) runs the update rule and
/// cannot fail.
///
/// Four members may run on several threads at once: `apply_shared`, `read_shared`,
/// `apply_split` and `read_split`, which
/// create rows under the table's own lock and touch each row under the lock of its stripe.
/// Every other member needs the table to itself (the server's lock of the table, held
/// exclusively, keeps both kinds apart).
class table_base {
public:
    table_base(wire::scalar_type k, wire::scalar_type v, std::uint32_t width)
        : key_type_(k), value_type_(v), width_(width) {}
    virtual ~table_base() = default;

    /// Whether a request with this header may touch this table.
    [[nodiscard]] std::error_code check(const wire::message_header& h) const noexcept {
        if (h.key_type != key_type_) {
            return errc::key_type_mismatch;
        }
        if (h.value_type != value_type_) {
            return errc::value_type_mismatch;
        }
        if (h.width != width_) {
            return errc::width_mismatch;
        }
        return {};
    }

    /// Adds the pushed rows (the message passed `check` and wire validation): all or
    /// nothing, as `reserve` then `apply`.
    void add(const wire::message& m) {
        reserve(m);
        apply(m);
    }
    /// Whether every key of `m` may live in this table (a dense table's declared range).
    [[nodiscard]] virtual std::error_code check_keys(const wire::message& m) const = 0;
    /// Creates the rows of the pushed keys not stored yet (with their initial values), so
    /// that `apply` needs no memory. All or nothing: on failure (`std::bad_alloc`) the
    /// table is as it was.
    virtual void reserve(const wire::message& m) = 0;
    /// Applies one push with the update rule; its keys were reserved. Cannot fail.
    virtual void apply(const wire::message& m) noexcept = 0;
    /// Applies the pushes of one clock, in the given order: the rows pushed for each key
    /// are added up (and divided by their number when `mean`), then the update rule runs
    /// once per key. Their keys were reserved. Cannot fail: when there is no memory for
    /// the sums, the pushes are applied one by one instead.
    virtual void apply_clock(std::span<const wire::message* const> pushes, bool mean) noexcept = 0;
    /// The rows of the keys of `pushes` as they are stored now (values, then optimizer
    /// state), keys ascending and unique: the rows a clock's pushes changed, as a row
    /// transfer (`wire::message_kind::row_transfer`: width is the table's width plus its
    /// state). The keys are stored. @throws std::bad_alloc
    [[nodiscard]] virtual wire::message
    rows_of(std::span<const wire::message* const> pushes) const = 0;
    /// Writes the rows of the pulled keys into `out` (initial values for keys never
    /// pushed).
    virtual void read(const wire::message& m, std::byte* out) const = 0;
    /// `reserve` then `apply` of one push (checked, not ordered), while other threads may
    /// do the same or `read_shared`: concurrent pushes of one key are applied one after
    /// the other, in no set order. All or nothing: `errc::out_of_memory` when its rows
    /// cannot be created.
    /// `created`: set to the rows this call created.
    [[nodiscard]] virtual std::error_code apply_shared(const wire::message& m,
                                                       std::size_t& created) noexcept = 0;
    [[nodiscard]] std::error_code apply_shared(const wire::message& m) noexcept {
        std::size_t created = 0;
        return apply_shared(m, created);
    }
    /// `read` while other threads may `apply_shared` or `read_shared`: each row is read
    /// whole, between two pushes. @throws std::bad_alloc
    virtual void read_shared(const wire::message& m, std::byte* out) const = 0;
    /// `apply_shared` of one push cut into `parts` (`split_request`), whose parts `run`
    /// may apply on several threads at once. All or nothing: the rows of every part, and
    /// what each part needs to be applied, are made before any part is applied;
    /// `errc::out_of_memory` when they cannot be.
    [[nodiscard]] virtual std::error_code apply_split(std::span<const request_part> parts,
                                                      const part_runner& run,
                                                      std::size_t& created) noexcept = 0;
    [[nodiscard]] std::error_code apply_split(std::span<const request_part> parts,
                                              const part_runner& run) noexcept {
        std::size_t created = 0;
        return apply_split(parts, run, created);
    }
    /// Whether every key of the push or pull `m` has its row (a push then creates none).
    /// `m` passed `check` and `check_keys`.
    [[nodiscard]] virtual bool holds_all(const wire::message& m) const = 0;
    /// `read_shared` of one pull cut into `parts`, each read into `out` from its first
    /// key on, by `run`. @throws std::bad_alloc (before any part is read)
    virtual void read_split(std::span<const request_part> parts, std::byte* out,
                            const part_runner& run) const = 0;
    /// Keys stored.
    [[nodiscard]] virtual std::size_t size() const noexcept = 0;
    /// Bytes of memory the table holds (index, rows, optimizer state, scratch).
    [[nodiscard]] virtual std::size_t memory_bytes() const noexcept = 0;

    /// The update rule's name, its state values per key, and a dense table's key range.
    [[nodiscard]] virtual std::string_view updater_name() const noexcept = 0;
    [[nodiscard]] virtual std::uint32_t state_values() const noexcept = 0;
    [[nodiscard]] virtual std::optional<key_range<std::uint64_t>> dense_keys() const noexcept = 0;
    /// Every stored row (values and state), keys ascending, for a checkpoint.
    /// @throws std::bad_alloc
    [[nodiscard]] virtual shard_table dump(std::uint32_t table_id) const = 0;
    /// The lock of the table's rows that `apply_shared` and `read_shared` take shared:
    /// held exclusively, the table is the holder's alone (for `dump`, say) while other
    /// threads use other tables.
    [[nodiscard]] virtual std::shared_mutex& rows_mutex() const noexcept = 0;
    /// Stores the rows of `t` (same types, width and state width, checked by the caller)
    /// whose key `owns` accepts, replacing what was there. @throws std::bad_alloc,
    /// std::out_of_range (a key outside a dense table's range)
    virtual void load(const shard_table& t, const std::function<bool(std::uint64_t)>& owns) = 0;

    [[nodiscard]] wire::scalar_type key_type() const noexcept { return key_type_; }
    [[nodiscard]] wire::scalar_type value_type() const noexcept { return value_type_; }
    [[nodiscard]] std::uint32_t width() const noexcept { return width_; }

private:
    wire::scalar_type key_type_;
    wire::scalar_type value_type_;
    std::uint32_t width_;
};

} // namespace petrel::detail
