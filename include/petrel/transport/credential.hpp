// Petrel: what a peer may do, and the reader's credential made from a job's secret.
#pragma once

#include <petrel/core/config.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace petrel {

/// What a connection's peer proved that it may do.
enum class access : std::uint8_t {
    /// It knows the job's secret (or the job has none): any request.
    full = 0,
    /// It holds a reader's credential (`reader_credential`): reads only. Servers answer
    /// its pushes, clocks and calls with `errc::not_permitted`; the manager takes its
    /// join as a reader, its heartbeats and its own leave, and nothing else.
    read_only = 1,
};

/// The reader's credential of the job whose secret is `job_secret`: 64 hexadecimal
/// digits, HMAC-SHA256 of a fixed label under the secret. A process that presents it
/// instead of the secret (`transport_options::credential`, `attach_options::credential`)
/// is admitted by the job's nodes as a reader: it can pull, and nothing it sends can
/// change the model or the job's membership. The secret cannot be learnt from it, so an
/// inference service can be given this and not the secret.
/// @throws std::invalid_argument for an empty secret; std::system_error when HMAC fails.
[[nodiscard]] PETREL_DECL std::string reader_credential(std::string_view job_secret);

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/transport/impl/credential.ipp>
#endif
