// Petrel: a table made for the first push or pull that names it.
#pragma once

#include <petrel/server/detail/table.hpp>
#include <petrel/server/detail/table_base.hpp>
#include <petrel/wire/header.hpp>

#include <cstdint>
#include <memory>

namespace petrel::detail {

/// A new empty sparse table (summing, zeros) for the key and value types named in `h`.
[[nodiscard]] inline std::unique_ptr<table_base> make_table(const wire::message_header& h) {
    using wire::scalar_type;
    const bool k32 = h.key_type == scalar_type::u32;
    const bool v32 = h.value_type == scalar_type::f32;
    if (k32) {
        return v32 ? std::unique_ptr<table_base>(
                         std::make_unique<table<std::uint32_t, float>>(h.width))
                   : std::make_unique<table<std::uint32_t, double>>(h.width);
    }
    return v32 ? std::unique_ptr<table_base>(std::make_unique<table<std::uint64_t, float>>(h.width))
               : std::make_unique<table<std::uint64_t, double>>(h.width);
}

} // namespace petrel::detail
