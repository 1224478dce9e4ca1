// Petrel: server-side update rules (sum, sgd, adagrad, ftrl, adam, user-defined).
#pragma once

#include <petrel/core/declarations.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace petrel {

/// What a server does with the rows workers push: `update(w, state, g)` changes the
/// stored values `w` of one key (its `width` values) given the pushed rows `g` of that key
/// and the key's optimizer state (`state_size(width)` values kept next to `w`, zeros for a
/// new key unless the type has `init_state(state)`).
///
/// A type opts in by having these members; `name` (a `std::string_view` constant) is
/// optional and is written into checkpoints. Update rules are called one key at a time,
/// never twice at once for one key, but (unordered pushes: `eventual`, `bounded_delay`)
/// on several threads at
/// once for different keys: `update` must not change shared state, and must not throw.
///
/// @par Example
/// @code
/// struct clipped_sum {
///     static constexpr std::string_view name = "clipped_sum";
///     std::size_t state_size(std::size_t) const { return 0; }
///     void update(std::span<float> w, std::span<float>, std::span<const float> g) const {
///         for (std::size_t j = 0; j < w.size(); ++j) w[j] += std::clamp(g[j], -1.f, 1.f);
///     }
/// };
/// static_assert(petrel::updater<clipped_sum, float>);
/// @endcode
template <typename U, typename Value>
concept updater = std::copy_constructible<U> &&
    requires(const U& u, std::span<Value> w, std::span<Value> state, std::span<const Value> g,
             std::size_t width) {
    { u.state_size(width) } -> std::convertible_to<std::size_t>;
    u.update(w, state, g);
};

/// Plain aggregation: `w += g`. The default.
struct sum {
    static constexpr std::string_view name = "sum";
    [[nodiscard]] std::size_t state_size(std::size_t) const noexcept { return 0; }
    template <typename Value>
    void update(std::span<Value> w, std::span<Value>, std::span<const Value> g) const noexcept {
        for (std::size_t j = 0; j < w.size(); ++j) {
            w[j] += g[j];
        }
    }
};

/// Stochastic gradient descent with the proximal step of the regularizer
/// `l1 |w| + l2/2 w²`: `w ← prox(w − eta g)`, that is
/// `u = w − eta g; w = sign(u) max(|u| − eta l1, 0) / (1 + eta l2)`.
struct sgd {
    static constexpr std::string_view name = "sgd";
    double eta = 0.01;
    double l1 = 0.0;
    double l2 = 0.0;
    [[nodiscard]] std::size_t state_size(std::size_t) const noexcept { return 0; }
    template <typename Value>
    void update(std::span<Value> w, std::span<Value>, std::span<const Value> g) const noexcept {
        const double shrink = eta * l1;
        const double scale = 1.0 / (1.0 + eta * l2);
        for (std::size_t j = 0; j < w.size(); ++j) {
            const double u = static_cast<double>(w[j]) - eta * static_cast<double>(g[j]);
            const double mag = std::max(std::abs(u) - shrink, 0.0);
            w[j] = static_cast<Value>(std::copysign(mag, u) * scale);
        }
    }
};

/// AdaGrad (Duchi et al.): per coordinate `n += g²; w −= eta g / (sqrt(n) + epsilon)`.
/// State: the accumulated squares `n`, starting at `initial_accumulator`.
struct adagrad {
    static constexpr std::string_view name = "adagrad";
    double eta = 0.1;
    double epsilon = 1e-8;
    double initial_accumulator = 0.0;
    [[nodiscard]] std::size_t state_size(std::size_t width) const noexcept { return width; }
    template <typename Value>
    void init_state(std::span<Value> state) const noexcept {
        for (auto& s : state) {
            s = static_cast<Value>(initial_accumulator);
        }
    }
    template <typename Value>
    void update(std::span<Value> w, std::span<Value> n, std::span<const Value> g) const noexcept {
        for (std::size_t j = 0; j < w.size(); ++j) {
            const double gj = g[j];
            const double nj = static_cast<double>(n[j]) + gj * gj;
            n[j] = static_cast<Value>(nj);
            w[j] = static_cast<Value>(static_cast<double>(w[j]) -
                                      eta * gj / (std::sqrt(nj) + epsilon));
        }
    }
};

