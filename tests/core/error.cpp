#include <petrel/core/error.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

using petrel::errc;

namespace {

const std::vector<errc> all_errors{
    errc::bad_magic,
    errc::unsupported_version,
    errc::header_too_large,
    errc::frame_too_large,
    errc::malformed_header,
    errc::segment_size_mismatch,
    errc::keys_not_sorted,
    errc::key_out_of_range,
    errc::value_count_mismatch,
    errc::bad_message_kind,
    errc::value_type_mismatch,
    errc::key_type_mismatch,
    errc::width_mismatch,
    errc::connection_closed,
    errc::timed_out,
    errc::shut_down,
    errc::no_server_for_key,
    errc::invalid_argument,
    errc::remote_error,
    errc::handler_failed,
    errc::out_of_memory,
    errc::node_failed,
    errc::job_mismatch,
    errc::job_full,
    errc::manager_unreachable,
    errc::backlog_full,
    errc::unknown_worker,
    errc::too_many_tables,
    errc::unknown_function,
    errc::checkpoint_failed,
    errc::malformed_payload,
    errc::key_cache_miss,
    errc::read_only,
    errc::stale_view,
    errc::data_lost,
    errc::not_permitted,
    errc::in_progress,
    errc::declaration_mismatch,
    errc::auth_failed,
    errc::tls_failed,
    errc::too_many_rows,
    errc::job_finished,
};

} // namespace

TEST_CASE("error: the category is named petrel and is a single object", "[core][error]") {
    CHECK(std::string(petrel::error_category().name()) == "petrel");
    CHECK(&petrel::error_category() == &petrel::error_category());
    CHECK(petrel::error_category() != std::generic_category());
}

TEST_CASE("error: codes are numbered from 1 without gaps", "[core][error]") {
    // Status fields on the wire carry these numbers; 0 means success.
    for (std::size_t i = 0; i < all_errors.size(); ++i) {
        CHECK(static_cast<int>(all_errors[i]) == static_cast<int>(i) + 1);
    }
    CHECK(static_cast<int>(errc::remote_error) == 19);
    CHECK(petrel::last_errc == all_errors.back());
}

TEST_CASE("error: every code has its own message", "[core][error]") {
    const auto& cat = petrel::error_category();
    const std::string fallback = cat.message(0);
    CHECK(fallback.find("unknown") != std::string::npos);
    CHECK(cat.message(9999).find("unknown") != std::string::npos);
    CHECK(cat.message(9999).find("9999") != std::string::npos);

    std::set<std::string> seen;
    for (errc e : all_errors) {
        const std::string text = cat.message(static_cast<int>(e));
        INFO("errc " << static_cast<int>(e) << ": " << text);
        CHECK_FALSE(text.empty());
        CHECK(text.find("unknown petrel error") == std::string::npos);
        CHECK(seen.insert(text).second);
    }
    CHECK(seen.size() == all_errors.size());
}

TEST_CASE("error: errc converts to std::error_code in the petrel category", "[core][error]") {
    STATIC_REQUIRE(std::is_error_code_enum_v<errc>);

    const std::error_code made = petrel::make_error_code(errc::timed_out);
    CHECK(made.value() == static_cast<int>(errc::timed_out));
    CHECK(&made.category() == &petrel::error_category());
    CHECK(made.message() == petrel::error_category().message(made.value()));
    CHECK(static_cast<bool>(made));

    const std::error_code implicit = errc::keys_not_sorted; // through make_error_code by ADL
    CHECK(implicit == petrel::make_error_code(errc::keys_not_sorted));
    CHECK(std::string(implicit.category().name()) == "petrel");

    std::error_code assigned;
    CHECK_FALSE(assigned);
    assigned = errc::shut_down;
    CHECK(assigned.value() == static_cast<int>(errc::shut_down));
}

TEST_CASE("error: codes compare with errc values", "[core][error]") {
    const std::error_code ec = petrel::make_error_code(errc::width_mismatch);
    CHECK(ec == errc::width_mismatch);
    CHECK(errc::width_mismatch == ec);
    CHECK(ec != errc::value_type_mismatch);
    CHECK_FALSE(std::error_code{} == errc::width_mismatch);

    // Same number, other category: not equal.
    const std::error_code generic(static_cast<int>(errc::width_mismatch), std::generic_category());
    CHECK(generic != errc::width_mismatch);
    CHECK(make_error_code(std::errc::timed_out) != errc::timed_out);
}

TEST_CASE("error: a system_error carries the code and its message", "[core][error]") {
    try {
        throw std::system_error(petrel::make_error_code(errc::no_server_for_key));
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::no_server_for_key);
        CHECK(std::string(e.what()).find("no server owns") != std::string::npos);
    }
}
