// Low-rank matrix factorization by distributed SGD, model-parallel with block rotation,
// and for comparison the same job data-parallel.
//
// The data is a synthetic rating matrix with a known answer: R = U V^T + noise, with U
// (rows x rank) and V (cols x rank) drawn from N(0, 1/sqrt(rank)) per entry, so that a
// rating has unit variance before the Gaussian noise (--noise, its standard deviation).
// Each row has round(cols * density) observed ratings and --test-per-row held-out ones
// at other columns. Every row is generated from the seed and its index alone, so any
// worker can read any row: the data set is divided by example index (rows) by the job's
// scheduler, and a worker that is handed new rows after a rebalance reads them itself.
//
// The model lives on the servers: table 0 holds a row factor per row, table 1 a column
// factor per column, both dense, initialised from N(0, 0.1).
//
// Model-parallel (the stratified schedule of distributed SGD): the columns are cut into
// --blocks blocks (default: one per worker) and the scheduler hands every worker one block
// per round, never one block to two workers, rotated so that over an epoch every worker
// meets every block. In a round a worker pulls the row factors of its rows and the column
// factors of its block, runs SGD over its ratings in that block, and pushes the changes.
// Nobody else touches those keys during the round, so `eventual` consistency loses nothing.
//
// Data-parallel: every worker runs SGD over all its ratings against all columns, in
// --steps steps per epoch under `sequential` consistency; the changes of the workers to
// the same column factors are added up by the servers.
//
// Both report the RMSE on the held-out ratings per epoch, and at the end against the noise
// floor (the RMSE of the true factors on the same ratings). The last line is
// `model_parallel_rmse_ratio=X data_parallel_rmse_ratio=Y`; with --target T the program
// exits with status 1 when the model-parallel ratio exceeds T.
#include <petrel/petrel.hpp>

#include <asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

constexpr std::uint32_t row_table = 0;
constexpr std::uint32_t col_table = 1;
constexpr std::uint32_t stats_table = 2;

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct options {
    std::uint64_t rows = 100000;
    std::uint64_t cols = 10000;
    std::uint32_t rank = 16;
    double density = 0.02;
    double noise = 0.25;
    std::uint32_t test_per_row = 5;
    int epochs = 20;
    double lr = 0.02;
    double decay = 0.92;
    double reg = 0.005;
    std::uint32_t blocks = 0; // 0: one per worker
    int steps = 4;
    std::string mode = "both";
    std::uint64_t seed = 1;
    double target = 0; // > 0: exit 1 when the model-parallel ratio exceeds it
};

constexpr std::string_view options_help =
    R"(Low-rank matrix factorization of a synthetic rating matrix by distributed SGD.

Options of this example:
  --rows N            rows of the rating matrix (default 100000)
  --cols N            columns (default 10000)
  --rank N            rank of the true and of the learned factors (default 16)
  --density X         fraction of each row observed for training (default 0.02)
  --noise X           standard deviation of the Gaussian noise (default 0.25)
  --test-per-row N    held-out ratings per row (default 5)
  --epochs N          passes over the ratings (default 20)
  --lr X              SGD step size (default 0.02), times --decay after each epoch
  --decay X           step size decay per epoch (default 0.92)
  --reg X             L2 regularisation per update (default 0.005)
  --blocks N          column blocks of the model-parallel schedule (default: workers)
  --steps N           data-parallel clocks per epoch (default 4)
  --mode M            model, data or both (default both)
  --seed N            seed of the data and of the initial factors (default 1)
  --target X          exit with status 1 when the model-parallel RMSE exceeds X times
                      the noise floor (default: no check)
Options are written --name value or --name=value.

)";

std::uint64_t parse_integer(std::string_view name, const std::string& text, std::uint64_t low,
                            std::uint64_t high) {
    std::size_t used = 0;
    std::uint64_t v = 0;
    if (!text.empty() && text.front() >= '0' && text.front() <= '9') {
        try {
            v = std::stoull(text, &used, 10);
        } catch (const std::exception&) {
            used = 0;
        }
    }
    if (used == 0 || used != text.size() || v < low || v > high) {
        throw usage_error("--" + std::string(name) + " \"" + text + "\": expected an integer in " +
                          std::to_string(low) + ".." + std::to_string(high));
    }
    return v;
}

double parse_real(std::string_view name, const std::string& text, double low, double high) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || !std::isfinite(v) || v < low || v > high) {
        throw usage_error("--" + std::string(name) + " \"" + text + "\": expected a number in [" +
                          std::to_string(low) + ", " + std::to_string(high) + "]");
    }
    return v;
}

