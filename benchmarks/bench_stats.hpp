// Petrel benchmark support: latency samples, JSON-lines output and a timed
// run loop.
//
// - `samples`   collects per-iteration durations (stored as microseconds)
//               and reports median, nearest-rank percentiles, min, max, mean.
// - `json_line` builds one flat JSON object (keys in insertion order) and
//               prints it as a single line.
// - `run_timed` runs warm-ups, then times iterations until both a minimum
//               count and a minimum wall time are reached, capped by a
//               maximum iteration count.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace petrel_bench {

// ---------------------------------------------------------------------------
// samples
// ---------------------------------------------------------------------------

/// A bag of per-iteration durations. Every statistic is in microseconds and
/// throws std::logic_error when no sample has been added.
class samples {
public:
    /// Adds one duration of any std::chrono type.
    template <class Rep, class Period>
    void add(std::chrono::duration<Rep, Period> d) {
        values_us_.push_back(std::chrono::duration<double, std::micro>(d).count());
    }

    /// Adds one duration given in microseconds.
    void add_us(double micros) { values_us_.push_back(micros); }

    void reserve(std::size_t n) { values_us_.reserve(n); }
    [[nodiscard]] std::size_t size() const noexcept { return values_us_.size(); }
    [[nodiscard]] bool empty() const noexcept { return values_us_.empty(); }

    /// The raw values in insertion order, in microseconds.
    [[nodiscard]] const std::vector<double>& values_us() const noexcept { return values_us_; }

    /// Median in µs (mean of the two middle values for an even count).
    [[nodiscard]] double median() const {
        const std::vector<double> s = sorted();
        const std::size_t n = s.size();
        return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
    }

    /// 99th percentile in µs, nearest-rank method.
    [[nodiscard]] double p99() const { return percentile(99.0); }

    /// Nearest-rank percentile in µs: the smallest sample such that at least
    /// `p` percent of all samples are <= it. `p` is clamped to [0, 100].
    [[nodiscard]] double percentile(double p) const {
        const std::vector<double> s = sorted();
        const double n = static_cast<double>(s.size());
        const double exact = std::clamp(p, 0.0, 100.0) * n / 100.0;
        // Tolerance so that e.g. 99 * 100 / 100 stays rank 99, not 100.
        const double rank = std::ceil(exact - 1e-9 * std::max(1.0, exact));
        const auto r = static_cast<std::size_t>(std::max(1.0, rank));
        return s[std::min(r, s.size()) - 1];
    }

    [[nodiscard]] double min() const {
        require_nonempty();
        return *std::min_element(values_us_.begin(), values_us_.end());
    }

    [[nodiscard]] double max() const {
        require_nonempty();
        return *std::max_element(values_us_.begin(), values_us_.end());
    }

    [[nodiscard]] double mean() const {
        require_nonempty();
        double sum = 0.0;
        for (const double v : values_us_)
            sum += v;
        return sum / static_cast<double>(values_us_.size());
    }

private:
    void require_nonempty() const {
        if (values_us_.empty())
            throw std::logic_error("petrel_bench::samples: no samples");
    }

    [[nodiscard]] std::vector<double> sorted() const {
        require_nonempty();
        std::vector<double> s = values_us_;
        std::sort(s.begin(), s.end());
        return s;
    }

    std::vector<double> values_us_;
};

/// Goodput in Gbit/s (10^9 bits per second) for `bytes` moved in `micros` µs.
[[nodiscard]] inline double gbit_per_s(std::size_t bytes, double micros) {
    if (!(micros > 0.0))
        return 0.0;
    return static_cast<double>(bytes) * 8.0 / (micros * 1e3);
}

// ---------------------------------------------------------------------------
// json_line
// ---------------------------------------------------------------------------

/// Builds one flat JSON object, keys in insertion order, and prints it as a
/// single line. Numbers are formatted with std::to_chars, so the output does
/// not depend on the C or C++ locale. Non-finite doubles become `null`.
///
///     json_line{}.add("case", "raw_pingpong_64B").add("median_us", 81.2)
///                .add("iterations", 2000).print();
class json_line {
public:
    /// Significant digits used for doubles unless told otherwise.
    static constexpr int default_significant_digits = 6;

    json_line& add(std::string_view key, std::string_view value) {
        begin_field(key);
        append_string(value);
        return *this;
    }

    // Without this overload a string literal would convert to bool.
    json_line& add(std::string_view key, const char* value) {
        return add(key, std::string_view(value));
    }

    template <std::integral T>
    requires(!std::same_as<T, bool>) json_line& add(std::string_view key, T value) {
        begin_field(key);
        char buf[32];
        const auto res = std::to_chars(buf, buf + sizeof buf, value);
        out_.append(buf, res.ptr);
        return *this;
    }

    template <std::same_as<bool> B>
    json_line& add(std::string_view key, B value) {
        begin_field(key);
        out_ += value ? "true" : "false";
        return *this;
    }

    /// Adds a double with `significant_digits` significant digits (shortest
    /// form, e.g. 81.2, 0.0125, 1.5e+07). Integral values keep a ".0" so the
    /// field always reads as a floating-point number.
    json_line& add(std::string_view key, double value,
                   int significant_digits = default_significant_digits) {
        begin_field(key);
        append_double(value, std::chars_format::general, std::clamp(significant_digits, 1, 17));
        return *this;
    }

