// Petrel: the pull operation: a checked request cut into one slice per server, sent once
// the worker's clock allows the read, and the replies' rows put back in the caller's key
// order (into a `kv_pairs`, or straight into the caller's memory).
#pragma once

#include <petrel/client/detail/fan_in.hpp>
#include <petrel/client/detail/slices.hpp>
#include <petrel/client/detail/store_core.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/transport/detail/completion.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/error.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// What a pull yields, without its types: the keys asked for, their rows in that order,
/// and the clocks of the servers' ranges.
struct pull_result {
    shared_bytes keys;
    shared_bytes values;
    std::size_t width = 1;
    std::vector<clock_entry> clocks;
};

/// The state of one pull, compiled once: the fan-in of its slices and where their rows
/// go. One slice's reply is kept as it came (no copy); several are gathered into one
/// buffer, or copied to the caller's memory `into` (only while the pull is live, so never
/// after it completed or was cancelled). The handler lives in `pull_op_for`.
class pull_op : public fan_in {
public:
    /// A pull of `p` in `slices` slices by a store of identity `id`, into the caller's
    /// memory `into` (`p.count` rows) when it is not null.
    PETREL_DECL pull_op(std::size_t slices, const prepared_request& p, std::byte* into,
                        const store_identity& id, buffer_pool& pool);
    pull_op(const pull_op&) = delete;
    pull_op& operator=(const pull_op&) = delete;
    virtual ~pull_op() = default;

    /// Cuts the checked pull `p` into slices; the error that completes it at once instead.
    /// No slices and no error: an empty pull, done at once.
    [[nodiscard]] PETREL_DECL static std::error_code
    cut(const store_core& core, const prepared_request& p, std::vector<slice>& slices);

    /// Sends the slices once the worker's clock allows the read (see
    /// `worker_gate::send_when_open`), due by `deadline`.
    PETREL_DECL static void send(store_core& core, const std::shared_ptr<pull_op>& op,
                                 std::vector<slice> slices,
                                 std::chrono::steady_clock::time_point deadline);

    /// Cancels: completes with `asio::error::operation_aborted` unless already completed.
    void abort() {
        if (cancel()) {
            deliver(make_error_code(asio::error::operation_aborted), {});
        }
    }

protected:
    /// Runs the handler with `ec` and, without error, the result, once, on its executor.
    virtual void deliver(std::error_code ec, pull_result r) = 0;

private:
    /// One slice's reply (or failure); the last completes.
    PETREL_DECL void arrive_one(const std::vector<key_run>& runs, std::size_t count,
                                std::error_code ec, const wire::message& m);

    shared_bytes keys_;
    std::byte* into_;
    std::size_t width_;
    std::size_t row_;
    wire::scalar_type value_type_;
    pooled_buffer gathered_; // several slices: their rows in the caller's order
    shared_bytes single_;    // one slice: the reply's own buffer
    std::vector<clock_entry> clocks_;
    bool one_ = false;
};

/// A pull with its handler: `void(std::error_code, kv_pairs<Key, Value>)`, or with
/// `Into`, `void(std::error_code)` (the rows went to the caller's memory).
template <typename Handler, typename Key, typename Value, bool Into>
class pull_op_for final : public pull_op {
public:
    template <typename... Args>
    pull_op_for(Handler handler, const asio::any_io_executor& ex, Args&&... args)
        : pull_op(std::forward<Args>(args)...), done_(std::in_place, std::move(handler), ex) {}

    /// Completes a pull that never started (an error, or no keys): posted, since the
    /// initiating call has not returned.
    static void post(Handler handler, const asio::any_io_executor& ex, std::error_code ec,
                     std::size_t width) {
        completion<Handler, asio::any_io_executor> d(std::move(handler), ex);
        if constexpr (Into) {
            std::move(d).post(ec);
        } else {
            std::move(d).post(ec,
                              ec ? kv_pairs<Key, Value>{} : kv_pairs<Key, Value>({}, {}, width));
        }
    }

private:
    void deliver(std::error_code ec, pull_result r) override {
        auto d = std::move(*done_); // only the one caller that claimed the fan-in gets here
        done_.reset();
        if constexpr (Into) {
            std::move(d).dispatch(ec);
        } else if (ec) {
            std::move(d).dispatch(ec, kv_pairs<Key, Value>{});
        } else {
            kv_pairs<Key, Value> out(std::move(r.keys), std::move(r.values), r.width);
            out.set_clocks(std::move(r.clocks));
            std::move(d).dispatch(ec, std::move(out));
        }
    }

    std::optional<completion<Handler, asio::any_io_executor>> done_;
};

/// The initiation of `kv_store::pull` (for `asio::async_initiate`): into a `kv_pairs`, or
/// with `Into` into the caller's memory (the extra argument).
template <typename Key, typename Value, bool Into>
struct initiate_pull {
    store_core* core;

    template <typename Handler>
    void operator()(Handler&& handler, prepared_request p, Value* into = nullptr) const {
        using op_type = pull_op_for<std::decay_t<Handler>, Key, Value, Into>;
        const auto deadline = core->deadline();
        const auto width = core->id().width;
        std::vector<slice> slices;
        const auto ec = pull_op::cut(*core, p, slices);
        if (ec || slices.empty()) {
            op_type::post(std::forward<Handler>(handler), core->executor(), ec, width);
            return;
        }
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto op = std::make_shared<op_type>(std::forward<Handler>(handler), core->executor(),
                                            slices.size(), p, reinterpret_cast<std::byte*>(into),
                                            core->id(), core->pool());
        abort_on_cancel(slot, op);
        pull_op::send(*core, op, std::move(slices), deadline);
    }
};

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/pull_op.ipp>
#endif
