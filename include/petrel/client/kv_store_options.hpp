// Petrel: the options of a worker-side store (`kv_store`).
#pragma once

#include <petrel/cluster/ring.hpp>
#include <petrel/core/key.hpp>
#include <petrel/wire/compression_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace petrel {

template <key Key>
struct kv_store_options {
    /// Without a cluster: the servers' addresses. Keys are placed on them by a `ring`
    /// made from this list (in this order), as a job's manager would place them.
    /// Ignored when the store is made from a `worker_node` (the job's view decides).
    std::vector<std::string> servers{};
    /// The ring's shape, without a cluster.
    ring_options ring{};
    /// Which table of the servers this handle reads and writes.
    std::uint32_t table_id = 0;
    /// Values per key: 1 for scalars, the row length for embeddings. 0 (the default): the
    /// table's declared width (`table_spec::width`) for a store made from a worker of a
    /// job that declares the table, else 1. A width that contradicts the declaration is
    /// refused when the store is made.
    std::size_t width = 0;
    /// This node's id, written as the sender of its requests (a worker's own id when
    /// made from a `worker_node`).
    std::uint32_t node_id = 0;
    /// This worker's index in the servers' clocks, below `server_options::workers` (its
    /// rank among the job's workers when made from a `worker_node`).
    std::uint32_t worker = 0;
    /// Every push, pull, call and `clock()` completes by then, with `errc::timed_out` if
    /// no reply came (a worker's request timeout when made from a `worker_node`). It counts
    /// from the call, also while the request waits for this worker's own clock tick or for
    /// a view, and when it is sent again after a dropped connection.
    std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
    /// Key caching: a key list sent to a server before travels as a reference (a number
    /// and a digest) instead of the keys, on pushes and pulls alike. Pays when the same key
    /// sets repeat (a worker's mini-batches over its shard, its whole working set).
    bool key_caching = false;
    /// Bytes of key lists remembered per server (least recently used first out). Keep it
    /// at most the servers' `wire_limits::max_key_cache_bytes`, or references miss (and the
    /// keys are resent).
    std::size_t key_cache_bytes = std::size_t{32} << 20;
    /// Snappy compression of the keys and values this store sends, and of the values the
    /// servers send back for its pulls (see `wire::compression_options`); off by default.
    wire::compression_options compression{};
};

} // namespace petrel
