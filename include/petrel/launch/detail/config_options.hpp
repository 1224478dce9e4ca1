// Petrel: its command-line options as one table, from which the command line's parsing,
// `--help`, the environment variables' names, each value's parsing and checks, and the
// settings that need no more than a default are all derived.
#pragma once

#include <petrel/launch/detail/config_values.hpp>
#include <petrel/launch/io_threads.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel::detail {

/// What `config_resolve` does with an option's value.
enum class config_use : std::uint8_t {
    resolved, ///< read by `config_resolve`, which checks it against the others
    direct,   ///< the setting of the same name: the value, else the entry's default
    limit,    ///< the limit of the same name in `settings::limits`, when given
};

/// No default: the option is unset unless given.
struct config_no_default {};

/// The checks of a value once read: none, or that it is not 0.
struct config_no_check {
    template <typename T>
    void operator()(const config_value<T>&) const noexcept {}
};
struct config_at_least_one {
    template <typename T>
    void operator()(const config_value<T>& v) const {
        config_check_positive(v);
    }
};

/// One option: what the command line and the help say of it (`option`), its field in
/// `config` (and, for `direct` and `limit` ones, in `settings`: `field` reaches either),
/// how its text is read and then checked, and its default.
template <typename Field, typename Parse, typename Check, typename Default>
struct config_entry {
    config_option option;
    Field field;
    Parse parse;
    config_use use;
    Check check;
    Default fallback;
};

template <typename Field, typename Parse, typename Check = config_no_check,
          typename Default = config_no_default>
[[nodiscard]] constexpr config_entry<Field, Parse, Check, Default>
config_entry_of(config_option option, Field field, Parse parse, config_use use, Check check = {},
                Default fallback = {}) {
    return {option, field, parse, use, check, fallback};
}