options parse_options(const std::vector<std::string>& rest) {
    options o;
    for (std::size_t i = 1; i < rest.size(); ++i) {
        const std::string& arg = rest[i];
        if (!arg.starts_with("--") || arg == "--") {
            throw usage_error("unexpected argument \"" + arg + "\"");
        }
        std::string name = arg.substr(2);
        std::string value;
        if (const auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name.resize(eq);
        } else {
            if (i + 1 >= rest.size()) {
                throw usage_error("--" + name + " needs a value");
            }
            value = rest[++i];
        }
        if (name == "rows") {
            o.rows = parse_integer(name, value, 1, std::uint64_t{1} << 32);
        } else if (name == "cols") {
            o.cols = parse_integer(name, value, 1, std::uint64_t{1} << 24);
        } else if (name == "rank") {
            o.rank = static_cast<std::uint32_t>(parse_integer(name, value, 1, 256));
        } else if (name == "density") {
            o.density = parse_real(name, value, 1e-6, 0.5);
        } else if (name == "noise") {
            o.noise = parse_real(name, value, 1e-6, 100);
        } else if (name == "test-per-row") {
            o.test_per_row = static_cast<std::uint32_t>(parse_integer(name, value, 1, 1000));
        } else if (name == "epochs") {
            o.epochs = static_cast<int>(parse_integer(name, value, 1, 10000));
        } else if (name == "lr") {
            o.lr = parse_real(name, value, 1e-9, 10);
        } else if (name == "decay") {
            o.decay = parse_real(name, value, 0.01, 1);
        } else if (name == "reg") {
            o.reg = parse_real(name, value, 0, 10);
        } else if (name == "blocks") {
            o.blocks = static_cast<std::uint32_t>(parse_integer(name, value, 1, 65536));
        } else if (name == "steps") {
            o.steps = static_cast<int>(parse_integer(name, value, 1, 10000));
        } else if (name == "mode") {
            if (value != "model" && value != "data" && value != "both") {
                throw usage_error("--mode \"" + value + "\": expected model, data or both");
            }
            o.mode = value;
        } else if (name == "seed") {
            o.seed = parse_integer(name, value, 0, std::numeric_limits<std::uint64_t>::max());
        } else if (name == "target") {
            o.target = parse_real(name, value, 1, 100);
        } else {
            throw usage_error("unknown option --" + name);
        }
    }
    const auto per_row = static_cast<std::uint64_t>(std::llround(o.cols * o.density));
    if (per_row == 0) {
        throw usage_error("--density " + std::to_string(o.density) +
                          " observes no rating of a "
                          "row: raise it or --cols");
    }
    if (per_row + o.test_per_row > o.cols) {
        throw usage_error("a row has " + std::to_string(o.cols) + " columns: too few for " +
                          std::to_string(per_row) + " observed and " +
                          std::to_string(o.test_per_row) + " held-out ratings");
    }
    return o;
}

// ---------------------------------------------------------------------------------------
// The synthetic data: every row and every true factor from the seed and its index alone.
// ---------------------------------------------------------------------------------------

