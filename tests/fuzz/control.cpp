// Fuzzes the control plane's bodies: joins, views, barriers, data sets, block schedules,
// rounds and declarations, as a manager or a node reads them from a control message.
#include <petrel/cluster/detail/control.hpp>

#include <petrel/core/buffer_pool.hpp>
#include <petrel/wire/message.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    petrel::wire::message m;
    m.header.kind = (size > 0 && (data[0] & 1) != 0) ? petrel::wire::message_kind::control_reply
                                                     : petrel::wire::message_kind::control;
    m.set_segment(
        petrel::wire::values_segment,
        petrel::shared_bytes::copy_of(std::span(reinterpret_cast<const std::byte*>(data), size)));
    if (const auto body = petrel::detail::read_control(m)) {
        // What was read writes again and reads back the same.
        const auto again = petrel::detail::read_control(petrel::detail::make_control(*body));
        if (!again || again->op != body->op || again->job_id != body->job_id ||
            again->view.has_value() != body->view.has_value()) {
            __builtin_trap();
        }
    }
    return 0;
}
