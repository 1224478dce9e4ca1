// Test support: child processes that are always stopped, by process id.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace petrel::test {

/// This test binary's path (to start copies of it).
inline std::string self_path() {
    std::vector<char> buf(4096);
    const auto n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string{};
}

/// A loopback TCP port that was free a moment ago.
inline std::uint16_t free_port(const char* host = "127.0.0.1") {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address(host), 0});
    return a.local_endpoint().port();
}

/// A child process in its own process group, with its output in a file. The destructor
/// kills the whole group (SIGKILL) and reaps the child, whatever happened before.
class child_process {
public:
    /// Starts `argv` with the current environment plus `env` (which wins), writing
    /// stdout and stderr to `log_path`. @throws std::runtime_error
    child_process(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, std::string log_path)
        : log_path_(std::move(log_path)) {
        std::map<std::string, std::string> all;
        for (char** e = environ; *e; ++e) {
            const std::string kv(*e);
            const auto eq = kv.find('=');
            if (eq != std::string::npos) {
                all[kv.substr(0, eq)] = kv.substr(eq + 1);
            }
        }
        for (const auto& [k, v] : env) {
            all[k] = v;
        }
        std::vector<std::string> env_strings;
        for (const auto& [k, v] : all) {
            env_strings.push_back(k + "=" + v);
        }
        std::vector<char*> envp;
        for (auto& s : env_strings) {
            envp.push_back(s.data());
        }
        envp.push_back(nullptr);
        std::vector<std::string> args = argv;
        std::vector<char*> argp;
        for (auto& s : args) {
            argp.push_back(s.data());
        }
        argp.push_back(nullptr);

        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&actions, 1, 2);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attr, 0);
        const int rc = ::posix_spawnp(&pid_, argp[0], &actions, &attr, argp.data(), envp.data());
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            pid_ = -1;
            throw std::runtime_error("could not start " + args[0]);
        }
    }

    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    /// Stops the child if it still runs and removes its log (kept with
    /// PETREL_TEST_KEEP_LOGS set; a failed check has already printed it).
    ~child_process() {
        kill(SIGKILL);
        if (!std::getenv("PETREL_TEST_KEEP_LOGS")) {
            std::error_code ec;
            std::filesystem::remove(log_path_, ec);
        }
    }

    [[nodiscard]] pid_t pid() const noexcept { return pid_; }

    /// Sends `sig` to the child's process group and, for SIGKILL, reaps the child.
    void kill(int sig) {
        if (pid_ <= 0 || exited_) {
            return;
        }
        ::kill(-pid_, sig);
        if (sig == SIGKILL) {
            int status = 0;
            ::waitpid(pid_, &status, 0);
            exited_ = true;
            status_ = status;
        }
    }

    /// Waits up to `limit` for the child to exit; true when it did.
    bool wait_for(std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!exited_) {
            int status = 0;
            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_) {
                exited_ = true;
                status_ = status;
                break;
            }
            if (std::chrono::steady_clock::now() >= deadline) {
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return true;
    }

    /// The exit code (after wait_for returned true); -signal when a signal ended it.
    [[nodiscard]] int exit_code() const noexcept {
        if (WIFEXITED(status_)) {
            return WEXITSTATUS(status_);
        }
        return WIFSIGNALED(status_) ? -WTERMSIG(status_) : -1000;
    }

    /// What the child wrote.
    [[nodiscard]] std::string output() const {
        std::ifstream in(log_path_);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

private:
    std::string log_path_;
    pid_t pid_ = -1;
    bool exited_ = false;
    int status_ = 0;
};

/// The secret of the jobs these tests start (PETREL_SECRET): their connections
/// authenticate as a real job's do.
inline const std::string& job_secret() {
    static const std::string secret = "petrel-test-secret-" + std::to_string(::getpid());
    return secret;
}

/// Starts this binary as `size` processes of one job under the PETREL_* launcher,
/// running the test case `spec` (which must call petrel::run), with its root at
/// 127.0.0.1:`port` (a free port when 0), job id "test-<pid of this process>" and the
/// secret `job_secret()`.
inline std::vector<std::unique_ptr<petrel::test::child_process>>
start_job(const std::string& spec, int size, const std::map<std::string, std::string>& extra,
          const std::vector<std::string>& prefix_of_rank = {}, std::uint16_t port = 0) {
    if (port == 0) {
        port = petrel::test::free_port();
    }
    std::vector<std::unique_ptr<petrel::test::child_process>> procs;
    for (int r = 0; r < size; ++r) {
        std::map<std::string, std::string> env{
            {"PETREL_RANK", std::to_string(r)},
            {"PETREL_SIZE", std::to_string(size)},
            {"PETREL_LOCAL_SIZE", std::to_string(size)},
            {"PETREL_ROOT", "127.0.0.1:" + std::to_string(port)},
            {"PETREL_SERVERS", "2"},
            {"PETREL_JOB_ID", "test-" + std::to_string(::getpid())},
            {"PETREL_SECRET", job_secret()}};
        for (const auto& [k, v] : extra) {
            env[k] = v;
        }
        std::vector<std::string> argv;
        if (!prefix_of_rank.empty()) {
            std::istringstream words(prefix_of_rank[static_cast<std::size_t>(r)]);
            for (std::string w; words >> w;) {
                argv.push_back(w);
            }
        }
        argv.push_back(petrel::test::self_path());
        argv.push_back(spec);
        procs.push_back(std::make_unique<petrel::test::child_process>(
            argv, env,
            "/tmp/petrel-test-" + std::to_string(::getpid()) + "-" + std::to_string(r) + ".log"));
    }
    return procs;
}

} // namespace petrel::test
