// Petrel: version.
#pragma once

#include <string_view>

#define PETREL_VERSION_MAJOR 0
#define PETREL_VERSION_MINOR 1
#define PETREL_VERSION_PATCH 0

namespace petrel {

/// The library's version, "major.minor.patch".
inline constexpr std::string_view version_string = "0.1.0";

} // namespace petrel
