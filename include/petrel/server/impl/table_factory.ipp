// Petrel: a server table of given key and value types, and the four compiled once.
#ifndef PETREL_SERVER_IMPL_TABLE_FACTORY_IPP
#define PETREL_SERVER_IMPL_TABLE_FACTORY_IPP

#include <petrel/server/detail/table.hpp>
#include <petrel/server/detail/table_factory.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

namespace petrel::detail {

template <wire::wire_key Key, wire::wire_value Value>
std::unique_ptr<table_base>
make_table_of(std::uint32_t width, std::shared_ptr<const any_updater<Value>> rule, initializer init,
              std::optional<key_range<std::uint64_t>> dense) {
    return std::make_unique<table<Key, Value>>(width, std::move(rule), init, dense);
}

#if !PETREL_HEADER_ONLY
template std::unique_ptr<table_base>
    make_table_of<std::uint32_t, float>(std::uint32_t, std::shared_ptr<const any_updater<float>>,
                                        initializer, std::optional<key_range<std::uint64_t>>);
template std::unique_ptr<table_base>
    make_table_of<std::uint32_t, double>(std::uint32_t, std::shared_ptr<const any_updater<double>>,
                                         initializer, std::optional<key_range<std::uint64_t>>);
template std::unique_ptr<table_base>
    make_table_of<std::uint64_t, float>(std::uint32_t, std::shared_ptr<const any_updater<float>>,
                                        initializer, std::optional<key_range<std::uint64_t>>);
template std::unique_ptr<table_base>
    make_table_of<std::uint64_t, double>(std::uint32_t, std::shared_ptr<const any_updater<double>>,
                                         initializer, std::optional<key_range<std::uint64_t>>);
#endif

} // namespace petrel::detail

#endif // PETREL_SERVER_IMPL_TABLE_FACTORY_IPP
