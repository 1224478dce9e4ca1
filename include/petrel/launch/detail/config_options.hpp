// Petrel: its command-line options, and the command line split into them and the rest.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace petrel::detail {

/// One of Petrel's command-line options.
struct config_option {
    std::string_view name;     ///< without the leading "--"
    std::string_view value;    ///< what the value looks like, for messages and usage();
                               ///< empty for a flag, which takes none
    std::string_view variable; ///< the environment variable
    std::string_view help;     ///< what it sets, and its default
};

[[nodiscard]] constexpr std::array<config_option, 40> config_options() noexcept {
    return {{
        {"servers", "N", "PETREL_SERVERS",
         "Server nodes in the job. Default: 2 without a launcher; with one, half the "
         "processes (at least 1) in the dedicated layout, one per process in the colocated "
         "layout."},
        {"workers", "N", "PETREL_WORKERS",
         "Worker nodes in the job. Default: 2 without a launcher; with one, the processes "
         "that are not servers (dedicated) or one per process (colocated)."},
        {"layout", "dedicated|colocated", "PETREL_LAYOUT",
         "How processes share out the nodes: dedicated (one server or one worker per "
         "process, servers on the first ranks) or colocated (one server and one worker per "
         "process). Rank 0 also hosts the manager. Default: dedicated."},
        {"root", "host:port", "PETREL_ROOT",
         "The manager's address: where rank 0 listens and every other process connects; "
         "IPv6 as [::1]:port. Under Kubernetes, the headless service name of pod 0. Required "
         "with a launcher. Default without one: 127.0.0.1:0 (a free port)."},
        {"bind", "host", "PETREL_BIND",
         "The host this process listens on. Default: 127.0.0.1 without a launcher, 0.0.0.0 "
         "with one."},
        {"advertise", "host", "PETREL_ADVERTISE",
         "The host peers on other hosts use to reach this process. Default: the bind host; "
         "when that is 0.0.0.0 or ::, the root's host on rank 0 (or when the root is a "
         "loopback address), 127.0.0.1 when the launcher says all processes share one host, "
         "and otherwise it must be set."},
        {"job-id", "ID", "PETREL_JOB_ID",
         "The job's name, the same in all its processes. Default: the launcher's job id, "
         "else petrel."},
        {"roles", "manager,server,worker", "PETREL_ROLES",
         "The roles this process hosts, one node each, overriding the layout; needs a "
         "launcher and the --servers and --workers totals. Only rank 0 hosts the manager, "
         "and it must."},
        {"threads", "N", "PETREL_THREADS",
         "I/O threads per process. Default: the machine's hardware threads, at most 16."},
        {"heartbeat-interval", "MS", "PETREL_HEARTBEAT_INTERVAL",
         "Milliseconds between a node's heartbeats to the manager. Default: 200."},
        {"heartbeat-timeout", "MS", "PETREL_HEARTBEAT_TIMEOUT",
         "Milliseconds without a heartbeat before the manager declares a node dead; more "
         "than the heartbeat interval. Default: 2000."},
        {"startup-timeout", "MS", "PETREL_STARTUP_TIMEOUT",
         "Milliseconds to wait for the root and for all nodes to register. Default: 30000."},
        {"request-timeout", "MS", "PETREL_REQUEST_TIMEOUT",
         "Milliseconds a push, pull or control request may take. Default: 30000."},
        {"restore", "DIR", "PETREL_RESTORE",
         "A checkpoint directory (written by kv_store::save) whose tables the servers load "
         "before any worker starts, each keeping the keys it owns. Default: none."},
        {"replicas", "K", "PETREL_REPLICAS",
         "Copies of each key range besides its primary's, held by the next K servers of the "
         "ring; a push is acknowledged once they have applied it. Fewer than the servers. "
         "Default: 1 with at least 2 servers, else 0."},
        {"max-servers", "N", "PETREL_MAX_SERVERS",
         "Live servers the running job may grow to: a process started with --join server "
         "takes a share of the keys. Read by rank 0. Default: the job's servers."},
        {"max-workers", "N", "PETREL_MAX_WORKERS",
         "Live workers the running job may grow to: a process started with --join worker "
         "trains from the job's clock. Read by rank 0. Default: the job's workers."},
        {"join", "server|worker|manager", "PETREL_JOIN",
         "Start one node of this role that joins the running job at the root (which must be "
         "given) rather than take part in its start; give the job's --servers and --workers "
         "as well. A manager restarts the job's lost manager at the root and takes the "
         "running job over. Default: take part in the start."},
        {"standby", "host:port", "PETREL_STANDBY",
         "Where a standby manager listens: rank 1 starts one, and if the manager at the root "
         "is lost the nodes register again there and it takes the running job over. Needs a "
         "launcher and 2 processes or more. Default: none."},
        {"manager-grace", "MS", "PETREL_MANAGER_GRACE",
         "How long a node that lost its manager looks for one (restarted at the root, or the "
         "standby) while pushes and pulls go on; then its process fails. Default: 30000."},
        {"worker-failure", "fail|drop", "PETREL_WORKER_FAILURE",
         "What a worker that fails does to the job: fail it, or drop it and go on as if it had "
         "left (its data share goes to the others, nobody waits for it, the updates it had not "
         "pushed are lost). Read by the manager. Default: fail."},
        {"secret-file", "FILE", "PETREL_SECRET_FILE",
         "A file holding the job's secret (at least 16 bytes; a final line break is not part "
         "of it), the same for every process: each connection starts with a mutual proof of "
         "it and peers without it are refused. Or the secret itself in PETREL_SECRET. "
         "Default: none; a job without a launcher makes its own."},
        {"insecure", "", "PETREL_INSECURE",
         "Run a launched job without a secret, trusting every process that can reach its "
         "ports with the model (each process logs a warning). Without it, a launched job with "
         "no secret refuses to start."},
        {"tls-cert", "FILE", "PETREL_TLS_CERT",
         "This process's TLS certificate (PEM, the chain up to the authority): with --tls-key "
         "and --tls-ca, every connection runs mutual TLS and a peer without a certificate the "
         "authority signed is refused. Give every process of the job all three. Default: "
         "none (plain TCP)."},
        {"tls-key", "FILE", "PETREL_TLS_KEY", "The private key of --tls-cert (PEM)."},
        {"tls-ca", "FILE", "PETREL_TLS_CA",
         "The certificates (PEM) of the authority that signed every process's --tls-cert."},
        {"tls-ranks", "", "PETREL_TLS_RANKS",
         "Every process's --tls-cert names its rank (common name rank-N): the manager admits "
         "a server or worker only as the rank its certificate names, so no process can take "
         "another's place. Needs the --tls-* files."},
        {"checkpoint-root", "DIR", "PETREL_CHECKPOINT_ROOT",
         "The directory under which saves write checkpoints: a save names a relative "
         "directory without \"..\" under it, and any other is refused. Default: the "
         "working directory under a launcher; none without one."},
        {"max-connections", "N", "PETREL_MAX_CONNECTIONS",
         "Connections each listener of this process keeps at once; one more is closed at once "
         "and logged. Default: 4096."},
        {"max-connections-per-address", "N", "PETREL_MAX_CONNECTIONS_PER_ADDRESS",
         "Of those, from one peer address. Default: 512."},
        {"idle-timeout", "MS", "PETREL_IDLE_TIMEOUT",
         "Milliseconds after which an accepted connection on which nothing arrived is closed; "
         "more than the longest a pull may wait for a slow clock. Default: 0 (never)."},
        {"frame-timeout", "MS", "PETREL_FRAME_TIMEOUT",
         "Milliseconds a frame's header may take to arrive once begun, and a peer that does "
         "not read its queued replies may take to read some. Default: 30000; 0: no deadline."},
        {"max-receiving-bytes", "BYTES", "PETREL_MAX_RECEIVING_BYTES",
         "Bytes of frames this process's accepted connections receive at once, together "
         "(K, M, G, T: times 1024^1..4). Default: 2G; 0: no budget."},
        {"max-queued-reply-bytes", "BYTES", "PETREL_MAX_QUEUED_REPLY_BYTES",
         "Bytes of replies this process's accepted connections hold queued for peers, "
         "together; a peer holding more than its share is read no more until it takes some. "
         "Default: 2G; 0: no budget."},
        {"max-cached-key-bytes", "BYTES", "PETREL_MAX_CACHED_KEY_BYTES",
         "Bytes of key lists this process keeps for its peers to refer to, together. "
         "Default: 1G; 0: no budget beyond each connection's."},
        {"max-held-bytes", "BYTES", "PETREL_MAX_HELD_BYTES",
         "Bytes of pushes a table of a server holds back for their clock before it refuses "
         "more (each worker's share: twice an even one). Default: 1G."},
        {"max-tables-per-connection", "N", "PETREL_MAX_TABLES_PER_CONNECTION",
         "Tables the requests of one connection may create on a server. Default: 1024; 0: "
         "as many as a server holds (4096)."},
        {"max-rows-per-connection", "N", "PETREL_MAX_ROWS_PER_CONNECTION",
         "Rows (keys) the pushes of one connection may create on a server, over all tables "
         "(K, M, G, T: times 1024^1..4). Default: 256M; 0: no limit."},
        {"max-readers", "N", "PETREL_MAX_READERS",
         "Readers attached to the job at once; one more is refused. Read by the manager. "
         "Default: 64."},
        {"departed-grace", "MS", "PETREL_DEPARTED_GRACE",
         "Milliseconds a node that went stays in the job's view: a reader, or a server or "
         "worker that joined the running job (then the view leaves it out). Read by the "
         "manager. Default: 60000."},
    }};
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

/// The command line, split into Petrel's options and the rest.
struct command_line {
    /// Petrel's options by name (without "--"); the last occurrence wins.
    std::map<std::string, std::string, std::less<>> values;
    bool help = false;
    std::vector<std::string> rest;
    /// The first malformed Petrel option, reported unless help was asked for.
    std::optional<std::string> error{};
};

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
