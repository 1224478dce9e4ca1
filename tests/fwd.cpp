#include <petrel/fwd.hpp>

// What fwd.hpp must not pull in: it exists so that naming Petrel's types stays cheap.
#ifdef ASIO_DETAIL_CONFIG_HPP
constexpr bool fwd_includes_asio = true;
#else
constexpr bool fwd_includes_asio = false;
#endif
#ifdef XTENSOR_VERSION_MAJOR
constexpr bool fwd_includes_xtensor = true;
#else
constexpr bool fwd_includes_xtensor = false;
#endif
#ifdef CEREAL_CEREAL_HPP_
constexpr bool fwd_includes_cereal = true;
#else
constexpr bool fwd_includes_cereal = false;
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

// Code that only names Petrel's types, as a header of a user's project would.
namespace user {

using store = petrel::kv_store<std::uint64_t, float>;
using pairs = petrel::kv_pairs<std::uint64_t, float>;

struct trainer {
    const store* kv = nullptr;
    petrel::server_node* server = nullptr;
    std::shared_ptr<petrel::connection> link;
    std::unique_ptr<petrel::buffer_pool, void (*)(petrel::buffer_pool*)> pool{nullptr, nullptr};
    const petrel::wire::message* last = nullptr;
    const petrel::key_range<std::uint32_t>* shard = nullptr;
    // An opaque enum with a fixed type is complete: it can be held by value.
    petrel::errc last_error{};
};

// Declared here, defined below after the definitions are known.
bool has_store(const store& kv);
std::size_t rows_of(const pairs& kv);
int code_of(petrel::errc e);
const petrel::wire::wire_limits* limits_of(const petrel::transport_options& o);

static_assert(std::is_enum_v<petrel::errc>);
static_assert(std::is_same_v<std::underlying_type_t<petrel::errc>, int>);
static_assert(sizeof(petrel::errc) == sizeof(int));
static_assert(petrel::key<std::uint64_t>); // the key concept comes with fwd.hpp
static_assert(!petrel::key<int>);

} // namespace user

#include <petrel/petrel.hpp>

#include "support/cluster.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace user {

bool has_store(const store& kv) {
    return !kv.options().servers.empty();
}
std::size_t rows_of(const pairs& kv) {
    return kv.size();
}
int code_of(petrel::errc e) {
    return petrel::make_error_code(e).value();
}
const petrel::wire::wire_limits* limits_of(const petrel::transport_options& o) {
    return &o.limits;
}

} // namespace user

TEST_CASE("fwd.hpp: includes none of the heavy dependencies", "[fwd]") {
    CHECK_FALSE(fwd_includes_asio);
    CHECK_FALSE(fwd_includes_xtensor);
    CHECK_FALSE(fwd_includes_cereal);
}

TEST_CASE("fwd.hpp: the declarations name the defined types", "[fwd]") {
    // The aliases made before the definitions denote the defined class templates.
    STATIC_REQUIRE(std::is_same_v<user::store, petrel::kv_store<std::uint64_t, float>>);
    STATIC_REQUIRE(std::is_same_v<user::store::value_type, float>);
    STATIC_REQUIRE(std::is_same_v<user::pairs::key_type, std::uint64_t>);
    STATIC_REQUIRE(std::is_same_v<petrel::key_range<std::uint32_t>::key_type, std::uint32_t>);
    STATIC_REQUIRE(
        std::is_same_v<petrel::kv_store_options<std::uint64_t>, user::store::options_type>);
    STATIC_REQUIRE(std::is_same_v<decltype(petrel::kv_store_options<std::uint64_t>{}.ring),
                                  petrel::ring_options>);
    STATIC_REQUIRE(
        std::is_same_v<decltype(petrel::transport_options{}.limits), petrel::wire::wire_limits>);
    STATIC_REQUIRE(
        std::is_same_v<
            decltype(petrel::connection_handlers{}.on_close),
            std::function<void(const std::shared_ptr<petrel::connection>&, std::error_code)>>);
    STATIC_REQUIRE(std::is_base_of_v<petrel::connection, petrel::detail::inproc_connection>);
    STATIC_REQUIRE(std::is_constructible_v<petrel::any_transport, petrel::inproc_transport>);
    STATIC_REQUIRE(
        std::is_same_v<decltype(petrel::wire::message{}.header), petrel::wire::message_header>);
    STATIC_REQUIRE(std::is_class_v<petrel::wire::frame_decoder>);
    STATIC_REQUIRE(std::is_class_v<petrel::vector_clock<std::uint64_t>>);
    STATIC_REQUIRE(std::is_class_v<petrel::shared_bytes>);
    STATIC_REQUIRE(std::is_class_v<petrel::pooled_buffer>);
    STATIC_REQUIRE(std::is_class_v<petrel::server_options>);
    STATIC_REQUIRE(std::is_class_v<petrel::inproc_hub>);
    STATIC_REQUIRE(std::is_class_v<petrel::tcp_transport>);
}

TEST_CASE("fwd.hpp: functions declared with forward-declared types take the real ones", "[fwd]") {
    const std::vector<std::uint64_t> keys{1, 2, 3};
    const std::vector<float> values{1, 2, 3};
    CHECK(user::rows_of(user::pairs::copy_of(keys, values)) == 3);
    CHECK(user::code_of(petrel::errc::timed_out) == static_cast<int>(petrel::errc::timed_out));

    petrel::transport_options o;
    CHECK(user::limits_of(o) == &o.limits);

    user::trainer t;
    t.last_error = petrel::errc::shut_down;
    CHECK(petrel::make_error_code(t.last_error) == petrel::errc::shut_down);

    petrel::test::io_threads io;
    petrel::inproc_hub hub;
    petrel::server_node server(petrel::inproc_transport(io.executor(), hub));
    petrel::kv_store_options<std::uint64_t> so;
    so.servers = {server.listen("")};
    const user::store kv(petrel::inproc_transport(io.executor(), hub), so);
    t.kv = &kv;
    t.server = &server;
    CHECK(user::has_store(*t.kv));
    CHECK(t.server->key_count(0) == 0);
}
