// The dependencies-only baseline of benchmarks/compile_time.sh: a translation unit that
// includes the libraries a trainer's unit uses through Petrel (Asio with coroutines,
// Cereal, xtensor, snappy, OpenSSL's HMAC) and uses each. Not xxHash or nlohmann-json:
// Petrel uses them in its own parts (checksums, manifests), not in a trainer's code.
// Linked and run, it prints "ok" when each gave the expected result.
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <snappy.h>
#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct message {
    std::uint32_t table = 0;
    std::vector<std::uint64_t> keys;
    std::string note;

    template <class Archive>
    void serialize(Archive& ar) {
        ar(table, keys, note);
    }
};

asio::awaitable<void> echo_once(asio::ip::tcp::acceptor& acceptor) {
    auto socket = co_await acceptor.async_accept(asio::use_awaitable);
    std::array<char, 5> data{};
    co_await asio::async_read(socket, asio::buffer(data), asio::use_awaitable);
    co_await asio::async_write(socket, asio::buffer(data), asio::use_awaitable);
}

asio::awaitable<std::string> ask(asio::ip::tcp::endpoint at) {
    asio::ip::tcp::socket socket(co_await asio::this_coro::executor);
    co_await socket.async_connect(at, asio::use_awaitable);
    co_await asio::async_write(socket, asio::buffer("hello", 5), asio::use_awaitable);
    std::array<char, 5> back{};
    co_await asio::async_read(socket, asio::buffer(back), asio::use_awaitable);
    co_return std::string(back.data(), back.size());
}

} // namespace

int main() {
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    std::string answer;
    asio::co_spawn(io, echo_once(acceptor), asio::detached);
    asio::co_spawn(io, ask(acceptor.local_endpoint()),
                   [&](std::exception_ptr, std::string s) { answer = std::move(s); });
    io.run();

    std::stringstream buffer;
    const message sent{7, {1, 2, 3}, "keys"};
    {
        cereal::BinaryOutputArchive out(buffer);
        out(sent);
    }
    message got;
    {
        cereal::BinaryInputArchive in(buffer);
        in(got);
    }

    std::mt19937 rng(1);
    const xt::xtensor<float, 1> target = xt::arange<float>(1000) / 1000.0f;
    const xt::xtensor<float, 1> noisy =
        target + 0.1f * xt::random::randn<float>({1000}, 0.f, 1.f, rng);
    const float error = xt::mean(xt::abs(noisy - target))();

    std::string packed;
    const std::string text(4096, 'x');
    snappy::Compress(text.data(), text.size(), &packed);
    std::string unpacked;
    snappy::Uncompress(packed.data(), packed.size(), &unpacked);

    std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
    unsigned int mac_size = 0;
    HMAC(EVP_sha256(), "secret", 6, reinterpret_cast<const unsigned char*>(text.data()),
         text.size(), mac.data(), &mac_size);

    const bool ok = answer == "hello" && got.keys == sent.keys && got.note == sent.note &&
                    error > 0.0f && unpacked == text && mac_size == 32;
    std::printf("%s\n", ok ? "ok" : "wrong");
    return ok ? 0 : 1;
}
