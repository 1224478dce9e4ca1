// The README's example: 4 workers fit w to a target from noisy gradients; Adam on 2 servers.
#include <petrel/petrel.hpp>

#include <asio/use_future.hpp>
#include <xtensor/xrandom.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    constexpr std::uint32_t dim = 1000;
    petrel::table_registry tables; // every process declares the same tables
    tables.add<std::uint32_t, float>(
        0,
        {.dense = petrel::key_range<std::uint64_t>{0, dim}, .aggregate = petrel::aggregation::mean},
        petrel::adam{.eta = 0.01});
    petrel::config cfg{.servers = 2, .workers = 4};
    cfg.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
    return petrel::run(cfg, argc, argv, [](petrel::worker_node& w) {
        // The consistency model is a type: sequential, bounded_delay<Tau> or eventual.
        petrel::kv_store<std::uint32_t, float, petrel::sequential> kv(w);
        const petrel::key_range<std::uint32_t> all{0, dim};
        const xt::xtensor<float, 1> target = xt::arange<float>(dim) / float(dim);
        std::mt19937 rng(w.rank());
        for (int it = 0; it < 300; ++it) {
            auto scope = kv.iteration();                               // clock() at the end
            const auto weights = kv.pull(all, asio::use_future).get(); // all steps < it are in
            xt::xtensor<float, 1> grad =
                weights.values() - target + 0.1f * xt::random::randn<float>({dim}, 0.f, 1.f, rng);
            kv.push(all, grad, asio::use_future).get(); // averaged, then one Adam step per key
        }
        const auto weights = kv.pull(all, asio::use_future).get();
        const float error = xt::amax(xt::abs(weights.values() - target))();
        std::printf("worker %u: max |w - target| = %.4f\n", w.rank(), double(error));
        if (error > 0.1f) {
            throw std::runtime_error("did not converge");
        }
    });
}
