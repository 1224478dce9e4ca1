// Petrel: a reader attached to a running job from outside it: `petrel::attachment`.
#pragma once

#include <petrel/cluster/member.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace petrel {

struct attach_options {
    /// The running job's root address ("host:port") and id.
    std::string root{};
    std::string job_id = "petrel";
    /// The read-only group this reader belongs to (not `training_group`).
    std::string group = "inference";
    /// Names the reader in logs with its process rank.
    std::uint32_t rank = 0;
    /// Threads that run the reader's network io.
    std::uint32_t threads = 1;
    std::chrono::milliseconds heartbeat_interval{200};
    std::chrono::milliseconds heartbeat_timeout{2000};
    /// How long attaching keeps trying to reach the root.
    std::chrono::milliseconds startup_timeout{30000};
    /// Every pull completes by then.
    std::chrono::milliseconds request_timeout{30000};
    /// The job's secret, when it has one (`transport_options::secret`), or the reader's
    /// credential made from it (`reader_credential`) with `credential` set to
    /// `access::read_only`: then the job's servers and manager take only reads and a
    /// reader's control messages from this reader.
    std::string secret{};
    access credential = access::full;
    /// The job's TLS files, when it runs mutual TLS (`transport_options::tls`): a
    /// certificate the job's authority signed, its key, and the authority's certificates.
    tls_files tls{};
};

/// A reader: a worker of a read-only group (an inference service, an evaluator) that
/// attaches to a running job by its root address, pulls the newest completed clock of
/// the job's tables without ever holding back the training clock, and detaches without
/// disturbing the job. It owns its io threads; `node()` is what `kv_store` takes.
///
/// @par Example
/// @code
/// petrel::attachment reader({.root = "10.0.0.1:9000", .job_id = "job-7", .group = "serve"});
/// petrel::kv_store<std::uint64_t, float> kv(reader.node(), {.table_id = 0});
/// auto weights = kv.pull(petrel::key_range<std::uint64_t>{0, 1000}, asio::use_future).get();
/// std::uint64_t clock = weights.min_clock(); // every push of the clocks below is in
/// reader.detach();
/// @endcode
///
/// @par Thread Safety
/// `node()` may be used from any thread; `detach` and the destructor from one.
class attachment {
public:
    /// Attaches; @throws std::system_error when the job refuses or cannot be reached
    /// (`errc::manager_unreachable`, `errc::job_mismatch`, `errc::invalid_argument`...),
    /// with the manager's reason in `what()`.
    explicit attachment(attach_options opts, logger log = stderr_logger())
        : work_(asio::make_work_guard(io_)) {
        for (std::uint32_t i = 0; i < std::max<std::uint32_t>(opts.threads, 1); ++i) {
            threads_.emplace_back([this] { io_.run(); });
        }
        try {
            transport_options topts;
            topts.log = log;
            topts.secret = opts.secret;
            topts.credential = opts.credential;
            topts.tls = opts.tls;
            member_options mo;
            mo.root = opts.root;
            mo.job_id = opts.job_id;
            mo.role = node_role::reader;
            mo.group = opts.group;
            mo.rank = opts.rank;
            mo.heartbeat_interval = opts.heartbeat_interval;
            mo.heartbeat_timeout = opts.heartbeat_timeout;
            mo.startup_timeout = opts.startup_timeout;
            member_ = std::make_shared<member>(tcp_transport(io_.get_executor(), topts), mo);
            auto joined = member_->async_join(asio::use_future);
            try {
                joined.get();
            } catch (const std::system_error& e) {
                const auto why = member_->failure();
                throw std::system_error(e.code(), "petrel::attachment: " +
                                                      (why.empty() ? e.code().message() : why));
            }
            node_ = std::make_unique<worker_node>(tcp_transport(io_.get_executor(), topts), member_,
                                                  opts.request_timeout);
            leave_timeout_ = opts.heartbeat_timeout;
        } catch (...) {
            stop();
            throw;
        }
    }

    attachment(const attachment&) = delete;
    attachment& operator=(const attachment&) = delete;
    ~attachment() { detach(); }

    /// The reader, for `kv_store` and the scheduler.
    [[nodiscard]] worker_node& node() noexcept { return *node_; }

    /// Leaves the job (the manager records it as left; nobody notices otherwise) and
    /// stops the io threads. Stores made from `node()` must be gone first. Idempotent.
    void detach() {
        if (member_ && node_) {
            auto left = member_->async_leave(asio::use_future);
            if (left.wait_for(leave_timeout_ * 2) == std::future_status::ready) {
                try {
                    left.get();
                } catch (const std::system_error&) {
                    // The job is over or the manager is gone: nothing to tell it.
                }
            }
        }
        stop();
    }

private:
    void stop() {
        node_.reset();
        if (member_) {
            member_->close();
            member_.reset();
        }
        work_.reset();
        io_.stop();
        for (auto& t : threads_) {
            if (t.joinable()) {
                t.join();
            }
        }
        threads_.clear();
    }

    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
    std::shared_ptr<member> member_;
    std::unique_ptr<worker_node> node_;
    std::chrono::milliseconds leave_timeout_{2000};
};

} // namespace petrel
