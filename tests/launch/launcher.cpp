#include <petrel/launch/launcher.hpp>

#include <catch2/catch.hpp>

#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

using petrel::config_error;
using petrel::detect_launcher;
using petrel::launcher_kind;
using petrel::map_environment;

namespace {

using vars = std::map<std::string, std::string, std::less<>>;

/// The config_error's message from detecting with `v`; empty when nothing is thrown.
std::string detect_error(vars v) {
    try {
        (void)detect_launcher(map_environment(std::move(v)));
    } catch (const config_error& e) {
        return e.what();
    }
    return {};
}

} // namespace

TEST_CASE("launcher: map_environment reads only its variables", "[launch]") {
    const auto env = map_environment({{"A", "1"}, {"EMPTY", ""}});
    CHECK(env("A") == std::optional<std::string>("1"));
    CHECK(env("EMPTY") == std::optional<std::string>(""));
    CHECK_FALSE(env("B").has_value());

    const auto copy = env;
    CHECK(copy("A") == std::optional<std::string>("1"));
}

TEST_CASE("launcher: process_environment reads the process's variables", "[launch]") {
    const auto env = petrel::process_environment();
    CHECK_FALSE(env("PETREL_TEST_SURELY_UNSET_VARIABLE_0123").has_value());
    CHECK(env("PATH").has_value());
}

TEST_CASE("launcher: config_error is an invalid_argument", "[launch]") {
    STATIC_REQUIRE(std::is_base_of_v<std::invalid_argument, config_error>);
}

TEST_CASE("launcher: to_string names every kind", "[launch]") {
    STATIC_REQUIRE(petrel::to_string(launcher_kind::embedded) == "embedded");
    CHECK(petrel::to_string(launcher_kind::petrel) == "petrel");
    CHECK(petrel::to_string(launcher_kind::open_mpi) == "open_mpi");
    CHECK(petrel::to_string(launcher_kind::pmi) == "pmi");
    CHECK(petrel::to_string(launcher_kind::slurm) == "slurm");
    CHECK(petrel::to_string(launcher_kind::kubernetes) == "kubernetes");
}

TEST_CASE("launcher: embedded when no launcher is set", "[launch]") {
    for (const auto& env :
         {map_environment({}), map_environment({{"HOME", "/root"}}), petrel::environment{}}) {
        const auto info = detect_launcher(env);
        CHECK(info.kind == launcher_kind::embedded);
        CHECK(info.rank == 0);
        CHECK(info.size == 1);
        CHECK(info.local_rank == 0);
        CHECK_FALSE(info.local_size.has_value());
        CHECK(info.job_id.empty());
    }
}

TEST_CASE("launcher: petrel variables", "[launch]") {
    SECTION("rank and size only") {
        const auto info =
            detect_launcher(map_environment({{"PETREL_RANK", "3"}, {"PETREL_SIZE", "4"}}));
        CHECK(info.kind == launcher_kind::petrel);
        CHECK(info.rank == 3);
        CHECK(info.size == 4);
        CHECK(info.local_rank == 0);
        CHECK_FALSE(info.local_size.has_value());
        CHECK(info.job_id.empty());
    }
    SECTION("with the optional variables") {
        const auto info = detect_launcher(map_environment({{"PETREL_RANK", "5"},
                                                           {"PETREL_SIZE", "8"},
                                                           {"PETREL_LOCAL_RANK", "1"},
                                                           {"PETREL_LOCAL_SIZE", "4"},
                                                           {"PETREL_JOB_ID", "exp-7"}}));
        CHECK(info.kind == launcher_kind::petrel);
        CHECK(info.rank == 5);
        CHECK(info.size == 8);
        CHECK(info.local_rank == 1);
        CHECK(info.local_size == 4u);
        CHECK(info.job_id == "exp-7");
    }
    SECTION("only one of the two is an error") {
        const auto rank_only = detect_error({{"PETREL_RANK", "0"}});
        CHECK_THAT(rank_only, Catch::Contains("PETREL_RANK") && Catch::Contains("PETREL_SIZE"));
        const auto size_only = detect_error({{"PETREL_SIZE", "2"}, {"PMI_RANK", "0"}});
        CHECK_THAT(size_only, Catch::Contains("PETREL_RANK") && Catch::Contains("PETREL_SIZE"));
    }
}

