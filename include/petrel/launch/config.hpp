// Petrel: a process's settings, from the program, the command line and the environment.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/core/config.hpp>
#include <petrel/fwd.hpp>
#include <petrel/launch/io_threads.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/layout.hpp>
#include <petrel/launch/limits.hpp>
#include <petrel/transport/tls_files.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace petrel {

/// The settings a program fixes in code. Every field is optional. A field set here is
/// fixed: `resolve` refuses a command-line option or environment variable that gives it
/// another value, naming both. Fields left unset come from the command line, else the
/// environment, else their defaults.
///
/// Each field's comment gives its command-line option and its environment variable; see
/// `usage()` for the defaults.
struct config {
    /// Server nodes in the job.  `--servers N`, `PETREL_SERVERS`.
    std::optional<std::uint32_t> servers{};
    /// Worker nodes in the job.  `--workers N`, `PETREL_WORKERS`.
    std::optional<std::uint32_t> workers{};
    /// How processes share out the nodes.  `--layout dedicated|colocated`, `PETREL_LAYOUT`.
    std::optional<petrel::layout> layout{};
    /// The manager's address, "host:port" ("[v6-address]:port" for IPv6): where rank 0
    /// listens and every other process connects.  `--root host:port`, `PETREL_ROOT`.
    std::optional<std::string> root{};
    /// The host this process listens on.  `--bind host`, `PETREL_BIND`.
    std::optional<std::string> bind{};
    /// The host peers use to reach this process.  `--advertise host`, `PETREL_ADVERTISE`.
    std::optional<std::string> advertise{};
    /// The job's name, shared by all its processes.  `--job-id ID`, `PETREL_JOB_ID`.
    std::optional<std::string> job_id{};
    /// The roles this process hosts, overriding the layout.  `--roles server,worker`,
    /// `PETREL_ROLES`.
    std::optional<std::vector<node_role>> roles{};
    /// I/O threads per process (default: `default_io_threads()`).  `--threads N`,
    /// `PETREL_THREADS`.
    std::optional<std::uint32_t> threads{};
    /// How often nodes report to the manager.  `--heartbeat-interval MS`,
    /// `PETREL_HEARTBEAT_INTERVAL`.
    std::optional<std::chrono::milliseconds> heartbeat_interval{};
    /// How long the manager waits for a heartbeat before it declares a node dead.
    /// `--heartbeat-timeout MS`, `PETREL_HEARTBEAT_TIMEOUT`.
    std::optional<std::chrono::milliseconds> heartbeat_timeout{};
    /// How long to wait for the root and for all nodes to register.
    /// `--startup-timeout MS`, `PETREL_STARTUP_TIMEOUT`.
    std::optional<std::chrono::milliseconds> startup_timeout{};
    /// How long a push, pull or control request may take.  `--request-timeout MS`,
    /// `PETREL_REQUEST_TIMEOUT`.
    std::optional<std::chrono::milliseconds> request_timeout{};
    /// The remote functions this process's servers run for workers (see
    /// `kv_store::call`); register the same ones in every process. Only from the program.
    std::shared_ptr<const function_registry> functions{};
    /// The tables this process's servers hold as declared (dense or sparse, initial
    /// values, update rules); declare the same ones in every process. Only from the
    /// program.
    std::shared_ptr<const table_registry> tables{};
    /// A checkpoint directory the servers restore every table from before the workers
    /// start.  `--restore DIR`, `PETREL_RESTORE`.
    std::optional<std::string> restore{};
    /// Copies of each key range besides its primary's, on the next servers of the ring
    /// (chain replication); tables may keep fewer (`table_spec::replicas`).
    /// `--replicas K`, `PETREL_REPLICAS`.
    std::optional<std::uint32_t> replicas{};
    /// How many servers and workers the running job may grow to: nodes started later
    /// with `join` take part up to these totals of live ones. Default: the job's
    /// servers and workers (none may join). `--max-servers N`, `PETREL_MAX_SERVERS`;
    /// `--max-workers N`, `PETREL_MAX_WORKERS`. Read by the manager.
    std::optional<std::uint32_t> max_servers{};
    std::optional<std::uint32_t> max_workers{};
    /// This process starts one node of this role (server or worker) that joins the
    /// running job at the root, instead of taking part in its start: a server takes its
    /// share of the keys once they are copied to it, a worker starts at the job's clock.
    /// `manager` restarts a lost manager at the root: it takes the running job over
    /// (`manager_options::take_over`). Needs the root.
    /// `--join server|worker|manager`, `PETREL_JOIN`.
    std::optional<node_role> join{};
    /// Where a standby manager listens ("host:port", not the root): the process of rank 1
    /// starts one there, and when the manager at the root is lost the nodes register
    /// again with it and it takes the running job over. `--standby host:port`,
    /// `PETREL_STANDBY`.
    std::optional<std::string> standby{};
    /// How long a node that lost its manager keeps looking for one (restarted at the
    /// root, or the standby) while pushes and pulls go on; then it gives up.
    /// `--manager-grace MS`, `PETREL_MANAGER_GRACE`.
    std::optional<std::chrono::milliseconds> manager_grace{};
    /// What a worker that fails does to the job: fails it, or is dropped and the job goes
    /// on without it. Read by the manager. `--worker-failure fail|drop`,
    /// `PETREL_WORKER_FAILURE`.
    std::optional<petrel::worker_failure> worker_failure{};
    /// A file holding the job's secret, the same for every process: each connection then
    /// starts with a mutual proof of it and a peer without it is refused
    /// (`transport_options::secret`). `--secret-file FILE`, `PETREL_SECRET_FILE`; or the
    /// secret itself in `PETREL_SECRET` (never on the command line, where other users of
    /// the host can read it).
    std::optional<std::string> secret_file{};
    /// Run a launched job without a secret (refused otherwise): every process that can
    /// reach its ports is trusted with the model. Every process logs a warning.
    /// `--insecure`, `PETREL_INSECURE=1`.
    std::optional<bool> insecure{};
    /// Mutual TLS on every connection (`transport_options::tls`): this process's
    /// certificate and private key, and the certificates of the authority that signed
    /// every process's, all PEM files. All three or none. `--tls-cert FILE`,
    /// `--tls-key FILE`, `--tls-ca FILE`; `PETREL_TLS_CERT`, `PETREL_TLS_KEY`,
    /// `PETREL_TLS_CA`.
    std::optional<std::string> tls_cert{};
    std::optional<std::string> tls_key{};
    std::optional<std::string> tls_ca{};
    /// Every process's certificate names its rank (common name `rank-N`): the manager
    /// admits servers and workers only as the ranks their certificates name
    /// (`manager_options::ranked_certificates`). Needs the TLS files. `--tls-ranks`,
    /// `PETREL_TLS_RANKS=1`.
    std::optional<bool> tls_ranks{};
    /// The directory under which saves write checkpoints (`kv_store::save` names a
    /// relative directory without ".." under it; any other is refused).
    /// `--checkpoint-root DIR`, `PETREL_CHECKPOINT_ROOT`. Default: the working directory
    /// under a launcher; none without one (every node is in this process).
    std::optional<std::string> checkpoint_root{};
    /// Limits on what this process holds for its peers (`--max-connections N`, ...; see
    /// `process_limits`). Those left unset keep their defaults.
    process_limits limits{};
};

