// Petrel: the scheduler's work assignment: data shares and model-parallel rounds.
#pragma once

#include <petrel/cluster/detail/text.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/core/key_range.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel {

/// The group of a job's training workers. Read-only groups (readers) have other names.
inline constexpr std::string_view training_group = "train";

/// One file of a data set divided by file and offset.
struct data_file {
    std::string path{};
    std::uint64_t bytes = 0;

    friend bool operator==(const data_file&, const data_file&) = default;
};

/// A data set the scheduler divides among the live workers of a group: either examples
/// `[0, examples)` by index, or the records of `files` (in order) by file and offset.
///
/// The data is cut into `chunks` pieces of nearly equal size, and every chunk belongs to
/// exactly one live worker of the group. When a worker leaves or fails, its chunks go to
/// the others (the least loaded first); when one joins, the most loaded give it chunks
/// until every worker holds `chunks / workers` or one more. Nobody else's chunks move.
struct data_set {
    std::string name{};
    /// The group whose workers share the data: `training_group`, or a reader group.
    std::string group = std::string(training_group);
    /// By example index: how many examples (leave `files` empty).
    std::uint64_t examples = 0;
    /// By file and offset: the files and the size of one record, which divides every
    /// file's size. Shares are whole records. For records of varying size (lines), use
    /// `record_bytes = 1` and let a record belong to the share in which it starts.
    std::vector<data_file> files{};
    std::uint64_t record_bytes = 1;
    /// How many pieces the data is cut into; 0 picks `min(units, 1024)`.
    std::uint32_t chunks = 0;

    friend bool operator==(const data_set&, const data_set&) = default;

    /// Examples, or records over all files.
    [[nodiscard]] std::uint64_t units() const noexcept {
        if (files.empty()) {
            return examples;
        }
        std::uint64_t n = 0;
        for (const auto& f : files) {
            n += f.bytes / (record_bytes == 0 ? 1 : record_bytes);
        }
        return n;
    }

    /// What is wrong with this definition; empty when nothing is.
    [[nodiscard]] std::string check() const {
        if (name.empty() || name.size() > 256) {
            return "a data set needs a name of 1 to 256 bytes";
        }
        if (group.empty() || group.size() > 256) {
            return "data set '" + name + "': a group name has 1 to 256 bytes";
        }
        if (!files.empty() && examples != 0) {
            return "data set '" + name + "': give examples or files, not both";
        }
        if (files.size() > max_files) {
            return "data set '" + name + "': at most " + std::to_string(max_files) + " files";
        }
        if (record_bytes == 0) {
            return "data set '" + name + "': record_bytes must be at least 1";
        }
        for (const auto& f : files) {
            if (f.path.empty() || f.path.size() > detail::max_text_bytes) {
                return "data set '" + name + "': a file needs a path of 1 to 4096 bytes";
            }
            if (f.bytes % record_bytes != 0) {
                return "data set '" + name + "': " + f.path + " holds " + std::to_string(f.bytes) +
                       " bytes, not a whole number of " + std::to_string(record_bytes) +
                       "-byte records";
            }
        }
        if (units() == 0) {
            return "data set '" + name + "' is empty";
        }
        if (chunks > max_chunks) {
            return "data set '" + name + "': at most " + std::to_string(max_chunks) + " chunks";
        }
        if (std::uint64_t{chunk_count()} * std::max<std::size_t>(files.size(), 1) > max_work) {
            return "data set '" + name + "': chunks times files exceeds " +
                   std::to_string(max_work) + " (fewer chunks or files)";
        }
        return {};
    }

    /// The number of chunks the data is cut into.
    [[nodiscard]] std::uint32_t chunk_count() const noexcept {
        const std::uint64_t want = chunks == 0 ? 1024 : chunks;
        return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, std::min(want, units())));
    }

    /// The units `[begin, end)` of chunk `c`.
    [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> chunk(std::uint32_t c) const noexcept {
        const std::uint64_t u = units();
        const std::uint64_t n = chunk_count();
        const std::uint64_t q = u / n;
        const std::uint64_t r = u % n;
        const auto at = [&](std::uint64_t i) { return i * q + std::min(i, r); };
        return {at(c), at(c + 1)};
    }

    static constexpr std::uint32_t max_files = 4096;
    static constexpr std::uint32_t max_chunks = 1u << 16;
    /// Chunks times files: bounds the work of computing shares from untrusted input.
    static constexpr std::uint64_t max_work = std::uint64_t{1} << 20;
};

