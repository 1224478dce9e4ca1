// Fashion-MNIST: data-parallel training with the parameters on Petrel servers.
//
// One SPMD program, like the quickstart: run it as it is and the whole job (2 servers,
// 2 workers by default) runs in this process over loopback TCP; run it under mpirun,
// srun, a Kubernetes indexed job or with PETREL_RANK/PETREL_SIZE/PETREL_ROOT and each
// process hosts its share (see --help).
//
// The model is softmax regression (784-10) or a multilayer perceptron (784-256-10 with
// ReLU). Each layer's weights live in a dense table (one key per input row, one value per
// output) and its bias in another (one key of width `outputs`), declared in a
// `petrel::table_registry` with their update rule (`petrel::sgd`, whose step the workers
// let fall linearly to zero by scaling their gradients, or `petrel::adam`),
// `aggregation::mean`, He-scaled normal initial weights and zero biases, all set up by the
// servers. Every worker trains on its own contiguous share of the 60,000 training images,
// shuffled each epoch. One iteration pulls every table, computes the gradient of the mean
// loss over the worker's mini-batch and pushes it; the servers apply the update rule. Under
// `sequential` the pushes of one iteration are averaged and applied once, so W workers with
// batch b/W follow the same path in expectation as one worker with batch b; under
// `eventual` and `bounded_delay:N` each push is applied as it arrives.
//
// Examples:
//   fashion_mnist --model softmax                       # 2 servers, 2 workers, sequential
//   fashion_mnist --workers 4 --consistency bounded_delay:2 --model mlp
//   fashion_mnist --workers 1 --batch 128   vs   --workers 4 --batch 32   (same updates)
//
// Worker 0 evaluates the model on the 10,000 test images after every epoch, shows the
// progress (a bar on a terminal, one line per epoch otherwise), writes a CSV log and, at the
// end, a plot of loss and accuracy against time (plot.py, with matplotlib). The last line
// of its output is `test_accuracy=0.xxxx`.
#include "../common/fashion_mnist_data.hpp"
#include "model.hpp"

#include <petrel/petrel.hpp>

#include <asio/use_future.hpp>

#include <xtensor/xtensor.hpp>

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

extern char** environ;

#ifndef FASHION_MNIST_PLOT_SCRIPT
#define FASHION_MNIST_PLOT_SCRIPT "plot.py"
#endif

namespace {

namespace fs = std::filesystem;
using examples::fashion::batch_stats;
using examples::fashion::layer_shape;
using examples::fashion::network;

// ---------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------

enum class model_kind { softmax, mlp };
enum class optimizer_kind { adam, sgd };

/// The example's own options (Petrel's are resolved by `petrel::resolve`).
struct options {
    model_kind model = model_kind::mlp;
    /// "sequential", "eventual" or "bounded_delay:N".
    std::string consistency = "sequential";
    /// 0 until resolved: the model's default.
    int epochs = 0;
    std::size_t batch = 32;
    std::optional<optimizer_kind> optimizer;
    std::optional<double> lr;
    std::uint64_t seed = 1;
    std::string csv = "fashion_mnist.csv";
    std::string plot = "fashion_mnist.png";
    bool no_plot = false;
    std::string data;
    std::size_t train_limit = 0;
    std::size_t test_limit = 0;
    std::optional<double> min_accuracy;
};

constexpr std::string_view options_help = R"(Fashion-MNIST options:
  --model softmax|mlp       softmax regression (784-10) or a perceptron with one hidden
                            layer (784-256-10, ReLU). Default: mlp.
  --consistency C           sequential, eventual or bounded_delay:N with N in 1, 2, 4, 8.
                            Default: sequential.
  --epochs N                passes over the training images. Default: 15 (softmax), 10 (mlp).
  --batch N                 images per mini-batch, per worker. Default: 32.
  --optimizer sgd|adam      the servers' update rule. Default: sgd, whose step size falls
                            linearly to zero over the run.
  --lr X                    the step size. Default for adam: 0.001. Default for sgd: 0.5
                            (softmax) or 0.4 (mlp) for an update of 128 images, scaled with
                            the images one update averages (batch x workers under
                            sequential, batch otherwise; at most 512).
  --seed N                  initial weights and shuffling. Default: 1.
  --data DIR                the Fashion-MNIST directory. Default: $FASHION_MNIST_DIR, else
                            /usr/share/datasets/fashion-mnist.
  --train-limit N           use only the first N training images. Default: all 60,000.
  --test-limit N            use only the first N test images. Default: all 10,000.
  --csv PATH                the per-epoch log. Default: fashion_mnist.csv.
  --plot PATH               the plot of loss and accuracy against time (needs python3 with
                            matplotlib). Default: fashion_mnist.png.
  --no-plot                 write no plot.
  --min-accuracy X          exit with status 1 when the final test accuracy is below X.
)";

