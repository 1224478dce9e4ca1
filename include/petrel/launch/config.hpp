// Petrel: a process's settings, from the program, the command line and the environment.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/fwd.hpp>
#include <petrel/launch/detail/config_options.hpp>
#include <petrel/launch/detail/config_values.hpp>
#include <petrel/launch/detail/secret_file.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/layout.hpp>
#include <petrel/launch/limits.hpp>
#include <petrel/transport/tls_files.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
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

namespace detail {

/// Decides what this process hosts: fills servers, workers, roles, *_here and first_*.
inline void config_plan(settings& s, const std::optional<config_value<std::uint32_t>>& servers,
                        const std::optional<config_value<std::uint32_t>>& workers,
                        const std::optional<config_value<std::vector<node_role>>>& roles) {
    const std::uint32_t size = s.launch.size;
    const std::uint32_t rank = s.launch.rank;
    const auto host = [&](node_role r) {
        s.roles.push_back(r);
        switch (r) {
        case node_role::manager:
            s.managers_here = 1;
            break;
        case node_role::server:
            s.servers_here = 1;
            break;
        case node_role::worker:
            s.workers_here = 1;
            break;
        case node_role::reader:
            break; // refused when the roles were read
        }
    };

    if (s.launch.kind == launcher_kind::embedded) {
        if (roles) {
            config_fail(*roles, "--roles needs a launcher: set PETREL_RANK and PETREL_SIZE, or "
                                "run under mpirun, srun or a Kubernetes indexed job");
        }
        s.servers = servers ? servers->value : 2;
        s.workers = workers ? workers->value : 2;
        s.roles = {node_role::manager, node_role::server, node_role::worker};
        s.managers_here = 1;
        s.servers_here = s.servers;
        s.workers_here = s.workers;
        return;
    }

    if (roles) {
        if (!servers || !workers) {
            config_fail(*roles, "with a roles override Petrel cannot count the nodes: set the "
                                "totals with " +
                                    config_ask("servers") + " and " + config_ask("workers"));
        }
        const bool has_manager = std::find(roles->value.begin(), roles->value.end(),
                                           node_role::manager) != roles->value.end();
        if (rank == 0 && !has_manager) {
            config_fail(*roles, "rank 0 hosts the manager (it listens at the root): add "
                                "manager to its roles");
        }
        if (rank != 0 && has_manager) {
            config_fail(*roles,
                        "only rank 0 hosts the manager, this is rank " + std::to_string(rank));
        }
        s.servers = servers->value;
        s.workers = workers->value;
        for (const auto r : {node_role::manager, node_role::server, node_role::worker}) {
            if (std::find(roles->value.begin(), roles->value.end(), r) != roles->value.end()) {
                host(r);
            }
        }
        s.first_server = rank;
        s.first_worker = rank;
        return;
    }

    const std::string processes = std::to_string(size) + " process" + (size == 1 ? "" : "es");
    if (rank == 0) {
        host(node_role::manager);
    }
    if (s.layout == petrel::layout::colocated) {
        for (const auto* v : {&servers, &workers}) {
            if (*v && (*v)->value != size) {
                config_fail(**v, "the colocated layout runs one server and one worker in each "
                                 "process, so with " +
                                     processes + " there are " + std::to_string(size) +
                                     " of each: leave it unset, set it to " + std::to_string(size) +
                                     ", or use --layout dedicated (PETREL_LAYOUT=dedicated)");
            }
        }
        s.servers = size;
        s.workers = size;
        host(node_role::server);
        host(node_role::worker);
        s.first_server = rank;
        s.first_worker = rank;
        return;
    }

    // Dedicated: one node per process, servers on ranks [0, servers), workers after them.
    if (size == 1) {
        throw config_error("petrel: the dedicated layout runs one server or one worker per "
                           "process and needs at least 2 processes, but the launcher started "
                           "1: use --layout colocated (PETREL_LAYOUT=colocated) or start "
                           "more processes");
    }
    if (servers && workers) {
        if (std::uint64_t{servers->value} + workers->value != size) {
            throw config_error("petrel: " + servers->origin + "=\"" + servers->text + "\" and " +
                               workers->origin + "=\"" + workers->text + "\"" +
                               ": the dedicated layout runs one server or one worker " +
                               "per process, so servers + workers must equal the " + processes +
                               " the launcher started");
        }
        s.servers = servers->value;
    } else if (servers) {
        if (servers->value >= size) {
            config_fail(*servers, "the dedicated layout runs one server or one worker per "
                                  "process and needs at least one worker, so with " +
                                      processes + " at most " + std::to_string(size - 1) +
                                      " servers");
        }
        s.servers = servers->value;
    } else if (workers) {
        if (workers->value >= size) {
            config_fail(*workers, "the dedicated layout runs one server or one worker per "
                                  "process and needs at least one server, so with " +
                                      processes + " at most " + std::to_string(size - 1) +
                                      " workers");
        }
        s.servers = size - workers->value;
    } else {
        s.servers = std::max<std::uint32_t>(1, size / 2);
    }
    s.workers = size - s.servers;
    if (rank < s.servers) {
        host(node_role::server);
        s.first_server = rank;
        s.first_worker = 0;
    } else {
        host(node_role::worker);
        s.first_server = s.servers;
        s.first_worker = rank - s.servers;
    }
}

/// Resolves every setting; throws `config_error` on the first bad one: first each value
/// alone, in the order of the options table, then the checks across options.
[[nodiscard]] inline settings config_resolve(const config& program, const command_line& cl,
                                             const environment& env) {
    settings s;
    std::vector<std::string> overridden;
    s.launch = detect_launcher(env);
    s.help = cl.help;
    s.rest = cl.rest;
    const bool launched = s.launch.kind != launcher_kind::embedded;

    const auto picked = config_pick_all(program, cl, env, overridden);
    config_apply(s, picked);
    const auto& servers = std::get<config_index("servers")>(picked);
    const auto& workers = std::get<config_index("workers")>(picked);
    const auto& layout = std::get<config_index("layout")>(picked);
    const auto& root = std::get<config_index("root")>(picked);
    const auto& bind = std::get<config_index("bind")>(picked);
    const auto& advertise = std::get<config_index("advertise")>(picked);
    const auto& job_id = std::get<config_index("job-id")>(picked);
    const auto& roles = std::get<config_index("roles")>(picked);
    const auto& restore = std::get<config_index("restore")>(picked);
    const auto& replicas = std::get<config_index("replicas")>(picked);
    const auto& max_servers = std::get<config_index("max-servers")>(picked);
    const auto& max_workers = std::get<config_index("max-workers")>(picked);
    const auto& join = std::get<config_index("join")>(picked);
    const auto& standby = std::get<config_index("standby")>(picked);
    const auto interval = config_resolved<config_index("heartbeat-interval")>(picked);
    const auto timeout = config_resolved<config_index("heartbeat-timeout")>(picked);

    if (roles) {
        config_check_roles(*roles);
    }
    if (timeout.value <= interval.value) {
        const auto name = [](const config_value<std::chrono::milliseconds>& v,
                             std::string_view what) {
            return v.origin.empty() ? "the default " + std::string(what) + " (" + v.text + " ms)"
                                    : v.origin + "=\"" + v.text + "\"";
        };
        throw config_error("petrel: " + name(timeout, "heartbeat timeout") + " must exceed " +
                           name(interval, "heartbeat interval") +
                           ": a node is declared dead when no heartbeat came for the timeout, "
                           "so it must span several heartbeats");
    }

    s.layout = layout ? layout->value : petrel::layout::dedicated;
    config_plan(s, servers, workers, roles);
    s.max_servers = s.servers;
    s.max_workers = s.workers;
    for (auto [v, total, out] : {std::tuple(&max_servers, s.servers, &s.max_servers),
                                 std::tuple(&max_workers, s.workers, &s.max_workers)}) {
        if (*v) {
            if ((*v)->value < total) {
                config_fail(**v, "fewer than the job's " + std::to_string(total));
            }
            *out = (*v)->value;
        }
    }
    if (join) {
        if (!root) {
            config_fail(*join, "a node that joins a running job needs its root: set "
                               "PETREL_ROOT=host:port or --root host:port");
        }
        if (roles) {
            config_fail(*join, "joins with one node: leave out the roles override");
        }
        s.join = join->value;
        s.roles = {join->value};
        s.managers_here = join->value == node_role::manager ? 1 : 0;
        s.servers_here = join->value == node_role::server ? 1 : 0;
        s.workers_here = join->value == node_role::worker ? 1 : 0;
    }
    if (replicas) {
        if (replicas->value >= s.servers) {
            config_fail(*replicas, "too many: " + std::to_string(s.servers) +
                                       " servers hold at most " + std::to_string(s.servers - 1) +
                                       " copies besides the primary's");
        }
        if (replicas->value > 7) {
            config_fail(*replicas, "too many: at most 7 copies besides the primary's");
        }
        s.replicas = replicas->value;
    } else {
        s.replicas = s.servers >= 2 ? 1 : 0;
    }

    if (!root && launched) {
        throw config_error(
            "petrel: no root: set PETREL_ROOT=host:port or --root host:port, the address where "
            "rank 0 (the manager) listens and every process connects (under Kubernetes, the "
            "headless service name of pod 0 and a port)");
    }
    const auto root_value = config_or(root, std::string("127.0.0.1:0"));
    const std::string root_host = config_root_host(root_value, launched);
    s.root = root_value.value;
    if (standby) {
        if (!launched || s.launch.size < 2) {
            config_fail(*standby, "the standby manager runs in the process of rank 1: it needs "
                                  "a launcher that starts 2 processes or more");
        }
        (void)config_root_host(*standby, true);
        if (standby->value == s.root) {
            config_fail(*standby, "the standby manager listens elsewhere than the root");
        }
        s.standby = standby->value;
        s.standby_here = s.launch.rank == 1 && !s.join;
    }

    s.bind = config_host(config_or(bind, std::string(launched ? "0.0.0.0" : "127.0.0.1")));
    if (advertise) {
        s.advertise = config_host(*advertise);
    } else if (!config_is_wildcard(s.bind)) {
        s.advertise = s.bind;
    } else if ((s.managers_here > 0 || config_is_loopback(root_host)) &&
               !config_is_wildcard(root_host)) {
        s.advertise = root_host;
    } else if (!launched || s.launch.local_size == s.launch.size) {
        s.advertise = "127.0.0.1";
    } else {
        throw config_error("petrel: no advertise address: this process listens on " + s.bind +
                           " (all interfaces) and processes may run on several hosts; set " +
                           "PETREL_ADVERTISE or --advertise to the address peers on other " +
                           "hosts use to reach this process (e.g. the host's or pod's IP)");
    }

    const auto job =
        config_or(job_id, s.launch.job_id.empty() ? std::string("petrel") : s.launch.job_id);
    if (job.value.empty()) {
        config_fail(job, "empty (expected the job's name)");
    }
    s.job_id = job.value;

    s.functions = program.functions;
    s.tables = program.tables;
    if (restore) {
        if (restore->value.empty()) {
            config_fail(*restore, "empty (expected a checkpoint directory)");
        }
        s.restore = restore->value;
    }
    if (const auto& secret_file = std::get<config_index("secret-file")>(picked)) {
        const auto& v = *secret_file;
        s.secret =
            read_secret_file(v.value, (v.origin.empty() ? std::string("the default") : v.origin) +
                                          "=\"" + v.text + "\"");
    } else if (auto text = env ? env("PETREL_SECRET") : std::nullopt) {
        s.secret = std::move(*text);
        check_secret(s.secret, "PETREL_SECRET");
    }
    const auto& tls_cert = std::get<config_index("tls-cert")>(picked);
    const auto& tls_key = std::get<config_index("tls-key")>(picked);
    const auto& tls_ca = std::get<config_index("tls-ca")>(picked);
    for (const auto* v : {&tls_cert, &tls_key, &tls_ca}) {
        if (*v && (*v)->value.empty()) {
            config_fail(**v, "empty (expected a PEM file)");
        }
        if (!*v && (tls_cert || tls_key || tls_ca)) {
            const auto& given = tls_cert ? *tls_cert : tls_key ? *tls_key : *tls_ca;
            config_fail(given, "given alone: TLS needs --tls-cert, --tls-key and --tls-ca");
        }
    }
    if (tls_cert) {
        s.tls = {tls_cert->value, tls_key->value, tls_ca->value};
    }
    if (const auto& ranks = std::get<config_index("tls-ranks")>(picked); ranks && ranks->value) {
        if (!tls_cert) {
            config_fail(*ranks, "needs TLS: give --tls-cert, --tls-key and --tls-ca too");
        }
        s.tls_ranks = true;
    }
    if (const auto& ckpt_root = std::get<config_index("checkpoint-root")>(picked)) {
        if (ckpt_root->value.empty()) {
            config_fail(*ckpt_root, "empty (expected a directory)");
        }
        s.checkpoint_root = std::filesystem::absolute(ckpt_root->value).lexically_normal().string();
    } else if (launched) {
        s.checkpoint_root = std::filesystem::current_path().string();
    }
    s.overridden = std::move(overridden);
    return s;
}

/// The settings returned with help when the others cannot be resolved: the defaults of a
/// process without a launcher.
[[nodiscard]] inline settings config_help_only(command_line cl) {
    settings s;
    s.help = true;
    s.rest = std::move(cl.rest);
    s.servers = 2;
    s.workers = 2;
    s.root = "127.0.0.1:0";
    s.bind = "127.0.0.1";
    s.advertise = "127.0.0.1";
    s.job_id = "petrel";
    s.roles = {node_role::manager, node_role::server, node_role::worker};
    std::vector<std::string> none;
    config_apply(s, config_pick_all(config{}, command_line{}, environment{}, none));
    s.replicas = 1;
    s.managers_here = 1;
    s.servers_here = 2;
    s.workers_here = 2;
    return s;
}

/// Appends `text` to `out`, wrapped at `width` columns, each line indented by `indent`.
inline void config_wrap(std::string& out, std::string_view text, std::size_t indent,
                        std::size_t width) {
    std::size_t column = 0;
    while (!text.empty()) {
        const auto space = text.find(' ');
        const std::string_view word = text.substr(0, space);
        text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
        if (column > 0 && column + 1 + word.size() > width) {
            out += '\n';
            column = 0;
        }
        if (column == 0) {
            out.append(indent, ' ');
            column = indent;
        } else {
            out += ' ';
            ++column;
        }
        out += word;
        column += word.size();
    }
    out += '\n';
}

} // namespace detail

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
[[nodiscard]] inline settings resolve(const config& program, int argc, const char* const* argv,
                                      const environment& env) {
    detail::command_line cl = detail::parse_command_line(argc, argv);
    if (cl.help) {
        try {
            return detail::config_resolve(program, cl, env);
        } catch (const config_error&) {
            return detail::config_help_only(std::move(cl));
        }
    }
    if (cl.error) {
        throw config_error(*cl.error);
    }
    return detail::config_resolve(program, cl, env);
}