/// Petrel's options, in the order `--help` lists them.
inline constexpr auto config_table = std::tuple{
    config_entry_of(
        {"servers", "N", "PETREL_SERVERS",
         "Server nodes in the job. Default: 2 without a launcher; with one, half the "
         "processes (at least 1) in the dedicated layout, one per process in the colocated "
         "layout."},
        [](auto& c) -> auto& { return c.servers; }, config_parse_count{}, config_use::resolved,
        config_at_least_one{}),
    config_entry_of(
        {"workers", "N", "PETREL_WORKERS",
         "Worker nodes in the job. Default: 2 without a launcher; with one, the processes "
         "that are not servers (dedicated) or one per process (colocated)."},
        [](auto& c) -> auto& { return c.workers; }, config_parse_count{}, config_use::resolved,
        config_at_least_one{}),
    config_entry_of(
        {"layout", "dedicated|colocated", "PETREL_LAYOUT",
         "How processes share out the nodes: dedicated (one server or one worker per "
         "process, servers on the first ranks) or colocated (one server and one worker per "
         "process). Rank 0 also hosts the manager. Default: dedicated."},
        [](auto& c) -> auto& { return c.layout; }, config_parse_layout{}, config_use::resolved),
    config_entry_of(
        {"root", "host:port", "PETREL_ROOT",
         "The manager's address: where rank 0 listens and every other process connects; "
         "IPv6 as [::1]:port. Under Kubernetes, the headless service name of pod 0. Required "
         "with a launcher. Default without one: 127.0.0.1:0 (a free port)."},
        [](auto& c) -> auto& { return c.root; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"bind", "host", "PETREL_BIND",
         "The host this process listens on. Default: 127.0.0.1 without a launcher, 0.0.0.0 "
         "with one."},
        [](auto& c) -> auto& { return c.bind; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"advertise", "host", "PETREL_ADVERTISE",
         "The host peers on other hosts use to reach this process. Default: the bind host; "
         "when that is 0.0.0.0 or ::, the root's host on rank 0 (or when the root is a "
         "loopback address), 127.0.0.1 when the launcher says all processes share one host, "
         "and otherwise it must be set."},
        [](auto& c) -> auto& { return c.advertise; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"job-id", "ID", "PETREL_JOB_ID",
         "The job's name, the same in all its processes. Default: the launcher's job id, "
         "else petrel."},
        [](auto& c) -> auto& { return c.job_id; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"roles", "manager,server,worker", "PETREL_ROLES",
         "The roles this process hosts, one node each, overriding the layout; needs a "
         "launcher and the --servers and --workers totals. Only rank 0 hosts the manager, "
         "and it must."},
        [](auto& c) -> auto& { return c.roles; }, config_parse_roles{}, config_use::resolved),
    config_entry_of(
        {"threads", "N", "PETREL_THREADS",
         "I/O threads per process. Default: the machine's hardware threads, at most 16."},
        [](auto& c) -> auto& { return c.threads; }, config_parse_count{}, config_use::direct,
        config_at_least_one{}, [] { return default_io_threads(); }),
    config_entry_of(
        {"heartbeat-interval", "MS", "PETREL_HEARTBEAT_INTERVAL",
         "Milliseconds between a node's heartbeats to the manager. Default: 200."},
        [](auto& c) -> auto& { return c.heartbeat_interval; }, config_parse_duration{},
        config_use::direct, config_at_least_one{}, [] { return std::chrono::milliseconds(200); }),
    config_entry_of(
        {"heartbeat-timeout", "MS", "PETREL_HEARTBEAT_TIMEOUT",
         "Milliseconds without a heartbeat before the manager declares a node dead; more "
         "than the heartbeat interval. Default: 2000."},
        [](auto& c) -> auto& { return c.heartbeat_timeout; }, config_parse_duration{},
        config_use::direct, config_at_least_one{}, [] { return std::chrono::milliseconds(2000); }),
    config_entry_of(
        {"startup-timeout", "MS", "PETREL_STARTUP_TIMEOUT",
         "Milliseconds to wait for the root and for all nodes to register. Default: 30000."},
        [](auto& c) -> auto& { return c.startup_timeout; }, config_parse_duration{},
        config_use::direct, config_at_least_one{}, [] { return std::chrono::milliseconds(30000); }),
    config_entry_of(
        {"request-timeout", "MS", "PETREL_REQUEST_TIMEOUT",
         "Milliseconds a push, pull or control request may take. Default: 30000."},
        [](auto& c) -> auto& { return c.request_timeout; }, config_parse_duration{},
        config_use::direct, config_at_least_one{}, [] { return std::chrono::milliseconds(30000); }),
    config_entry_of(
        {"restore", "DIR", "PETREL_RESTORE",
         "A checkpoint directory (written by kv_store::save) whose tables the servers load "
         "before any worker starts, each keeping the keys it owns. Default: none."},
        [](auto& c) -> auto& { return c.restore; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"replicas", "K", "PETREL_REPLICAS",
         "Copies of each key range besides its primary's, held by the next K servers of the "
         "ring; a push is acknowledged once they have applied it. Fewer than the servers. "
         "Default: 1 with at least 2 servers, else 0."},
        [](auto& c) -> auto& { return c.replicas; }, config_parse_whole{}, config_use::resolved),
    config_entry_of(
        {"max-servers", "N", "PETREL_MAX_SERVERS",
         "Live servers the running job may grow to: a process started with --join server "
         "takes a share of the keys. Read by rank 0. Default: the job's servers."},
        [](auto& c) -> auto& { return c.max_servers; }, config_parse_whole{}, config_use::resolved),
    config_entry_of(
        {"max-workers", "N", "PETREL_MAX_WORKERS",
         "Live workers the running job may grow to: a process started with --join worker "
         "trains from the job's clock. Read by rank 0. Default: the job's workers."},
        [](auto& c) -> auto& { return c.max_workers; }, config_parse_whole{}, config_use::resolved),
    config_entry_of(
        {"join", "server|worker|manager", "PETREL_JOIN",
         "Start one node of this role that joins the running job at the root (which must be "
         "given) rather than take part in its start; give the job's --servers and --workers "
         "as well. A manager restarts the job's lost manager at the root and takes the "
         "running job over. Default: take part in the start."},
        [](auto& c) -> auto& { return c.join; }, config_parse_join{}, config_use::resolved),
    config_entry_of(
        {"standby", "host:port", "PETREL_STANDBY",
         "Where a standby manager listens: rank 1 starts one, and if the manager at the root "
         "is lost the nodes register again there and it takes the running job over. Needs a "
         "launcher and 2 processes or more. Default: none."},
        [](auto& c) -> auto& { return c.standby; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"manager-grace", "MS", "PETREL_MANAGER_GRACE",
         "How long a node that lost its manager looks for one (restarted at the root, or the "
         "standby) while pushes and pulls go on; then its process fails. Default: 30000."},
        [](auto& c) -> auto& { return c.manager_grace; }, config_parse_duration{},
        config_use::direct, config_at_least_one{}, [] { return std::chrono::milliseconds(30000); }),
    config_entry_of(
        {"worker-failure", "fail|drop", "PETREL_WORKER_FAILURE",
         "What a worker that fails does to the job: fail it, or drop it and go on as if it had "
         "left (its data share goes to the others, nobody waits for it, the updates it had not "
         "pushed are lost). Read by the manager. Default: fail."},
        [](auto& c) -> auto& { return c.worker_failure; }, config_parse_worker_failure{},
        config_use::direct, config_no_check{}, [] { return petrel::worker_failure::fail; }),
    config_entry_of(
        {"secret-file", "FILE", "PETREL_SECRET_FILE",
         "A file holding the job's secret (at least 16 bytes; a final line break is not part "
         "of it), the same for every process: each connection starts with a mutual proof of "
         "it and peers without it are refused. Or the secret itself in PETREL_SECRET. "
         "Default: none; a job without a launcher makes its own."},
        [](auto& c) -> auto& { return c.secret_file; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"insecure", "", "PETREL_INSECURE",
         "Run a launched job without a secret, trusting every process that can reach its "
         "ports with the model (each process logs a warning). Without it, a launched job with "
         "no secret refuses to start."},
        [](auto& c) -> auto& { return c.insecure; }, config_parse_flag{}, config_use::direct,
        config_no_check{}, [] { return false; }),
    config_entry_of(
        {"tls-cert", "FILE", "PETREL_TLS_CERT",
         "This process's TLS certificate (PEM, the chain up to the authority): with --tls-key "
         "and --tls-ca, every connection runs mutual TLS and a peer without a certificate the "
         "authority signed is refused. Give every process of the job all three. Default: "
         "none (plain TCP)."},
        [](auto& c) -> auto& { return c.tls_cert; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"tls-key", "FILE", "PETREL_TLS_KEY", "The private key of --tls-cert (PEM)."},
        [](auto& c) -> auto& { return c.tls_key; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"tls-ca", "FILE", "PETREL_TLS_CA",
         "The certificates (PEM) of the authority that signed every process's --tls-cert."},
        [](auto& c) -> auto& { return c.tls_ca; }, config_parse_text{}, config_use::resolved),
    config_entry_of(
        {"tls-ranks", "", "PETREL_TLS_RANKS",
         "Every process's --tls-cert names its rank (common name rank-N): the manager admits "
         "a server or worker only as the rank its certificate names, so no process can take "
         "another's place. Needs the --tls-* files."},
        [](auto& c) -> auto& { return c.tls_ranks; }, config_parse_flag{}, config_use::resolved),
    config_entry_of(
        {"checkpoint-root", "DIR", "PETREL_CHECKPOINT_ROOT",
         "The directory under which saves write checkpoints: a save names a relative "
         "directory without \"..\" under it, and any other is refused. Default: the "
         "working directory under a launcher; none without one."},
        [](auto& c) -> auto& { return c.checkpoint_root; }, config_parse_text{},
        config_use::resolved),
    config_entry_of(
        {"max-connections", "N", "PETREL_MAX_CONNECTIONS",
         "Connections each listener of this process keeps at once; one more is closed at once "
         "and logged. Default: 4096."},
        [](auto& c) -> auto& { return c.limits.max_connections; }, config_parse_whole{},
        config_use::limit, config_at_least_one{}),
    config_entry_of(
        {"max-connections-per-address", "N", "PETREL_MAX_CONNECTIONS_PER_ADDRESS",
         "Of those, from one peer address. Default: 512."},
        [](auto& c) -> auto& { return c.limits.max_connections_per_address; }, config_parse_whole{},
        config_use::limit, config_at_least_one{}),
    config_entry_of(
        {"idle-timeout", "MS", "PETREL_IDLE_TIMEOUT",
         "Milliseconds after which an accepted connection on which nothing arrived is closed; "
         "more than the longest a pull may wait for a slow clock. Default: 0 (never)."},
        [](auto& c) -> auto& { return c.limits.idle_timeout; }, config_parse_duration{},
        config_use::limit),
    config_entry_of(
        {"frame-timeout", "MS", "PETREL_FRAME_TIMEOUT",
         "Milliseconds a frame's header may take to arrive once begun, and a peer that does "
         "not read its queued replies may take to read some. Default: 30000; 0: no deadline."},
        [](auto& c) -> auto& { return c.limits.frame_timeout; }, config_parse_duration{},
        config_use::limit),
    config_entry_of(
        {"max-receiving-bytes", "BYTES", "PETREL_MAX_RECEIVING_BYTES",
         "Bytes of frames this process's accepted connections receive at once, together "
         "(K, M, G, T: times 1024^1..4). Default: 2G; 0: no budget."},
        [](auto& c) -> auto& { return c.limits.max_receiving_bytes; }, config_parse_amount{},
        config_use::limit),
    config_entry_of(
        {"max-queued-reply-bytes", "BYTES", "PETREL_MAX_QUEUED_REPLY_BYTES",
         "Bytes of replies this process's accepted connections hold queued for peers, "
         "together; a peer holding more than its share is read no more until it takes some. "
         "Default: 2G; 0: no budget."},
        [](auto& c) -> auto& { return c.limits.max_queued_reply_bytes; }, config_parse_amount{},
        config_use::limit),
    config_entry_of(
        {"max-cached-key-bytes", "BYTES", "PETREL_MAX_CACHED_KEY_BYTES",
         "Bytes of key lists this process keeps for its peers to refer to, together. "
         "Default: 1G; 0: no budget beyond each connection's."},
        [](auto& c) -> auto& { return c.limits.max_cached_key_bytes; }, config_parse_amount{},
        config_use::limit),
    config_entry_of(
        {"max-held-bytes", "BYTES", "PETREL_MAX_HELD_BYTES",
         "Bytes of pushes a table of a server holds back for their clock before it refuses "
         "more (each worker's share: twice an even one). Default: 1G."},
        [](auto& c) -> auto& { return c.limits.max_held_bytes; }, config_parse_amount{},
        config_use::limit, config_at_least_one{}),
    config_entry_of(
        {"max-tables-per-connection", "N", "PETREL_MAX_TABLES_PER_CONNECTION",
         "Tables the requests of one connection may create on a server. Default: 1024; 0: "
         "as many as a server holds (4096)."},
        [](auto& c) -> auto& { return c.limits.max_tables_per_connection; }, config_parse_whole{},
        config_use::limit),
    config_entry_of(
        {"max-rows-per-connection", "N", "PETREL_MAX_ROWS_PER_CONNECTION",
         "Rows (keys) the pushes of one connection may create on a server, over all tables "
         "(K, M, G, T: times 1024^1..4). Default: 256M; 0: no limit."},
        [](auto& c) -> auto& { return c.limits.max_rows_per_connection; }, config_parse_amount{},
        config_use::limit),
    config_entry_of(
        {"max-readers", "N", "PETREL_MAX_READERS",
         "Readers attached to the job at once; one more is refused. Read by the manager. "
         "Default: 64."},
        [](auto& c) -> auto& { return c.limits.max_readers; }, config_parse_whole{},
        config_use::limit),
    config_entry_of(
        {"departed-grace", "MS", "PETREL_DEPARTED_GRACE",
         "Milliseconds a node that went stays in the job's view: a reader, or a server or "
         "worker that joined the running job (then the view leaves it out). Read by the "
         "manager. Default: 60000."},
        [](auto& c) -> auto& { return c.limits.departed_grace; }, config_parse_duration{},
        config_use::limit),
};