/// A bad command line, reported with exit status 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename T>
T parse_number(std::string_view flag, std::string_view text) {
    T value{};
    const auto* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr != end) {
        throw usage_error("fashion_mnist: " + std::string(flag) + " \"" + std::string(text) +
                          "\" is not a valid number");
    }
    return value;
}

/// Parses the arguments that Petrel left (`rest`, argv[0] first).
options parse_options(const std::vector<std::string>& rest) {
    options o;
    for (std::size_t i = 1; i < rest.size(); ++i) {
        std::string_view arg = rest[i];
        if (arg == "--") {
            continue;
        }
        if (!arg.starts_with("--")) {
            throw usage_error("fashion_mnist: unexpected argument \"" + std::string(arg) + "\"");
        }
        std::string flag(arg);
        std::optional<std::string> inline_value;
        if (const auto eq = flag.find('='); eq != std::string::npos) {
            inline_value = flag.substr(eq + 1);
            flag.resize(eq);
        }
        if (flag == "--no-plot") {
            if (inline_value) {
                throw usage_error("fashion_mnist: --no-plot takes no value");
            }
            o.no_plot = true;
            continue;
        }
        auto value = [&]() -> std::string {
            if (inline_value) {
                return *inline_value;
            }
            if (i + 1 >= rest.size() || rest[i + 1].starts_with("--")) {
                throw usage_error("fashion_mnist: " + flag + " needs a value");
            }
            return rest[++i];
        };
        if (flag == "--model") {
            const auto v = value();
            if (v == "softmax") {
                o.model = model_kind::softmax;
            } else if (v == "mlp") {
                o.model = model_kind::mlp;
            } else {
                throw usage_error("fashion_mnist: --model \"" + v + "\": expected softmax or mlp");
            }
        } else if (flag == "--consistency") {
            const auto v = value();
            if (v != "sequential" && v != "eventual" && v != "bounded_delay:1" &&
                v != "bounded_delay:2" && v != "bounded_delay:4" && v != "bounded_delay:8") {
                throw usage_error("fashion_mnist: --consistency \"" + v +
                                  "\": expected sequential, eventual or bounded_delay:N with N "
                                  "in 1, 2, 4, 8");
            }
            o.consistency = v;
        } else if (flag == "--epochs") {
            o.epochs = parse_number<int>(flag, value());
            if (o.epochs < 1) {
                throw usage_error("fashion_mnist: --epochs must be at least 1");
            }
        } else if (flag == "--batch") {
            o.batch = parse_number<std::size_t>(flag, value());
            if (o.batch < 1) {
                throw usage_error("fashion_mnist: --batch must be at least 1");
            }
        } else if (flag == "--optimizer") {
            const auto v = value();
            if (v == "adam") {
                o.optimizer = optimizer_kind::adam;
            } else if (v == "sgd") {
                o.optimizer = optimizer_kind::sgd;
            } else {
                throw usage_error("fashion_mnist: --optimizer \"" + v + "\": expected adam or sgd");
            }
        } else if (flag == "--lr") {
            o.lr = parse_number<double>(flag, value());
            if (!(*o.lr > 0.0) || !std::isfinite(*o.lr)) {
                throw usage_error("fashion_mnist: --lr must be positive");
            }
        } else if (flag == "--seed") {
            o.seed = parse_number<std::uint64_t>(flag, value());
        } else if (flag == "--data") {
            o.data = value();
            if (o.data.empty()) {
                throw usage_error("fashion_mnist: --data needs a directory");
            }
        } else if (flag == "--train-limit") {
            o.train_limit = parse_number<std::size_t>(flag, value());
        } else if (flag == "--test-limit") {
            o.test_limit = parse_number<std::size_t>(flag, value());
        } else if (flag == "--csv") {
            o.csv = value();
            if (o.csv.empty()) {
                throw usage_error("fashion_mnist: --csv needs a path");
            }
        } else if (flag == "--plot") {
            o.plot = value();
            if (o.plot.empty()) {
                throw usage_error("fashion_mnist: --plot needs a path (or use --no-plot)");
            }
        } else if (flag == "--min-accuracy") {
            o.min_accuracy = parse_number<double>(flag, value());
            if (!(*o.min_accuracy >= 0.0 && *o.min_accuracy <= 1.0)) {
                throw usage_error("fashion_mnist: --min-accuracy must be in [0, 1]");
            }
        } else {
            throw usage_error("fashion_mnist: unknown option " + flag);
        }
    }
    if (!o.optimizer) {
        o.optimizer = optimizer_kind::sgd;
    }
    if (o.epochs == 0) {
        o.epochs = o.model == model_kind::softmax ? 15 : 10;
    }
    return o;
}