std::uint64_t mix(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/// A true factor (of a row when `side` is 0, of a column when 1).
void true_factor(const options& o, int side, std::uint64_t index, std::span<float> out) {
    std::mt19937_64 rng(mix(o.seed * 4 + static_cast<std::uint64_t>(side) + mix(index)));
    std::normal_distribution<float> n(
        0.0f, static_cast<float>(1.0 / std::sqrt(std::sqrt(static_cast<double>(o.rank)))));
    for (auto& x : out) {
        x = n(rng);
    }
}

struct rating {
    std::uint32_t row; // local index among this worker's rows
    std::uint32_t col;
    float value;
    float truth; // the rating without noise (for the noise floor)
};

/// The ratings of the rows of a share: training ones by column block, and held-out ones.
struct local_data {
    std::uint64_t version = 0;
    std::vector<std::uint64_t> rows;           // global row of each local row
    std::vector<std::vector<rating>> by_block; // training ratings of each column block
    std::vector<rating> test;
    std::size_t train_count = 0;
};

std::uint32_t block_of(std::uint64_t col, const petrel::block_schedule& s) {
    // Blocks are contiguous and nearly equal: find by the same arithmetic as the schedule.
    const std::uint64_t size = s.end - s.begin;
    const std::uint64_t q = size / s.blocks;
    const std::uint64_t r = size % s.blocks;
    // The first r blocks have q + 1 keys.
    const std::uint64_t big = r * (q + 1);
    return static_cast<std::uint32_t>(col < big ? col / (q + 1) : r + (col - big) / q);
}

local_data read_share(const options& o, const petrel::data_share& share,
                      const std::vector<float>& col_truth, const petrel::block_schedule& blocks) {
    local_data d;
    d.version = share.version;
    d.by_block.resize(blocks.blocks);
    const auto per_row = static_cast<std::uint64_t>(std::llround(o.cols * o.density));
    std::vector<float> u(o.rank);
    std::vector<std::uint32_t> picked;
    for (const auto& range : share.ranges) {
        for (std::uint64_t row = range.begin; row < range.end; ++row) {
            const auto local = static_cast<std::uint32_t>(d.rows.size());
            d.rows.push_back(row);
            true_factor(o, 0, row, u);
            std::mt19937_64 rng(mix(o.seed * 4 + 2 + mix(row)));
            std::normal_distribution<float> noise(0.0f, static_cast<float>(o.noise));
            // Distinct columns: Floyd's sample of per_row + test_per_row of cols.
            const std::uint64_t want = per_row + o.test_per_row;
            picked.clear();
            for (std::uint64_t j = o.cols - want; j < o.cols; ++j) {
                std::uniform_int_distribution<std::uint64_t> pick(0, j);
                auto c = static_cast<std::uint32_t>(pick(rng));
                if (std::find(picked.begin(), picked.end(), c) != picked.end()) {
                    c = static_cast<std::uint32_t>(j);
                }
                picked.push_back(c);
            }
            // Floyd's sample is uniform as a set, not in its order (the last columns can
            // only come last): shuffle before the first ones become the training ratings.
            std::shuffle(picked.begin(), picked.end(), rng);
            for (std::size_t k = 0; k < picked.size(); ++k) {
                const auto col = picked[k];
                float truth = 0;
                for (std::uint32_t f = 0; f < o.rank; ++f) {
                    truth += u[f] * col_truth[std::size_t{col} * o.rank + f];
                }
                const rating r{local, col, truth + noise(rng), truth};
                if (k < per_row) {
                    d.by_block[block_of(col, blocks)].push_back(r);
                    ++d.train_count;
                } else {
                    d.test.push_back(r);
                }
            }
        }
    }
    return d;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

/// One SGD pass over `ratings`; `u` holds the local rows' factors, `v` the factors of the
/// columns from `first_col` on.
void sgd(std::span<const rating> ratings, std::vector<float>& u, std::vector<float>& v,
         std::uint64_t first_col, std::uint32_t rank, float lr, float reg) {
    for (const auto& r : ratings) {
        float* pu = u.data() + std::size_t{r.row} * rank;
        float* pv = v.data() + (r.col - first_col) * rank;
        float pred = 0;
        for (std::uint32_t f = 0; f < rank; ++f) {
            pred += pu[f] * pv[f];
        }
        const float e = r.value - pred;
        for (std::uint32_t f = 0; f < rank; ++f) {
            const float a = pu[f];
            const float b = pv[f];
            pu[f] += lr * (e * b - reg * a);
            pv[f] += lr * (e * a - reg * b);
        }
    }
}

/// Squared error of the held-out ratings under factors `u` (local rows) and `v` (all
/// columns), and of the true factors.
std::pair<double, double> test_error(const local_data& d, const std::vector<float>& u,
                                     const std::vector<float>& v, std::uint32_t rank) {
    double sse = 0;
    double floor = 0;
    for (const auto& r : d.test) {
        float pred = 0;
        for (std::uint32_t f = 0; f < rank; ++f) {
            pred += u[std::size_t{r.row} * rank + f] * v[std::size_t{r.col} * rank + f];
        }
        sse += static_cast<double>(r.value - pred) * (r.value - pred);
        floor += static_cast<double>(r.value - r.truth) * (r.value - r.truth);
    }
    return {sse, floor};
}

/// The factors of the local rows, pulled range by range of the share.
template <typename Store>
std::vector<float> pull_rows(Store& rows_kv, const petrel::data_share& share, std::uint32_t rank) {
    std::vector<float> u(share.units * rank);
    std::size_t at = 0;
    std::vector<std::future<void>> pulls;
    for (const auto& r : share.ranges) {
        const std::size_t n = (r.end - r.begin) * rank;
        pulls.push_back(rows_kv.pull(petrel::key_range<std::uint64_t>{r.begin, r.end},
                                     std::span<float>(u.data() + at, n), asio::use_future));
        at += n;
    }
    for (auto& p : pulls) {
        p.get();
    }
    return u;
}

/// Pushes `now - before` of the local rows, range by range.
template <typename Store>
void push_rows(Store& rows_kv, const petrel::data_share& share, std::uint32_t rank,
               const std::vector<float>& before, const std::vector<float>& now) {
    std::size_t at = 0;
    std::vector<std::future<void>> pushes;
    for (const auto& r : share.ranges) {
        const std::size_t n = (r.end - r.begin) * rank;
        auto delta = std::make_shared<std::vector<float>>(n);
        for (std::size_t i = 0; i < n; ++i) {
            (*delta)[i] = now[at + i] - before[at + i];
        }
        pushes.push_back(rows_kv.push(petrel::key_range<std::uint64_t>{r.begin, r.end}, delta,
                                      asio::use_future));
        at += n;
    }
    for (auto& p : pushes) {
        p.get();
    }
}

template <typename Store>
void push_cols(Store& cols_kv, petrel::key_range<std::uint64_t> range,
               const std::vector<float>& before, const std::vector<float>& now) {
    auto delta = std::make_shared<std::vector<float>>(now.size());
    for (std::size_t i = 0; i < now.size(); ++i) {
        (*delta)[i] = now[i] - before[i];
    }
    cols_kv.push(range, delta, asio::use_future).get();
}

/// What worker 0 prints at the end.
struct report {
    std::mutex mutex;
    std::vector<double> epoch_rmse;
    double rmse = 0;
    double floor = 0;
    double seconds = 0;
    bool done = false;
};

/// Adds this worker's held-out errors of an epoch to the stats table (key: the epoch).
template <typename Stats>
void record(Stats& stats, int epoch, const local_data& d, const std::vector<float>& u,
            const std::vector<float>& v, std::uint32_t rank) {
    const auto [sse, floor] = test_error(d, u, v, rank);
    std::vector<std::uint64_t> key{static_cast<std::uint64_t>(epoch)};
    xt::xtensor<double, 2> row = {{sse, floor, static_cast<double>(d.test.size())}};
    stats.push(key, row, asio::use_future).get();
}

template <typename Stats>
void summarize(Stats& stats, int epochs, report& out) {
    std::vector<std::uint64_t> keys;
    for (int e = 0; e < epochs; ++e) {
        keys.push_back(static_cast<std::uint64_t>(e));
    }
    const auto p = stats.pull(keys, asio::use_future).get();
    const auto v = p.value_span();
    std::lock_guard lock(out.mutex);
    for (int e = 0; e < epochs; ++e) {
        const double n = std::max(1.0, v[3 * e + 2]);
        out.epoch_rmse.push_back(std::sqrt(v[3 * e] / n));
        out.floor = std::sqrt(v[3 * e + 1] / n);
    }
    out.rmse = out.epoch_rmse.back();
    out.done = true;
}

petrel::block_schedule column_blocks(const options& o, std::uint32_t workers) {
    const std::uint32_t blocks =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(o.blocks ? o.blocks : workers, o.cols));
    return {.name = "column-blocks",
            .table_id = col_table,
            .begin = 0,
            .end = o.cols,
            .blocks = blocks,
            .rounds = static_cast<std::uint64_t>(o.epochs) * blocks};
}

/// What both ways of training hold: the stores of the three tables, the true column
/// factors (to generate ratings) and the start time.
template <typename Consistency>
class session {
public:
    using store = petrel::kv_store<std::uint64_t, float, Consistency>;
    using stats_store = petrel::kv_store<std::uint64_t, double, petrel::eventual>;

    session(petrel::worker_node& w, const options& o)
        : w_(w),
          o_(o), parts_{store(w, {.table_id = row_table, .width = o.rank}),
                        store(w, {.table_id = col_table, .width = o.rank}),
                        stats_store(w, {.table_id = stats_table, .width = 3}),
                        std::vector<float>(o.cols * o.rank), std::chrono::steady_clock::now()} {
        for (std::uint64_t c = 0; c < o.cols; ++c) {
            true_factor(o, 1, c, std::span<float>(parts_.col_truth).subspan(c * o.rank, o.rank));
        }
    }

    struct members {
        store rows_kv;
        store cols_kv;
        stats_store stats;
        std::vector<float> col_truth;
        std::chrono::steady_clock::time_point start;
    };
    members& parts() noexcept { return parts_; }

    /// After the last epoch: once every worker recorded its results, worker 0 reads them.
    void finish(report& out) {
        w_.barrier(petrel::group::workers, asio::use_future).get();
        if (w_.rank() == 0) {
            summarize(parts_.stats, o_.epochs, out);
            std::lock_guard lock(out.mutex);
            out.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - parts_.start)
                    .count();
        }
    }

private:
    petrel::worker_node& w_;
    const options& o_;
    members parts_;
};

