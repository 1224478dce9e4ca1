// Petrel: the push operation: a checked request cut into one slice per server, each sent
// (and resent where its keys go after a failure), completing once every slice is answered.
#pragma once

#include <petrel/client/detail/fan_in.hpp>
#include <petrel/client/detail/slices.hpp>
#include <petrel/client/detail/store_core.hpp>
#include <petrel/consistency/task.hpp>
#include <petrel/core/config.hpp>
#include <petrel/transport/detail/completion.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/error.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// The state of one push, compiled once: the fan-in of its slices and the settling of its
/// clock's dependency (the worker's next tick waits for the push). The handler lives in
/// `push_op_for`, which completes it.
class push_op : public fan_in {
public:
    explicit push_op(std::size_t slices) : fan_in(slices) {}
    push_op(const push_op&) = delete;
    push_op& operator=(const push_op&) = delete;
    virtual ~push_op() = default;

    /// Cuts the checked push `p` into slices; the error that completes it at once instead
    /// (its own, `errc::read_only` for a reader's store, or a slice too large). No slices
    /// and no error: an empty push, done at once.
    [[nodiscard]] PETREL_DECL static std::error_code
    cut(const store_core& core, const prepared_request& p, std::vector<slice>& slices);

    /// Registers the push at the worker's clock and sends its slices (one per server),
    /// each retained for resends under an ordered model.
    PETREL_DECL static void send(store_core& core, const std::shared_ptr<push_op>& op,
                                 std::vector<slice> slices);

    /// Cancels: completes with `asio::error::operation_aborted` unless already completed.
    /// The slices sent are not recalled (a cancelled push may still be applied).
    void abort() {
        if (cancel()) {
            deliver(make_error_code(asio::error::operation_aborted));
        }
    }

protected:
    /// Runs the handler with `ec`, once, on its executor.
    virtual void deliver(std::error_code ec) = 0;

private:
    /// One slice's outcome; the last settles the clock dependency and completes.
    PETREL_DECL void arrive_one(std::error_code ec);

    task_completer<void> settle_;
};

/// A push with its handler.
template <typename Handler>
class push_op_for final : public push_op {
public:
    push_op_for(Handler handler, const asio::any_io_executor& ex, std::size_t slices)
        : push_op(slices), done_(std::in_place, std::move(handler), ex) {}

private:
    void deliver(std::error_code ec) override {
        auto d = std::move(*done_); // only the one caller that claimed the fan-in gets here
        done_.reset();
        std::move(d).dispatch(ec);
    }

    std::optional<completion<Handler, asio::any_io_executor>> done_;
};

/// The initiation of `kv_store::push` (for `asio::async_initiate`).
struct initiate_push {
    store_core* core;

    template <typename Handler>
    void operator()(Handler&& handler, prepared_request p) const {
        using handler_type = std::decay_t<Handler>;
        std::vector<slice> slices;
        const auto ec = push_op::cut(*core, p, slices);
        if (ec || slices.empty()) {
            completion<handler_type, asio::any_io_executor>(std::forward<Handler>(handler),
                                                            core->executor())
                .post(ec);
            return;
        }
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto op = std::make_shared<push_op_for<handler_type>>(std::forward<Handler>(handler),
                                                              core->executor(), slices.size());
        abort_on_cancel(slot, op);
        push_op::send(*core, op, std::move(slices));
    }
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/push_op.ipp>
#endif