/// The default step size (see --help): for sgd, linear in the images one update averages.
[[nodiscard]] double default_lr(const options& o, std::uint32_t workers) {
    if (*o.optimizer == optimizer_kind::adam) {
        return 1e-3;
    }
    const double base = o.model == model_kind::softmax ? 0.5 : 0.4;
    const std::size_t per_update = o.consistency == "sequential" ? o.batch * workers : o.batch;
    return base * static_cast<double>(std::min<std::size_t>(per_update, 512)) / 128.0;
}

[[nodiscard]] std::string_view to_string(model_kind m) {
    return m == model_kind::softmax ? "softmax" : "mlp";
}
[[nodiscard]] std::string_view to_string(optimizer_kind k) {
    return k == optimizer_kind::sgd ? "sgd" : "adam";
}

[[nodiscard]] std::vector<layer_shape> layers_of(model_kind m) {
    constexpr std::size_t in = examples::fashion_mnist_pixels;
    constexpr std::size_t out = examples::fashion_mnist_classes;
    if (m == model_kind::softmax) {
        return {{in, out}};
    }
    return {{in, 256}, {256, out}};
}

/// Table ids: layer l's weights are table 2l, its bias table 2l + 1.
[[nodiscard]] std::uint32_t weight_table(std::size_t layer) {
    return static_cast<std::uint32_t>(2 * layer);
}
[[nodiscard]] std::uint32_t bias_table(std::size_t layer) {
    return static_cast<std::uint32_t>(2 * layer + 1);
}

/// Every layer's two tables, dense, averaged per clock under `sequential`, with normal
/// initial weights (standard deviation sqrt(2 / inputs) before a ReLU, He et al.;
/// sqrt(1 / inputs) for the output layer) and zero biases, updated by `rule`.
template <typename Rule>
void add_tables(petrel::table_registry& tables, const std::vector<layer_shape>& layers,
                std::uint64_t seed, const Rule& rule) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
        const auto& s = layers[l];
        const double gain = l + 1 < layers.size() ? 2.0 : 1.0;
        const double stddev = std::sqrt(gain / static_cast<double>(s.inputs));
        tables.add<std::uint32_t, float>(
            weight_table(l),
            {.width = static_cast<std::uint32_t>(s.outputs),
             .dense = petrel::key_range<std::uint64_t>{0, s.inputs},
             .init = petrel::initializer::normal(0.0, stddev, seed * 1000 + l),
             .aggregate = petrel::aggregation::mean},
            rule);
        tables.add<std::uint32_t, float>(bias_table(l),
                                         {.width = static_cast<std::uint32_t>(s.outputs),
                                          .dense = petrel::key_range<std::uint64_t>{0, 1},
                                          .init = petrel::initializer::zeros(),
                                          .aggregate = petrel::aggregation::mean},
                                         rule);
    }
}