/// A contiguous part of a data set: examples `[begin, end)` (`path` empty), or the bytes
/// `[begin, end)` of the file `path`.
struct data_range {
    std::string path{};
    std::uint64_t begin = 0;
    std::uint64_t end = 0;

    friend bool operator==(const data_range&, const data_range&) = default;
};

/// What one worker of a group is to process of a data set under one view.
struct data_share {
    std::string data_set{};
    /// The view that made this assignment: a larger version is a newer share.
    std::uint64_t version = 0;
    /// The ranges, in data order; adjacent chunks are merged.
    std::vector<data_range> ranges{};
    /// Examples, or records.
    std::uint64_t units = 0;

    friend bool operator==(const data_share&, const data_share&) = default;

    /// True when `example` (an index) is in the share.
    [[nodiscard]] bool contains(std::uint64_t example) const noexcept {
        return std::any_of(ranges.begin(), ranges.end(), [&](const data_range& r) {
            return r.path.empty() && r.begin <= example && example < r.end;
        });
    }
};

/// A data set and which node holds each of its chunks (`no_node` while its group has no
/// live worker). Part of the membership view.
struct data_assignment {
    data_set set{};
    std::vector<node_id> owners{};

    friend bool operator==(const data_assignment&, const data_assignment&) = default;

    /// Gives every chunk to one of `live` (ids in ascending order), moving as few chunks
    /// as possible: see `data_set`. With nobody live, every chunk is unowned.
    void rebalance(const std::vector<node_id>& live) {
        const std::uint32_t n_chunks = set.chunk_count();
        owners.resize(n_chunks, no_node);
        if (live.empty()) {
            std::fill(owners.begin(), owners.end(), no_node);
            return;
        }
        const auto position = [&](node_id id) -> std::optional<std::size_t> {
            auto it = std::lower_bound(live.begin(), live.end(), id);
            if (it == live.end() || *it != id) {
                return std::nullopt;
            }
            return static_cast<std::size_t>(it - live.begin());
        };
        std::vector<std::vector<std::uint32_t>> held(live.size());
        std::vector<std::uint32_t> orphans;
        for (std::uint32_t c = 0; c < n_chunks; ++c) {
            if (auto p = position(owners[c])) {
                held[*p].push_back(c);
            } else {
                orphans.push_back(c);
            }
        }
        // Quotas: chunks / workers each, and one more for the most loaded (ties: lowest id).
        const std::size_t n = live.size();
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return held[a].size() > held[b].size();
        });
        std::vector<std::size_t> quota(n, n_chunks / n);
        for (std::size_t i = 0; i < n_chunks % n; ++i) {
            ++quota[order[i]];
        }
        for (std::size_t p = 0; p < n; ++p) {
            while (held[p].size() > quota[p]) {
                orphans.push_back(held[p].back()); // give up the last chunks
                held[p].pop_back();
            }
        }
        std::sort(orphans.begin(), orphans.end());
        std::size_t next = 0;
        for (std::size_t p = 0; p < n && next < orphans.size(); ++p) {
            while (held[p].size() < quota[p] && next < orphans.size()) {
                held[p].push_back(orphans[next]);
                owners[orphans[next++]] = live[p];
            }
        }
    }

    /// The share of node `id` (empty when it holds no chunk).
    [[nodiscard]] data_share share_of(node_id id, std::uint64_t version) const {
        data_share s;
        s.data_set = set.name;
        s.version = version;
        const bool by_file = !set.files.empty();
        for (std::uint32_t c = 0; c < owners.size(); ++c) {
            if (owners[c] != id) {
                continue;
            }
            auto [b, e] = set.chunk(c);
            s.units += e - b;
            if (!by_file) {
                if (!s.ranges.empty() && s.ranges.back().end == b) {
                    s.ranges.back().end = e;
                } else {
                    s.ranges.push_back({{}, b, e});
                }
                continue;
            }
            // Records [b, e) over the files in order: cut at file boundaries.
            std::uint64_t first = 0; // the first record of the current file
            for (const auto& f : set.files) {
                const std::uint64_t records = f.bytes / set.record_bytes;
                const std::uint64_t lo = std::max(b, first);
                const std::uint64_t hi = std::min(e, first + records);
                if (lo < hi) {
                    const std::uint64_t bb = (lo - first) * set.record_bytes;
                    const std::uint64_t be = (hi - first) * set.record_bytes;
                    if (!s.ranges.empty() && s.ranges.back().path == f.path &&
                        s.ranges.back().end == bb) {
                        s.ranges.back().end = be;
                    } else {
                        s.ranges.push_back({f.path, bb, be});
                    }
                }
                first += records;
            }
        }
        return s;
    }
};

