// Petrel: key caching: a repeated key list travels as a reference to an earlier copy.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/detail/byte_budget.hpp>
#include <petrel/core/detail/checksum.hpp>
#include <petrel/wire/header.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

namespace petrel::wire {

/// The digest a key list is stored and referred to with (XXH64 of its bytes).
[[nodiscard]] inline std::uint64_t key_list_digest(std::span<const std::byte> keys) noexcept {
    return petrel::detail::checksum(keys);
}

namespace detail {

/// A key list held by either end: its keys, digest, key type and place in the
/// least-recently-used order.
struct key_list_entry {
    shared_bytes keys;
    std::uint64_t digest = 0;
    scalar_type type = scalar_type::none;
    std::list<std::uint64_t>::iterator place;
};

} // namespace detail

/// The receiving end of key caching, one per connection: the key lists the peer asked to
/// keep (`encoding_keys_store`), by the peer's number for them, least recently used first
/// out once they take more than `max_bytes`.
///
/// A reference (`encoding_keys_cached`) is resolved only when the list of that number is
/// held with the same digest, key type and key count; anything else is a miss, which the
/// server answers with `errc::key_cache_miss` so that the sender sends the keys again.
/// A reference never yields keys other than the ones the sender meant.
///
/// With a budget shared by the receivers of a node (`share_budget`), the lists of all its
/// connections together stay within it: a list that does not fit once this receiver's
/// older lists are gone is not kept (its references miss, and the sender sends the keys
/// again), and the bytes come back as lists are dropped or the receiver goes.
///
/// @par Thread Safety
/// Not thread safe: used by its connection's read loop only.
class key_cache_receiver {
public:
    explicit key_cache_receiver(std::size_t max_bytes) : max_bytes_(max_bytes) {}
    key_cache_receiver(const key_cache_receiver&) = delete;
    key_cache_receiver& operator=(const key_cache_receiver&) = delete;
    ~key_cache_receiver() {
        if (budget_) {
            budget_->give_back(bytes_);
        }
    }

    /// Draws the lists' bytes from `budget` as well (before any list is stored).
    void share_budget(std::shared_ptr<petrel::detail::byte_budget> budget) noexcept {
        budget_ = std::move(budget);
    }

    /// The keys of list `id`, when it is held with this digest, key type and size.
    [[nodiscard]] std::optional<shared_bytes> find(std::uint64_t id, std::uint64_t digest,
                                                   scalar_type type, std::size_t bytes) {
        auto it = lists_.find(id);
        if (it == lists_.end() || it->second.digest != digest || it->second.type != type ||
            it->second.keys.size() != bytes) {
            return std::nullopt;
        }
        order_.splice(order_.end(), order_, it->second.place); // most recently used
        return it->second.keys;
    }

    /// Keeps a copy of `keys` (in a buffer of their own, so that the message's payload is
    /// not pinned) as list `id`, replacing any list of that number. A list larger than the
    /// whole cache is not kept.
    void store(std::uint64_t id, std::uint64_t digest, scalar_type type,
               std::span<const std::byte> keys, buffer_pool& pool) {
        erase(id);
        if (cost(keys.size()) > max_bytes_ || keys.empty()) {
            return;
        }
        while (bytes_ + cost(keys.size()) > max_bytes_ && !order_.empty()) {
            erase(order_.front());
        }
        while (budget_ && !budget_->try_take(cost(keys.size()))) {
            if (order_.empty()) {
                return; // the node's other connections hold the budget: not kept
            }
            erase(order_.front());
        }
        pooled_buffer copy;
        try {
            copy = pool.acquire(keys.size());
        } catch (...) {
            if (budget_) {
                budget_->give_back(cost(keys.size()));
            }
            throw;
        }
        std::memcpy(copy.data(), keys.data(), keys.size());
        order_.push_back(id);
        lists_.emplace(id,
                       entry{copy.share(0, keys.size()), digest, type, std::prev(order_.end())});
        bytes_ += cost(keys.size());
    }

    /// Bytes the lists take, each counted with `entry_overhead` for its bookkeeping (so
    /// that a peer cannot make many tiny lists cost more than the limit says).
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    [[nodiscard]] std::size_t size() const noexcept { return lists_.size(); }

    static constexpr std::size_t entry_overhead = 128;

private:
    using entry = detail::key_list_entry;

