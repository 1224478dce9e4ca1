// Petrel: a parameter server for distributed machine learning. The umbrella header of a
// trainer: declaring tables and update rules, configuring and running a job, and a
// worker's key-value store. The server, the manager and the transports that `run` starts
// are not included (`<petrel/all.hpp>` includes every public header).
#pragma once

#include <petrel/fwd.hpp>
#include <petrel/version.hpp>

#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/core/kv_pairs.hpp>
#include <petrel/core/log.hpp>
#include <petrel/core/vector_clock.hpp>

#include <petrel/consistency/policy.hpp>
#include <petrel/consistency/task.hpp>

#include <petrel/server/checkpoint.hpp>
#include <petrel/server/initializer.hpp>
#include <petrel/server/remote_function.hpp>
#include <petrel/server/table_registry.hpp>
#include <petrel/server/updater.hpp>

#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/cluster/worker_node.hpp>

#include <petrel/launch/config.hpp>
#include <petrel/launch/launcher.hpp>
#include <petrel/launch/run.hpp>

#include <petrel/kv_store.hpp>
