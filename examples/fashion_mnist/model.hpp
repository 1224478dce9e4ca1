// Fashion-MNIST example: the models' arithmetic on one worker.
//
// A stack of fully connected layers with ReLU between them and a softmax cross-entropy
// loss on top: one layer is multinomial logistic regression (784-10), two layers the
// multilayer perceptron (784-256-10). Layer l computes z = a W + b with W of shape
// [inputs, outputs] and b of shape [outputs], which is exactly how the parameters are
// stored on the servers: one table per weight matrix (a key per input row, one value per
// output) and one per bias vector (a single key of width `outputs`).
//
// Buffers are kept between calls and only reallocated when the batch size changes, so a
// training step allocates nothing; the matrix products go to BLAS (xt::blas::gemm).
#pragma once

#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples::fashion {

/// The sizes of one fully connected layer.
struct layer_shape {
    std::size_t inputs = 0;
    std::size_t outputs = 0;
};

/// The sum of the losses and the number of correct predictions over some examples.
struct batch_stats {
    double loss_sum = 0.0;
    std::size_t correct = 0;
    std::size_t count = 0;

    batch_stats& operator+=(const batch_stats& o) noexcept {
        loss_sum += o.loss_sum;
        correct += o.correct;
        count += o.count;
        return *this;
    }
    [[nodiscard]] double mean_loss() const noexcept {
        return count == 0 ? 0.0 : loss_sum / static_cast<double>(count);
    }
    [[nodiscard]] double accuracy() const noexcept {
        return count == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(count);
    }
};

/// Copies rows `first..first+n-1` of `src`, or the rows listed in `rows`, into `dst`
/// (resized to [n, columns] when its shape differs).
inline void gather_rows(const xt::xtensor<float, 2>& src, std::span<const std::size_t> rows,
                        xt::xtensor<float, 2>& dst) {
    const std::size_t cols = src.shape()[1];
    if (dst.shape()[0] != rows.size() || dst.shape()[1] != cols) {
        dst.resize({rows.size(), cols});
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const float* from = src.data() + rows[i] * cols;
        std::copy(from, from + cols, dst.data() + i * cols);
    }
}

/// A fully connected network with ReLU hidden layers and a softmax output.
///
/// `weights()` and `biases()` hold the parameters the caller sets (pulled from the
/// servers); `train_step` fills `weight_gradients()` and `bias_gradients()` with the
/// gradient of the mean loss over the batch.
class network {
public:
    /// @throws std::invalid_argument when the layers do not chain (each layer's inputs
    /// must be the previous layer's outputs) or are empty
    explicit network(std::vector<layer_shape> layers) : layers_(std::move(layers)) {
        if (layers_.empty()) {
            throw std::invalid_argument("network: no layers");
        }
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            const auto& s = layers_[l];
            if (s.inputs == 0 || s.outputs == 0 || (l > 0 && s.inputs != layers_[l - 1].outputs)) {
                throw std::invalid_argument("network: layer " + std::to_string(l) +
                                            " does not fit the one before");
            }
            w_.push_back(xt::zeros<float>({s.inputs, s.outputs}));
            dw_.push_back(xt::zeros<float>({s.inputs, s.outputs}));
            b_.push_back(xt::zeros<float>({s.outputs}));
            db_.push_back(xt::zeros<float>({s.outputs}));
        }
        z_.resize(layers_.size());
        dz_.resize(layers_.size());
    }

    [[nodiscard]] const std::vector<layer_shape>& layers() const noexcept { return layers_; }
    [[nodiscard]] std::size_t inputs() const noexcept { return layers_.front().inputs; }
    [[nodiscard]] std::size_t classes() const noexcept { return layers_.back().outputs; }

    /// The number of parameters.
    [[nodiscard]] std::size_t parameters() const noexcept {
        std::size_t n = 0;
        for (const auto& s : layers_) {
            n += s.inputs * s.outputs + s.outputs;
        }
        return n;
    }

    [[nodiscard]] std::vector<xt::xtensor<float, 2>>& weights() noexcept { return w_; }
    [[nodiscard]] std::vector<xt::xtensor<float, 1>>& biases() noexcept { return b_; }
    [[nodiscard]] const std::vector<xt::xtensor<float, 2>>& weight_gradients() const noexcept {
        return dw_;
    }
    [[nodiscard]] const std::vector<xt::xtensor<float, 1>>& bias_gradients() const noexcept {
        return db_;
    }

    /// The loss and the correct predictions on `x` ([n, inputs]) with labels `y`.
    batch_stats evaluate(const xt::xtensor<float, 2>& x, std::span<const std::uint8_t> y) {
        check_batch(x, y);
        forward(x);
        return loss(y, false);
    }

    /// As `evaluate`, and the gradients of the mean loss over the batch.
    batch_stats train_step(const xt::xtensor<float, 2>& x, std::span<const std::uint8_t> y) {
        check_batch(x, y);
        forward(x);
        const batch_stats stats = loss(y, true); // dz_ of the last layer
        for (std::size_t l = layers_.size(); l-- > 0;) {
            const xt::xtensor<float, 2>& input = l == 0 ? x : z_[l - 1];
            // dW = input^T dz, db = column sums of dz.
            xt::blas::gemm(input, dz_[l], dw_[l], true, false);
            column_sums(dz_[l], db_[l]);
            if (l > 0) {
                // d(input) = dz W^T, through the ReLU of the layer below.
                auto& below = dz_[l - 1];
                reshape(below, x.shape()[0], layers_[l].inputs);
                xt::blas::gemm(dz_[l], w_[l], below, false, true);
                const float* a = z_[l - 1].data();
                float* d = below.data();
                for (std::size_t i = 0; i < below.size(); ++i) {
                    d[i] = a[i] > 0.0f ? d[i] : 0.0f;
                }
            }
        }
        return stats;
    }

