// Petrel: a server's checkpoint writer: shard files compressed, written and flushed with
// no lock of the server held, one at a time.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/checkpoint_call.hpp>
#include <petrel/server/remote_function.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace petrel {

/// Writes a server's checkpoint shards.
///
/// A server answers the checkpoint call (`kv_store::save`) in two steps. Under its lock
/// it takes the snapshot: a copy of the rows it holds as a primary, at the call's
/// consistent cut, with what the manifest records of the table (a `shard_job`). It hands
/// that to the writer (`enqueue`), whose own thread compresses the rows, writes the shard
/// file, flushes it to storage (`detail::write_shard`) and then sends the reply. Neither
/// the server's lock nor an I/O thread waits for the disk: the server serves every
/// table meanwhile, the one being saved included, on every connection.
///
/// Shards are written one at a time, in the order they were queued (a shard is written
/// to a temporary file of a fixed name, then renamed). Servers of one process may share
/// a writer (`server_options::checkpoints`) so that their saves take turns at the disk.
/// The thread starts with the first job and stops when the writer is destroyed, after
/// the write in progress; jobs not started by then complete with `errc::shut_down`.
///
/// @par Thread Safety
/// Every member function may be called from any thread. Lock order: `mutex_` (the queue)
/// and `write_mutex_` (the disk) are each taken alone, never with a server's lock.
class checkpoint_writer {
public:
    /// Writes a shard file and returns its record: `detail::write_shard`, or a stand-in
    /// (tests use one that waits, to observe a save in progress).
    using write_function =
        std::function<shard_info(const std::filesystem::path&, std::uint32_t, const shard_table&)>;

    /// What a server hands the writer: the snapshot of its rows of one table, the file
    /// to write them to, and the manifest's record of the table, whose `shard` the write
    /// fills in.
    struct shard_job {
        std::filesystem::path file;
        std::uint32_t server = 0;
        shard_table rows;
        detail::saved_shard record;
    };

    /// The outcome of a write: the encoded record (the call's result) on success, else
    /// the error and what went wrong.
    struct outcome {
        std::error_code error;
        std::vector<std::byte> result;
        std::string message;
    };

    /// Called with a job's outcome on the writer's thread.
    using completion = std::function<void(outcome)>;

    explicit checkpoint_writer(write_function write = &detail::write_shard)
        : write_(std::move(write)) {}

    checkpoint_writer(const checkpoint_writer&) = delete;
    checkpoint_writer& operator=(const checkpoint_writer&) = delete;

    ~checkpoint_writer() {
        std::deque<pending> left;
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
            left.swap(queue_);
        }
        wake_.notify_all();
        if (thread_.joinable()) {
            thread_.join();
        }
        for (auto& p : left) {
            p.done(outcome{make_error_code(errc::shut_down), {}, "the server is closing"});
        }
    }

    /// Queues `job`; the writer's thread writes it after those queued before and then
    /// calls `done` with the outcome (as `write`).
    void enqueue(shard_job job, logger log, completion done) {
        {
            std::lock_guard lock(mutex_);
            if (!stopping_) {
                queue_.push_back({std::move(job), std::move(log), std::move(done)});
                if (!thread_.joinable()) {
                    thread_ = std::thread([this] { run(); });
                }
                wake_.notify_one();
                return;
            }
        }
        done(outcome{make_error_code(errc::shut_down), {}, "the server is closing"});
    }

    /// Writes `job`'s shard on the calling thread, after any write in progress. A file that cannot
    /// be written gives `errc::checkpoint_failed` with the reason (also logged to `log`); memory
    /// that runs out, `errc::out_of_memory`.
    outcome write(shard_job job, const logger& log = {}) {
        outcome out;
        try {
            {
                std::lock_guard lock(write_mutex_);
                job.record.shard = write_(job.file, job.server, job.rows);
            }
            detail::append_binary(out.result, job.record);
        } catch (const std::bad_alloc&) {
            out.error = errc::out_of_memory;
        } catch (const std::exception& e) {
            out.error = errc::checkpoint_failed;
            out.message = e.what();
            if (log) {
                log(log_level::error, "petrel server " + std::to_string(job.server) +
                                          ": checkpoint failed: " + out.message);
            }
        }
        if (out.error) {
            out.result.clear();
        }
        return out;
    }

private:
    struct pending {
        shard_job job;
        logger log;
        completion done;
    };

    void run() {
        for (;;) {
            pending p;
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
                if (queue_.empty()) {
                    return; // stopping
                }
                p = std::move(queue_.front());
                queue_.pop_front();
            }
            auto out = write(std::move(p.job), p.log);
            p.done(std::move(out));
        }
    }

    std::mutex mutex_; // the queue and the thread
    std::condition_variable wake_;
    std::deque<pending> queue_;
    bool stopping_ = false;
    std::thread thread_;
    std::mutex write_mutex_; // one write at a time
    write_function write_;
};

} // namespace petrel
