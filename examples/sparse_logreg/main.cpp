// Sparse logistic regression: softmax regression on hashed sparse features of the
// Fashion-MNIST images, trained on a sparse Petrel table with FTRL-proximal or AdaGrad.
//
// Every image becomes a set of binary features (quantized pixels, crosses of neighbouring
// pixels, a bias; see features.hpp) hashed into 2^hash-bits keys. The model keeps one row
// of 10 values per key, one per class: the logits of an image are the sum of the rows of
// its features. The rows live in table 0 of the servers, a sparse table declared with the
// update rule (`petrel::ftrl` by default, `petrel::adagrad` with --updater adagrad); a key
// is inserted by its first push, and a pull of a key never pushed reads zeros without
// inserting it.
//
// Each worker trains on its share of the training images. Per mini-batch it collects the
// sorted unique keys of the batch's features, pulls their rows, computes the gradient of
// the summed softmax cross-entropy of the batch for exactly those keys, and pushes it; the
// servers apply the update rule. Worker 0 counts the keys the servers store with a remote
// function (each server returns how many keys it stores, and how many of their rows are
// not all zeros) and prints, per epoch, the loss and accuracy on the training batches
// (each scored before its own update) and the distinct keys stored; at the end, the
// accuracy on the 10,000 test images. The last line is `test_accuracy=0.xxxx`.
//
// Runs the whole job in this process by default (--servers and --workers, see --help);
// under a launcher each process hosts its share, as in the quickstart.
#include "../common/fashion_mnist_data.hpp"
#include "features.hpp"

#include <petrel/petrel.hpp>

#include <asio/use_future.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace examples::sparse_logreg;

constexpr std::size_t classes = examples::fashion_mnist_classes;
constexpr std::uint32_t weights_table = 0;
constexpr std::uint32_t stats_table = 1;
/// Key of the stats table where the workers add up their test results (epochs use 0, 1...).
constexpr std::uint64_t test_stats_key = std::uint64_t{1} << 32;
/// The N of --consistency bounded_delay:N, each its own instantiation of the training code.
using delays = std::index_sequence<1, 2, 4, 8>;

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class consistency_kind { sequential, eventual, bounded_delay };

struct options {
    int epochs = 5;
    std::size_t batch = 100;
    std::string updater = "ftrl";
    double alpha = 0.01;
    double beta = 1.0;
    double l1 = 1.0;
    double l2 = 10.0;
    double lr = 0.005;
    unsigned hash_bits = 22;
    std::size_t train_limit = 0;
    std::string data;
    consistency_kind consistency = consistency_kind::bounded_delay;
    std::size_t delay = 2;
    std::string consistency_text = "bounded_delay:2";
    std::uint64_t seed = 1;
    double kkt = 0; // > 0: the KKT filter's gradient threshold
};

constexpr std::string_view options_help =
    R"(Sparse logistic regression on hashed features of Fashion-MNIST.

Options of this example:
  --epochs N           passes over the training images (default 5)
  --batch N            images per mini-batch and worker (default 100)
  --updater NAME       ftrl (default) or adagrad: the servers' update rule
  --alpha X            FTRL learning rate alpha (default 0.01)
  --beta X             FTRL beta (default 1)
  --l1 X               FTRL L1 strength (default 1)
  --l2 X               FTRL L2 strength (default 10)
  --lr X               AdaGrad learning rate (default 0.005)
  --hash-bits N        features are hashed into 2^N keys, N in 8..40 (default 22)
  --train-limit N      use the first N training images only (default: all 60,000)
  --data DIR           the Fashion-MNIST files (default: $FASHION_MNIST_DIR, else
                       /usr/share/datasets/fashion-mnist from dataset-fashion-mnist)
  --consistency MODE   sequential, eventual or bounded_delay:N with N 1, 2, 4 or 8
                       (default bounded_delay:2)
  --seed N             seed of the feature hash and of the shuffling (default 1)
  --kkt-filter X       send no row whose weights are all zero and whose gradient is
                       at most X in every class (the KKT filter; X = the L1 strength
                       --l1 is the optimality bound; default 0: off)
Options are written --name value or --name=value.

)";

