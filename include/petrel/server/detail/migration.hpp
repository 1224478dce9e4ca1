// Petrel: how a server's partitions move while servers join and leave.
#pragma once

#include <petrel/server/replication_plan.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace petrel::detail {

/// The part of a server that moves partitions to joining servers, as a state machine fed
/// by the server (under its lock): it decides, the server acts (copies rows, sends the
/// hand-over) after each decision. A pure value type.
///
/// As a primary (a *teacher*): a plan whose `next_primaries` move partitions of this server
/// to a joining server (a *learner*) makes it copy them there (`moves::copies`), then send
/// the learner every later update of them (`learners`), until a plan makes the learner
/// their primary: it then sends the hand-over, the end of its ownership
/// (`moves::hand_overs`), copying the partitions again first if something it sent did not
/// arrive (`failed`).
///
/// As a learner: it notes which primaries teach it, and whether their copies have ended
/// (`join_ready`); once a plan makes it the primary of what they taught it, it waits for
/// their hand-overs (`awaiting_hand_over`) before it serves workers, as their last updates
/// may still be on their way.
class migration {
public:
    using partitions = std::vector<std::uint32_t>;

    /// What a new plan asks of this server, in order.
    struct moves {
        struct hand_over {
            std::uint32_t to = 0;
            partitions parts;
            bool copy_again = false; // copy `parts` again first: something did not arrive
        };
        struct copy {
            std::uint32_t to = 0;
            partitions parts;
        };
        std::vector<hand_over> hand_overs;
        std::vector<copy> copies;
    };

    /// Follows plan `now` (after `old`) as server `self`. @throws std::bad_alloc
    moves follow(const replication_plan& old, const replication_plan& now, std::uint32_t self) {
        moves m;
        // The hand-over: partitions taught to a learner that is now their primary.
        for (const auto& [learner, parts] : teaching_) {
            const auto to = learner;
            const bool now_its =
                !parts.empty() && std::all_of(parts.begin(), parts.end(), [&](std::uint32_t p) {
                    return primary_of_partition(now, to, p);
                });
            if (!now_its || !peer_of(now, to)) {
                continue;
            }
            const bool again = failed_.erase(to) != 0;
            handing_to_.insert(to);
            m.hand_overs.push_back({to, parts, again});
        }
        // Teaching: copy to the learners of this plan whose partitions are new.
        auto teach = moving_from(now, self);
        for (const auto& [to, parts] : teach) {
            const auto was = teaching_.find(to);
            if ((was != teaching_.end() && was->second == parts) || !peer_of(now, to)) {
                continue;
            }
            failed_.erase(to);
            copied_.erase(to);
            m.copies.push_back({to, parts});
        }
        teaching_ = std::move(teach);
        std::erase_if(copied_, [&](const auto& e) { return teaching_.count(e.first) == 0; });
        std::erase_if(handing_to_, [&](std::uint32_t to) { return !peer_of(now, to); });
        // Learning: the primaries that teach this server under this plan.
        const auto sources = moving_to(now, self);
        const auto before = moving_to(old, self);
        std::map<std::uint32_t, lesson> learn;
        for (const auto& [from, parts] : sources) {
            const auto b = before.find(from);
            const auto l = learning_.find(from);
            if (b != before.end() && b->second == parts && l != learning_.end()) {
                learn[from] = l->second; // the same partitions: the copy stands
            } else {
                learn[from] = lesson{now.version, false};
            }
        }
        // Primaries whose taught partitions this plan makes this server's: their last
        // updates may still be on the way; workers wait for their hand-over.
        for (const auto& [from, parts] : before) {
            const bool mine = std::all_of(parts.begin(), parts.end(), [&](std::uint32_t p) {
                return primary_of_partition(now, self, p);
            });
            if (mine && sources.count(from) == 0 && peer_of(now, from)) {
                awaiting_.insert(from);
            }
        }
        // A teacher that is no longer alive (not in the plan) sends no hand-over.
        std::erase_if(awaiting_, [&](std::uint32_t from) { return !peer_of(now, from); });
        learning_ = std::move(learn);
        return m;
    }

    // As a teacher.

