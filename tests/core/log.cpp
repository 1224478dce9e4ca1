#include <petrel/core/log.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

using petrel::log_level;

namespace {

/// Everything written to stderr while `f` runs.
template <typename F>
std::string stderr_of(F&& f) {
    std::fflush(stderr);
    std::FILE* tmp = std::tmpfile();
    REQUIRE(tmp != nullptr);
    const int saved = ::dup(2);
    REQUIRE(saved >= 0);
    REQUIRE(::dup2(::fileno(tmp), 2) >= 0);
    f();
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::rewind(tmp);
    std::string out;
    char buf[256];
    while (const std::size_t n = std::fread(buf, 1, sizeof buf, tmp)) {
        out.append(buf, n);
    }
    std::fclose(tmp);
    return out;
}

} // namespace

TEST_CASE("log: levels have names and are ordered by severity", "[core][log]") {
    STATIC_REQUIRE(petrel::to_string(log_level::debug) == "debug");
    CHECK(petrel::to_string(log_level::debug) == "debug");
    CHECK(petrel::to_string(log_level::info) == "info");
    CHECK(petrel::to_string(log_level::warning) == "warning");
    CHECK(petrel::to_string(log_level::error) == "error");
    CHECK(petrel::to_string(static_cast<log_level>(42)) == "?");
    STATIC_REQUIRE(log_level::debug < log_level::info);
    STATIC_REQUIRE(log_level::info < log_level::warning);
    STATIC_REQUIRE(log_level::warning < log_level::error);
}

TEST_CASE("log: stderr_logger writes one line per message at or above its level", "[core][log]") {
    SECTION("the default level is warning") {
        const auto log = petrel::stderr_logger();
        REQUIRE(log);
        const auto out = stderr_of([&] {
            log(log_level::debug, "dropped debug");
            log(log_level::info, "dropped info");
            log(log_level::warning, "kept warning");
            log(log_level::error, "kept error");
        });
        CHECK(out == "petrel warning: kept warning\npetrel error: kept error\n");
    }
    SECTION("a lower level lets more through") {
        const auto log = petrel::stderr_logger(log_level::debug);
        const auto out = stderr_of([&] {
            log(log_level::debug, "d");
            log(log_level::info, "i");
        });
        CHECK(out == "petrel debug: d\npetrel info: i\n");
    }
    SECTION("error only") {
        const auto log = petrel::stderr_logger(log_level::error);
        const auto out = stderr_of([&] {
            log(log_level::warning, "w");
            log(log_level::error, std::string_view("no terminator here", 2));
        });
        CHECK(out == "petrel error: no\n");
    }
}

TEST_CASE("log: a custom logger receives every line with its level", "[core][log]") {
    std::vector<std::pair<log_level, std::string>> got;
    const petrel::logger log = [&](log_level l, std::string_view text) {
        got.emplace_back(l, std::string(text));
    };
    log(log_level::info, "connected");
    log(log_level::error, "lost");
    REQUIRE(got.size() == 2);
    CHECK(got[0].first == log_level::info);
    CHECK(got[0].second == "connected");
    CHECK(got[1].first == log_level::error);
    CHECK(got[1].second == "lost");

    const petrel::logger none;
    CHECK_FALSE(none); // an empty logger is how a node is told to discard everything
}

TEST_CASE("log: printable escapes what a terminal acts on and cuts long text", "[core][log]") {
    using petrel::printable;
    CHECK(printable("job-7 at 10.0.0.1:9000") == "job-7 at 10.0.0.1:9000");
    CHECK(printable("a\nb\rc\td") == "a\\x0ab\\x0dc\\x09d");
    CHECK(printable("\x1b[2J\x7f") == "\\x1b[2J\\x7f");
    CHECK(printable(std::string("nul\0end", 7)) == "nul\\x00end");
    // C1 controls in UTF-8 (CSI is U+009B) are escaped; other characters are kept.
    CHECK(printable("\xc2\x9b"
                    "31m") == "\\u009b31m");
    CHECK(printable("caf\xc3\xa9 \xc2\xa0") == "caf\xc3\xa9 \xc2\xa0");
    CHECK(printable("\xc2") == "\xc2"); // a lone lead byte at the end is not a control

    CHECK(printable("abcdef", 6) == "abcdef");
    CHECK(printable("abcdefg", 6) == "abcdef...(7 bytes)");
    CHECK(printable("ab\ncd", 3) == "ab\\x0a...(5 bytes)");
    // Never inside a character: a cut in the middle of "é" leaves it out whole.
    CHECK(printable("abc\xc3\xa9xyz", 4) == "abc...(8 bytes)");
    CHECK(printable("\xe2\x82\xac\xe2\x82\xac", 5) == "\xe2\x82\xac...(6 bytes)");
    CHECK(printable("", 0).empty());
    CHECK(printable("x", 0) == "...(1 bytes)");
}

TEST_CASE("log: stderr_logger lets no text pass for a line of its own", "[core][log]") {
    const auto log = petrel::stderr_logger();
    const auto out = stderr_of([&] {
        log(log_level::error, "job failed:\nworker 1 failed: lost\nworker 2 failed: lost");
        log(log_level::warning, "asked for job 'x\x1b[2J'");
    });
    CHECK(out == "petrel error: job failed:\n"
                 "  worker 1 failed: lost\n"
                 "  worker 2 failed: lost\n"
                 "petrel warning: asked for job 'x\\x1b[2J'\n");
}
