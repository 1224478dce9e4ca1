// Test support: io threads and small clusters in one process.
#pragma once

#include <petrel/kv_store.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/inproc_transport.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace petrel::test {

/// An io_context run by `threads` threads until destruction.
class io_threads {
public:
    explicit io_threads(int threads = 1) : work_(asio::make_work_guard(io_)) {
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this] { io_.run(); });
        }
    }
    ~io_threads() { stop(); }
    void stop() {
        work_.reset();
        io_.stop();
        for (auto& t : threads_) {
            if (t.joinable()) {
                t.join();
            }
        }
    }
    asio::io_context& context() { return io_; }
    asio::any_io_executor executor() { return io_.get_executor(); }

private:
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
};

/// Records what a node logs.
struct log_capture {
    std::mutex mutex;
    std::vector<std::string> lines;
    petrel::logger logger() {
        return [this](petrel::log_level, std::string_view text) {
            std::lock_guard lock(mutex);
            lines.emplace_back(text);
        };
    }
    std::size_t size() {
        std::lock_guard lock(mutex);
        return lines.size();
    }
    std::string all() {
        std::lock_guard lock(mutex);
        std::string s;
        for (auto& l : lines) {
            s += l + "\n";
        }
        return s;
    }
};

/// Which transport a test runs over.
struct over_tcp {
    static constexpr const char* name = "tcp";
};
struct over_inproc {
    static constexpr const char* name = "inproc";
};

/// Makes transports of one kind, all reaching each other.
template <typename Kind>
struct transport_factory {
    inproc_hub hub;
    any_transport make(asio::any_io_executor ex, transport_options opts = {}) {
        if constexpr (std::is_same_v<Kind, over_tcp>) {
            return tcp_transport(std::move(ex), std::move(opts));
        } else {
            return inproc_transport(std::move(ex), hub, std::move(opts));
        }
    }
    std::string listen_address() const {
        return std::is_same_v<Kind, over_tcp> ? "127.0.0.1:0" : "";
    }
};

} // namespace petrel::test