    /// Adds a double in fixed notation with `decimals` digits after the point.
    json_line& add_fixed(std::string_view key, double value, int decimals = 3) {
        begin_field(key);
        append_double(value, std::chars_format::fixed, std::clamp(decimals, 0, 17));
        return *this;
    }

    /// The complete object, without a trailing newline.
    [[nodiscard]] std::string str() const { return out_ + '}'; }

    /// Writes the object plus '\n' with a single fwrite, then flushes.
    void print(std::FILE* stream = stdout) const {
        std::string line = str();
        line += '\n';
        if (std::fwrite(line.data(), 1, line.size(), stream) != line.size() ||
            std::fflush(stream) != 0)
            throw std::runtime_error("petrel_bench::json_line: write failed");
    }

private:
    void begin_field(std::string_view key) {
        for (const std::string& k : keys_)
            if (k == key)
                throw std::invalid_argument("petrel_bench::json_line: duplicate key \"" +
                                            std::string(key) + "\"");
        keys_.emplace_back(key);
        if (keys_.size() > 1)
            out_ += ',';
        append_string(key);
        out_ += ':';
    }

    void append_string(std::string_view s) {
        static constexpr char hex[] = "0123456789abcdef";
        out_ += '"';
        for (const char c : s) {
            switch (c) {
            case '"':
                out_ += "\\\"";
                break;
            case '\\':
                out_ += "\\\\";
                break;
            case '\b':
                out_ += "\\b";
                break;
            case '\f':
                out_ += "\\f";
                break;
            case '\n':
                out_ += "\\n";
                break;
            case '\r':
                out_ += "\\r";
                break;
            case '\t':
                out_ += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    const auto u = static_cast<unsigned char>(c);
                    out_ += "\\u00";
                    out_ += hex[u >> 4];
                    out_ += hex[u & 0xF];
                } else {
                    out_ += c; // UTF-8 passes through unchanged
                }
            }
        }
        out_ += '"';
    }

    void append_double(double v, std::chars_format fmt, int precision) {
        if (!std::isfinite(v)) {
            out_ += "null";
            return;
        }
        char buf[512]; // fixed format of 1e308 needs ~330 characters
        const auto res = std::to_chars(buf, buf + sizeof buf, v, fmt, precision);
        if (res.ec != std::errc{}) {
            out_ += "null";
            return;
        }
        const std::string_view text(buf, static_cast<std::size_t>(res.ptr - buf));
        out_ += text;
        if (text.find_first_of(".e") == std::string_view::npos)
            out_ += ".0";
    }

    std::string out_ = "{";
    std::vector<std::string> keys_;
};

// ---------------------------------------------------------------------------
// run_timed
// ---------------------------------------------------------------------------

/// Pass as `warmup_iterations` to let run_timed choose:
/// clamp(min_iterations / 10, 1, 100).
inline constexpr std::size_t auto_warmup = static_cast<std::size_t>(-1);

namespace detail {
template <class T>
inline constexpr bool is_duration_v = false;
template <class Rep, class Period>
inline constexpr bool is_duration_v<std::chrono::duration<Rep, Period>> = true;
} // namespace detail

/// Calls `fn()` `warmup_iterations` times untimed, then records one sample per
/// call until at least `min_iterations` samples AND `min_seconds` of measured
/// wall time (warm-ups excluded) are reached, or `max_iterations` samples
/// were taken, whichever comes first (so `max_iterations` wins over both
/// minimums and the loop is bounded as long as `fn` is).
///
/// If `fn` returns a std::chrono::duration, that value is the sample (so `fn`
/// can exclude its own setup); otherwise the call itself is timed with
/// std::chrono::steady_clock. Exceptions from `fn` propagate unchanged.
template <class Fn>
samples run_timed(Fn&& fn, std::size_t min_iterations, double min_seconds,
                  std::size_t max_iterations, std::size_t warmup_iterations = auto_warmup) {
    using clock = std::chrono::steady_clock;
    using result_t = std::invoke_result_t<Fn&>;

    if (max_iterations == 0)
        throw std::invalid_argument("run_timed: max_iterations must be >= 1");
    if (warmup_iterations == auto_warmup)
        warmup_iterations = std::clamp<std::size_t>(min_iterations / 10, 1, 100);

    for (std::size_t i = 0; i < warmup_iterations; ++i)
        (void)fn();

    samples out;
    out.reserve(std::min<std::size_t>(max_iterations, std::max<std::size_t>(min_iterations, 1024)));
    const auto min_time = std::chrono::duration<double>(std::max(0.0, min_seconds));
    const auto start = clock::now();
    for (;;) {
        if constexpr (detail::is_duration_v<std::remove_cvref_t<result_t>>) {
            out.add(fn());
        } else {
            const auto t0 = clock::now();
            (void)fn();
            out.add(clock::now() - t0);
        }
        if (out.size() >= max_iterations)
            break;
        if (out.size() >= min_iterations && clock::now() - start >= min_time)
            break;
    }
    return out;
}

} // namespace petrel_bench