/// Every setting with its value, what the launcher said, and what this process hosts.
struct settings {
    /// Server and worker nodes in the whole job.
    std::uint32_t servers = 0;
    std::uint32_t workers = 0;
    petrel::layout layout = petrel::layout::dedicated;
    /// The manager's address, "host:port" as given (port 0 only without a launcher: a free
    /// port is chosen at start).
    std::string root;
    /// The host this process listens on, and the host peers use to reach it. Both are bare
    /// hosts: an IPv6 address given in brackets is stored without them.
    std::string bind;
    std::string advertise;
    std::string job_id;
    /// The roles this process hosts, in the order manager, server, worker; never empty.
    std::vector<node_role> roles;
    std::uint32_t threads = 0;
    std::chrono::milliseconds heartbeat_interval{0};
    std::chrono::milliseconds heartbeat_timeout{0};
    std::chrono::milliseconds startup_timeout{0};
    std::chrono::milliseconds request_timeout{0};
    /// The remote functions of this process's servers (none when null).
    std::shared_ptr<const function_registry> functions;
    /// The declared tables of this process's servers (none when null).
    std::shared_ptr<const table_registry> tables;
    /// The checkpoint directory to restore from (empty: none).
    std::string restore;
    /// Copies of each key range besides the primary's: below `servers`.
    std::uint32_t replicas = 0;
    /// The totals of live servers and workers the running job may grow to (at least
    /// `servers` and `workers`).
    std::uint32_t max_servers = 0;
    std::uint32_t max_workers = 0;
    /// The role of the one node this process adds to the running job (`config::join`);
    /// empty when it takes part in the job's start. `manager`: this process hosts only a
    /// manager that takes the running job over.
    std::optional<node_role> join;
    /// The standby manager's address (empty: none), whether this process hosts it, and
    /// how long nodes look for a manager after losing theirs.
    std::string standby;
    bool standby_here = false;
    std::chrono::milliseconds manager_grace{0};
    /// What a worker that fails does to the job.
    petrel::worker_failure worker_failure = petrel::worker_failure::fail;
    /// The job's secret, from the secret file or `PETREL_SECRET` (empty: none given;
    /// `petrel::run` then makes one for a job without a launcher).
    std::string secret;
    /// `config::insecure`: a launched job may run without a secret.
    bool insecure = false;
    /// The TLS files (none: plain TCP).
    tls_files tls;
    /// `config::tls_ranks`: certificates name their processes' ranks.
    bool tls_ranks = false;
    /// Where saves write checkpoints, as an absolute path (empty: anywhere).
    std::string checkpoint_root;
    /// The limits given (`config::limits`); the others keep their defaults.
    process_limits limits;
    /// What the launcher said (`launcher_kind::embedded` without one).
    launch_info launch;
    /// `--help` or `-h` was given: print `usage()` and exit.
    bool help = false;
    /// The environment variables a command-line option overrode, one line each
    /// ("--root=\"h:9\" overrides PETREL_ROOT=\"10.0.0.1:7000\""): `petrel::run` logs them.
    std::vector<std::string> overridden;
    /// The command-line arguments that are not Petrel's, `argv[0]` first, in their order,
    /// for the program's own parsing.
    std::vector<std::string> rest;
    /// How many nodes of each role this process hosts.
    std::uint32_t managers_here = 0;
    std::uint32_t servers_here = 0;
    std::uint32_t workers_here = 0;
    /// The index of this process's first server among all servers, and of its first worker
    /// among all workers: the number of servers (workers) on lower ranks. With a roles
    /// override both are the process's rank, as the others' roles are unknown here; node
    /// ids are ordered by rank either way.
    std::uint32_t first_server = 0;
    std::uint32_t first_worker = 0;
};

