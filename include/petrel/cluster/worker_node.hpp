// Petrel: a worker node of a job, as the training code sees it.
#pragma once

#include <petrel/cluster/member.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel {

/// A table as the job declares it (`table_registry`), as far as a worker's stores need:
/// a store made from a worker takes its width from here and checks its types.
struct declared_table {
    std::uint32_t width = 1;
    wire::scalar_type key_type = wire::scalar_type::u64;
    wire::scalar_type value_type = wire::scalar_type::f32;
    /// A dense table's keys (`table_spec::dense`); a store refuses keys outside them.
    std::optional<key_range<std::uint64_t>> dense{};
};

/// A worker that has joined its job: its id and rank, the job's view, barriers, the
/// scheduler's work for it, and what a `kv_store` needs to reach the servers
/// (`petrel::kv_store<K, V> kv(worker)`). `petrel::run` hands one to the training
/// function of each worker it hosts.
///
/// A reader (a worker of a read-only group, attached to a running job with
/// `petrel::attachment`) is a `worker_node` too: its stores pull the newest completed
/// clock without waiting and refuse to push (`errc::read_only`), and it takes part in
/// no clock, so the training group never waits for it.
///
/// @par Example
/// @code
/// petrel::run(cfg, argc, argv, [](petrel::worker_node& w) {
///     petrel::kv_store<std::uint64_t, float> kv(w);
///     if (w.rank() == 0) { /* ... */ }
///     w.barrier(petrel::group::workers, asio::use_future).get();
/// });
/// @endcode
///
/// @par Thread Safety
/// All member functions may be called from any thread.
class worker_node {
public:
    /// @throws std::invalid_argument unless `m` has joined as a worker.
    worker_node(any_transport transport, std::shared_ptr<member> m,
                std::chrono::milliseconds request_timeout = std::chrono::seconds(30))
        : transport_(std::move(transport)), member_(std::move(m)),
          request_timeout_(request_timeout) {
        const auto v = member_ ? member_->view() : nullptr;
        const auto* self = v ? v->find(member_->id()) : nullptr;
        if (!self || (self->role != node_role::worker && self->role != node_role::reader)) {
            throw std::invalid_argument("petrel::worker_node: the member has not joined as a "
                                        "worker or a reader");
        }
        read_only_ = self->role == node_role::reader;
        group_ = self->group;
        rank_ = self->index;
        // One past the highest index: nodes that went may have left the view.
        for (const auto& n : v->nodes) {
            if (n.role == node_role::worker) {
                workers_ = std::max(workers_, n.index + 1);
            } else if (n.role == node_role::server) {
                servers_ = std::max(servers_, n.index + 1);
            }
        }
    }

