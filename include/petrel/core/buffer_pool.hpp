// Petrel: shared byte buffers and the pool they come from.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <vector>

namespace petrel {

/// Read-only bytes with shared ownership: a view plus whatever keeps it alive.
///
/// Message segments, pulled values and pushed values travel as `shared_bytes`, so a
/// payload read from the network is handed on (to a server table, to the caller of a
/// pull) without copying. Sub-views share ownership of the whole buffer.
///
/// @par Thread Safety
/// Like `std::shared_ptr`: copies may be used and destroyed concurrently.
class shared_bytes {
public:
    shared_bytes() = default;

    shared_bytes(std::shared_ptr<const void> owner, std::span<const std::byte> bytes) noexcept
        : owner_(std::move(owner)), data_(bytes.data()), size_(bytes.size()) {}

    /// A new buffer holding a copy of `bytes`.
    [[nodiscard]] static shared_bytes copy_of(std::span<const std::byte> bytes) {
        auto owner = std::shared_ptr<std::byte[]>(new std::byte[bytes.size() ? bytes.size() : 1]);
        if (!bytes.empty()) {
            std::memcpy(owner.get(), bytes.data(), bytes.size());
        }
        const std::byte* p = owner.get();
        return {std::move(owner), {p, bytes.size()}};
    }

    [[nodiscard]] const std::byte* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] std::span<const std::byte> span() const noexcept { return {data_, size_}; }

    /// The bytes as an array of `T`; `size()` must be a multiple of `sizeof(T)` and the data
    /// suitably aligned (segments of Petrel messages always are).
    template <typename T>
    [[nodiscard]] std::span<const T> as() const noexcept {
        return {reinterpret_cast<const T*>(data_), size_ / sizeof(T)};
    }

    /// `count` bytes from `offset`, sharing ownership; clamped to the buffer.
    [[nodiscard]] shared_bytes subspan(std::size_t offset, std::size_t count) const noexcept {
        offset = offset < size_ ? offset : size_;
        count = count < size_ - offset ? count : size_ - offset;
        shared_bytes r;
        r.owner_ = owner_;
        r.data_ = data_ + offset;
        r.size_ = count;
        return r;
    }

    [[nodiscard]] const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

private:
    std::shared_ptr<const void> owner_;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

/// A writable buffer from a `buffer_pool`; it goes back to the pool when the last
/// owner (this handle or any `shared_bytes` made from it) lets go.
class pooled_buffer {
public:
    pooled_buffer() = default;
    pooled_buffer(std::shared_ptr<std::byte> storage, std::size_t size) noexcept
        : storage_(std::move(storage)), size_(size) {}

    [[nodiscard]] std::byte* data() const noexcept { return storage_.get(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::span<std::byte> span() const noexcept { return {storage_.get(), size_}; }

    template <typename T>
    [[nodiscard]] T* as() const noexcept {
        return reinterpret_cast<T*>(storage_.get());
    }

    /// A read-only view of `[offset, offset + count)` that shares ownership.
    [[nodiscard]] shared_bytes share(std::size_t offset, std::size_t count) const noexcept {
        return shared_bytes(storage_, {storage_.get(), size_}).subspan(offset, count);
    }
    [[nodiscard]] shared_bytes share() const noexcept { return share(0, size_); }

private:
    std::shared_ptr<std::byte> storage_;
    std::size_t size_ = 0;
};

/// A pool of reusable byte buffers in power-of-two size classes.
///
/// Large messages are read into buffers that were used before, so their pages are
/// already mapped: a fresh 64 MiB allocation costs thousands of page faults each time.
/// Buffers come back to the pool when their last owner drops them, from any thread;
/// the pool keeps at most `max_pooled_bytes` of idle buffers and frees the rest.
/// Buffers may outlive the pool (they are then freed, not pooled).
///
/// @par Thread Safety
/// All member functions may be called concurrently.
class buffer_pool {
public:
    struct options {
        /// Idle bytes kept for reuse; beyond this, released buffers are freed.
        std::size_t max_pooled_bytes = std::size_t{512} << 20;
    };

    static constexpr std::size_t min_class_bytes = 4096;
    static constexpr std::size_t max_class_bytes = std::size_t{1} << 40;

    buffer_pool() : buffer_pool(options{}) {}
    explicit buffer_pool(options opts) : state_(std::make_shared<state>(opts)) {}

    buffer_pool(const buffer_pool&) = delete;
    buffer_pool& operator=(const buffer_pool&) = delete;

    /// A buffer of `size` bytes (contents unspecified), aligned for any scalar type.
    /// @throws std::length_error when `size` exceeds `max_class_bytes`.
    [[nodiscard]] pooled_buffer acquire(std::size_t size) {
        if (size > max_class_bytes) {
            throw std::length_error("petrel::buffer_pool: buffer larger than 1 TiB requested");
        }
        const std::size_t cls = class_of(size);
        const std::size_t capacity = std::size_t{1} << cls;
        std::byte* p = nullptr;
        {
            std::lock_guard lock(state_->mutex);
            auto& list = state_->free[cls];
            if (!list.empty()) {
                p = list.back();
                list.pop_back();
                state_->pooled_bytes -= capacity;
            }
        }
        if (p == nullptr) {
            p = new std::byte[capacity];
        }
        std::weak_ptr<state> weak = state_;
        auto storage = std::shared_ptr<std::byte>(p, [weak, cls](std::byte* q) {
            if (auto s = weak.lock()) {
                s->release(q, cls);
            } else {
                delete[] q;
            }
        });
        return {std::move(storage), size};
    }

    /// Bytes held idle in the pool now.
    [[nodiscard]] std::size_t pooled_bytes() const {
        std::lock_guard lock(state_->mutex);
        return state_->pooled_bytes;
    }

private:
    static constexpr std::size_t class_count = 41;

    static std::size_t class_of(std::size_t size) noexcept {
        const std::size_t want = size < min_class_bytes ? min_class_bytes : size;
        return static_cast<std::size_t>(std::bit_width(want - 1));
    }

    struct state {
        explicit state(options o) : opts(o) {}
        ~state() {
            for (auto& list : free) {
                for (std::byte* p : list) {
                    delete[] p;
                }
            }
        }
        void release(std::byte* p, std::size_t cls) {
            const std::size_t capacity = std::size_t{1} << cls;
            {
                std::lock_guard lock(mutex);
                if (pooled_bytes + capacity <= opts.max_pooled_bytes) {
                    free[cls].push_back(p);
                    pooled_bytes += capacity;
                    return;
                }
            }
            delete[] p;
        }

        options opts;
        mutable std::mutex mutex;
        std::array<std::vector<std::byte*>, class_count> free;
        std::size_t pooled_bytes = 0;
    };

    std::shared_ptr<state> state_;
};

} // namespace petrel