// ---------------------------------------------------------------------------------------
// Progress, CSV log and plot (worker 0)
// ---------------------------------------------------------------------------------------

/// One epoch's line of the log.
struct epoch_record {
    int epoch = 0;
    double seconds = 0.0; ///< since training started, evaluation included
    batch_stats train;    ///< worker 0's mini-batches of the epoch
    batch_stats test;
    double samples_per_second = 0.0; ///< all workers' images over the training time
};

/// Shows the progress on stdout and writes the CSV log as the epochs complete.
class reporter {
public:
    reporter(const fs::path& csv, int epochs) : epochs_(epochs), tty_(isatty(STDOUT_FILENO) == 1) {
        csv_.open(csv, std::ios::out | std::ios::trunc);
        if (!csv_) {
            throw std::runtime_error("fashion_mnist: cannot write the CSV log " + csv.string());
        }
        csv_ << "epoch,seconds,train_loss,train_accuracy,test_loss,test_accuracy,"
                "samples_per_second\n";
        csv_.flush();
    }

    /// During an epoch: a bar, updated in place at most every 200 ms, on a terminal;
    /// nothing otherwise.
    void step(int epoch, std::size_t done, std::size_t steps, const batch_stats& so_far,
              double samples_per_second) {
        if (!tty_) {
            return;
        }
        const auto now = std::chrono::steady_clock::now();
        if (done < steps && now - last_draw_ < std::chrono::milliseconds(200)) {
            return;
        }
        last_draw_ = now;
        constexpr std::size_t width = 30;
        const std::size_t filled = steps == 0 ? width : done * width / steps;
        std::string bar(filled, '=');
        if (filled < width) {
            bar += '>';
            bar.append(width - filled - 1, ' ');
        }
        std::printf("\r\033[Kepoch %*d/%d [%s] %3zu%%  loss %.4f  acc %.4f  %.0f samples/s",
                    digits(), epoch, epochs_, bar.c_str(), steps == 0 ? 100 : done * 100 / steps,
                    so_far.mean_loss(), so_far.accuracy(), samples_per_second);
        std::fflush(stdout);
    }

    /// After an epoch's evaluation: a line on stdout and one in the CSV log.
    void epoch_done(const epoch_record& r) {
        std::printf("%sepoch %*d/%d  %7.1f s  train loss %.4f acc %.4f  test loss %.4f acc "
                    "%.4f  %.0f samples/s\n",
                    tty_ ? "\r\033[K" : "", digits(), r.epoch, epochs_, r.seconds,
                    r.train.mean_loss(), r.train.accuracy(), r.test.mean_loss(), r.test.accuracy(),
                    r.samples_per_second);
        std::fflush(stdout);
        char line[256];
        std::snprintf(line, sizeof line, "%d,%.3f,%.6f,%.6f,%.6f,%.6f,%.1f\n", r.epoch, r.seconds,
                      r.train.mean_loss(), r.train.accuracy(), r.test.mean_loss(),
                      r.test.accuracy(), r.samples_per_second);
        csv_ << line;
        csv_.flush();
        if (!csv_) {
            throw std::runtime_error("fashion_mnist: writing the CSV log failed");
        }
    }

private:
    [[nodiscard]] int digits() const { return static_cast<int>(std::to_string(epochs_).size()); }

    int epochs_;
    bool tty_;
    std::ofstream csv_;
    std::chrono::steady_clock::time_point last_draw_{};
};

/// plot.py: next to the executable (the build copies it there), else in the source tree.
[[nodiscard]] fs::path plot_script() {
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const auto beside = exe.parent_path() / "plot.py";
        if (fs::is_regular_file(beside, ec)) {
            return beside;
        }
    }
    return fs::path(FASHION_MNIST_PLOT_SCRIPT);
}