/// FTRL-proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches"), the
/// usual rule for sparse logistic regression. Per coordinate, with state `z` and `n`:
/// `sigma = (sqrt(n + g²) − sqrt(n)) / alpha; z += g − sigma w; n += g²;`
/// `w = 0 if |z| ≤ l1, else −(z − sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)`.
struct ftrl {
    static constexpr std::string_view name = "ftrl";
    double alpha = 0.1;
    double beta = 1.0;
    double l1 = 1.0;
    double l2 = 1.0;
    /// `z` then `n`, `width` values each.
    [[nodiscard]] std::size_t state_size(std::size_t width) const noexcept { return 2 * width; }
    template <typename Value>
    void update(std::span<Value> w, std::span<Value> state,
                std::span<const Value> g) const noexcept {
        const std::size_t width = w.size();
        for (std::size_t j = 0; j < width; ++j) {
            Value& z = state[j];
            Value& n = state[width + j];
            const double gj = g[j];
            const double n_old = n;
            const double n_new = n_old + gj * gj;
            const double sigma = (std::sqrt(n_new) - std::sqrt(n_old)) / alpha;
            const double z_new = static_cast<double>(z) + gj - sigma * static_cast<double>(w[j]);
            z = static_cast<Value>(z_new);
            n = static_cast<Value>(n_new);
            if (std::abs(z_new) <= l1) {
                w[j] = Value{0};
            } else {
                const double sign = z_new < 0 ? -1.0 : 1.0;
                w[j] = static_cast<Value>(-(z_new - sign * l1) /
                                          ((beta + std::sqrt(n_new)) / alpha + l2));
            }
        }
    }
};

/// Adam (Kingma and Ba) with bias correction. State per key: the first and second moment
/// estimates (`width` values each) and the key's step count.
struct adam {
    static constexpr std::string_view name = "adam";
    double eta = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double epsilon = 1e-8;
    /// `m`, then `v`, then the step count.
    [[nodiscard]] std::size_t state_size(std::size_t width) const noexcept { return 2 * width + 1; }
    template <typename Value>
    void update(std::span<Value> w, std::span<Value> state,
                std::span<const Value> g) const noexcept {
        const std::size_t width = w.size();
        Value& steps = state[2 * width];
        const double t = static_cast<double>(steps) + 1.0;
        steps = static_cast<Value>(t);
        const double c1 = 1.0 - std::pow(beta1, t);
        const double c2 = 1.0 - std::pow(beta2, t);
        for (std::size_t j = 0; j < width; ++j) {
            const double gj = g[j];
            const double m = beta1 * static_cast<double>(state[j]) + (1.0 - beta1) * gj;
            const double v =
                beta2 * static_cast<double>(state[width + j]) + (1.0 - beta2) * gj * gj;
            state[j] = static_cast<Value>(m);
            state[width + j] = static_cast<Value>(v);
            w[j] = static_cast<Value>(static_cast<double>(w[j]) -
                                      eta * (m / c1) / (std::sqrt(v / c2) + epsilon));
        }
    }
};

/// An update rule made from a function `f(w, g)` (no state) or `f(w, state, g)` with
/// `state_per_value` state values per value.
///
/// @par Example
/// @code
/// auto decayed = petrel::update_fn<float>([](std::span<float> w, std::span<const float> g) {
///     for (std::size_t j = 0; j < w.size(); ++j) w[j] = 0.99f * w[j] - 0.1f * g[j];
/// });
/// @endcode
template <typename Value, typename F>
struct function_updater {
    static constexpr std::string_view name = "function";
    F f;
    std::size_t state_per_value = 0;
    [[nodiscard]] std::size_t state_size(std::size_t width) const noexcept {
        return state_per_value * width;
    }
    void update(std::span<Value> w, std::span<Value> state, std::span<const Value> g) const {
        if constexpr (std::is_invocable_v<const F&, std::span<Value>, std::span<Value>,
                                          std::span<const Value>>) {
            f(w, state, g);
        } else {
            f(w, g);
        }
    }
};

/// A `function_updater` of `f(w, g)`.
template <typename Value, typename F>
requires std::is_invocable_v<const F&, std::span<Value>, std::span<const Value>>
[[nodiscard]] function_updater<Value, std::decay_t<F>> update_fn(F&& f) {
    return {std::forward<F>(f), 0};
}