/// `resolve` with the process environment.
[[nodiscard]] inline settings resolve(const config& program, int argc, const char* const* argv) {
    return resolve(program, argc, argv, process_environment());
}

/// The `--help` text: every option with its environment variable and default, the order of
/// precedence, and the launchers that are recognised.
///
/// @par Example
/// @code
/// if (s.help) {
///     std::cout << petrel::usage(argv[0]);
/// }
/// @endcode
[[nodiscard]] inline std::string usage(std::string_view program_name) {
    constexpr std::size_t width = 80;
    std::string out = "Usage: " + std::string(program_name) + " [Petrel options] [options]\n\n";
    detail::config_wrap(out,
                        "Petrel options. Each may also be set with its environment variable; "
                        "the command line wins over the environment (the log says what it "
                        "overrode). A setting the program fixes cannot be changed: an option "
                        "or variable that gives it another value is refused.",
                        0, width);
    out += '\n';
    for (const auto& o : detail::config_options()) {
        out += "  --" + std::string(o.name) + (o.value.empty() ? "" : " ") + std::string(o.value) +
               "   (" + std::string(o.variable) + ")\n";
        detail::config_wrap(out, o.help, 6, width);
    }
    out += "  -h, --help\n";
    detail::config_wrap(out, "Print this help and exit.", 6, width);
    out += '\n';
    detail::config_wrap(out,
                        "Launchers, recognised from the environment in this order (the first "
                        "that matches wins):",
                        0, width);
    const std::array<std::pair<std::string_view, std::string_view>, 6> launchers = {{
        {"petrel", "PETREL_RANK and PETREL_SIZE, set by hand or by a script; optionally "
                   "PETREL_LOCAL_RANK, PETREL_LOCAL_SIZE and PETREL_JOB_ID."},
        {"Open MPI", "mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, "
                     "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE."},
        {"PMI", "MPICH or Intel MPI mpiexec (Hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, "
                "MPI_LOCALNRANKS."},
        {"Slurm", "srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE."},
        {"Kubernetes", "an indexed Job: JOB_COMPLETION_INDEX, with PETREL_SIZE set to the "
                       "Job's completions."},
        {"none", "one process hosts the manager, the servers and the workers."},
    }};
    for (const auto& [name, text] : launchers) {
        out += "  " + std::string(name) + "\n";
        detail::config_wrap(out, text, 6, width);
    }
    return out;
}

} // namespace petrel