/// Model-parallel training: rounds of disjoint column blocks.
void train_model_parallel(petrel::worker_node& w, const options& o, report& out) {
    session<petrel::eventual> job(w, o);
    auto& [rows_kv, cols_kv, stats, col_truth, start] = job.parts();
    auto share = w.assign({.name = "rows", .examples = o.rows}, asio::use_future).get();
    const auto schedule = column_blocks(o, w.workers());
    local_data data = read_share(o, share, col_truth, schedule);
    const std::uint64_t rounds_per_epoch = schedule.blocks;
    float lr = static_cast<float>(o.lr);
    for (;;) {
        const auto round = w.next_round(schedule, asio::use_future).get();
        // Every worker finished the round before this one: at an epoch's end the model
        // is complete for that epoch, so score it.
        if (round.round > 0 && round.round % rounds_per_epoch == 0) {
            const int epoch = static_cast<int>(round.round / rounds_per_epoch) - 1;
            auto u = pull_rows(rows_kv, share, o.rank);
            auto v =
                cols_kv.pull(petrel::key_range<std::uint64_t>{0, o.cols}, asio::use_future).get();
            record(stats, epoch, data, u,
                   std::vector<float>(v.value_span().begin(), v.value_span().end()), o.rank);
            lr *= static_cast<float>(o.decay);
        }
        if (round.finished) {
            break;
        }
        // After workers came or went, this worker's rows may have changed: read the new
        // ones (every row can be read by anyone; see the top of the file).
        if (auto now = w.share("rows"); now && now->ranges != share.ranges) {
            share = *now;
            data = read_share(o, share, col_truth, schedule);
        }
        const auto b = round.block();
        if (b == petrel::no_block || share.units == 0) {
            continue;
        }
        const auto cols = schedule.block(b);
        auto u0 = pull_rows(rows_kv, share, o.rank);
        auto pulled = cols_kv.pull(cols, asio::use_future).get();
        std::vector<float> v0(pulled.value_span().begin(), pulled.value_span().end());
        auto u = u0;
        auto v = v0;
        sgd(data.by_block[b], u, v, cols.begin, o.rank, lr, static_cast<float>(o.reg));
        push_rows(rows_kv, share, o.rank, u0, u);
        push_cols(cols_kv, cols, v0, v);
    }
    job.finish(out);
}