template <typename T>
T parse_integer(std::string_view name, const std::string& text, T low, T high) {
    std::size_t used = 0;
    unsigned long long v = 0;
    if (!text.empty() && text.front() >= '0' && text.front() <= '9') {
        try {
            v = std::stoull(text, &used, 10);
        } catch (const std::exception&) {
            used = 0;
        }
    }
    if (used == 0 || used != text.size() || v < static_cast<unsigned long long>(low) ||
        v > static_cast<unsigned long long>(high)) {
        throw usage_error("--" + std::string(name) + " \"" + text + "\": expected an integer in " +
                          std::to_string(low) + ".." + std::to_string(high));
    }
    return static_cast<T>(v);
}

double parse_real(std::string_view name, const std::string& text, bool positive) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || !std::isfinite(v) || v < 0 || (positive && v == 0)) {
        throw usage_error("--" + std::string(name) + " \"" + text + "\": expected a " +
                          (positive ? "positive" : "non-negative") + " number");
    }
    return v;
}

void parse_consistency(const std::string& text, options& o) {
    constexpr std::string_view bounded = "bounded_delay:";
    o.consistency_text = text;
    if (text == "sequential") {
        o.consistency = consistency_kind::sequential;
    } else if (text == "eventual") {
        o.consistency = consistency_kind::eventual;
    } else if (text.starts_with(bounded)) {
        o.consistency = consistency_kind::bounded_delay;
        const std::string n(text.substr(bounded.size()));
        if (n != "1" && n != "2" && n != "4" && n != "8") {
            throw usage_error("--consistency \"" + text +
                              "\": the N of bounded_delay:N must be 1, 2, 4 or 8");
        }
        o.delay = static_cast<std::size_t>(std::stoul(n));
    } else {
        throw usage_error("--consistency \"" + text +
                          "\": expected sequential, eventual or bounded_delay:N (N 1, 2, 4 or 8)");
    }
}

/// Parses the program's own arguments (`rest` from petrel::resolve: argv[0], then every
/// argument that is not a Petrel option).
options parse_options(const std::vector<std::string>& rest) {
    options o;
    bool ftrl_option = false;
    bool adagrad_option = false;
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
        if (name == "epochs") {
            o.epochs = parse_integer<int>(name, value, 1, 10000);
        } else if (name == "batch") {
            o.batch = parse_integer<std::size_t>(name, value, 1, 60000);
        } else if (name == "updater") {
            if (value != "ftrl" && value != "adagrad") {
                throw usage_error("--updater \"" + value + "\": expected ftrl or adagrad");
            }
            o.updater = value;
        } else if (name == "alpha") {
            o.alpha = parse_real(name, value, true);
            ftrl_option = true;
        } else if (name == "beta") {
            o.beta = parse_real(name, value, false);
            ftrl_option = true;
        } else if (name == "l1") {
            o.l1 = parse_real(name, value, false);
            ftrl_option = true;
        } else if (name == "l2") {
            o.l2 = parse_real(name, value, false);
            ftrl_option = true;
        } else if (name == "lr") {
            o.lr = parse_real(name, value, true);
            adagrad_option = true;
        } else if (name == "hash-bits") {
            o.hash_bits = parse_integer<unsigned>(name, value, 8, 40);
        } else if (name == "train-limit") {
            o.train_limit = parse_integer<std::size_t>(name, value, 1, 60000);
        } else if (name == "data") {
            if (value.empty()) {
                throw usage_error("--data needs a directory");
            }
            o.data = value;
        } else if (name == "consistency") {
            parse_consistency(value, o);
        } else if (name == "kkt-filter") {
            o.kkt = parse_real(name, value, false);
        } else if (name == "seed") {
            o.seed = parse_integer<std::uint64_t>(name, value, 0,
                                                  std::numeric_limits<std::uint64_t>::max());
        } else {
            throw usage_error("unknown option --" + name);
        }
    }
    if (o.updater == "ftrl" && adagrad_option) {
        throw usage_error("--lr is AdaGrad's learning rate: use --alpha (and --beta, --l1, "
                          "--l2) with --updater ftrl, or add --updater adagrad");
    }
    if (o.updater == "adagrad" && ftrl_option) {
        throw usage_error("--alpha, --beta, --l1 and --l2 are FTRL's: use --lr with "
                          "--updater adagrad");
    }
    return o;
}

// ---------------------------------------------------------------------------------------
// Data and model arithmetic
// ---------------------------------------------------------------------------------------

/// Quantized images (`image_pixels` levels each) and their classes.
struct dataset {
    std::vector<std::uint8_t> levels;
    std::vector<std::uint8_t> labels;