/// A model-parallel schedule: the keys `[begin, end)` of table `table_id` cut into
/// `blocks` contiguous blocks, handed to the live workers of `group` one block each per
/// round, so that no two workers hold the same block in the same round, and rotated:
/// in round `r` the worker at position `p` (of `n`, in id order) holds block
/// `(p + r) mod max(n, blocks)` when that is below `blocks` and none otherwise. Over
/// `max(n, blocks)` rounds every worker holds every block once (the stratified schedule
/// of distributed SGD for matrix factorization). A round starts once every live worker
/// of the group has asked for it; a worker that leaves or fails is no longer waited for.
/// After `rounds` rounds the schedule is finished.
struct block_schedule {
    std::string name{};
    std::string group = std::string(training_group);
    std::uint32_t table_id = 0;
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint32_t blocks = 1;
    std::uint64_t rounds = 1;

    friend bool operator==(const block_schedule&, const block_schedule&) = default;

    /// What is wrong with this definition; empty when nothing is.
    [[nodiscard]] std::string check() const {
        if (name.empty() || name.size() > 256) {
            return "a block schedule needs a name of 1 to 256 bytes";
        }
        if (group.empty() || group.size() > 256) {
            return "block schedule '" + name + "': a group name has 1 to 256 bytes";
        }
        if (blocks == 0 || blocks > max_blocks) {
            return "block schedule '" + name + "': 1 to " + std::to_string(max_blocks) + " blocks";
        }
        if (end <= begin || end - begin < blocks) {
            return "block schedule '" + name +
                   "': the key range must hold at least one key per "
                   "block";
        }
        return {};
    }

    /// The keys of block `b`.
    [[nodiscard]] key_range<std::uint64_t> block(std::uint32_t b) const noexcept {
        const std::uint64_t size = end - begin;
        const std::uint64_t q = size / blocks;
        const std::uint64_t r = size % blocks;
        const auto at = [&](std::uint64_t i) {
            return begin + i * q + std::min<std::uint64_t>(i, r);
        };
        return {at(b), at(b + 1)};
    }

    static constexpr std::uint32_t max_blocks = 1u << 16;
};

/// No block this round.
inline constexpr std::uint32_t no_block = 0xFFFFFFFFu;

/// One round of a block schedule: every participant and its block.
struct round_assignment {
    std::string schedule{};
    /// 0, 1, ...; equal to the schedule's `rounds` once it is finished.
    std::uint64_t round = 0;
    /// Set once every round has been handed out: nothing more to do.
    bool finished = false;
    /// The view version the round started under.
    std::uint64_t version = 0;
    /// The node that asked.
    node_id self = no_node;
    /// Every participant (id order) and its block (`no_block`: none this round).
    std::vector<std::pair<node_id, std::uint32_t>> blocks{};

    friend bool operator==(const round_assignment&, const round_assignment&) = default;

    /// The block of `id` this round, or `no_block`.
    [[nodiscard]] std::uint32_t block_of(node_id id) const noexcept {
        for (const auto& [n, b] : blocks) {
            if (n == id) {
                return b;
            }
        }
        return no_block;
    }
    [[nodiscard]] std::uint32_t block() const noexcept { return block_of(self); }