    /// Each learner and the partitions this server teaches it.
    [[nodiscard]] const std::map<std::uint32_t, partitions>& learners() const noexcept {
        return teaching_;
    }
    /// Something sent to learner `to` did not arrive: its partitions are copied again
    /// before the hand-over.
    void failed(std::uint32_t to) { failed_.insert(to); }
    /// Takes the mark of `failed`: whether learner `to` must be copied `parts` again.
    bool take_failed(std::uint32_t to) { return failed_.erase(to) != 0; }
    /// The end of a copy of `parts` to learner `to`, made for plan `version`, was answered
    /// (`ok`): true when it is worth sending again (it failed, and `to` still learns
    /// `parts`).
    bool copy_answered(std::uint32_t to, const partitions& parts, std::uint64_t version, bool ok) {
        const auto it = teaching_.find(to);
        if (it == teaching_.end() || it->second != parts) {
            return false; // another plan moves other partitions to it
        }
        if (ok) {
            copied_[to] = version; // it holds them as of the end
        }
        return !ok;
    }
    /// The hand-over to `to` was answered (`ok`), or will not be sent again (`last`).
    void hand_over_answered(std::uint32_t to, bool ok, bool last) {
        if (ok || last) {
            handing_to_.erase(to);
        }
    }
    /// `to` left the plan before its hand-over: nobody waits for it.
    void hand_over_dropped(std::uint32_t to) { handing_to_.erase(to); }
    /// Plan `version` when every learner acknowledged the end of its copy (this server
    /// may hand over and leave), else 0.
    [[nodiscard]] std::uint64_t hand_over_ready(std::uint64_t version) const {
        const bool all = !teaching_.empty() &&
                         std::all_of(teaching_.begin(), teaching_.end(),
                                     [&](const auto& e) { return copied_.count(e.first) != 0; });
        return all ? version : 0;
    }
    /// Whether a hand-over this server sent is not acknowledged yet.
    [[nodiscard]] bool handing_over() const noexcept { return !handing_to_.empty(); }

    // As a learner.

    /// Whether this server takes updates from primary `origin` as its learner: it learns
    /// partitions of it, or waits for its hand-over of them.
    [[nodiscard]] bool learns_from(std::uint32_t origin) const {
        return learning_.count(origin) != 0 || awaiting_.count(origin) != 0;
    }
    /// Whether primary `from` taught this server partitions, and the copy ended.
    [[nodiscard]] bool taught_by(std::uint32_t from) const {
        const auto l = learning_.find(from);
        return l != learning_.end() && l->second.done;
    }
    /// The end of primary `from`'s copy, made for plan `version`, arrived.
    void copy_ended(std::uint32_t from, std::uint64_t version) {
        if (auto it = learning_.find(from); it != learning_.end() && version >= it->second.since) {
            it->second.done = true;
        }
    }
    /// Primary `from` handed its partitions over: true when no hand-over is awaited any
    /// more (workers may be served).
    bool handed_over(std::uint32_t from) {
        awaiting_.erase(from);
        learning_.erase(from);
        return awaiting_.empty();
    }
    /// Plan `version` when every primary that teaches this server ended its copy, else 0.
    [[nodiscard]] std::uint64_t join_ready(std::uint64_t version) const {
        const bool all =
            !learning_.empty() && std::all_of(learning_.begin(), learning_.end(),
                                              [](const auto& e) { return e.second.done; });
        return all ? version : 0;
    }
    /// Whether this server waits for a hand-over before serving workers.
    [[nodiscard]] bool awaiting_hand_over() const noexcept { return !awaiting_.empty(); }

    // A copy down this server's chain deferred until every hand-over has arrived.

    /// Defers the copy down the chain: true when it is, as a hand-over is awaited.
    bool defer_chain_copy() {
        if (awaiting_.empty()) {
            return false;
        }
        chain_copy_ = true;
        return true;
    }
    /// Takes the deferred copy once no hand-over is awaited: whether it is due now.
    bool take_chain_copy() {
        if (!chain_copy_ || !awaiting_.empty()) {
            return false;
        }
        chain_copy_ = false;
        return true;
    }

private:
    struct lesson {
        std::uint64_t since = 0; // the plan version its partitions were set by
        bool done = false;       // its copy has ended
    };

    std::map<std::uint32_t, partitions> teaching_;  // learner → partitions taught to it
    std::set<std::uint32_t> failed_;                // learners something did not reach
    std::map<std::uint32_t, std::uint64_t> copied_; // learner → plan its copy ended for
    std::set<std::uint32_t> handing_to_;            // hand-overs not acknowledged yet
    std::map<std::uint32_t, lesson> learning_;      // teacher → its copy to this server
    std::set<std::uint32_t> awaiting_;              // teachers whose hand-over is awaited
    bool chain_copy_ = false;
};

} // namespace petrel::detail
