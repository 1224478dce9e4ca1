// Petrel: the call operation: a remote function run by every server that owns keys of a
// range, once the range's clocks allow it, with one result per server.
#pragma once

#include <petrel/client/detail/fan_in.hpp>
#include <petrel/client/detail/router.hpp>
#include <petrel/client/detail/store_core.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/transport/detail/completion.hpp>
#include <petrel/wire/remote_call.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/error.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// A remote function call checked and encoded before the initiating call returns.
struct prepared_call {
    std::error_code error;
    key_range<std::uint64_t> range;
    shared_bytes body; // the function's name and arguments (`encode_call`)
};

/// The state of one call, compiled once: the fan-in of the servers' replies and their
/// answers, still encoded (each server's reply buffer, not copied). The handler lives in
/// `call_op_for`, which decodes them.
class call_op : public fan_in {
public:
    explicit call_op(std::size_t servers) : fan_in(servers), answers_(servers) {}
    call_op(const call_op&) = delete;
    call_op& operator=(const call_op&) = delete;
    virtual ~call_op() = default;

    /// Sends `c` to the servers of `slots` under `where`, once the worker's clock allows a
    /// read, due by `deadline`. Each server answers under exactly `where`'s view (it waits
    /// for a newer one, refuses an older one), so that the results cover each key once.
    PETREL_DECL static void send(store_core& core, const std::shared_ptr<call_op>& op,
                                 const prepared_call& c, const route_table& where,
                                 const std::vector<std::size_t>& slots,
                                 std::chrono::steady_clock::time_point deadline);

    /// Cancels: completes with `asio::error::operation_aborted` unless already completed.
    void abort() {
        if (cancel()) {
            deliver(make_error_code(asio::error::operation_aborted), {});
        }
    }

protected:
    /// Runs the handler, once, with `ec` or (without error) the servers' answers in the
    /// order of their slots.
    virtual void deliver(std::error_code ec, std::vector<shared_bytes> answers) = 0;

private:
    /// Server `i`'s reply (or failure); the last completes. A failed function's message is
    /// logged.
    PETREL_DECL void arrive_one(std::size_t i, std::error_code ec, const wire::message& r,
                                const logger& log, std::uint32_t self);

    std::vector<shared_bytes> answers_; // each written by its server's reply only
};

/// A call with its handler: `void(std::error_code, std::vector<Result>)`.
template <typename Handler, typename Result>
class call_op_for final : public call_op {
public:
    call_op_for(Handler handler, const asio::any_io_executor& ex, std::size_t servers)
        : call_op(servers), done_(std::in_place, std::move(handler), ex) {}

private:
    void deliver(std::error_code ec, std::vector<shared_bytes> answers) override {
        auto d = std::move(*done_); // only the one caller that claimed the fan-in gets here
        done_.reset();
        std::vector<Result> out;
        if (!ec) {
            try {
                out.resize(answers.size());
                for (std::size_t i = 0; i < answers.size() && !ec; ++i) {
                    ec = decode_result(answers[i].span(), out[i]);
                }
            } catch (const std::bad_alloc&) {
                ec = errc::out_of_memory;
            }
        }
        if (ec) {
            out.clear();
        }
        std::move(d).dispatch(ec, std::move(out));
    }

    std::optional<completion<Handler, asio::any_io_executor>> done_;
};

/// Starts call `c` with the operation `make(servers)` returns (a `call_op`), or completes
/// it at once (posted) with `fail(ec)` when it is refused or its range is empty.
template <typename Make, typename Fail>
void start_call(store_core& core, const prepared_call& c, Make make, Fail fail) {
    const auto deadline = core.deadline();
    if (c.error || c.range.empty()) {
        fail(c.error);
        return;
    }
    const auto where = core.placement();
    const auto slots = owners_of(*where, c.range.begin, c.range.end);
    auto op = make(slots.size());
    call_op::send(core, op, c, *where, slots, deadline);
}

/// The initiation of `kv_store::call` (for `asio::async_initiate`).
template <typename Result>
struct initiate_call {
    store_core* core;

    template <typename Handler>
    void operator()(Handler&& handler, const prepared_call& c) const {
        using handler_type = std::decay_t<Handler>;
        start_call(
            *core, c,
            [&](std::size_t servers) {
                auto slot = asio::get_associated_cancellation_slot(handler);
                auto op = std::make_shared<call_op_for<handler_type, Result>>(
                    std::forward<Handler>(handler), core->executor(), servers);
                abort_on_cancel(slot, op);
                return op;
            },
            [&](std::error_code ec) {
                completion<handler_type, asio::any_io_executor>(std::forward<Handler>(handler),
                                                                core->executor())
                    .post(ec, std::vector<Result>{});
            });
    }
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/call_op.ipp>
#endif