    /// Hands out round `round` of a schedule with `blocks` blocks to `participants`.
    [[nodiscard]] static std::vector<std::pair<node_id, std::uint32_t>>
    rotate(std::uint32_t blocks, std::uint64_t round, const std::vector<node_id>& participants) {
        std::vector<std::pair<node_id, std::uint32_t>> out;
        const std::uint64_t slots = std::max<std::uint64_t>(participants.size(), blocks);
        for (std::size_t p = 0; p < participants.size(); ++p) {
            const std::uint64_t s = (p + round) % slots;
            out.emplace_back(participants[p],
                             s < blocks ? static_cast<std::uint32_t>(s) : no_block);
        }
        return out;
    }
};

/// The scheduler's part of the membership view: every data set's assignment.
struct work_schedule {
    std::vector<data_assignment> data{};

    friend bool operator==(const work_schedule&, const work_schedule&) = default;

    [[nodiscard]] const data_assignment* find(std::string_view name) const noexcept {
        for (const auto& d : data) {
            if (d.set.name == name) {
                return &d;
            }
        }
        return nullptr;
    }

    static constexpr std::uint32_t max_data_sets = 256;
};

// ---- serialization (counts checked against limits before allocating) -------------------

template <class Archive>
void save(Archive& ar, const data_set& d) {
    detail::save_text(ar, d.name);
    detail::save_text(ar, d.group);
    ar(d.examples, d.record_bytes, d.chunks);
    ar(static_cast<std::uint32_t>(d.files.size()));
    for (const auto& f : d.files) {
        detail::save_text(ar, f.path);
        ar(f.bytes);
    }
}

template <class Archive>
void load(Archive& ar, data_set& d) {
    detail::load_text(ar, d.name);
    detail::load_text(ar, d.group);
    ar(d.examples, d.record_bytes, d.chunks);
    d.files.resize(detail::load_count(ar, data_set::max_files, "files in a data set"));
    for (auto& f : d.files) {
        detail::load_text(ar, f.path);
        ar(f.bytes);
    }
}

template <class Archive>
void save(Archive& ar, const data_assignment& a) {
    ar(a.set);
    ar(static_cast<std::uint32_t>(a.owners.size()));
    ar(cereal::binary_data(a.owners.data(), a.owners.size() * sizeof(node_id)));
}

template <class Archive>
void load(Archive& ar, data_assignment& a) {
    ar(a.set);
    if (auto why = a.set.check(); !why.empty()) {
        throw std::domain_error(why);
    }
    const auto n = detail::load_count(ar, data_set::max_chunks, "chunks in a data set");
    if (n != a.set.chunk_count()) {
        throw std::domain_error("a data set's owners do not match its chunks");
    }
    a.owners.resize(n);
    ar(cereal::binary_data(a.owners.data(), a.owners.size() * sizeof(node_id)));
}

template <class Archive>
void save(Archive& ar, const block_schedule& s) {
    detail::save_text(ar, s.name);
    detail::save_text(ar, s.group);
    ar(s.table_id, s.begin, s.end, s.blocks, s.rounds);
}

template <class Archive>
void load(Archive& ar, block_schedule& s) {
    detail::load_text(ar, s.name);
    detail::load_text(ar, s.group);
    ar(s.table_id, s.begin, s.end, s.blocks, s.rounds);
}

template <class Archive>
void save(Archive& ar, const round_assignment& r) {
    detail::save_text(ar, r.schedule);
    ar(r.round, r.finished, r.version, r.self);
    ar(static_cast<std::uint32_t>(r.blocks.size()));
    for (const auto& [n, b] : r.blocks) {
        ar(n, b);
    }
}

template <class Archive>
void load(Archive& ar, round_assignment& r) {
    detail::load_text(ar, r.schedule);
    ar(r.round);
    r.finished = detail::load_flag(ar);
    ar(r.version, r.self);
    r.blocks.resize(detail::load_count(ar, detail::max_view_nodes, "round participants"));
    for (auto& [n, b] : r.blocks) {
        ar(n, b);
    }
}

template <class Archive>
void save(Archive& ar, const work_schedule& w) {
    ar(static_cast<std::uint32_t>(w.data.size()));
    for (const auto& d : w.data) {
        ar(d);
    }
}

template <class Archive>
void load(Archive& ar, work_schedule& w) {
    w.data.resize(detail::load_count(ar, work_schedule::max_data_sets, "data sets"));
    for (auto& d : w.data) {
        ar(d);
    }
}

} // namespace petrel
