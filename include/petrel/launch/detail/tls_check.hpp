// Petrel: a process's TLS files, checked before it starts anything.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/log.hpp>
#include <petrel/launch/config.hpp>
#include <petrel/transport/detail/tcp_stream.hpp>
#include <petrel/transport/tls_files.hpp>

#include <string>
#include <system_error>

namespace petrel::detail {

/// Checks that the TLS files of `s` make a context (each transport makes its own later)
/// and, with ranked certificates (`settings::tls_ranks`), that this process's certificate
/// names its rank. @throws std::system_error saying what is wrong, naming the file.
inline void check_tls(const settings& s) {
    if (!s.tls.enabled()) {
        return;
    }
    (void)make_tls_context(s.tls);
    if (!s.tls_ranks) {
        return;
    }
    const auto name = certificate_name(s.tls.certificate);
    if (certificate_rank(name) != s.launch.rank) {
        throw std::system_error(
            make_error_code(errc::invalid_argument),
            "petrel: --tls-ranks: the certificate '" + s.tls.certificate + "' is named '" +
                printable(name, 256) + "', not rank-" + std::to_string(s.launch.rank) +
                ", the rank of this process: the manager would refuse its nodes");
    }
}

} // namespace petrel::detail
