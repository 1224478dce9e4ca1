// Petrel: one SPMD binary, whatever starts it: `petrel::run`.
#pragma once

#include <petrel/cluster/worker_node.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/log.hpp>
#include <petrel/launch/config.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace petrel {

/// The training code of one worker; `petrel::run` calls it once per worker it hosts, each
/// on its own thread. Throwing fails the worker, and the job with it: every process of
/// the job ends with `run_failed`, naming the worker and the exception's message (unless
/// the job drops failed workers, `worker_failure::drop`: then only this process does).
using worker_function = std::function<void(worker_node&)>;

/// What `run` returns.
enum run_status : int {
    run_ok = 0,           ///< every node of this process finished and left
    run_failed = 1,       ///< a node failed, a worker threw, or the job did not form
    run_config_error = 2, ///< the configuration was refused (the message says why)
};

namespace detail {

/// The threads each of the `servers` servers of a process may cut one large request for
/// (`server_options::split_threads`): they share the process's `threads` I/O threads, so
/// their parts do not take turns at the same threads. At least 1.
[[nodiscard]] PETREL_DECL std::size_t server_split_threads(std::uint32_t threads,
                                                           std::uint32_t servers) noexcept;

/// The warning a process started by a launcher logs when it listens on every interface
/// (`--bind` left at 0.0.0.0, or given as a wildcard): any host that can reach its ports
/// reaches the job. Empty when it binds one interface, or runs without a launcher (whose
/// default is 127.0.0.1).
[[nodiscard]] PETREL_DECL std::string wildcard_bind_warning(const settings& s);

/// Why a process started by a launcher refuses to run its share of the job: it has no
/// secret, so any process that reaches its ports could join and change the model, and
/// `--insecure` was not given. Empty when it may run (with a secret, with `--insecure`,
/// or without a launcher, where `run` makes the job's secret itself).
[[nodiscard]] PETREL_DECL std::string secret_refusal(const settings& s);

} // namespace detail

/// Runs this process's share of a job with resolved settings: hosts the manager, servers
/// and workers that `s` assigns to this process (every node when no launcher started
/// it), joins the job, calls `fn` for each worker, then waits at a final barrier of all
/// nodes so that no server stops while a worker still needs it, and leaves. A worker
/// whose `fn` threw does not wait: it tells the manager it failed, and why
/// (`member::async_fail`), which fails the others' final barrier.
///
/// Returns `run_ok`, or `run_failed` after logging one line that says what failed (the
/// first failure; any others on the lines after it): a node of the job that died, or
/// whose training function threw, in this process or another (named, with the reason
/// the manager gave), a job that did not form within the startup timeout, a root that
/// could not be reached, or a node refused because this process declares other tables or
/// remote functions than the job's (the first difference named). A process started by a
/// launcher without a secret and without `--insecure` starts nothing and returns
/// `run_config_error` after logging why (`detail::secret_refusal`), as does one whose TLS
/// files (`--tls-cert`, `--tls-key`, `--tls-ca`) cannot be used.
PETREL_DECL int run(const settings& s, const worker_function& fn, logger log = stderr_logger());

/// Resolves the configuration from `cfg`, the command line and the environment (a field
/// `cfg` sets is fixed: another value on the command line or in the environment is
/// refused; the command line wins over the environment, logged; see `petrel::resolve`),
/// then runs this process's share of the job.
/// `--help` prints the options and returns `run_ok`; a refused configuration prints why
/// and returns `run_config_error`.
///
/// @par Example
/// @code
/// int main(int argc, char** argv) {
///     return petrel::run({.servers = 2}, argc, argv, [](petrel::worker_node& w) {
///         petrel::kv_store<std::uint64_t, float> kv(w);
///         // ... push gradients, pull weights ...
///     });
/// }
/// @endcode
/// With no launcher this runs the whole job in this process over loopback TCP; under
/// `mpirun`, `srun`, a Kubernetes indexed job or `PETREL_RANK`/`PETREL_SIZE` each process
/// hosts its share and meets the others at `PETREL_ROOT`.
PETREL_DECL int run(const config& cfg, int argc, const char* const* argv, const worker_function& fn,
                    logger log = stderr_logger());

/// As above, without a command line (configuration from `cfg` and the environment).
PETREL_DECL int run(const config& cfg, const worker_function& fn, logger log = stderr_logger());

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/launch/impl/run.ipp>
#endif