inline constexpr std::size_t config_option_count = std::tuple_size_v<decltype(config_table)>;

[[nodiscard]] constexpr std::array<config_option, config_option_count> config_options() noexcept {
    return std::apply(
        [](const auto&... e) {
            return std::array<config_option, config_option_count>{e.option...};
        },
        config_table);
}

[[nodiscard]] constexpr std::optional<config_option>
find_config_option(std::string_view name) noexcept {
    for (const auto& o : config_options()) {
        if (o.name == name) {
            return o;
        }
    }
    return std::nullopt;
}

/// The position of option `name` in the table; used as a template argument, a name that is
/// not an option does not compile.
[[nodiscard]] consteval std::size_t config_index(std::string_view name) {
    const auto options = config_options();
    for (std::size_t i = 0; i < options.size(); ++i) {
        if (options[i].name == name) {
            return i;
        }
    }
    throw "not one of Petrel's options";
}

/// Who may be asked to set what, for messages: "--servers (PETREL_SERVERS)".
[[nodiscard]] inline std::string config_ask(std::string_view name) {
    const config_option option = *find_config_option(name);
    return "--" + std::string(option.name) + " (" + std::string(option.variable) + ")";
}

/// Every option picked (`config_pick`) from the program's `config`, the command line and
/// the environment, in the table's order, each checked as its entry says: a tuple of
/// `std::optional<config_value<T>>`, one per option (`config_index`).
template <typename Config>
[[nodiscard]] auto config_pick_all(const Config& program, const command_line& cl,
                                   const environment& env, std::vector<std::string>& overridden) {
    const auto pick = [&](const auto& e) {
        auto v = config_pick(e.field(program), e.option, cl, env, overridden, e.parse);
        if (v) {
            e.check(*v);
        }
        return v;
    };
    // A braced list is evaluated in order: the first bad value in table order is reported.
    return std::apply([&](const auto&... e) { return std::tuple{pick(e)...}; }, config_table);
}

