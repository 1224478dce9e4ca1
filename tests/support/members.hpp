// Test support: members of a job in one process.
#pragma once

#include <petrel/cluster/member.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace petrel::test {

/// A member's options for job `job` at `root`, with a heartbeat every 100 ms and a
/// timeout of a second (tests notice a lost node quickly).
inline petrel::member_options member_options_of(std::string root, std::string job,
                                                petrel::node_role role, std::uint32_t rank,
                                                std::string address) {
    petrel::member_options o;
    o.root = std::move(root);
    o.job_id = std::move(job);
    o.role = role;
    o.rank = rank;
    o.address = std::move(address);
    o.heartbeat_interval = std::chrono::milliseconds(100);
    o.heartbeat_timeout = std::chrono::milliseconds(1000);
    return o;
}

} // namespace petrel::test