    [[nodiscard]] std::size_t size() const noexcept { return labels.size(); }
    [[nodiscard]] std::span<const std::uint8_t> image(std::size_t i) const noexcept {
        return std::span<const std::uint8_t>(levels).subspan(i * image_pixels, image_pixels);
    }
};

dataset quantized(const examples::fashion_mnist_split& split) {
    dataset d;
    d.labels = split.labels;
    d.levels.resize(split.size() * image_pixels);
    const float* src = split.images.data();
    for (std::size_t i = 0; i < d.levels.size(); ++i) {
        d.levels[i] = quantize(src[i]);
    }
    return d;
}

/// Sums of the loss, the correct predictions and the examples.
struct stats {
    double loss = 0;
    double correct = 0;
    double count = 0;
};

/// One mini-batch: the features of each image, the batch's sorted unique keys, where each
/// feature's key is among them, and the gradient of every key.
struct batch {
    std::vector<std::uint64_t> features;
    std::vector<std::size_t> offsets;
    std::vector<std::uint64_t> keys;
    std::vector<std::uint32_t> slots;
    std::vector<float> gradient;

    void build(const dataset& d, std::span<const std::size_t> rows, const feature_hasher& hash) {
        features.clear();
        offsets.assign(1, 0);
        for (const std::size_t r : rows) {
            image_features(d.image(r), hash, features);
            offsets.push_back(features.size());
        }
        // The distinct keys in order of appearance (an open-addressing set of key ->
        // number), then sorted, and every feature's number mapped to its sorted position.
        std::size_t capacity = 64;
        while (capacity < 2 * features.size()) {
            capacity *= 2;
        }
        const std::size_t mask = capacity - 1;
        set_keys.assign(capacity, empty_slot);
        set_numbers.resize(capacity);
        found.clear();
        slots.resize(features.size());
        for (std::size_t i = 0; i < features.size(); ++i) {
            const std::uint64_t k = features[i];
            std::size_t at = static_cast<std::size_t>(mix64(k)) & mask;
            while (set_keys[at] != k && set_keys[at] != empty_slot) {
                at = (at + 1) & mask;
            }
            if (set_keys[at] == empty_slot) {
                set_keys[at] = k;
                set_numbers[at] = static_cast<std::uint32_t>(found.size());
                found.emplace_back(k, static_cast<std::uint32_t>(found.size()));
            }
            slots[i] = set_numbers[at];
        }
        std::sort(found.begin(), found.end());
        keys.resize(found.size());
        position.resize(found.size());
        for (std::size_t j = 0; j < found.size(); ++j) {
            keys[j] = found[j].first;
            position[found[j].second] = static_cast<std::uint32_t>(j);
        }
        for (auto& s : slots) {
            s = position[s];
        }
    }

    /// The loss and predictions of the images given the rows `w` of `keys` (`classes`
    /// values each); with `train`, also the gradient of the summed loss for every key.
    stats forward(const dataset& d, std::span<const std::size_t> rows, std::span<const float> w,
                  bool train) {
        if (w.size() != keys.size() * classes) {
            throw std::runtime_error("a pull returned " + std::to_string(w.size()) +
                                     " values for " + std::to_string(keys.size()) + " keys");
        }
        if (train) {
            gradient.assign(keys.size() * classes, 0.0f);
        }
        stats s;
        for (std::size_t e = 0; e < rows.size(); ++e) {
            std::array<double, classes> z{};
            for (std::size_t f = offsets[e]; f < offsets[e + 1]; ++f) {
                const float* row = w.data() + std::size_t{slots[f]} * classes;
                for (std::size_t c = 0; c < classes; ++c) {
                    z[c] += static_cast<double>(row[c]);
                }
            }
            const std::size_t label = d.labels[rows[e]];
            const std::size_t predicted =
                static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin());
            const double top = z[predicted];
            double total = 0;
            for (auto& v : z) {
                v = std::exp(v - top);
                total += v;
            }
            s.loss += std::log(total) - std::log(z[label]);
            s.correct += predicted == label ? 1.0 : 0.0;
            s.count += 1.0;
            if (!train) {
                continue;
            }
            std::array<float, classes> delta{};
            for (std::size_t c = 0; c < classes; ++c) {
                delta[c] = static_cast<float>(z[c] / total) - (c == label ? 1.0f : 0.0f);
            }
            for (std::size_t f = offsets[e]; f < offsets[e + 1]; ++f) {
                float* g = gradient.data() + std::size_t{slots[f]} * classes;
                for (std::size_t c = 0; c < classes; ++c) {
                    g[c] += delta[c];
                }
            }
        }
        return s;
    }