/// Option `I`'s value, else its default (for an option that has one).
template <std::size_t I, typename Picked>
[[nodiscard]] auto config_resolved(const Picked& picked) {
    return config_or(std::get<I>(picked), std::get<I>(config_table).fallback());
}

/// Sets the `direct` settings (the value given, else the default) and the `limit` ones
/// given in `s.limits`.
template <typename Settings, typename Picked>
void config_apply(Settings& s, const Picked& picked) {
    const auto apply = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
        constexpr auto use = std::get<I>(config_table).use;
        const auto& e = std::get<I>(config_table);
        if constexpr (use == config_use::direct) {
            static_assert(
                !std::is_same_v<std::remove_cvref_t<decltype(e.fallback)>, config_no_default>,
                "an option that sets its setting directly needs a default");
            e.field(s) = config_resolved<I>(picked).value;
        } else if constexpr (use == config_use::limit) {
            if (const auto& v = std::get<I>(picked)) {
                e.field(s) = v->value;
            }
        }
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (apply(std::integral_constant<std::size_t, I>{}), ...);
    }
    (std::make_index_sequence<config_option_count>{});
}

[[nodiscard]] inline command_line parse_command_line(int argc, const char* const* argv) {
    command_line out;
    if (argv == nullptr) {
        return out;
    }
    for (int i = 0; i < argc && argv[i] != nullptr; ++i) {
        const std::string_view arg = argv[i];
        if (i == 0) {
            out.rest.emplace_back(arg);
            continue;
        }
        if (arg == "--") {
            // Everything from "--" on is the program's, "--" included.
            for (; i < argc && argv[i] != nullptr; ++i) {
                out.rest.emplace_back(argv[i]);
            }
            break;
        }
        if (arg == "--help" || arg == "-h") {
            out.help = true;
            continue;
        }
        if (!arg.starts_with("--")) {
            out.rest.emplace_back(arg);
            continue;
        }
        std::string_view name = arg.substr(2);
        std::optional<std::string_view> value;
        if (const auto eq = name.find('='); eq != std::string_view::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        if (name == "secret") {
            // Other users of the host can read a command line: the value is not kept.
            if (!value && i + 1 < argc && argv[i + 1] != nullptr &&
                !std::string_view(argv[i + 1]).starts_with("--")) {
                ++i;
            }
            if (!out.error) {
                out.error = "petrel: --secret: give the job's secret in a file (--secret-file "
                            "FILE) or in PETREL_SECRET, not on the command line, where other "
                            "users of the host can read it";
            }
            continue;
        }
        const auto option = find_config_option(name);
        if (!option) {
            out.rest.emplace_back(arg);
            continue;
        }
        if (!value && option->value.empty()) {
            value = "1"; // a flag
        }
        if (!value) {
            if (i + 1 >= argc || argv[i + 1] == nullptr ||
                std::string_view(argv[i + 1]).starts_with("--")) {
                if (!out.error) {
                    out.error = "petrel: --" + std::string(name) + " needs a value (--" +
                                std::string(name) + " " + std::string(option->value) + " or --" +
                                std::string(name) + "=" + std::string(option->value) + ")";
                }
                continue;
            }
            value = argv[++i];
        }
        out.values.insert_or_assign(std::string(name), std::string(*value));
    }
    return out;
}

} // namespace petrel::detail
