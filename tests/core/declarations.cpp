#include <petrel/core/declarations.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>

using petrel::declarations;
using petrel::first_difference;
using petrel::table_declaration;

namespace {

table_declaration table(std::uint32_t id, std::string width, std::string rule) {
    return {id, {{"width", std::move(width)}, {"update rule", std::move(rule)}}};
}

} // namespace

TEST_CASE("declarations: equal declarations have no difference", "[core][declarations]") {
    const declarations a{{table(0, "16", "sum"), table(3, "1", "adam{eta=0.001}")}, {"f", "g"}};
    CHECK(first_difference(a, a).empty());
    CHECK(first_difference(declarations{}, declarations{}).empty());
    CHECK(a == a);
}

TEST_CASE("declarations: the first differing table and field is named with both values",
          "[core][declarations]") {
    const declarations job{{table(0, "16", "adagrad{eta=0.1}"), table(2, "16", "sum")}, {}};
    declarations here = job;
    here.tables[1].fields[0].second = "32";
    here.tables[0].fields[1].second = "sgd{eta=0.01}";
    // Tables by increasing id, fields in order: table 0's rule comes first.
    CHECK(first_difference(here, job) ==
          "table 0: update rule is sgd{eta=0.01} on this node but adagrad{eta=0.1} on the job's "
          "other nodes");
    here.tables[0] = job.tables[0];
    CHECK(first_difference(here, job) ==
          "table 2: width is 32 on this node but 16 on the job's other nodes");
}

TEST_CASE("declarations: a table or function declared on one side only is named",
          "[core][declarations]") {
    const declarations job{{table(0, "1", "sum"), table(2, "1", "sum")}, {"norm"}};
    declarations extra = job;
    extra.tables.push_back(table(3, "1", "sum"));
    CHECK(first_difference(extra, job) ==
          "table 3 is declared on this node but not on the job's other nodes");
    CHECK(first_difference(job, extra) ==
          "table 3 is declared on the job's other nodes but not on this node");

    declarations missing = job;
    missing.tables.erase(missing.tables.begin());
    CHECK(first_difference(missing, job) ==
          "table 0 is declared on the job's other nodes but not on this node");

    declarations field_less = job;
    field_less.tables[1].fields.pop_back();
    CHECK(first_difference(field_less, job) ==
          "table 2: update rule is sum on the job's other nodes but not given on this node");
    CHECK(first_difference(job, field_less) ==
          "table 2: update rule is sum on this node but not given on the job's other nodes");

    declarations more_functions = job;
    more_functions.functions = {"clip", "norm"};
    CHECK(first_difference(more_functions, job) ==
          "remote function 'clip' is registered on this node but not on the job's other nodes");
    CHECK(first_difference(declarations{job.tables, {}}, job) ==
          "remote function 'norm' is registered on the job's other nodes but not on this node");
}

TEST_CASE("declarations: numbers are written in their shortest exact form",
          "[core][declarations]") {
    CHECK(petrel::detail::number_text(0.01) == "0.01");
    CHECK(petrel::detail::number_text(0.0) == "0");
    CHECK(petrel::detail::number_text(1e-8) == "1e-08");
    CHECK(petrel::detail::number_text(0.1 + 0.2) != petrel::detail::number_text(0.3));
}
