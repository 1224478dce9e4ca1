// Petrel: a worker node of a job, as the training code sees it.
#pragma once

#include <petrel/cluster/member.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/key.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/transport/transport.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace petrel {

/// A worker that has joined its job: its id and rank, the job's view, barriers, and
/// what a `kv_store` needs to reach the servers (`petrel::kv_store<K, V> kv(worker)`).
/// `petrel::run` hands one to the training function of each worker it hosts.
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
        if (!self || self->role != node_role::worker) {
            throw std::invalid_argument("petrel::worker_node: the member has not joined as a "
                                        "worker");
        }
        rank_ = self->index;
        workers_ = static_cast<std::uint32_t>(v->of_role(node_role::worker).size());
        servers_ = static_cast<std::uint32_t>(v->of_role(node_role::server).size());
    }

    /// This node's id in the job.
    [[nodiscard]] node_id id() const { return member_->id(); }
    /// Its position among the workers: 0 .. workers() - 1.
    [[nodiscard]] std::uint32_t rank() const noexcept { return rank_; }
    [[nodiscard]] std::uint32_t workers() const noexcept { return workers_; }
    [[nodiscard]] std::uint32_t servers() const noexcept { return servers_; }

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

    /// This worker's clock on table `table_id`, shared by its stores of that table.
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
    std::uint32_t rank_ = 0;
    std::uint32_t workers_ = 0;
    std::uint32_t servers_ = 0;
    std::mutex clocks_mutex_;
    std::map<std::uint32_t, std::shared_ptr<detail::worker_clock>> clocks_;
};

} // namespace petrel