TEST_CASE("launcher: Open MPI", "[launch]") {
    SECTION("all variables") {
        const auto info = detect_launcher(map_environment({{"OMPI_COMM_WORLD_RANK", "6"},
                                                           {"OMPI_COMM_WORLD_SIZE", "8"},
                                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                           {"OMPI_MCA_ess_base_jobid", "1234"},
                                                           {"PMIX_NAMESPACE", "prterun-1"}}));
        CHECK(info.kind == launcher_kind::open_mpi);
        CHECK(info.rank == 6);
        CHECK(info.size == 8);
        CHECK(info.local_rank == 2);
        CHECK(info.local_size == 4u);
        CHECK(info.job_id == "1234");
    }
    SECTION("the job id falls back to PMIX_NAMESPACE") {
        const auto info = detect_launcher(map_environment({{"OMPI_COMM_WORLD_RANK", "0"},
                                                           {"OMPI_COMM_WORLD_SIZE", "2"},
                                                           {"PMIX_NAMESPACE", "prterun-1"}}));
        CHECK(info.kind == launcher_kind::open_mpi);
        CHECK(info.local_rank == 0);
        CHECK_FALSE(info.local_size.has_value());
        CHECK(info.job_id == "prterun-1");
    }
    SECTION("no job id") {
        const auto info = detect_launcher(
            map_environment({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
        CHECK(info.job_id.empty());
    }
    SECTION("a rank without a size is an error") {
        CHECK_THAT(detect_error({{"OMPI_COMM_WORLD_RANK", "1"}}),
                   Catch::Contains("OMPI_COMM_WORLD_SIZE"));
    }
}

TEST_CASE("launcher: PMI (MPICH, Intel MPI)", "[launch]") {
    SECTION("all variables") {
        const auto info = detect_launcher(map_environment({{"PMI_RANK", "3"},
                                                           {"PMI_SIZE", "4"},
                                                           {"MPI_LOCALRANKID", "1"},
                                                           {"MPI_LOCALNRANKS", "2"},
                                                           {"PMI_KVSNAME", "kvs_42_0"}}));
        CHECK(info.kind == launcher_kind::pmi);
        CHECK(info.rank == 3);
        CHECK(info.size == 4);
        CHECK(info.local_rank == 1);
        CHECK(info.local_size == 2u);
        CHECK(info.job_id == "kvs_42_0");
    }
    SECTION("rank and size only") {
        const auto info = detect_launcher(map_environment({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}));
        CHECK(info.kind == launcher_kind::pmi);
        CHECK(info.local_rank == 0);
        CHECK_FALSE(info.local_size.has_value());
        CHECK(info.job_id.empty());
    }
    SECTION("a rank without a size is an error") {
        CHECK_THAT(detect_error({{"PMI_RANK", "0"}}), Catch::Contains("PMI_SIZE"));
    }
}

TEST_CASE("launcher: Slurm", "[launch]") {
    SECTION("all variables") {
        const auto info = detect_launcher(map_environment({{"SLURM_PROCID", "5"},
                                                           {"SLURM_NTASKS", "8"},
                                                           {"SLURM_LOCALID", "1"},
                                                           {"SLURM_NTASKS_PER_NODE", "4"},
                                                           {"SLURM_JOB_ID", "991"},
                                                           {"SLURM_STEP_ID", "2"}}));
        CHECK(info.kind == launcher_kind::slurm);
        CHECK(info.rank == 5);
        CHECK(info.size == 8);
        CHECK(info.local_rank == 1);
        CHECK(info.local_size == 4u);
        CHECK(info.job_id == "991.2");
    }
    SECTION("SLURM_NPROCS when SLURM_NTASKS is unset") {
        const auto info = detect_launcher(
            map_environment({{"SLURM_PROCID", "2"}, {"SLURM_NPROCS", "3"}, {"SLURM_JOB_ID", "7"}}));
        CHECK(info.kind == launcher_kind::slurm);
        CHECK(info.rank == 2);
        CHECK(info.size == 3);
        CHECK(info.job_id.empty()); // a job id without a step id is not used
    }
    SECTION("a per-node count that is not a plain number is ignored") {
        const auto info = detect_launcher(map_environment({{"SLURM_PROCID", "0"},
                                                           {"SLURM_NTASKS", "7"},
                                                           {"SLURM_LOCALID", "0"},
                                                           {"SLURM_NTASKS_PER_NODE", "2(x3),1"}}));
        CHECK(info.kind == launcher_kind::slurm);
        CHECK_FALSE(info.local_size.has_value());
    }
    SECTION("a rank without a size is an error") {
        CHECK_THAT(detect_error({{"SLURM_PROCID", "0"}}), Catch::Contains("SLURM_NPROCS"));
    }
}

TEST_CASE("launcher: Kubernetes indexed job", "[launch]") {
    SECTION("index and PETREL_SIZE") {
        const auto info = detect_launcher(map_environment(
            {{"JOB_COMPLETION_INDEX", "2"}, {"PETREL_SIZE", "4"}, {"PETREL_JOB_ID", "train"}}));
        CHECK(info.kind == launcher_kind::kubernetes);
        CHECK(info.rank == 2);
        CHECK(info.size == 4);
        CHECK(info.local_rank == 0);
        CHECK(info.job_id == "train");
    }
    SECTION("PETREL_SIZE is required") {
        const auto what = detect_error({{"JOB_COMPLETION_INDEX", "0"}});
        CHECK_THAT(what, Catch::Contains("under a Kubernetes indexed job set PETREL_SIZE to the "
                                         "job's completions"));
    }
    SECTION("the index must be below PETREL_SIZE") {
        CHECK_THAT(detect_error({{"JOB_COMPLETION_INDEX", "4"}, {"PETREL_SIZE", "4"}}),
                   Catch::StartsWith("petrel: JOB_COMPLETION_INDEX=\"4\"") &&
                       Catch::Contains("PETREL_SIZE"));
    }
}

TEST_CASE("launcher: precedence", "[launch]") {
    const vars ompi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
    const vars pmi = {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}};
    const vars slurm = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}};
    const vars k8s = {{"JOB_COMPLETION_INDEX", "4"}};
    const auto with = [](std::initializer_list<vars> parts) {
        vars all;
        for (const auto& p : parts) {
            all.insert(p.begin(), p.end());
        }
        return detect_launcher(map_environment(all));
    };

    SECTION("PETREL_* over everything") {
        const auto info =
            with({{{"PETREL_RANK", "0"}, {"PETREL_SIZE", "9"}}, ompi, pmi, slurm, k8s});
        CHECK(info.kind == launcher_kind::petrel);
        CHECK(info.size == 9);
    }
    SECTION("Open MPI over PMI, Slurm and Kubernetes") {
        const auto info = with({ompi, pmi, slurm, k8s, {{"PETREL_SIZE", "9"}}});
        CHECK(info.kind == launcher_kind::open_mpi);
        CHECK(info.size == 2);
    }
    SECTION("PMI over Slurm and Kubernetes") {
        const auto info = with({pmi, slurm, k8s});
        CHECK(info.kind == launcher_kind::pmi);
        CHECK(info.size == 3);
    }
    SECTION("Slurm over Kubernetes") {
        const auto info = with({slurm, k8s});
        CHECK(info.kind == launcher_kind::slurm);
        CHECK(info.size == 4);
    }
}

