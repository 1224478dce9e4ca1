// Test support: whether a type is defined (not only declared) where the check is made.
#pragma once

namespace petrel::test {

/// True where `T` is a complete type. Evaluated once per translation unit and type: check
/// a type in a unit that never completes it later, or only after it is complete.
template <typename T>
concept complete = requires {
    sizeof(T);
};

} // namespace petrel::test
