// Petrel: push filters: what a worker sends of its updates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel::wire {

/// The rows of one push on their way through the filters: sorted, unique keys and
/// `width` values per key, row-major.
template <typename Key, typename Value>
struct filter_batch {
    std::vector<Key> keys;
    std::vector<Value> values;
    std::size_t width = 1;

    [[nodiscard]] std::size_t size() const noexcept { return keys.size(); }
    [[nodiscard]] bool empty() const noexcept { return keys.empty(); }
    [[nodiscard]] std::span<Value> row(std::size_t i) noexcept {
        return {values.data() + i * width, width};
    }
    [[nodiscard]] std::span<const Value> row(std::size_t i) const noexcept {
        return {values.data() + i * width, width};
    }
    /// Payload bytes of the rows (keys and values), as counted by the traffic counters.
    [[nodiscard]] std::size_t bytes() const noexcept {
        return keys.size() * sizeof(Key) + values.size() * sizeof(Value);
    }

    /// Keeps the rows `i` for which `keep(i)` is true, in their order.
    template <typename Predicate>
    void keep_if(Predicate&& keep) {
        std::size_t out = 0;
        for (std::size_t i = 0; i < keys.size(); ++i) {
            if (!keep(i)) {
                continue;
            }
            if (out != i) {
                keys[out] = keys[i];
                std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(i * width), width,
                            values.begin() + static_cast<std::ptrdiff_t>(out * width));
            }
            ++out;
        }
        keys.resize(out);
        values.resize(out * width);
    }
};

/// A filter of a worker's pushes (a user-defined one derives from this).
///
/// `filter` sees the rows of each push of its store before they are sent and may drop
/// rows or change their values; the keys must stay sorted and unique. A filter that holds
/// something back gives it up in `drain` (called by `kv_store::flush`), so that nothing is
/// lost at the end of training. Filters of a store run in the order given, each on what
/// the one before left; they are called from the threads that push, one push at a time
/// per store.
///
/// @par Example
/// A KKT filter for L1-regularised models (the parameter server paper, §5.1): a key whose
/// weight is zero and whose gradient is below the L1 strength would stay zero after the
/// update, so it need not be sent.
/// @code
/// struct kkt_filter final : petrel::wire::push_filter<std::uint64_t, float> {
///     float lambda;
///     std::function<float(std::uint64_t)> weight;   // the worker's last pulled weights
///     void filter(petrel::wire::filter_batch<std::uint64_t, float>& b) override {
///         b.keep_if([&](std::size_t i) {
///             return weight(b.keys[i]) != 0 || std::abs(b.row(i)[0]) > lambda;
///         });
///     }
/// };
/// @endcode
template <typename Key, typename Value>
class push_filter {
public:
    virtual ~push_filter() = default;
    /// Filters the rows of one push in place.
    virtual void filter(filter_batch<Key, Value>& batch) = 0;
    /// Moves whatever the filter held back into `out` (empty when called; rows sorted by
    /// key, `out.width` values each). The default holds nothing back.
    virtual void drain(filter_batch<Key, Value>& out) { (void)out; }
};

/// The significantly-modified filter: a row is sent only once its accumulated change
/// reaches `threshold` in some value (|v| ≥ threshold); smaller changes are kept as a
/// residual per key and added to the key's next push, so nothing is lost, only delayed.
/// `drain` (through `kv_store::flush`) sends every residual. Rows that are all zeros are
/// dropped without a residual.
///
/// Memory: one residual row per key held back (at most the keys the worker pushes).
///
/// @par Thread Safety
/// All member functions may be called concurrently.
template <typename Key, typename Value>
class significance_filter final : public push_filter<Key, Value> {
public:
    explicit significance_filter(Value threshold) : threshold_(threshold) {}

    void filter(filter_batch<Key, Value>& b) override {
        std::lock_guard lock(mutex_);
        const std::size_t w = b.width;
        b.keep_if([&](std::size_t i) {
            auto row = b.row(i);
            if (!residual_.empty()) {
                if (auto it = residual_.find(b.keys[i]); it != residual_.end()) {
                    for (std::size_t j = 0; j < w && j < it->second.size(); ++j) {
                        row[j] += it->second[j];
                    }
                    residual_.erase(it);
                }
            }
            Value largest = 0;
            for (const Value v : row) {
                largest = std::max<Value>(largest, std::abs(v));
            }
            if (largest >= threshold_) {
                return true;
            }
            if (largest != 0) {
                residual_.emplace(b.keys[i], std::vector<Value>(row.begin(), row.end()));
            }
            return false;
        });
    }

    void drain(filter_batch<Key, Value>& out) override {
        std::lock_guard lock(mutex_);
        std::vector<Key> keys;
        keys.reserve(residual_.size());
        for (const auto& [k, row] : residual_) {
            if (row.size() == out.width) {
                keys.push_back(k);
            }
        }
        std::sort(keys.begin(), keys.end());
        for (const Key k : keys) {
            const auto& row = residual_.at(k);
            out.keys.push_back(k);
            out.values.insert(out.values.end(), row.begin(), row.end());
        }
        residual_.clear();
    }

    /// Keys whose change is held back now.
    [[nodiscard]] std::size_t held_keys() const {
        std::lock_guard lock(mutex_);
        return residual_.size();
    }

    [[nodiscard]] Value threshold() const noexcept { return threshold_; }

private:
    Value threshold_;
    mutable std::mutex mutex_;
    std::unordered_map<Key, std::vector<Value>> residual_;
};

/// Runs `filters` in order on `batch`.
template <typename Key, typename Value>
void apply_filters(const std::vector<std::shared_ptr<push_filter<Key, Value>>>& filters,
                   filter_batch<Key, Value>& batch) {
    for (const auto& f : filters) {
        if (batch.empty()) {
            return;
        }
        f->filter(batch);
    }
}

/// Drains every filter and merges what they held back into one batch (rows of the same
/// key added), sorted by key.
template <typename Key, typename Value>
filter_batch<Key, Value>
drain_filters(const std::vector<std::shared_ptr<push_filter<Key, Value>>>& filters,
              std::size_t width) {
    filter_batch<Key, Value> merged;
    merged.width = width;
    for (const auto& f : filters) {
        filter_batch<Key, Value> part;
        part.width = width;
        f->drain(part);
        if (part.empty()) {
            continue;
        }
        if (part.values.size() != part.keys.size() * width ||
            std::adjacent_find(part.keys.begin(), part.keys.end(), std::greater_equal<Key>{}) !=
                part.keys.end()) {
            continue; // a filter that broke the batch's shape gives nothing
        }
        filter_batch<Key, Value> next;
        next.width = width;
        std::size_t a = 0;
        std::size_t c = 0;
        while (a < merged.size() || c < part.size()) {
            const bool take_a =
                c == part.size() || (a < merged.size() && merged.keys[a] < part.keys[c]);
            const bool same =
                a < merged.size() && c < part.size() && merged.keys[a] == part.keys[c];
            if (same) {
                next.keys.push_back(merged.keys[a]);
                for (std::size_t j = 0; j < width; ++j) {
                    next.values.push_back(merged.row(a)[j] + part.row(c)[j]);
                }
                ++a;
                ++c;
            } else if (take_a) {
                next.keys.push_back(merged.keys[a]);
                next.values.insert(next.values.end(), merged.row(a).begin(), merged.row(a).end());
                ++a;
            } else {
                next.keys.push_back(part.keys[c]);
                next.values.insert(next.values.end(), part.row(c).begin(), part.row(c).end());
                ++c;
            }
        }
        merged = std::move(next);
    }
    return merged;
}

} // namespace petrel::wire
