// Petrel: every public header: what a trainer needs (<petrel/petrel.hpp>) and the parts it
// runs without naming them: the server, the manager, a node's membership, the transports,
// the frame format, server agents and readers' attachments.
#pragma once

#include <petrel/petrel.hpp>

#include <petrel/fwd.hpp>
#include <petrel/version.hpp>

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/core/log.hpp>
#include <petrel/core/vector_clock.hpp>

#include <petrel/wire/frame.hpp>
#include <petrel/wire/frame_decoder.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <petrel/transport/connection.hpp>
#include <petrel/transport/inproc_transport.hpp>
#include <petrel/transport/tcp_transport.hpp>
#include <petrel/transport/transport.hpp>

#include <petrel/consistency/clock_gate.hpp>
#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>

#include <petrel/server/checkpoint.hpp>
#include <petrel/server/initializer.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/server/updater.hpp>

#include <petrel/cluster/manager_node.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>

#include <petrel/launch/attachment.hpp>
#include <petrel/launch/config.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/run.hpp>
#include <petrel/launch/server_agent.hpp>

#include <petrel/kv_store.hpp>