private:
    static void reshape(xt::xtensor<float, 2>& t, std::size_t rows, std::size_t cols) {
        if (t.shape()[0] != rows || t.shape()[1] != cols) {
            t.resize({rows, cols});
        }
    }

    static void column_sums(const xt::xtensor<float, 2>& m, xt::xtensor<float, 1>& out) {
        const std::size_t rows = m.shape()[0];
        const std::size_t cols = m.shape()[1];
        std::fill(out.begin(), out.end(), 0.0f);
        for (std::size_t i = 0; i < rows; ++i) {
            const float* r = m.data() + i * cols;
            for (std::size_t j = 0; j < cols; ++j) {
                out.data()[j] += r[j];
            }
        }
    }

    void check_batch(const xt::xtensor<float, 2>& x, std::span<const std::uint8_t> y) const {
        if (x.shape()[1] != inputs() || x.shape()[0] != y.size() || y.empty()) {
            throw std::invalid_argument("network: a batch of " + std::to_string(x.shape()[0]) +
                                        " x " + std::to_string(x.shape()[1]) + " with " +
                                        std::to_string(y.size()) + " labels");
        }
    }

    /// z_[l] = relu(input W + b) for the hidden layers; the last z_ holds the logits.
    void forward(const xt::xtensor<float, 2>& x) {
        const std::size_t n = x.shape()[0];
        for (std::size_t l = 0; l < layers_.size(); ++l) {
            const xt::xtensor<float, 2>& input = l == 0 ? x : z_[l - 1];
            auto& z = z_[l];
            reshape(z, n, layers_[l].outputs);
            xt::blas::gemm(input, w_[l], z);
            const std::size_t cols = layers_[l].outputs;
            const bool relu = l + 1 < layers_.size();
            const float* b = b_[l].data();
            for (std::size_t i = 0; i < n; ++i) {
                float* r = z.data() + i * cols;
                for (std::size_t j = 0; j < cols; ++j) {
                    const float v = r[j] + b[j];
                    r[j] = relu && v < 0.0f ? 0.0f : v;
                }
            }
        }
    }

    /// The softmax cross-entropy of the logits; with `gradient`, the last dz_ becomes
    /// (softmax - one_hot(y)) / n, the gradient of the mean loss.
    batch_stats loss(std::span<const std::uint8_t> y, bool gradient) {
        const auto& logits = z_.back();
        const std::size_t n = logits.shape()[0];
        const std::size_t k = logits.shape()[1];
        auto& dz = dz_.back();
        if (gradient) {
            reshape(dz, n, k);
        }
        batch_stats stats;
        stats.count = n;
        const float scale = 1.0f / static_cast<float>(n);
        for (std::size_t i = 0; i < n; ++i) {
            const float* r = logits.data() + i * k;
            const std::size_t best = static_cast<std::size_t>(std::max_element(r, r + k) - r);
            const float top = r[best];
            double sum = 0.0;
            for (std::size_t j = 0; j < k; ++j) {
                sum += std::exp(static_cast<double>(r[j] - top));
            }
            const std::size_t label = y[i];
            stats.loss_sum += std::log(sum) - static_cast<double>(r[label] - top);
            stats.correct += best == label ? 1 : 0;
            if (gradient) {
                float* d = dz.data() + i * k;
                for (std::size_t j = 0; j < k; ++j) {
                    const double p = std::exp(static_cast<double>(r[j] - top)) / sum;
                    d[j] = scale * (static_cast<float>(p) - (j == label ? 1.0f : 0.0f));
                }
            }
        }
        return stats;
    }

    std::vector<layer_shape> layers_;
    std::vector<xt::xtensor<float, 2>> w_, dw_;
    std::vector<xt::xtensor<float, 1>> b_, db_;
    std::vector<xt::xtensor<float, 2>> z_;  ///< each layer's output (after the ReLU)
    std::vector<xt::xtensor<float, 2>> dz_; ///< the loss's gradient at each layer's output
};

} // namespace examples::fashion