TEST_CASE("launcher: malformed numbers name the variable and its value", "[launch]") {
    const auto bad = GENERATE(as<std::string>{}, "", "x", "-1", "+1", " 1", "1 ", "1.0", "0x10",
                              "1e3", "4294967296", "99999999999999999999");
    const bool too_large = bad == "4294967296" || bad == "99999999999999999999";
    const std::string problem = too_large ? "too large" : "not a number";

    const std::map<std::string, vars> cases = {
        {"PETREL_RANK", {{"PETREL_SIZE", "4"}}},
        {"PETREL_SIZE", {{"PETREL_RANK", "0"}}},
        {"PETREL_LOCAL_RANK", {{"PETREL_RANK", "0"}, {"PETREL_SIZE", "4"}}},
        {"PETREL_LOCAL_SIZE", {{"PETREL_RANK", "0"}, {"PETREL_SIZE", "4"}}},
        {"OMPI_COMM_WORLD_RANK", {{"OMPI_COMM_WORLD_SIZE", "4"}}},
        {"OMPI_COMM_WORLD_SIZE", {{"OMPI_COMM_WORLD_RANK", "0"}}},
        {"OMPI_COMM_WORLD_LOCAL_RANK",
         {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}}},
        {"OMPI_COMM_WORLD_LOCAL_SIZE",
         {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}}},
        {"PMI_RANK", {{"PMI_SIZE", "4"}}},
        {"PMI_SIZE", {{"PMI_RANK", "0"}}},
        {"MPI_LOCALRANKID", {{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}}},
        {"MPI_LOCALNRANKS", {{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}}},
        {"SLURM_PROCID", {{"SLURM_NTASKS", "4"}}},
        {"SLURM_NTASKS", {{"SLURM_PROCID", "0"}}},
        {"SLURM_NPROCS", {{"SLURM_PROCID", "0"}}},
        {"SLURM_LOCALID", {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}},
        {"JOB_COMPLETION_INDEX", {{"PETREL_SIZE", "4"}}},
    };
    for (const auto& [name, others] : cases) {
        CAPTURE(name, bad);
        vars env = others;
        env[name] = bad;
        const auto what = detect_error(env);
        CHECK_THAT(what, Catch::StartsWith("petrel: " + name + "=\"" + bad + "\": " + problem));
    }
    SECTION("PETREL_SIZE under Kubernetes") {
        CHECK_THAT(detect_error({{"JOB_COMPLETION_INDEX", "0"}, {"PETREL_SIZE", bad}}),
                   Catch::StartsWith("petrel: PETREL_SIZE=\"" + bad + "\": " + problem));
    }
}

