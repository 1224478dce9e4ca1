// Petrel: which launcher started this process, read from the environment.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace petrel {

/// A setting that cannot be used: a malformed or inconsistent environment variable,
/// command-line option or configuration field.
///
/// The message starts with "petrel: ", names the variable or option and its value, and
/// says what is allowed, e.g. `petrel: OMPI_COMM_WORLD_RANK="x": not a number`.
class config_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Reads one environment variable; nothing when unset.
///
/// Petrel reads its environment only through such a function, so tests and embedding
/// programs can supply their own (see `map_environment`).
using environment = std::function<std::optional<std::string>(std::string_view)>;

/// The process environment, read with `std::getenv` at each call.
///
/// @par Thread Safety
/// Safe to call from several threads as long as no thread modifies the environment.
[[nodiscard]] inline environment process_environment() {
    return [](std::string_view name) -> std::optional<std::string> {
        const std::string key(name);
        if (const char* value = std::getenv(key.c_str())) {
            return std::string(value);
        }
        return std::nullopt;
    };
}

/// An environment made of the given variables only; for tests and for programs that
/// take their settings from elsewhere.
///
/// @par Example
/// @code
/// auto env = petrel::map_environment({{"PETREL_RANK", "1"}, {"PETREL_SIZE", "4"}});
/// petrel::launch_info info = petrel::detect_launcher(env);   // petrel, rank 1 of 4
/// @endcode
[[nodiscard]] inline environment
map_environment(std::map<std::string, std::string, std::less<>> vars) {
    auto shared =
        std::make_shared<const std::map<std::string, std::string, std::less<>>>(std::move(vars));
    return [shared](std::string_view name) -> std::optional<std::string> {
        if (const auto it = shared->find(name); it != shared->end()) {
            return it->second;
        }
        return std::nullopt;
    };
}

/// The launchers Petrel recognises, in the order `detect_launcher` tries them (except
/// `embedded`, which is what remains when none matches).
enum class launcher_kind : std::uint8_t {
    embedded,   ///< no launcher: one process hosts the whole job
    petrel,     ///< PETREL_RANK and PETREL_SIZE set by hand or by a script
    open_mpi,   ///< Open MPI's mpirun / prterun (OMPI_COMM_WORLD_*)
    pmi,        ///< a PMI launcher: MPICH's or Intel MPI's mpiexec (Hydra) (PMI_RANK, PMI_SIZE)
    slurm,      ///< Slurm's srun (SLURM_PROCID, SLURM_NTASKS)
    kubernetes, ///< a Kubernetes indexed Job (JOB_COMPLETION_INDEX, with PETREL_SIZE)
};

/// "embedded", "petrel", "open_mpi", "pmi", "slurm" or "kubernetes".
[[nodiscard]] constexpr std::string_view to_string(launcher_kind k) noexcept {
    switch (k) {
    case launcher_kind::embedded:
        return "embedded";
    case launcher_kind::petrel:
        return "petrel";
    case launcher_kind::open_mpi:
        return "open_mpi";
    case launcher_kind::pmi:
        return "pmi";
    case launcher_kind::slurm:
        return "slurm";
    case launcher_kind::kubernetes:
        return "kubernetes";
    }
    return "unknown";
}

/// This process's place in the job, as its launcher reported it.
struct launch_info {
    launcher_kind kind = launcher_kind::embedded;
    /// This process's rank among all processes of the job, in `[0, size)`.
    std::uint32_t rank = 0;
    /// The number of processes in the job; at least 1.
    std::uint32_t size = 1;
    /// This process's rank among the processes on its host; 0 when the launcher does not say.
    std::uint32_t local_rank = 0;
    /// The number of processes on this host, when the launcher says.
    std::optional<std::uint32_t> local_size;
    /// The launcher's job id when it gives one, else empty.
    std::string job_id;
};

namespace detail {

/// Reads the launcher's variables and reports bad ones as `config_error`.
class launch_reader {
public:
    explicit launch_reader(const environment& env) : env_(env) {}

    [[nodiscard]] std::optional<std::string> text(std::string_view name) const {
        return env_ ? env_(name) : std::nullopt;
    }

    [[nodiscard]] bool has(std::string_view name) const { return text(name).has_value(); }