private:
    static constexpr std::uint64_t empty_slot = ~std::uint64_t{0}; // never a key
    std::vector<std::uint64_t> set_keys;
    std::vector<std::uint32_t> set_numbers;
    std::vector<std::pair<std::uint64_t, std::uint32_t>> found;
    std::vector<std::uint32_t> position;
};

// ---------------------------------------------------------------------------------------
// Remote function: the keys a server stores
// ---------------------------------------------------------------------------------------

/// Runs on every server that owns part of the range: how many keys it stores there, and
/// how many of those have a row that is not all zeros (FTRL's L1 term keeps rare
/// features at exactly zero).
struct key_census {
    static constexpr std::string_view name = "sparse_logreg.key_census";
    using args_type = petrel::no_args;
    using result_type = std::array<std::uint64_t, 2>;
    template <typename Key, typename Value>
    result_type operator()(petrel::table_rows<Key, Value>& rows, const petrel::no_args&) const {
        std::uint64_t nonzero = 0;
        std::as_const(rows).for_each([&](Key, std::span<const Value> row) {
            nonzero += std::any_of(row.begin(), row.end(), [](Value v) { return v != 0; }) ? 1 : 0;
        });
        return {rows.size(), nonzero};
    }
};

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

struct job_data {
    dataset train;
    dataset test;
};

/// printf to stdout, flushed at once (the workers' lines come from their own threads).
[[gnu::format(printf, 1, 2)]] void say(const char* format, ...) {
    std::va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    std::fflush(stdout);
}

