// Petrel: the bodies of its non-template parts, for the one translation unit that compiles
// them (see <petrel/core/config.hpp>).
#pragma once

#include <petrel/core/config.hpp>

#if PETREL_HEADER_ONLY
#error Define PETREL_SEPARATE_COMPILATION to compile <petrel/impl/src.hpp>
#endif

#include <petrel/client/impl/call_op.ipp>
#include <petrel/client/impl/checkpoint_save.ipp>
#include <petrel/client/impl/pull_op.ipp>
#include <petrel/client/impl/push_op.ipp>
#include <petrel/client/impl/resender.ipp>
#include <petrel/client/impl/router.ipp>
#include <petrel/client/impl/send_pipeline.ipp>
#include <petrel/client/impl/server_links.ipp>
#include <petrel/client/impl/slices.ipp>
#include <petrel/client/impl/store_core.ipp>
#include <petrel/client/impl/worker_gate.ipp>
#include <petrel/cluster/impl/manager_node.ipp>
#include <petrel/cluster/impl/member.ipp>
#include <petrel/core/impl/checksum.ipp>
#include <petrel/launch/impl/config.ipp>
#include <petrel/launch/impl/run.ipp>
#include <petrel/launch/impl/server_agent.ipp>
#include <petrel/server/impl/checkpoint_file.ipp>
#include <petrel/server/impl/checkpoint_format.ipp>
#include <petrel/server/impl/checkpoint_manifest_io.ipp>
#include <petrel/server/impl/server_node.ipp>
#include <petrel/server/impl/table_factory.ipp>
#include <petrel/transport/impl/credential.ipp>
#include <petrel/transport/impl/handshake.ipp>
#include <petrel/transport/impl/inproc_transport.ipp>
#include <petrel/transport/impl/request_link.ipp>
#include <petrel/transport/impl/tcp_connection.ipp>
#include <petrel/transport/impl/tcp_stream.ipp>
#include <petrel/transport/impl/tcp_transport.ipp>
#include <petrel/wire/impl/compression.ipp>