    /// The variable as a number, or nothing when unset.
    [[nodiscard]] std::optional<std::uint32_t> number(std::string_view name) const {
        const auto value = text(name);
        if (!value) {
            return std::nullopt;
        }
        return parse(name, *value);
    }

    /// The variable as a number; `config_error` when unset, naming `because` (the variable
    /// that selected this launcher).
    [[nodiscard]] std::uint32_t required(std::string_view name, std::string_view because) const {
        if (const auto n = number(name)) {
            return *n;
        }
        throw config_error("petrel: " + std::string(because) + " is set but " + std::string(name) +
                           " is not: the launcher's environment is " + "incomplete; set " +
                           std::string(name) + " as well");
    }

    [[noreturn]] void fail(std::string_view name, std::string_view problem) const {
        throw config_error("petrel: " + std::string(name) + "=\"" + text(name).value_or("") +
                           "\": " + std::string(problem));
    }

private:
    [[nodiscard]] std::uint32_t parse(std::string_view name, const std::string& value) const {
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
            fail(name, "not a number (expected a whole number written with digits only)");
        }
        std::uint32_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc{} || end != value.data() + value.size()) {
            fail(name, "too large (at most 4294967295)");
        }
        return n;
    }

    const environment& env_;
};

/// Checks the numbers of `info`; the names are the variables they were read from.
inline launch_info check_launch(const launch_reader& in, launch_info info,
                                std::string_view rank_name, std::string_view size_name,
                                std::string_view local_rank_name = {},
                                std::string_view local_size_name = {}) {
    if (info.size == 0) {
        in.fail(size_name, "must be at least 1");
    }
    if (info.rank >= info.size) {
        in.fail(rank_name, "must be less than " + std::string(size_name) + " (" +
                               std::to_string(info.size) + ")");
    }
    if (info.local_size) {
        if (*info.local_size == 0) {
            in.fail(local_size_name, "must be at least 1");
        }
        if (!local_rank_name.empty() && info.local_rank >= *info.local_size) {
            in.fail(local_rank_name, "must be less than " + std::string(local_size_name) + " (" +
                                         std::to_string(*info.local_size) + ")");
        }
    }
    return info;
}

} // namespace detail

