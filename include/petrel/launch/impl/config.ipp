// Petrel: a process's settings resolved (see <petrel/launch/config.hpp>).
#ifndef PETREL_LAUNCH_IMPL_CONFIG_IPP
#define PETREL_LAUNCH_IMPL_CONFIG_IPP

#include <petrel/launch/config.hpp>
#include <petrel/launch/detail/config_options.hpp>
#include <petrel/launch/detail/config_values.hpp>
#include <petrel/launch/detail/secret_file.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace petrel {
namespace detail {

/// Decides what this process hosts: fills servers, workers, roles, *_here and first_*.
PETREL_DECL void config_plan(settings& s, const std::optional<config_value<std::uint32_t>>& servers,
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
PETREL_DECL settings config_resolve(const config& program, const command_line& cl,
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
PETREL_DECL settings config_help_only(command_line cl) {
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
PETREL_DECL void config_wrap(std::string& out, std::string_view text, std::size_t indent,
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

PETREL_DECL settings resolve(const config& program, int argc, const char* const* argv,
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

PETREL_DECL settings resolve(const config& program, int argc, const char* const* argv) {
    return resolve(program, argc, argv, process_environment());
}

PETREL_DECL std::string usage(std::string_view program_name) {
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

#endif // PETREL_LAUNCH_IMPL_CONFIG_IPP
