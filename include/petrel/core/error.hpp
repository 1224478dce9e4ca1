// Petrel: error codes.
#pragma once

#include <string>
#include <system_error>
#include <type_traits>

namespace petrel {

/// Errors reported by Petrel, as `std::error_code` values in `petrel::error_category()`.
/// Their numbers are part of the wire format (the status of a reply).
///
/// Every failure of an operation completes it with one of these (or a system error
/// from the network). Messages say what happened and what to do about it.
enum class errc : int {
    // Wire format: a peer sent something that is not a valid Petrel frame.
    bad_magic = 1,
    unsupported_version,
    header_too_large,
    frame_too_large,
    malformed_header,
    segment_size_mismatch,
    keys_not_sorted,
    key_out_of_range,
    value_count_mismatch,
    bad_message_kind,
    // Requests a server cannot apply.
    value_type_mismatch,
    key_type_mismatch,
    width_mismatch,
    // Operations that did not complete.
    connection_closed,
    timed_out,
    shut_down,
    no_server_for_key,
    invalid_argument,
    remote_error,
    // Numbers travel in replies: new codes go at the end, existing ones never move.
    handler_failed,
    out_of_memory,
    // Cluster membership.
    node_failed,
    job_mismatch,
    job_full,
    manager_unreachable,
    // Consistency and remote functions.
    backlog_full,
    unknown_worker,
    too_many_tables,
    unknown_function,
    // Checkpoints.
    checkpoint_failed,
    // Traffic reduction.
    malformed_payload,
    key_cache_miss,
    // Worker groups.
    read_only,
    // Replication.
    stale_view,
    data_lost,
    not_permitted,
    // Elasticity.
    in_progress,
    // Cluster membership (continued).
    declaration_mismatch,
    // Authentication.
    auth_failed,
    tls_failed,
    too_many_rows,
    // Cluster membership (continued).
    job_finished,
};

/// The highest `errc` value; a reply status above it is reported as `remote_error`.
inline constexpr errc last_errc = errc::job_finished;

namespace detail {

class error_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "petrel"; }

    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
        case errc::bad_magic:
            return "frame does not start with Petrel's magic number: the peer is not a Petrel "
                   "node, runs a Petrel older than wire protocol 6, or the stream lost sync; "
                   "the connection is closed";
        case errc::unsupported_version:
            return "peer speaks another Petrel protocol version: run the same Petrel version on "
                   "every node";
        case errc::header_too_large:
            return "message header exceeds the configured limit (wire_limits::max_header_bytes); "
                   "the connection is closed";
        case errc::frame_too_large:
            return "frame exceeds the configured maximum size (wire_limits::max_frame_bytes): "
                   "raise the limit on the receiver or send smaller messages";
        case errc::malformed_header:
            return "message header could not be decoded: the peer sent corrupt data";
        case errc::segment_size_mismatch:
            return "payload segment sizes do not match the header's key count, value type and "
                   "width";
        case errc::keys_not_sorted:
            return "keys must be sorted in increasing order and unique: sort and deduplicate "
                   "them before the call";
        case errc::key_out_of_range:
            return "a key lies outside the key range of the message or of the server that owns "
                   "it";
        case errc::value_count_mismatch:
            return "the number of values does not equal keys x width: pass one row of `width` "
                   "values per key";
        case errc::bad_message_kind:
            return "unknown or unexpected message kind";
        case errc::value_type_mismatch:
            return "value type differs from the table's value type on the server: use one value "
                   "type per table id";
        case errc::key_type_mismatch:
            return "key type differs from the table's key type on the server: use one key type "
                   "per table id";
        case errc::width_mismatch:
            return "values per key (kv_store_options::width) differ from the table's width on "
                   "the server (its declared table_spec::width, or the width of its first "
                   "push): use one width per table id, or leave kv_store_options::width unset "
                   "to take the declared one";
        case errc::connection_closed:
            return "the connection to the peer closed before the operation completed";
        case errc::timed_out:
            return "the operation did not complete before its deadline: the peer may be "
                   "overloaded, unreachable or dead (see the request timeout option)";
        case errc::shut_down:
            return "the node was shut down before the operation completed";
        case errc::no_server_for_key:
            return "no server owns one of the keys: the configured server ranges do not cover it";
        case errc::invalid_argument:
            return "invalid argument";
        case errc::handler_failed:
            return "a message handler threw an exception; the connection was closed (see the "
                   "node's log)";
        case errc::out_of_memory:
            return "the server ran out of memory applying the request; nothing was applied";
        case errc::remote_error:
            return "the server reported an error it could not name";
        case errc::node_failed:
            return "a node of the cluster failed (no heartbeat within the timeout, or its "
                   "connection to the manager was lost); the node's log names it";
        case errc::job_mismatch:
            return "the peer belongs to another job: a node of an earlier job is still running "
                   "at that address, or the job ids differ (see PETREL_JOB_ID)";
        case errc::job_full:
            return "the job already has all the servers and workers it was started with";
        case errc::manager_unreachable:
            return "the manager (root address) could not be reached or stopped answering: "
                   "check PETREL_ROOT and that rank 0 is running";
        case errc::backlog_full:
            return "the server holds as many waiting requests (pushes held for their clock, "
                   "pulls waiting for slower workers) as its limits allow: call clock() once "
                   "per iteration and wait for pulls before pushing further ahead";
        case errc::unknown_worker:
            return "the worker index is not one of the server's workers (see "
                   "server_options::workers and kv_store_options::worker)";
        case errc::too_many_tables:
            return "the server already holds as many tables as server_options::max_tables "
                   "allows, or this connection created as many as "
                   "server_options::max_tables_per_connection allows";
        case errc::unknown_function:
            return "no remote function of that name is registered on the server: register it "
                   "in the function_registry of every process";
        case errc::checkpoint_failed:
            return "a checkpoint could not be written or read: the log names the file and the "
                   "reason (a full disk, a missing directory, a truncated or corrupted file)";
        case errc::malformed_payload:
            return "a compressed payload segment does not decode, or a key list does not match "
                   "its digest: the peer sent corrupt data; the connection is closed";
        case errc::key_cache_miss:
            return "the receiver does not hold the key list the request refers to (a new "
                   "connection, or evicted from its key cache); the sender sends the keys again";
        case errc::read_only:
            return "a reader (a worker of a read-only group) cannot push, tick a clock or leave "
                   "one: it only pulls";
        case errc::stale_view:
            return "the receiver's membership view does not place this replica update (or this "
                   "request) here: the sender and receiver disagree on the ring until the newer "
                   "view reaches both";
        case errc::data_lost:
            return "the server took over keys of failed servers of which it held no complete "
                   "copy (more servers failed at once than the tables have replicas): those "
                   "keys are lost, and the server refuses to serve a wrong model";
        case errc::not_permitted:
            return "the request may only come from a server of the job (a replica update "
                   "without the job's server secret): nothing was applied";
        case errc::in_progress:
            return "the change asked for has begun and takes more steps (a server without "
                   "replicas hands its key partitions over before it leaves): ask again once "
                   "they are done";
        case errc::declaration_mismatch:
            return "the node's process declares other tables or remote functions than the "
                   "job's other nodes (ids, key and value types, width, dense range, "
                   "initializer, aggregation, update rule and its parameters, function names): "
                   "declare the same ones in every process (config::tables, config::functions); "
                   "the node's log names the first difference";
        case errc::auth_failed:
            return "the peer did not prove that it knows the job's secret, or this node does "
                   "not know it (a different secret file, none given, or a peer that is not a "
                   "node of this job): the connection is closed and nothing was exchanged";
        case errc::tls_failed:
            return "the TLS handshake failed: the peer showed no certificate signed by this "
                   "node's authority (--tls-ca), or this node's was refused, or only one end "
                   "uses TLS (give every node of the job --tls-cert, --tls-key and --tls-ca): "
                   "the connection is closed and nothing was exchanged";
        case errc::too_many_rows:
            return "the requests of this connection created as many rows on the server as one "
                   "connection may (server_options::max_rows_per_connection): pushes that would "
                   "create more are refused whole, pushes to rows that exist go on";
        case errc::job_finished:
            return "the job finished: every server of the job left, so nothing holds these "
                   "keys any more (a reader of a finished job detaches; a new job restores "
                   "its model from a checkpoint)";
        }
        return "unknown petrel error " + std::to_string(ev);
    }
};

} // namespace detail

/// The category of Petrel's error codes; its name is "petrel".
inline const std::error_category& error_category() noexcept {
    static const detail::error_category_impl instance;
    return instance;
}

inline std::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), error_category()};
}

} // namespace petrel

template <>
struct std::is_error_code_enum<petrel::errc> : std::true_type {};