/// How a run of plot.py ended.
enum class plot_outcome { written, no_python, no_matplotlib, failed };

/// Runs `python plot.py ARGS...` and waits for it.
plot_outcome run_plot(const char* python, const fs::path& script, std::vector<std::string> args) {
    args.insert(args.begin(), {python, script.string()});
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    std::fflush(stdout);
    pid_t pid = 0;
    if (posix_spawnp(&pid, python, nullptr, nullptr, argv.data(), environ) != 0) {
        return plot_outcome::no_python;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            return plot_outcome::failed;
        }
    }
    if (!WIFEXITED(status)) {
        return plot_outcome::failed;
    }
    switch (WEXITSTATUS(status)) {
    case 0:
        return plot_outcome::written;
    case 127:
        return plot_outcome::no_python;
    case 3:
        return plot_outcome::no_matplotlib;
    default:
        return plot_outcome::failed;
    }
}

/// Writes the plot with plot.py: with the `python3` on the PATH, or with the system's
/// /usr/bin/python3 (where Debian's python3-matplotlib lives) when the first has no
/// matplotlib (`plot.py --check` says which). Returns false, after printing a warning to
/// stderr, when python3, matplotlib or the script is missing or the script fails; the run
/// itself does not fail.
bool write_plot(const fs::path& csv, const fs::path& png, const std::string& title) {
    const auto script = plot_script();
    std::error_code ec;
    if (!fs::is_regular_file(script, ec)) {
        std::fprintf(stderr, "warning: no plot written: %s is missing\n", script.c_str());
        return false;
    }
    auto outcome = plot_outcome::no_python;
    for (const char* python : {"python3", "/usr/bin/python3"}) {
        outcome = run_plot(python, script, {"--check"});
        if (outcome == plot_outcome::written) {
            outcome = run_plot(python, script, {csv.string(), png.string(), title});
            break;
        }
    }
    switch (outcome) {
    case plot_outcome::written:
        return true;
    case plot_outcome::no_python:
        std::fprintf(stderr, "warning: no plot written: python3 was not found\n");
        break;
    case plot_outcome::no_matplotlib:
        std::fprintf(stderr, "warning: no plot written: python3 has no matplotlib (install "
                             "the Debian package python3-matplotlib)\n");
        break;
    case plot_outcome::failed:
        std::fprintf(stderr, "warning: no plot written: %s failed\n", script.c_str());
        break;
    }
    return false;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

/// What every worker of this process shares: the settings, the data (read once) and, from
/// worker 0, the results.
struct job {
    options opts;
    std::vector<layer_shape> layers;
    std::uint32_t servers = 0;
    std::shared_ptr<const examples::fashion_mnist_split> train;
    std::shared_ptr<const examples::fashion_mnist_split> test;
    /// Worker 0's progress display and CSV log (where worker 0 runs).
    std::optional<reporter> report;
    /// Set by worker 0 when it has evaluated the final model.
    std::optional<double> final_accuracy;
    std::vector<epoch_record> records;
};

/// A worker's stores of the model's tables, one clock for all of them per iteration.
template <typename Consistency>
class model_store {
public:
    using store = petrel::kv_store<std::uint32_t, float, Consistency>;

    model_store(petrel::worker_node& worker, const std::vector<layer_shape>& layers)
        : layers_(layers) {
        for (std::size_t l = 0; l < layers.size(); ++l) {
            weights_.push_back(std::make_unique<store>(
                worker, typename store::options_type{.table_id = weight_table(l),
                                                     .width = layers[l].outputs}));
            biases_.push_back(std::make_unique<store>(
                worker, typename store::options_type{.table_id = bias_table(l),
                                                     .width = layers[l].outputs}));
        }
    }

    /// One iteration: every table's clock advances when the scope ends.
    class iteration_scope {
    public:
        explicit iteration_scope(model_store& m) noexcept : m_(&m) {}
        iteration_scope(const iteration_scope&) = delete;
        iteration_scope& operator=(const iteration_scope&) = delete;
        ~iteration_scope() {
            for (std::size_t l = 0; l < m_->weights_.size(); ++l) {
                m_->weights_[l]->clock();
                m_->biases_[l]->clock();
            }
        }

    private:
        model_store* m_;
    };

    [[nodiscard]] iteration_scope iteration() noexcept { return iteration_scope(*this); }

    /// Pulls every table (in parallel) into the network's parameters.
    void pull(network& net) {
        using pairs = petrel::kv_pairs<std::uint32_t, float>;
        std::vector<std::future<pairs>> w, b;
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            w.push_back(weights_[l]->pull(range(layers_[l].inputs), asio::use_future));
            b.push_back(biases_[l]->pull(range(1), asio::use_future));
        }
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            copy(w[l].get(), net.weights()[l]);
            copy(b[l].get(), net.biases()[l]);
        }
    }

    /// Pushes the network's gradients times `scale` (in parallel) and waits for them.
    void push(const network& net, float scale) {
        std::vector<std::future<void>> done;
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            const auto& dw = net.weight_gradients()[l];
            const auto& db = net.bias_gradients()[l];
            if (scale == 1.0f) {
                done.push_back(weights_[l]->push(range(layers_[l].inputs), dw, asio::use_future));
                done.push_back(biases_[l]->push(range(1), xt::view(db, xt::newaxis(), xt::all()),
                                                asio::use_future));
            } else {
                done.push_back(
                    weights_[l]->push(range(layers_[l].inputs), scale * dw, asio::use_future));
                done.push_back(biases_[l]->push(
                    range(1), scale * xt::view(db, xt::newaxis(), xt::all()), asio::use_future));
            }
        }
        for (auto& f : done) {
            f.get();
        }
    }