    void erase(std::uint64_t id) {
        auto it = lists_.find(id);
        if (it == lists_.end()) {
            return;
        }
        bytes_ -= cost(it->second.keys.size());
        if (budget_) {
            budget_->give_back(cost(it->second.keys.size()));
        }
        order_.erase(it->second.place);
        lists_.erase(it);
    }

    static constexpr std::size_t cost(std::size_t key_bytes) noexcept {
        return key_bytes + entry_overhead;
    }

    std::size_t max_bytes_;
    std::size_t bytes_ = 0;
    std::shared_ptr<petrel::detail::byte_budget> budget_;
    std::unordered_map<std::uint64_t, entry> lists_;
    std::list<std::uint64_t> order_;
};

/// The sending end of key caching, one per peer: remembers the key lists sent to it, so
/// that a list sent again goes as a reference (`encoding_keys_cached`). A list is matched
/// by its digest and then compared byte for byte, so two lists with the same digest are
/// never confused. Lists are numbered from 1 and numbers are never reused; the least
/// recently used lists are forgotten beyond `max_bytes`.
///
/// The sender cannot know whether the receiver still holds a list (it may have evicted
/// it, or the connection may be new); a reference it does not hold is answered with
/// `errc::key_cache_miss`, and the sender sends the keys again with `store_again`.
///
/// @par Thread Safety
/// All member functions may be called concurrently.
class key_cache_sender {
public:
    /// How to send one key list.
    struct decision {
        std::uint64_t id = 0;
        std::uint64_t digest = 0;
        /// Sent before: send a reference. Otherwise send the keys and ask to keep them.
        bool known = false;
    };

    explicit key_cache_sender(std::size_t max_bytes) : max_bytes_(max_bytes) {}

    /// How to send `keys` (of type `type`): as a reference to the list sent before, or as
    /// keys the receiver keeps. A new list is remembered as a copy.
    [[nodiscard]] decision lookup(const shared_bytes& keys, scalar_type type) {
        const std::uint64_t digest = key_list_digest(keys.span());
        std::lock_guard lock(mutex_);
        auto [first, last] = by_digest_.equal_range(digest);
        for (auto it = first; it != last; ++it) {
            auto& e = by_id_.at(it->second);
            if (e.type == type && e.keys.size() == keys.size() &&
                std::memcmp(e.keys.data(), keys.data(), keys.size()) == 0) {
                order_.splice(order_.end(), order_, e.place);
                return {it->second, digest, true};
            }
        }
        const std::uint64_t id = ++next_id_;
        if (keys.size() > max_bytes_ || keys.empty()) {
            return {id, digest, false}; // sent with a number, never referred to
        }
        while (bytes_ + keys.size() > max_bytes_ && !order_.empty()) {
            evict(order_.front());
        }
        order_.push_back(id);
        // A copy of its own: the caller may reuse a shared buffer once its push is done.
        by_id_.emplace(
            id, entry{shared_bytes::copy_of(keys.span()), digest, type, std::prev(order_.end())});
        by_digest_.emplace(digest, id);
        bytes_ += keys.size();
        return {id, digest, false};
    }

    /// Lists remembered, and their bytes.
    [[nodiscard]] std::size_t size() const {
        std::lock_guard lock(mutex_);
        return by_id_.size();
    }
    [[nodiscard]] std::size_t bytes() const {
        std::lock_guard lock(mutex_);
        return bytes_;
    }

private:
    using entry = detail::key_list_entry;

    void evict(std::uint64_t id) {
        auto it = by_id_.find(id);
        auto [first, last] = by_digest_.equal_range(it->second.digest);
        for (auto d = first; d != last; ++d) {
            if (d->second == id) {
                by_digest_.erase(d);
                break;
            }
        }
        bytes_ -= it->second.keys.size();
        order_.erase(it->second.place);
        by_id_.erase(it);
    }

    std::size_t max_bytes_;
    mutable std::mutex mutex_;
    std::size_t bytes_ = 0;
    std::uint64_t next_id_ = 0;
    std::unordered_map<std::uint64_t, entry> by_id_;
    std::unordered_multimap<std::uint64_t, std::uint64_t> by_digest_;
    std::list<std::uint64_t> order_;
};

} // namespace petrel::wire