/// A `function_updater` of `f(w, state, g)` with `state_per_value` state values per value.
template <typename Value, typename F>
requires std::is_invocable_v<const F&, std::span<Value>, std::span<Value>, std::span<const Value>>
[[nodiscard]] function_updater<Value, std::decay_t<F>> update_fn(std::size_t state_per_value,
                                                                 F&& f) {
    return {std::forward<F>(f), state_per_value};
}

namespace detail {

/// An update rule with its parameters, as text: `sum`, `sgd{eta=0.01,l1=0,l2=0}`,
/// `adagrad{eta=..,epsilon=..,initial_accumulator=..}`, `ftrl{alpha=..,beta=..,l1=..,l2=..}`,
/// `adam{eta=..,beta1=..,beta2=..,epsilon=..}`; rules made from a function and other types
/// by their name (`function`, `U::name` or `user`) and their state values per key for a
/// table of `width` values per key, e.g. `function{state=16}`. Numbers are written in
/// their shortest exact form, so that rules that differ in a parameter differ here.
template <typename U>
[[nodiscard]] std::string rule_text(const U& u, std::size_t width) {
    const auto n = [](double v) { return number_text(v); };
    if constexpr (std::is_same_v<U, petrel::sum>) {
        return "sum";
    } else if constexpr (std::is_same_v<U, petrel::sgd>) {
        return "sgd{eta=" + n(u.eta) + ",l1=" + n(u.l1) + ",l2=" + n(u.l2) + "}";
    } else if constexpr (std::is_same_v<U, petrel::adagrad>) {
        return "adagrad{eta=" + n(u.eta) + ",epsilon=" + n(u.epsilon) +
               ",initial_accumulator=" + n(u.initial_accumulator) + "}";
    } else if constexpr (std::is_same_v<U, petrel::ftrl>) {
        return "ftrl{alpha=" + n(u.alpha) + ",beta=" + n(u.beta) + ",l1=" + n(u.l1) +
               ",l2=" + n(u.l2) + "}";
    } else if constexpr (std::is_same_v<U, petrel::adam>) {
        return "adam{eta=" + n(u.eta) + ",beta1=" + n(u.beta1) + ",beta2=" + n(u.beta2) +
               ",epsilon=" + n(u.epsilon) + "}";
    } else {
        std::string name = "user";
        if constexpr (requires { std::string_view(U::name); }) {
            name = std::string(std::string_view(U::name));
        }
        return name + "{state=" + std::to_string(u.state_size(width)) + "}";
    }
}

/// An update rule of any type, for one value type.
template <typename Value>
class any_updater {
public:
    virtual ~any_updater() = default;
    [[nodiscard]] virtual std::size_t state_size(std::size_t width) const = 0;
    virtual void init_state(std::span<Value> state) const = 0;
    virtual void update(std::span<Value> w, std::span<Value> state,
                        std::span<const Value> g) const = 0;
    [[nodiscard]] virtual std::string_view name() const = 0;
    /// The rule with its parameters, for comparing declarations across processes
    /// (`rule_text`), for a table of `width` values per key.
    [[nodiscard]] virtual std::string describe(std::size_t width) const = 0;
    /// Whether this is `sum` (tables add pushes without calling `update`).
    [[nodiscard]] virtual bool is_sum() const noexcept = 0;
};

template <typename Value, typename U>
class updater_model final : public any_updater<Value> {
public:
    explicit updater_model(U u) : u_(std::move(u)) {}
    std::size_t state_size(std::size_t width) const override { return u_.state_size(width); }
    void init_state(std::span<Value> state) const override {
        if constexpr (requires { u_.init_state(state); }) {
            u_.init_state(state);
        } else {
            for (auto& s : state) {
                s = Value{0};
            }
        }
    }
    void update(std::span<Value> w, std::span<Value> state,
                std::span<const Value> g) const override {
        u_.update(w, state, g);
    }
    std::string_view name() const override {
        if constexpr (requires { std::string_view(U::name); }) {
            return U::name;
        } else {
            return "user";
        }
    }
    std::string describe(std::size_t width) const override { return rule_text(u_, width); }
    bool is_sum() const noexcept override { return std::is_same_v<U, petrel::sum>; }

private:
    U u_;
};

template <typename Value, typename U>
[[nodiscard]] std::shared_ptr<const any_updater<Value>> make_updater(U u) {
    return std::make_shared<const updater_model<Value, U>>(std::move(u));
}

} // namespace detail

} // namespace petrel