private:
    static petrel::key_range<std::uint32_t> range(std::size_t n) {
        return {0, static_cast<std::uint32_t>(n)};
    }

    template <typename Tensor>
    static void copy(const petrel::kv_pairs<std::uint32_t, float>& from, Tensor& to) {
        const auto values = from.value_span();
        if (values.size() != to.size()) {
            throw std::runtime_error("a pull returned " + std::to_string(values.size()) +
                                     " values, expected " + std::to_string(to.size()));
        }
        std::copy(values.begin(), values.end(), to.data());
    }

    std::vector<layer_shape> layers_;
    std::vector<std::unique_ptr<store>> weights_;
    std::vector<std::unique_ptr<store>> biases_;
};

/// The loss and accuracy of the pulled model on the test images, in chunks.
batch_stats evaluate(network& net, const examples::fashion_mnist_split& test) {
    constexpr std::size_t chunk = 1000;
    batch_stats total;
    xt::xtensor<float, 2> x;
    std::vector<std::size_t> rows;
    for (std::size_t first = 0; first < test.size(); first += chunk) {
        const std::size_t n = std::min(chunk, test.size() - first);
        rows.resize(n);
        std::iota(rows.begin(), rows.end(), first);
        examples::fashion::gather_rows(test.images, rows, x);
        total += net.evaluate(x, std::span<const std::uint8_t>(test.labels).subspan(first, n));
    }
    return total;
}