/// Finds out which launcher started this process and where the process stands in the job.
///
/// The launchers are tried in this order; the first whose variables are set wins:
///
/// - **petrel**: `PETREL_RANK` and `PETREL_SIZE`; optionally `PETREL_LOCAL_RANK` (default 0),
///   `PETREL_LOCAL_SIZE` and `PETREL_JOB_ID`. Setting only one of the two is an error
///   (except `PETREL_SIZE` under a Kubernetes indexed job, below).
/// - **open_mpi**: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, and when set
///   `OMPI_COMM_WORLD_LOCAL_RANK` and `OMPI_COMM_WORLD_LOCAL_SIZE`; the job id is
///   `OMPI_MCA_ess_base_jobid`, else `PMIX_NAMESPACE`.
/// - **pmi** (MPICH and Intel MPI's Hydra): `PMI_RANK`, `PMI_SIZE`, and when set
///   `MPI_LOCALRANKID`, `MPI_LOCALNRANKS` and `PMI_KVSNAME` (the job id).
/// - **slurm**: `SLURM_PROCID`, `SLURM_NTASKS` (or `SLURM_NPROCS`), and when set
///   `SLURM_LOCALID`; the local size is `SLURM_NTASKS_PER_NODE` when it is a plain number;
///   the job id is `SLURM_JOB_ID.SLURM_STEP_ID` when both are set. Run the program with
///   `srun`: a batch script's own environment describes the whole allocation, not a step.
/// - **kubernetes**: `JOB_COMPLETION_INDEX` (an indexed Job) is the rank; `PETREL_SIZE`
///   must be set to the Job's completions; the job id is `PETREL_JOB_ID` when set.
/// - otherwise **embedded**: rank 0 of 1.
///
/// Numbers are whole decimal numbers written with digits only (no sign, no spaces).
///
/// @throws config_error naming the variable and its value when a number is malformed,
/// the size is 0, the rank is not below the size, the local rank is not below the local
/// size, or a launcher's variables are incomplete.
///
/// @par Example
/// @code
/// petrel::launch_info info = petrel::detect_launcher(petrel::process_environment());
/// if (info.kind == petrel::launcher_kind::embedded) {
///     // one process: host the manager, the servers and the workers here
/// }
/// @endcode
[[nodiscard]] inline launch_info detect_launcher(const environment& env) {
    const detail::launch_reader in(env);
    launch_info info;

    const bool petrel_rank = in.has("PETREL_RANK");
    const bool petrel_size = in.has("PETREL_SIZE");
    if (petrel_rank && petrel_size) {
        info.kind = launcher_kind::petrel;
        info.rank = *in.number("PETREL_RANK");
        info.size = *in.number("PETREL_SIZE");
        info.local_rank = in.number("PETREL_LOCAL_RANK").value_or(0);
        info.local_size = in.number("PETREL_LOCAL_SIZE");
        info.job_id = in.text("PETREL_JOB_ID").value_or("");
        return detail::check_launch(in, std::move(info), "PETREL_RANK", "PETREL_SIZE",
                                    "PETREL_LOCAL_RANK", "PETREL_LOCAL_SIZE");
    }
    if (petrel_rank || (petrel_size && !in.has("JOB_COMPLETION_INDEX"))) {
        throw config_error(std::string("petrel: ") +
                           (petrel_rank ? "PETREL_RANK is set but PETREL_SIZE is not"
                                        : "PETREL_SIZE is set but PETREL_RANK is not") +
                           ": set both PETREL_RANK (this process's rank, from 0) and "
                           "PETREL_SIZE (the number of processes), or neither");
    }

    if (in.has("OMPI_COMM_WORLD_RANK")) {
        info.kind = launcher_kind::open_mpi;
        info.rank = *in.number("OMPI_COMM_WORLD_RANK");
        info.size = in.required("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
        info.local_rank = in.number("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
        info.local_size = in.number("OMPI_COMM_WORLD_LOCAL_SIZE");
        info.job_id =
            in.text("OMPI_MCA_ess_base_jobid").value_or(in.text("PMIX_NAMESPACE").value_or(""));
        return detail::check_launch(in, std::move(info), "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_SIZE");
    }

    if (in.has("PMI_RANK")) {
        info.kind = launcher_kind::pmi;
        info.rank = *in.number("PMI_RANK");
        info.size = in.required("PMI_SIZE", "PMI_RANK");
        info.local_rank = in.number("MPI_LOCALRANKID").value_or(0);
        info.local_size = in.number("MPI_LOCALNRANKS");
        info.job_id = in.text("PMI_KVSNAME").value_or("");
        return detail::check_launch(in, std::move(info), "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                    "MPI_LOCALNRANKS");
    }

    if (in.has("SLURM_PROCID")) {
        info.kind = launcher_kind::slurm;
        info.rank = *in.number("SLURM_PROCID");
        const std::string_view size_name = in.has("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
        info.size = in.required(size_name, "SLURM_PROCID");
        info.local_rank = in.number("SLURM_LOCALID").value_or(0);
        // "2(x3),1" and the like describe uneven nodes: only a plain number is a local size.
        const auto per_node = in.text("SLURM_NTASKS_PER_NODE");
        if (per_node && !per_node->empty() &&
            per_node->find_first_not_of("0123456789") == std::string::npos) {
            info.local_size = in.number("SLURM_NTASKS_PER_NODE");
        }
        const auto job = in.text("SLURM_JOB_ID");
        const auto step = in.text("SLURM_STEP_ID");
        if (job && step) {
            info.job_id = *job + "." + *step;
        }
        return detail::check_launch(in, std::move(info), "SLURM_PROCID", size_name, "SLURM_LOCALID",
                                    "SLURM_NTASKS_PER_NODE");
    }

    if (in.has("JOB_COMPLETION_INDEX")) {
        info.kind = launcher_kind::kubernetes;
        info.rank = *in.number("JOB_COMPLETION_INDEX");
        if (!petrel_size) {
            throw config_error("petrel: JOB_COMPLETION_INDEX is set but PETREL_SIZE is not: "
                               "under a Kubernetes indexed job set PETREL_SIZE to the job's "
                               "completions");
        }
        info.size = *in.number("PETREL_SIZE");
        info.job_id = in.text("PETREL_JOB_ID").value_or("");
        return detail::check_launch(in, std::move(info), "JOB_COMPLETION_INDEX", "PETREL_SIZE");
    }

    return info;
}

} // namespace petrel
