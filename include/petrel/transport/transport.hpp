// Petrel: the transport concept and a type-erased transport.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/transport/connection.hpp>

#include <asio/any_io_executor.hpp>

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace petrel {

/// The callback form of `async_connect` that every transport must accept.
using connect_callback = std::function<void(std::error_code, connection_ptr)>;

/// What a node needs from a transport: listening at an address, connecting to one,
/// and closing everything it opened. `tcp_transport` and `inproc_transport` model it.
///
/// - `listen(address, handlers)` starts accepting and returns the address peers should
///   use (a port of 0 is replaced by the bound port); it throws `std::system_error`.
/// - `async_connect(address, handlers, token)` completes with
///   `void(std::error_code, connection_ptr)`.
/// - `close()` stops listening and closes every connection; idempotent.
template <typename T>
concept transport = std::movable<T> && requires(T& t, const T& ct, std::string_view address,
                                                connection_handlers h, connect_callback cb) {
    { ct.get_executor() } -> std::convertible_to<asio::any_io_executor>;
    { t.listen(address, h) } -> std::same_as<std::string>;
    t.async_connect(address, h, std::move(cb));
    t.close();
    { ct.options() } -> std::same_as<const transport_options&>;
    { ct.pool() } -> std::same_as<const std::shared_ptr<buffer_pool>&>;
};

/// Any `transport`, owned and type-erased, so that nodes need not be templates over
/// their transport.
///
/// @par Thread Safety
/// As the wrapped transport.
class any_transport {
public:
    // The same-type test comes first, so copying an any_transport never asks whether
    // any_transport itself models `transport` (a recursive question clang refuses).
    template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, any_transport> && transport<T>)
        any_transport(T t) // NOLINT(google-explicit-constructor): a transport is-a transport
        : impl_(std::make_shared<model<T>>(std::move(t))) {}

    [[nodiscard]] asio::any_io_executor get_executor() const { return impl_->get_executor(); }
    std::string listen(std::string_view address, connection_handlers h) {
        return impl_->listen(address, std::move(h));
    }
    void async_connect(std::string_view address, connection_handlers h, connect_callback cb) {
        impl_->async_connect(address, std::move(h), std::move(cb));
    }
    void close() { impl_->close(); }
    [[nodiscard]] const transport_options& options() const { return impl_->options(); }
    [[nodiscard]] const std::shared_ptr<buffer_pool>& pool() const { return impl_->pool(); }

private:
    struct base {
        virtual ~base() = default;
        virtual asio::any_io_executor get_executor() const = 0;
        virtual std::string listen(std::string_view, connection_handlers) = 0;
        virtual void async_connect(std::string_view, connection_handlers, connect_callback) = 0;
        virtual void close() = 0;
        virtual const transport_options& options() const = 0;
        virtual const std::shared_ptr<buffer_pool>& pool() const = 0;
    };
    template <typename T>
    struct model final : base {
        explicit model(T&& t) : value(std::move(t)) {}
        asio::any_io_executor get_executor() const override { return value.get_executor(); }
        std::string listen(std::string_view a, connection_handlers h) override {
            return value.listen(a, std::move(h));
        }
        void async_connect(std::string_view a, connection_handlers h,
                           connect_callback cb) override {
            value.async_connect(a, std::move(h), std::move(cb));
        }
        void close() override { value.close(); }
        const transport_options& options() const override { return value.options(); }
        const std::shared_ptr<buffer_pool>& pool() const override { return value.pool(); }
        T value;
    };

    std::shared_ptr<base> impl_;
};

} // namespace petrel