std::string number(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return text;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// The KKT filter of the parameter server paper (§5.1), written as a user filter: with an
/// L1 penalty, a key whose weights are all zero stays at zero while its gradient is smaller
/// than the penalty's pull towards zero, so a small gradient of such a key need not be
/// sent. The filter sees each push's rows with the weights the worker pulled for the same
/// keys just before.
class kkt_filter final : public petrel::wire::push_filter<std::uint64_t, float> {
public:
    explicit kkt_filter(float threshold) : threshold_(threshold) {}

    /// The weights pulled for the keys of the next push, in the same order.
    void set_weights(std::span<const float> w) { weights_ = w; }

    void filter(petrel::wire::filter_batch<std::uint64_t, float>& b) override {
        if (weights_.size() != b.values.size()) {
            return; // not the batch the weights belong to: send everything
        }
        const std::size_t w = b.width;
        b.keep_if([&](std::size_t i) {
            for (std::size_t c = 0; c < w; ++c) {
                if (weights_[i * w + c] != 0.0f || std::abs(b.row(i)[c]) > threshold_) {
                    return true;
                }
            }
            return false;
        });
        weights_ = {};
    }

private:
    float threshold_;
    std::span<const float> weights_;
};

template <typename Consistency>
void train(petrel::worker_node& worker, const options& o, const job_data& data) {
    const std::uint32_t rank = worker.rank();
    const std::uint32_t workers = worker.workers();
    const bool leader = rank == 0;
    const feature_hasher hash(o.hash_bits, o.seed);
    const petrel::key_range<std::uint64_t> all_keys{0, std::uint64_t{1} << o.hash_bits};

    petrel::kv_store<std::uint64_t, float, Consistency> kv(
        worker, {.table_id = weights_table, .width = classes});
    std::shared_ptr<kkt_filter> kkt;
    if (o.kkt > 0) {
        kkt = std::make_shared<kkt_filter>(static_cast<float>(o.kkt));
        kv.set_filters({kkt});
    }
    // Each worker adds its loss, correct predictions and examples to one key per epoch;
    // `eventual`: a push is applied when it arrives, and the barrier after it makes it
    // visible to worker 0.
    petrel::kv_store<std::uint64_t, double, petrel::eventual> totals(
        worker, {.table_id = stats_table, .width = 3});
    // The keys the servers store, and those with a row that is not all zeros.
    auto census = [&] {
        const auto per_server = kv.template call<key_census>(all_keys, {}, asio::use_future).get();
        std::array<unsigned long long, 2> total{};
        for (const auto& c : per_server) {
            total[0] += c[0];
            total[1] += c[1];
        }
        return total;
    };
    auto sum_over_workers = [&](std::uint64_t key, const stats& mine) {
        const std::vector<std::uint64_t> k{key};
        const std::vector<double> v{mine.loss, mine.correct, mine.count};
        totals.push(k, std::span<const double>(v), asio::use_future).get();
        worker.barrier(petrel::group::workers, asio::use_future).get();
        stats all;
        if (leader) {
            const auto pulled = totals.pull(k, asio::use_future).get();
            const auto row = pulled.row(0);
            all = {row[0], row[1], row[2]};
        }
        return all;
    };

    // This worker's training images: every workers-th one.
    std::vector<std::size_t> mine;
    for (std::size_t i = rank; i < data.train.size(); i += workers) {
        mine.push_back(i);
    }
    // The same number of mini-batches on every worker, so that their clocks keep pace.
    const std::size_t largest_share = (data.train.size() + workers - 1) / workers;
    const std::size_t batches = (largest_share + o.batch - 1) / o.batch;

    batch b;
    if (leader) {
        const std::string rule =
            o.updater == "ftrl" ? "ftrl (alpha " + number(o.alpha) + ", beta " + number(o.beta) +
                                      ", l1 " + number(o.l1) + ", l2 " + number(o.l2) + ")"
                                : "adagrad (lr " + number(o.lr) + ")";
        say("sparse_logreg: %zu training and %zu test images; %u servers, %u workers; "
            "consistency %s; updater %s; features hashed into 2^%u keys, rows of %zu values; "
            "batch %zu per worker\n",
            data.train.size(), data.test.size(), worker.servers(), workers,
            o.consistency_text.c_str(), rule.c_str(), o.hash_bits, classes, o.batch);
        say("loss and train_accuracy: over the epoch's batches, each scored just before its "
            "update\n");
        // Before any push: the table is empty, and pulling the keys of a batch reads
        // zeros without inserting them.
        const std::size_t n = std::min(o.batch, mine.size());
        b.build(data.train, std::span<const std::size_t>(mine).first(n), hash);
        const auto w = kv.pull(b.keys, asio::use_future).get();
        float largest = 0;
        for (const float v : w.value_span()) {
            largest = std::max(largest, std::abs(v));
        }
        say("before any push: pulled the %zu keys of a batch (largest |value| %g); the servers "
            "store %llu keys\n",
            b.keys.size(), static_cast<double>(largest), census()[0]);
    }
    worker.barrier(petrel::group::workers, asio::use_future).get();

    std::mt19937_64 rng(mix64(o.seed + 0x632be59bd9b4e019ULL * (rank + std::uint64_t{1})));
    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < o.epochs; ++epoch) {
        std::shuffle(mine.begin(), mine.end(), rng);
        stats epoch_stats;
        for (std::size_t i = 0; i < batches; ++i) {
            {
                auto scope = kv.iteration();
                const std::size_t first = std::min(i * o.batch, mine.size());
                const std::size_t last = std::min(first + o.batch, mine.size());
                const auto rows = std::span<const std::size_t>(mine).subspan(first, last - first);
                if (rows.empty()) {
                    continue; // a worker with a smaller share: only its clock moves
                }
                b.build(data.train, rows, hash);
                const auto w = kv.pull(b.keys, asio::use_future).get();
                const stats s = b.forward(data.train, rows, w.value_span(), true);
                epoch_stats.loss += s.loss;
                epoch_stats.correct += s.correct;
                epoch_stats.count += s.count;
                if (kkt) {
                    kkt->set_weights(w.value_span());
                }
                kv.push(b.keys, std::span<const float>(b.gradient), asio::use_future).get();
            }
            // Keys are inserted by their first push: watch the table grow early on.
            const std::size_t done = i + 1;
            if (leader && epoch == 0 && (done & (done - 1)) == 0 && done < batches) {
                say("epoch 1  batch %5zu/%zu  distinct_keys %llu\n", done, batches, census()[0]);
            }
        }
        const stats all = sum_over_workers(static_cast<std::uint64_t>(epoch), epoch_stats);
        if (leader) {
            const auto keys = census();
            say("epoch %d/%d  loss %.4f  train_accuracy %.4f  distinct_keys %llu  nonzero_keys "
                "%llu  (%.1f s)\n",
                epoch + 1, o.epochs, all.loss / all.count, all.correct / all.count, keys[0],
                keys[1], seconds_since(start));
        }
    }

    // Test: every worker scores its share of the test images with the final rows.
    stats test_stats;
    std::vector<std::size_t> test_rows;
    for (std::size_t i = rank; i < data.test.size(); i += workers) {
        test_rows.push_back(i);
    }
    for (std::size_t first = 0; first < test_rows.size(); first += o.batch) {
        const auto rows = std::span<const std::size_t>(test_rows).subspan(
            first, std::min(o.batch, test_rows.size() - first));
        b.build(data.test, rows, hash);
        const auto w = kv.pull(b.keys, asio::use_future).get();
        const stats s = b.forward(data.test, rows, w.value_span(), false);
        test_stats.loss += s.loss;
        test_stats.correct += s.correct;
        test_stats.count += s.count;
    }
    const stats all = sum_over_workers(test_stats_key, test_stats);
    if (leader) {
        if (all.count != static_cast<double>(data.test.size())) {
            throw std::runtime_error("the workers scored " + std::to_string(all.count) +
                                     " test images of " + std::to_string(data.test.size()));
        }
        const auto keys = census();
        say("distinct_keys %llu  nonzero_keys %llu after scoring the test images (pulls insert "
            "no keys)  (%.1f s)\n",
            keys[0], keys[1], seconds_since(start));
        if (kkt) {
            const auto t = kv.traffic();
            say("kkt filter (worker 0): sent %.1f%% of the gradient bytes (%llu of %llu)\n",
                100.0 * static_cast<double>(t.filter.out) /
                    static_cast<double>(std::max<std::uint64_t>(t.filter.in, 1)),
                static_cast<unsigned long long>(t.filter.out),
                static_cast<unsigned long long>(t.filter.in));
        }
        say("test_loss=%.4f\n", all.loss / all.count);
        say("test_accuracy=%.4f\n", all.correct / all.count);
    }
}

