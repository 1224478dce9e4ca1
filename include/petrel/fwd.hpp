// Petrel: forward declarations of the public types. Includes only the key concept, so
// headers that merely name Petrel's types stay cheap to compile.
#pragma once

#include <petrel/core/key.hpp>

#include <cstdint>

namespace petrel {

template <key Key>
struct key_range;
template <key Key>
class vector_clock;
template <key Key, typename Value>
class kv_pairs;
template <key Key>
struct kv_store_options;

struct sequential;
struct eventual;
template <std::uint64_t Tau>
struct bounded_delay;
template <typename T>
class task;
struct clock_entry;

/// The default consistency model is `sequential`.
template <key Key, typename Value, typename Consistency = sequential>
class kv_store;

class shared_bytes;
class pooled_buffer;
class buffer_pool;
class connection;
struct connection_handlers;
struct transport_options;
class any_transport;
class tcp_transport;
class inproc_transport;
class inproc_hub;
struct server_options;
struct replication_plan;
class server_node;
class function_registry;
class table_registry;
struct table_spec;
struct initializer;
struct ring_options;
class ring;
struct node_info;
struct membership_view;
struct manager_options;
class manager_node;
struct member_options;
class member;
class worker_node;
struct data_set;
struct data_share;
struct block_schedule;
struct round_assignment;
struct attach_options;
class attachment;
struct config;
struct settings;

enum class errc : int;

namespace wire {
struct message_header;
struct message;
struct wire_limits;
class frame_decoder;
} // namespace wire

} // namespace petrel