TEST_CASE("launcher: numbers at the limits", "[launch]") {
    const auto info = detect_launcher(
        map_environment({{"PETREL_RANK", "4294967294"}, {"PETREL_SIZE", "4294967295"}}));
    CHECK(info.rank == 4294967294u);
    CHECK(info.size == 4294967295u);

    const auto padded =
        detect_launcher(map_environment({{"PMI_RANK", "007"}, {"PMI_SIZE", "0010"}}));
    CHECK(padded.rank == 7);
    CHECK(padded.size == 10);
}

TEST_CASE("launcher: sizes and ranks out of range name the variable", "[launch]") {
    const auto check = [](vars env, const std::string& prefix, const std::string& mention) {
        CAPTURE(prefix);
        CHECK_THAT(detect_error(std::move(env)),
                   Catch::StartsWith(prefix) && Catch::Contains(mention));
    };

    check({{"PETREL_RANK", "0"}, {"PETREL_SIZE", "0"}}, "petrel: PETREL_SIZE=\"0\"", "at least 1");
    check({{"PETREL_RANK", "4"}, {"PETREL_SIZE", "4"}}, "petrel: PETREL_RANK=\"4\"",
          "PETREL_SIZE (4)");
    check({{"PETREL_RANK", "0"},
           {"PETREL_SIZE", "4"},
           {"PETREL_LOCAL_RANK", "2"},
           {"PETREL_LOCAL_SIZE", "2"}},
          "petrel: PETREL_LOCAL_RANK=\"2\"", "PETREL_LOCAL_SIZE (2)");
    check({{"PETREL_RANK", "0"}, {"PETREL_SIZE", "4"}, {"PETREL_LOCAL_SIZE", "0"}},
          "petrel: PETREL_LOCAL_SIZE=\"0\"", "at least 1");
    check({{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
          "petrel: OMPI_COMM_WORLD_RANK=\"9\"", "OMPI_COMM_WORLD_SIZE (2)");
    check({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}},
          "petrel: OMPI_COMM_WORLD_SIZE=\"0\"", "at least 1");
    check({{"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "2"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
          "petrel: OMPI_COMM_WORLD_LOCAL_RANK=\"1\"", "OMPI_COMM_WORLD_LOCAL_SIZE (1)");
    check({{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}}, "petrel: PMI_RANK=\"3\"", "PMI_SIZE (3)");
    check(
        {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "5"}, {"MPI_LOCALNRANKS", "2"}},
        "petrel: MPI_LOCALRANKID=\"5\"", "MPI_LOCALNRANKS (2)");
    check({{"SLURM_PROCID", "8"}, {"SLURM_NTASKS", "8"}}, "petrel: SLURM_PROCID=\"8\"",
          "SLURM_NTASKS (8)");
    check({{"SLURM_PROCID", "1"}, {"SLURM_NPROCS", "1"}}, "petrel: SLURM_PROCID=\"1\"",
          "SLURM_NPROCS (1)");
    check({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}, "petrel: SLURM_NTASKS=\"0\"",
          "at least 1");
    check({{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "8"},
           {"SLURM_LOCALID", "4"},
           {"SLURM_NTASKS_PER_NODE", "4"}},
          "petrel: SLURM_LOCALID=\"4\"", "SLURM_NTASKS_PER_NODE (4)");
    check({{"JOB_COMPLETION_INDEX", "0"}, {"PETREL_SIZE", "0"}}, "petrel: PETREL_SIZE=\"0\"",
          "at least 1");
}