/// Calls `f.template operator()<C>()` with the consistency policy type `C` the options name.
template <typename F, std::size_t... Tau>
int with_bounded_delay(std::size_t delay, F& f, std::index_sequence<Tau...>) {
    int status = 0;
    (void)((delay == Tau ? (status = f.template operator()<petrel::bounded_delay<Tau>>(), true)
                         : false) ||
           ...);
    return status;
}

template <typename F>
int with_consistency(const options& o, F&& f) {
    switch (o.consistency) {
    case consistency_kind::sequential:
        return f.template operator()<petrel::sequential>();
    case consistency_kind::eventual:
        return f.template operator()<petrel::eventual>();
    case consistency_kind::bounded_delay:
        break;
    }
    return with_bounded_delay(o.delay, f, delays{});
}

} // namespace

int main(int argc, char** argv) {
    petrel::settings s;
    try {
        s = petrel::resolve({}, argc, argv);
    } catch (const petrel::config_error& e) {
        std::fprintf(stderr, "%s\n(see --help)\n", e.what());
        return petrel::run_config_error;
    }
    if (s.help) {
        std::printf("%s%s", options_help.data(),
                    petrel::usage(argc > 0 ? argv[0] : "sparse_logreg").c_str());
        return 0;
    }
    options o;
    try {
        o = parse_options(s.rest);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "sparse_logreg: %s (see --help)\n", e.what());
        return petrel::run_config_error;
    }

    // The data, read once per process that hosts workers.
    auto data = std::make_shared<job_data>();
    if (s.workers_here > 0) {
        try {
            const auto dir = examples::fashion_mnist_dir(o.data);
            data->train = quantized(examples::load_fashion_mnist(dir, true, o.train_limit));
            data->test = quantized(examples::load_fashion_mnist(dir, false));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "sparse_logreg: %s\n", e.what());
            return 1;
        }
    }

    // Table 0: the model, sparse, one row of 10 values per key, zeros until first pushed.
    // Table 1: the workers' sums of loss and accuracy, added up as pushed.
    petrel::table_registry tables;
    if (o.updater == "ftrl") {
        tables.add<std::uint64_t, float>(
            weights_table, {.width = classes},
            petrel::ftrl{.alpha = o.alpha, .beta = o.beta, .l1 = o.l1, .l2 = o.l2});
    } else {
        tables.add<std::uint64_t, float>(weights_table, {.width = classes},
                                         petrel::adagrad{.eta = o.lr});
    }
    tables.add<std::uint64_t, double>(stats_table, {.width = 3});
    auto functions = std::make_shared<petrel::function_registry>();
    functions->add<key_census>();
    s.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
    s.functions = functions;

    return with_consistency(o, [&]<typename C>() {
        return petrel::run(s, [&](petrel::worker_node& w) { train<C>(w, o, *data); });
    });
}