/// Data-parallel training: every worker, all columns, summed under `sequential`.
void train_data_parallel(petrel::worker_node& w, const options& o, report& out) {
    session<petrel::sequential> job(w, o);
    auto& [rows_kv, cols_kv, stats, col_truth, start] = job.parts();
    const auto share = w.assign({.name = "rows", .examples = o.rows}, asio::use_future).get();
    // One block of all columns: the ratings in one list, cut into --steps parts.
    const petrel::block_schedule all{.name = "all", .begin = 0, .end = o.cols, .blocks = 1};
    const local_data data = read_share(o, share, col_truth, all);
    const auto& ratings = data.by_block[0];
    const petrel::key_range<std::uint64_t> every_col{0, o.cols};
    float lr = static_cast<float>(o.lr);
    for (int epoch = 0; epoch < o.epochs; ++epoch) {
        for (int step = 0; step < o.steps; ++step) {
            auto u0 = pull_rows(rows_kv, share, o.rank);
            auto pulled = cols_kv.pull(every_col, asio::use_future).get();
            std::vector<float> v0(pulled.value_span().begin(), pulled.value_span().end());
            auto u = u0;
            auto v = v0;
            const std::size_t b =
                ratings.size() * static_cast<std::size_t>(step) / static_cast<std::size_t>(o.steps);
            const std::size_t e = ratings.size() * static_cast<std::size_t>(step + 1) /
                                  static_cast<std::size_t>(o.steps);
            sgd(std::span<const rating>(ratings).subspan(b, e - b), u, v, 0, o.rank, lr,
                static_cast<float>(o.reg));
            push_rows(rows_kv, share, o.rank, u0, u);
            push_cols(cols_kv, every_col, v0, v);
            rows_kv.clock();
            cols_kv.clock(asio::use_future).get();
        }
        // Reads at the next clock include every worker's changes of this epoch.
        auto u = pull_rows(rows_kv, share, o.rank);
        auto v = cols_kv.pull(every_col, asio::use_future).get();
        record(stats, epoch, data, u,
               std::vector<float>(v.value_span().begin(), v.value_span().end()), o.rank);
        lr *= static_cast<float>(o.decay);
    }
    job.finish(out);
}

