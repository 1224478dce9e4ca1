// Must not compile: `int` is not a consistency model. The build log must name the choices.
#include <petrel/kv_store.hpp>

#include <cstdint>

int main() {
    return static_cast<int>(sizeof(petrel::kv_store<std::uint64_t, float, int>));
}