template <typename Consistency>
void train(petrel::worker_node& worker, job& j) {
    using clock = std::chrono::steady_clock;
    const options& o = j.opts;
    const auto& data = *j.train;
    const std::uint32_t rank = worker.rank();
    const std::uint32_t workers = worker.workers();
    const bool lead = rank == 0;

    // This worker's contiguous share; every worker runs the same number of steps per
    // epoch (the smallest share's full batches), so the clocks stay in step.
    const std::size_t n = data.size();
    const std::size_t first = n * rank / workers;
    const std::size_t last = n * (rank + 1) / workers;
    const std::size_t steps = (n / workers) / o.batch;
    if (steps == 0) {
        throw std::runtime_error("a worker's share of " + std::to_string(n / workers) +
                                 " images is smaller than one batch of " + std::to_string(o.batch));
    }
    const std::size_t total_steps = steps * static_cast<std::size_t>(o.epochs);

    model_store<Consistency> store(worker, j.layers);
    network net(j.layers);
    std::vector<std::size_t> order(last - first);
    std::iota(order.begin(), order.end(), first);
    xt::xtensor<float, 2> x;
    std::vector<std::uint8_t> y(o.batch);

    if (lead && !j.report) {
        throw std::runtime_error("worker 0 runs in a process that did not expect it");
    }
    reporter* report = lead ? &*j.report : nullptr;
    const auto start = clock::now();

    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        std::seed_seq seq{o.seed, std::uint64_t{rank}, static_cast<std::uint64_t>(epoch)};
        std::mt19937_64 rng(seq);
        std::shuffle(order.begin(), order.end(), rng);
        batch_stats seen;
        const auto epoch_start = clock::now();
        auto rate = [&](std::size_t done) {
            const double s = std::chrono::duration<double>(clock::now() - epoch_start).count();
            return s > 0.0 ? static_cast<double>(done * o.batch * workers) / s : 0.0;
        };
        for (std::size_t step = 0; step < steps; ++step) {
            auto it = store.iteration();
            store.pull(net);
            const std::span<const std::size_t> rows(order.data() + step * o.batch, o.batch);
            examples::fashion::gather_rows(data.images, rows, x);
            for (std::size_t i = 0; i < o.batch; ++i) {
                y[i] = data.labels[rows[i]];
            }
            seen += net.train_step(x, y);
            // sgd: the step size falls linearly to zero over the run (the servers apply
            // w -= eta g, so scaling g scales the step). Adam is invariant to the scale.
            float scale = 1.0f;
            if (*o.optimizer == optimizer_kind::sgd) {
                const std::size_t done = static_cast<std::size_t>(epoch - 1) * steps + step;
                scale = 1.0f - static_cast<float>(done) / static_cast<float>(total_steps);
            }
            store.push(net, scale);
            if (lead) {
                report->step(epoch, step + 1, steps, seen, rate(step + 1));
            }
        }
        const double epoch_seconds =
            std::chrono::duration<double>(clock::now() - epoch_start).count();

        const bool final_epoch = epoch == o.epochs;
        if (final_epoch) {
            // Every worker's last push is in before worker 0 reads the final model.
            worker.barrier(petrel::group::workers, asio::use_future).get();
        }
        if (lead) {
            store.pull(net); // at this worker's clock: under sequential, every push is in
            epoch_record r;
            r.epoch = epoch;
            r.train = seen;
            r.test = evaluate(net, *j.test);
            r.seconds = std::chrono::duration<double>(clock::now() - start).count();
            r.samples_per_second =
                epoch_seconds > 0.0 ? static_cast<double>(steps * o.batch * workers) / epoch_seconds
                                    : 0.0;
            report->epoch_done(r);
            j.records.push_back(r);
            if (final_epoch) {
                j.final_accuracy = r.test.accuracy();
            }
        }
    }
}

/// Runs the job with stores of consistency `C`.
template <typename C>
int run_with(const petrel::settings& s, job& j) {
    return petrel::run(s, [&j](petrel::worker_node& w) { train<C>(w, j); });
}

int dispatch(const petrel::settings& s, job& j) {
    const std::string& c = j.opts.consistency;
    if (c == "sequential") {
        return run_with<petrel::sequential>(s, j);
    }
    if (c == "eventual") {
        return run_with<petrel::eventual>(s, j);
    }
    if (c == "bounded_delay:1") {
        return run_with<petrel::bounded_delay<1>>(s, j);
    }
    if (c == "bounded_delay:2") {
        return run_with<petrel::bounded_delay<2>>(s, j);
    }
    if (c == "bounded_delay:4") {
        return run_with<petrel::bounded_delay<4>>(s, j);
    }
    return run_with<petrel::bounded_delay<8>>(s, j);
}

/// BLAS on one thread per worker: the workers (and the servers) already share the cores.
void single_threaded_blas() {
    using set_threads = void (*)(int);
    if (void* f = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
        reinterpret_cast<set_threads>(f)(1);
    }
}

} // namespace

