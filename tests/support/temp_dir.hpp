// Test support: a scratch directory that goes away with the test.
#pragma once

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace petrel::test {

/// A fresh directory under the system's temporary directory, removed with everything in
/// it when the test ends (passed or not). Its name is new: one that exists is never
/// reused, so concurrent tests and processes never share one.
class temp_dir {
public:
    temp_dir() {
        std::random_device rd;
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        for (int attempt = 0;; ++attempt) {
            path_ = std::filesystem::temp_directory_path() /
                    ("petrel-test-" + std::to_string(now) + "-" + std::to_string(rd()) + "-" +
                     std::to_string(attempt));
            if (std::filesystem::create_directories(path_)) {
                break;
            }
        }
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

private:
    std::filesystem::path path_;
};

} // namespace petrel::test
