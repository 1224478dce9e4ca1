// Petrel: the update ids a server applied lately, so that a resent push applies once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

namespace petrel::detail {

/// The newest update ids a server applied (or held), each with the primary whose rows it
/// changed: the pieces of one push split over several servers share its id, and one may
/// reach a server as a replica update of another piece's server. A window of the last
/// `capacity` ids remembered, oldest forgotten first (an id forgotten early keeps its place
/// until it leaves). A pure value type.
class update_window {
public:
    static constexpr std::size_t default_capacity = std::size_t{1} << 18;

    explicit update_window(std::size_t capacity = default_capacity) noexcept
        : capacity_(capacity == 0 ? 1 : capacity) {}

    /// Whether update `id` of `primary` is in the window (never for id 0: no id).
    [[nodiscard]] bool contains(std::uint64_t id, std::uint32_t primary) const {
        return id != 0 && ids_.count(key(id, primary)) != 0;
    }

    /// Remembers update `id` of `primary` as the newest; nothing for id 0 or an id already
    /// in the window. @throws std::bad_alloc
    void remember(std::uint64_t id, std::uint32_t primary) {
        if (id == 0) {
            return;
        }
        const auto k = key(id, primary);
        if (!ids_.try_emplace(k, next_).second) {
            return;
        }
        order_.emplace_back(k, next_++);
        while (order_.size() > capacity_) {
            const auto [old, at] = order_.front();
            // Only the entry that remembered it: one forgotten and remembered again later
            // has a newer place in the window.
            if (auto it = ids_.find(old); it != ids_.end() && it->second == at) {
                ids_.erase(it);
            }
            order_.pop_front();
        }
    }

    /// Forgets update `id` of `primary` (its push was not applied after all), so that a
    /// resend of it applies.
    void forget(std::uint64_t id, std::uint32_t primary) {
        if (id != 0) {
            ids_.erase(key(id, primary));
        }
    }

    /// The ids in the window.
    [[nodiscard]] std::size_t size() const noexcept { return ids_.size(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
    static std::uint64_t key(std::uint64_t id, std::uint32_t primary) noexcept {
        return id ^ ((std::uint64_t{primary} + 1) * 0x9e3779b97f4a7c15ULL);
    }

    std::size_t capacity_;
    std::uint64_t next_ = 0;                               // the place of the next remembered id
    std::unordered_map<std::uint64_t, std::uint64_t> ids_; // id → its place in `order_`
    std::deque<std::pair<std::uint64_t, std::uint64_t>> order_; // oldest first
};

} // namespace petrel::detail