/// Resolves this process's settings from the program's `config`, the command line and the
/// environment, and decides which nodes the process hosts.
///
/// A setting may come from a field set in `program`, a command-line option or an
/// environment variable (else its default). A field the program sets is fixed: an option
/// or variable that disagrees with it is refused, naming both. A command-line option wins
/// over an environment variable, and `settings::overridden` says which it overrode. Nothing
/// given is silently dropped. Options are written `--servers 4` or
/// `--servers=4`; arguments that are not Petrel's options (including other `--flags`, and
/// everything from a `--` on) are returned in `rest`, in order, after `argv[0]`. When
/// an option is given twice the last one counts.
///
/// Without a launcher (see `detect_launcher`) the process hosts the whole job: the manager,
/// `servers` servers and `workers` workers. Under a launcher with P processes, rank 0
/// hosts the manager and:
/// - in the dedicated layout, ranks `[0, servers)` host one server each and the others one
///   worker each, so servers + workers = P (servers defaults to P / 2, at least 1);
/// - in the colocated layout, every rank hosts one server and one worker (servers = workers
///   = P);
/// - with a roles override, the process hosts exactly the listed roles; the totals must be
///   given.
///
/// When `--help` or `-h` is given, `help` is set and no `config_error` is thrown: if the
/// settings cannot be resolved, the defaults without a launcher are returned with `rest`.
///
/// @throws config_error naming the option, variable or field, its value, and what is
/// allowed: a malformed or missing value, totals that do not fit the layout, no root under a
/// launcher, or no way to choose the advertised host.
///
/// @par Example
/// @code
/// int main(int argc, char** argv) {
///     petrel::config program;
///     program.layout = petrel::layout::colocated;   // --layout dedicated is then refused
///     petrel::settings s = petrel::resolve(program, argc, argv);
///     if (s.help) {
///         std::cout << petrel::usage(argv[0]);
///         return 0;
///     }
///     // s.rest holds the program's own arguments; s.servers_here the servers to start here
/// }
/// @endcode
[[nodiscard]] PETREL_DECL settings resolve(const config& program, int argc, const char* const* argv,
                                           const environment& env);

/// `resolve` with the process environment.
[[nodiscard]] PETREL_DECL settings resolve(const config& program, int argc,
                                           const char* const* argv);

/// The `--help` text: every option with its environment variable and default, the order of
/// precedence, and the launchers that are recognised.
///
/// @par Example
/// @code
/// if (s.help) {
///     std::cout << petrel::usage(argv[0]);
/// }
/// @endcode
[[nodiscard]] PETREL_DECL std::string usage(std::string_view program_name);

} // namespace petrel

#if PETREL_HEADER_ONLY
#include <petrel/launch/impl/config.ipp>
#endif
