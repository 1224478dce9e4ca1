// Quickstart: fit a linear model y = X w by data-parallel gradient descent on a Petrel job.
//
// One SPMD program: run it as it is and the whole job (2 servers, 2 workers) runs in this
// process over loopback TCP; run it under mpirun, srun, a Kubernetes indexed job or with
// PETREL_RANK/PETREL_SIZE/PETREL_ROOT and each process hosts its share (see --help and the
// README's "Running on a cluster").
//
// Each worker holds its own examples. Every iteration it pulls the weights, computes the
// gradient of the squared error on its examples, and pushes the step -lr * gradient /
// workers; the servers add the steps of all workers. The weights are spread over the
// servers by the job's ring. The store is `sequential`: each pull waits until every
// worker's step of the previous iteration is in (bulk synchronous SGD); change the third
// template argument to `petrel::bounded_delay<2>` or `petrel::eventual` to let workers
// run ahead. Worker 0 prints the loss as it falls; every worker checks its distance to the
// true weights at the end, and the program exits non-zero if the fit failed.
#include <petrel/petrel.hpp>

#include <asio/use_future.hpp>

#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t features = 64;
constexpr std::size_t examples_per_worker = 2000;
constexpr int iterations = 150;
constexpr float learning_rate = 0.1f;

void train(petrel::worker_node& worker) {
    // The same true weights on every worker; examples of its own.
    std::mt19937 truth_rng(7);
    const xt::xtensor<float, 1> truth = xt::random::randn<float>({features}, 0.0f, 1.0f, truth_rng);
    std::mt19937 rng(100 + worker.rank());
    const xt::xtensor<float, 2> x =
        xt::random::randn<float>({examples_per_worker, features}, 0.0f, 1.0f, rng);
    const xt::xtensor<float, 1> y =
        xt::sum(x * truth, {1}) +
        0.01f * xt::random::randn<float>({examples_per_worker}, 0.0f, 1.0f, rng);

    // sequential (the default): every pull sees all workers' steps of the earlier
    // iterations, so the run is bulk synchronous and bitwise reproducible.
    petrel::kv_store<std::uint64_t, float, petrel::sequential> kv(worker);
    std::vector<std::uint64_t> keys(features);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const float share = 1.0f / static_cast<float>(worker.workers());
    for (int it = 0; it < iterations; ++it) {
        auto scope = kv.iteration(); // advances this worker's clock at the end of the body
        auto w = kv.pull(keys, asio::use_future).get();
        xt::xtensor<float, 1> err = xt::sum(x * w.values(), {1}) - y;
        const float loss = 0.5f * xt::mean(err * err)();
        xt::xtensor<float, 1> grad =
            xt::sum(x * xt::view(err, xt::all(), xt::newaxis()), {0}) / float(y.size());
        kv.push(keys, xt::xtensor<float, 1>(-learning_rate * share * grad), asio::use_future).get();
        if (worker.rank() == 0 && (it % 25 == 0 || it == iterations - 1)) {
            std::printf("iteration %3d  loss %.6f\n", it, static_cast<double>(loss));
        }
    }
    // At clock `iterations` the pull waits until every worker's steps are in.
    const auto w = kv.pull(keys, asio::use_future).get();
    const float distance = xt::amax(xt::abs(w.values() - truth))();
    if (worker.rank() == 0) {
        std::printf("max |w - truth| = %.4f over %u workers and %u servers\n",
                    static_cast<double>(distance), worker.workers(), worker.servers());
    }
    if (!(distance < 0.05f)) {
        throw std::runtime_error("the fit failed: max |w - truth| = " + std::to_string(distance));
    }
}

} // namespace

int main(int argc, char** argv) {
    return petrel::run({}, argc, argv, train);
}