int main(int argc, char** argv) {
    petrel::settings s;
    try {
        s = petrel::resolve({}, argc, argv);
    } catch (const petrel::config_error& e) {
        std::fprintf(stderr, "%s\n(see --help)\n", e.what());
        return 2;
    }
    if (s.help) {
        std::printf("%s\n%s", petrel::usage(argc > 0 ? argv[0] : "fashion_mnist").c_str(),
                    std::string(options_help).c_str());
        return 0;
    }

    job j;
    try {
        j.opts = parse_options(s.rest);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "%s\n(see --help)\n", e.what());
        return 2;
    }
    if (!j.opts.lr) {
        j.opts.lr = default_lr(j.opts, s.workers);
    }
    const options& o = j.opts;
    j.layers = layers_of(o.model);
    j.servers = s.servers;

    // The data, read once for all the workers of this process; the test images only
    // where worker 0 runs.
    const bool hosts_lead = s.workers_here > 0 && s.first_worker == 0;
    try {
        if (s.workers_here > 0) {
            const auto dir = examples::fashion_mnist_dir(o.data);
            j.train = std::make_shared<const examples::fashion_mnist_split>(
                examples::load_fashion_mnist(dir, true, o.train_limit));
            if (hosts_lead) {
                j.test = std::make_shared<const examples::fashion_mnist_split>(
                    examples::load_fashion_mnist(dir, false, o.test_limit));
            }
        }
        if (s.workers_here > 0 && (j.train->size() / s.workers) / o.batch == 0) {
            throw usage_error("fashion_mnist: a worker's share of " +
                              std::to_string(j.train->size() / s.workers) +
                              " training images is smaller than one batch of " +
                              std::to_string(o.batch) + " (see --batch and --train-limit)");
        }
        if (hosts_lead) {
            j.report.emplace(fs::path(o.csv), o.epochs);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }

    petrel::table_registry tables;
    const auto lr = *o.lr;
    if (*o.optimizer == optimizer_kind::sgd) {
        add_tables(tables, j.layers, o.seed, petrel::sgd{.eta = lr});
    } else {
        add_tables(tables, j.layers, o.seed, petrel::adam{.eta = lr});
    }
    s.tables = std::make_shared<const petrel::table_registry>(std::move(tables));

    single_threaded_blas();
    if (hosts_lead) {
        std::printf("fashion_mnist: %s (%zu parameters), %u workers x batch %zu, %u servers, "
                    "%s, %s lr %g, %zu training / %zu test images, %d epochs\n",
                    std::string(to_string(o.model)).c_str(), network(j.layers).parameters(),
                    s.workers, o.batch, s.servers, o.consistency.c_str(),
                    std::string(to_string(*o.optimizer)).c_str(), lr, j.train->size(),
                    j.test->size(), o.epochs);
        std::fflush(stdout);
    }

    const int status = dispatch(s, j);
    if (!hosts_lead) {
        return status;
    }
    std::error_code ec;
    const auto csv = fs::absolute(o.csv, ec);
    if (!j.records.empty()) {
        std::printf("csv: %s\n", csv.c_str());
    }
    if (!j.records.empty() && !o.no_plot) {
        const auto png = fs::absolute(o.plot, ec);
        const std::string title = "Fashion-MNIST " + std::string(to_string(o.model)) + ", " +
                                  std::to_string(s.workers) + " workers, " +
                                  std::to_string(s.servers) + " servers, " + o.consistency;
        if (write_plot(csv, png, title)) {
            std::printf("plot: %s\n", png.c_str());
        }
    }
    if (status != petrel::run_ok || !j.final_accuracy) {
        std::fflush(stdout);
        return status != petrel::run_ok ? status : 1;
    }
    std::printf("test_accuracy=%.4f\n", *j.final_accuracy);
    std::fflush(stdout);
    if (o.min_accuracy && *j.final_accuracy < *o.min_accuracy) {
        std::fprintf(stderr, "fashion_mnist: the test accuracy %.4f is below --min-accuracy %.4f\n",
                     *j.final_accuracy, *o.min_accuracy);
        return 1;
    }
    return 0;
}