/// Runs one job (this process's share of it); prints worker 0's report.
int run_job(petrel::settings s, const options& o, bool model, double& ratio) {
    petrel::table_registry tables;
    const auto init = [&](int which) {
        return petrel::initializer::normal(0.0, 0.1,
                                           mix(o.seed * 8 + static_cast<std::uint64_t>(which)));
    };
    tables.add<std::uint64_t, float>(
        row_table,
        {.width = o.rank, .dense = petrel::key_range<std::uint64_t>{0, o.rows}, .init = init(0)});
    tables.add<std::uint64_t, float>(
        col_table,
        {.width = o.rank, .dense = petrel::key_range<std::uint64_t>{0, o.cols}, .init = init(1)});
    tables.add<std::uint64_t, double>(stats_table, {.width = 3});
    s.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
    s.job_id += model ? "-model" : "-data";
    report out;
    const int status = petrel::run(s, [&](petrel::worker_node& w) {
        if (model) {
            train_model_parallel(w, o, out);
        } else {
            train_data_parallel(w, o, out);
        }
    });
    const char* name = model ? "model-parallel" : "data-parallel";
    if (status == petrel::run_ok && out.done) {
        for (std::size_t e = 0; e < out.epoch_rmse.size(); ++e) {
            std::printf("%s: epoch %zu test_rmse=%.4f\n", name, e + 1, out.epoch_rmse[e]);
        }
        ratio = out.rmse / out.floor;
        std::printf("%s: test_rmse=%.4f noise_floor=%.4f ratio=%.3f time=%.1fs\n", name, out.rmse,
                    out.floor, ratio, out.seconds);
        std::fflush(stdout);
    }
    return status;
}

} // namespace

int main(int argc, char** argv) {
    petrel::settings s;
    try {
        s = petrel::resolve({.servers = 2, .workers = 2}, argc, argv);
    } catch (const petrel::config_error& e) {
        std::fprintf(stderr, "%s\n(see --help)\n", e.what());
        return petrel::run_config_error;
    }
    if (s.help) {
        std::printf("%s%s", options_help.data(),
                    petrel::usage(argc > 0 ? argv[0] : "matrix_factorization").c_str());
        return 0;
    }
    options o;
    try {
        o = parse_options(s.rest);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "matrix_factorization: %s (see --help)\n", e.what());
        return petrel::run_config_error;
    }
    const auto per_row = static_cast<std::uint64_t>(std::llround(o.cols * o.density));
    std::printf("matrix_factorization: %llu x %llu, rank %u, %llu observed ratings per row "
                "(%llu in all), noise %.3f; %u servers, %u workers\n",
                static_cast<unsigned long long>(o.rows), static_cast<unsigned long long>(o.cols),
                o.rank, static_cast<unsigned long long>(per_row),
                static_cast<unsigned long long>(per_row * o.rows), o.noise, s.servers, s.workers);
    std::fflush(stdout);
    double model_ratio = std::numeric_limits<double>::quiet_NaN();
    double data_ratio = std::numeric_limits<double>::quiet_NaN();
    if (o.mode != "data") {
        if (const int st = run_job(s, o, true, model_ratio); st != petrel::run_ok) {
            return st;
        }
    }
    if (o.mode != "model") {
        if (const int st = run_job(s, o, false, data_ratio); st != petrel::run_ok) {
            return st;
        }
    }
    if (std::isnan(model_ratio) && std::isnan(data_ratio)) {
        return 0; // worker 0 runs elsewhere: that process reports
    }
    std::printf("model_parallel_rmse_ratio=%.3f data_parallel_rmse_ratio=%.3f\n", model_ratio,
                data_ratio);
    if (o.target > 0 && o.mode != "data" && !(model_ratio <= o.target)) {
        std::fprintf(stderr,
                     "matrix_factorization: the model-parallel RMSE is %.3f times the "
                     "noise floor, above the target %.3f\n",
                     model_ratio, o.target);
        return 1;
    }
    return 0;
}
