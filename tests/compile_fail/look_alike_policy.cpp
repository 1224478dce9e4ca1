// Must not compile: a type shaped like a policy is still not one of Petrel's models, whose
// meaning servers and workers must share.
#include <petrel/kv_store.hpp>

#include <cstdint>

struct almost_sequential {
    static constexpr std::uint64_t delay = 0;
    static constexpr bool waits = true;
    static constexpr bool ordered = true;
};

int main() {
    return static_cast<int>(sizeof(petrel::kv_store<std::uint64_t, float, almost_sequential>));
}
