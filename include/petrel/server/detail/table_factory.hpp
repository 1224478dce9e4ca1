// Petrel: a server table of given key and value types, made where its class is compiled.
#pragma once

#include <petrel/core/config.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/server/initializer.hpp>
#include <petrel/server/updater.hpp>
#include <petrel/wire/header.hpp>

#include <cstdint>
#include <memory>
#include <optional>

namespace petrel::detail {

class table_base;

/// A new table (`detail::table<Key, Value>`) of `width` values per key, updated by `rule`,
/// its rows initialised by `init`, dense over `dense` when given.
///
/// Declaring tables (`table_registry::add`) names this, not the table's class: under
/// `PETREL_SEPARATE_COMPILATION` the four key and value types are instantiated once, in
/// the compiled library, so a trainer's unit does not compile the server's storage.
/// @throws std::bad_alloc
template <wire::wire_key Key, wire::wire_value Value>
[[nodiscard]] std::unique_ptr<table_base>
make_table_of(std::uint32_t width, std::shared_ptr<const any_updater<Value>> rule, initializer init,
              std::optional<key_range<std::uint64_t>> dense);

#if !PETREL_HEADER_ONLY
extern template std::unique_ptr<table_base>
    make_table_of<std::uint32_t, float>(std::uint32_t, std::shared_ptr<const any_updater<float>>,
                                        initializer, std::optional<key_range<std::uint64_t>>);
extern template std::unique_ptr<table_base>
    make_table_of<std::uint32_t, double>(std::uint32_t, std::shared_ptr<const any_updater<double>>,
                                         initializer, std::optional<key_range<std::uint64_t>>);
extern template std::unique_ptr<table_base>
    make_table_of<std::uint64_t, float>(std::uint32_t, std::shared_ptr<const any_updater<float>>,
                                        initializer, std::optional<key_range<std::uint64_t>>);
extern template std::unique_ptr<table_base>
    make_table_of<std::uint64_t, double>(std::uint32_t, std::shared_ptr<const any_updater<double>>,
                                         initializer, std::optional<key_range<std::uint64_t>>);
#endif

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/server/impl/table_factory.ipp>
#endif