    /// This node's id in the job.
    [[nodiscard]] node_id id() const { return member_->id(); }
    /// Its position among the workers: 0 .. workers() - 1 (among the readers, in attach
    /// order, for a reader).
    [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
    /// One past the highest worker (server) index in the view this node joined with: the
    /// workers (servers) the job has had so far, those that went included.
    [[nodiscard]] std::uint32_t workers() const noexcept { return workers_; }
    [[nodiscard]] std::uint32_t servers() const noexcept { return servers_; }

    /// True for a reader: its stores only pull.
    [[nodiscard]] bool read_only() const noexcept { return read_only_; }
    /// Its worker group: `training_group`, or a reader's read-only group.
    [[nodiscard]] const std::string& worker_group() const noexcept { return group_; }

    /// Defines data set `d` with the scheduler (every worker of the group may call it with
    /// the same definition) and completes with this worker's share; see
    /// `member::async_assign`. Signature `void(std::error_code, data_share)`.
    ///
    /// @par Example
    /// @code
    /// auto share = w.assign({.name = "train", .examples = 60000}, asio::use_future).get();
    /// for (const auto& r : share.ranges) { /* examples [r.begin, r.end) */ }
    /// // after workers joined or left, the newest view has a new share:
    /// if (auto now = w.share("train"); now && now->version > share.version) { /* ... */ }
    /// @endcode
    template <typename CompletionToken>
    auto assign(data_set d, CompletionToken&& token) {
        if (d.group == training_group && read_only_) {
            d.group = group_; // a reader's data sets are its own group's by default
        }
        return member_->async_assign(std::move(d), std::forward<CompletionToken>(token));
    }

    /// This worker's share of data set `name` under the newest view (it changes when the
    /// group's workers change); nothing when the data set is not defined.
    [[nodiscard]] std::optional<data_share> share(std::string_view name) const {
        return member_->share(name);
    }

    /// Waits for the next round of block schedule `s`; see `member::async_round`.
    /// Signature `void(std::error_code, round_assignment)`.
    template <typename CompletionToken>
    auto next_round(block_schedule s, CompletionToken&& token) {
        if (s.group == training_group && read_only_) {
            s.group = group_;
        }
        return member_->async_round(std::move(s), std::forward<CompletionToken>(token));
    }

    /// The newest membership view.
    [[nodiscard]] std::shared_ptr<const membership_view> view() const { return member_->view(); }

    /// Waits for every live node of `g`; see `member::async_barrier`.
    template <typename CompletionToken>
    auto barrier(group g, CompletionToken&& token) {
        return member_->async_barrier(g, std::forward<CompletionToken>(token));
    }

    [[nodiscard]] member& membership() noexcept { return *member_; }
    [[nodiscard]] const std::shared_ptr<member>& membership_ptr() const noexcept { return member_; }
    [[nodiscard]] const any_transport& transport() const noexcept { return transport_; }
    [[nodiscard]] std::chrono::milliseconds request_timeout() const noexcept {
        return request_timeout_;
    }
    [[nodiscard]] asio::any_io_executor get_executor() const { return transport_.get_executor(); }

    /// The checkpoint directory the job's servers restored their tables from before this
    /// worker started (`config::restore`), empty when none. Read its clock with
    /// `petrel::read_checkpoint(dir, table_id).clock` to resume the training loop there.
    [[nodiscard]] const std::string& restored_from() const noexcept { return restored_from_; }
    void set_restored_from(std::string dir) { restored_from_ = std::move(dir); }

    /// The directory under which this worker's saves write their manifests, as the
    /// servers write their shards (`server_options::checkpoint_root`); empty: none.
    [[nodiscard]] const std::filesystem::path& checkpoint_root() const noexcept {
        return checkpoint_root_;
    }
    void set_checkpoint_root(std::filesystem::path root) { checkpoint_root_ = std::move(root); }

    /// This worker's clock on table `table_id`, shared by its stores of that table.
    /// What the job declares of table `table_id` (`config::tables`), as stores made from
    /// this worker need it: its width and types. `petrel::run` declares every table.
    void declare(std::uint32_t table_id, declared_table t) {
        std::lock_guard lock(clocks_mutex_);
        declared_[table_id] = t;
    }

    /// The declaration of `table_id`; nothing when the table is not declared.
    [[nodiscard]] std::optional<declared_table> declared(std::uint32_t table_id) const {
        std::lock_guard lock(clocks_mutex_);
        const auto it = declared_.find(table_id);
        return it == declared_.end() ? std::nullopt : std::optional<declared_table>(it->second);
    }

    /// This worker's clock on `table_id` starts at `start` (a restored job's clock, from
    /// the checkpoint), so that its stores count clocks from the job's first iteration.
    /// `petrel::run` calls it for every table of the checkpoint it restored.
    void resume_at(std::uint32_t table_id, clock_type start) {
        clock_of(table_id)->start_at(start);
    }

    [[nodiscard]] std::shared_ptr<detail::worker_clock> clock_of(std::uint32_t table_id) {
        std::lock_guard lock(clocks_mutex_);
        auto& c = clocks_[table_id];
        if (!c) {
            c = std::make_shared<detail::worker_clock>();
        }
        return c;
    }

    /// Leaves the clock of every table on every live server, so that nobody waits for
    /// this worker any more; waits for the servers' answers, at most `timeout` each.
    /// `petrel::run` calls it when the training function returns. Blocks: do not call it
    /// from the transport's executor. Returns the first error.
    std::error_code finish(std::chrono::milliseconds timeout) {
        if (read_only_) {
            return {}; // a reader is in no clock
        }
        const auto v = view();
        std::vector<std::shared_ptr<detail::request_link>> links;
        std::vector<std::future<std::error_code>> answers;
        for (const auto* n : v->of_role(node_role::server)) {
            if (n->state != node_state::alive) {
                continue;
            }
            auto link = std::make_shared<detail::request_link>(transport_, n->address, timeout);
            wire::message m;
            m.header.kind = wire::message_kind::clock;
            m.header.flags = wire::flag_finish | wire::flag_all_tables;
            m.header.sender = id();
            m.header.worker = rank_;
            m.header.range_begin = 0;
            m.header.range_end = key_space_end<std::uint64_t>;
            auto answered = std::make_shared<std::promise<std::error_code>>();
            answers.push_back(answered->get_future());
            link->request(std::move(m), [answered](std::error_code ec, wire::message&&) {
                answered->set_value(ec);
            });
            links.push_back(std::move(link));
        }
        std::error_code first;
        for (auto& a : answers) {
            if (auto ec = a.get(); ec && !first) {
                first = ec;
            }
        }
        for (auto& l : links) {
            l->close();
        }
        return first;
    }

private:
    any_transport transport_;
    std::shared_ptr<member> member_;
    std::chrono::milliseconds request_timeout_;
    std::string restored_from_;
    std::filesystem::path checkpoint_root_;
    std::uint32_t rank_ = 0;
    bool read_only_ = false;
    std::string group_;
    std::uint32_t workers_ = 0;
    std::uint32_t servers_ = 0;
    mutable std::mutex clocks_mutex_; // guards clocks_ and declared_; takes no other lock
    std::map<std::uint32_t, declared_table> declared_;
    std::map<std::uint32_t, std::shared_ptr<detail::worker_clock>> clocks_;
};

} // namespace petrel
