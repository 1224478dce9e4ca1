// Quickstart: two servers and two workers in one process, over TCP on loopback,
// fit a linear model y = X w by data-parallel gradient descent.
//
// Each worker holds half of the examples. Every iteration it pulls the weights, computes
// the gradient of the squared error on its half, and pushes the step -lr * gradient; the
// servers add the steps of both workers. The weights are split over the two servers by
// key range. The workers run without waiting for each other (asynchronous SGD). The
// program prints the loss as it falls and the distance to the true
// weights, and exits non-zero if the fit failed.
#include <petrel/petrel.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t features = 64;
constexpr std::size_t examples_per_worker = 2000;
constexpr int iterations = 150;
constexpr float learning_rate = 0.1f;

/// Worker `rank` fits its shard; returns its last loss.
float train(petrel::kv_store<std::uint64_t, float>& kv, const xt::xtensor<float, 2>& x,
            const xt::xtensor<float, 1>& y, int rank) {
    std::vector<std::uint64_t> keys(features);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    float loss = 0.0f;
    for (int it = 0; it < iterations; ++it) {
        auto w = kv.pull(keys, asio::use_future).get();
        xt::xtensor<float, 1> err = xt::sum(x * w.values(), {1}) - y;
        loss = 0.5f * xt::mean(err * err)();
        xt::xtensor<float, 1> grad =
            xt::sum(x * xt::view(err, xt::all(), xt::newaxis()), {0}) / float(y.size());
        // Both workers push; the servers add the two half-steps.
        kv.push(keys, xt::xtensor<float, 1>(-learning_rate * 0.5f * grad), asio::use_future).get();
        if (rank == 0 && (it % 25 == 0 || it == iterations - 1)) {
            std::printf("iteration %3d  loss %.6f\n", it, static_cast<double>(loss));
        }
    }
    return loss;
}

} // namespace

int main() {
    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::thread io_thread([&] { io.run(); });

    // Two servers, each owning half of the key space.
    petrel::server_node s0(petrel::tcp_transport(io.get_executor()));
    petrel::server_node s1(petrel::tcp_transport(io.get_executor()));
    petrel::kv_store_options<std::uint64_t> options;
    options.servers = {s0.listen("127.0.0.1:0"), s1.listen("127.0.0.1:0")};

    // Synthetic data with known weights and a little noise.
    xt::random::seed(7);
    const xt::xtensor<float, 1> truth = xt::random::randn<float>({features});
    int status = 0;
    {
        std::vector<std::thread> workers;
        std::vector<float> losses(2);
        for (int rank = 0; rank < 2; ++rank) {
            xt::xtensor<float, 2> x = xt::random::randn<float>({examples_per_worker, features});
            xt::xtensor<float, 1> y =
                xt::sum(x * truth, {1}) + 0.01f * xt::random::randn<float>({examples_per_worker});
            workers.emplace_back([&, rank, x = std::move(x), y = std::move(y)] {
                petrel::kv_store<std::uint64_t, float> kv(petrel::tcp_transport(io.get_executor()),
                                                          options);
                losses[static_cast<std::size_t>(rank)] = train(kv, x, y, rank);
            });
        }
        for (auto& t : workers) {
            t.join();
        }
        petrel::kv_store<std::uint64_t, float> reader(petrel::tcp_transport(io.get_executor()),
                                                      options);
        std::vector<std::uint64_t> keys(features);
        std::iota(keys.begin(), keys.end(), std::uint64_t{0});
        auto w = reader.pull(keys, asio::use_future).get();
        const float distance = xt::amax(xt::abs(w.values() - truth))();
        std::printf("weights on %zu + %zu keys of 2 servers; largest error vs truth %.5f\n",
                    s0.key_count(0), s1.key_count(0), static_cast<double>(distance));
        if (!(distance < 0.01f)) {
            std::printf("quickstart: the fit did not converge\n");
            status = 1;
        }
    }
    s0.close();
    s1.close();
    work.reset();
    io_thread.join();
    return status;
}
