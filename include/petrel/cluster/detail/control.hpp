// Petrel: the control messages between nodes and the manager.
#pragma once

#include <petrel/cluster/detail/text.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/view.hpp>
#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/declarations.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/detail/streambuf.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cereal/archives/binary.hpp>
#include <cereal/cereal.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel::detail {

/// What a control message asks or tells. Numbers are fixed: they are on the wire.
enum class control_op : std::uint8_t {
    join = 1,      ///< node → manager: register; answered with the node's id and the view
    heartbeat = 2, ///< node → manager: still alive; answered with the view's version
    view = 3,      ///< manager → node, unsolicited: a new membership view
    barrier = 4,   ///< node → manager: arrived; answered when the group has arrived
    leave = 5,     ///< node → manager: done, or failed (`text`: why); answered once recorded
    assign = 6,    ///< worker → manager: define a data set; answered with the new view
    round = 7,     ///< worker → manager: ready for the next round of a block schedule
    retire = 8,    ///< server → manager: leave, its keys handed to their replicas
    ready = 9,     ///< joining server → manager: its copies arrived under view `version`
    /// node → manager: server `id` refuses this node's connections or does not answer
    /// (`text`: what the node saw); answered once recorded. The manager tries the
    /// server's address itself and declares it failed if it cannot connect either.
    unreachable = 10,
};

template <class Archive, typename T>
void save_optional(Archive& ar, const std::optional<T>& v) {
    const bool has = v.has_value();
    ar(has);
    if (has) {
        ar(*v);
    }
}

template <class Archive, typename T>
void load_optional(Archive& ar, std::optional<T>& v) {
    if (load_flag(ar)) {
        v.emplace();
        ar(*v);
    }
}

/// Writes a node's declarations (see `petrel::declarations`).
template <class Archive>
void save_declarations(Archive& ar, const declarations& d) {
    ar(static_cast<std::uint32_t>(d.tables.size()));
    for (const auto& t : d.tables) {
        ar(t.id, static_cast<std::uint32_t>(t.fields.size()));
        for (const auto& [name, value] : t.fields) {
            save_text(ar, name);
            save_text(ar, value);
        }
    }
    ar(static_cast<std::uint32_t>(d.functions.size()));
    for (const auto& f : d.functions) {
        save_text(ar, f);
    }
}

/// Reads declarations, refusing counts above `declarations`' limits before allocating;
/// what it holds grows with the bytes actually read.
template <class Archive>
void load_declarations(Archive& ar, declarations& d) {
    d = {};
    const auto tables = load_count(ar, declarations::max_tables, "declared tables");
    for (std::uint32_t i = 0; i < tables; ++i) {
        table_declaration t;
        ar(t.id);
        const auto fields = load_count(ar, declarations::max_fields, "fields of a table");
        for (std::uint32_t k = 0; k < fields; ++k) {
            std::pair<std::string, std::string> f;
            load_text(ar, f.first);
            load_text(ar, f.second);
            t.fields.push_back(std::move(f));
        }
        d.tables.push_back(std::move(t));
    }
    const auto functions = load_count(ar, declarations::max_functions, "remote functions");
    for (std::uint32_t i = 0; i < functions; ++i) {
        std::string f;
        load_text(ar, f);
        d.functions.push_back(std::move(f));
    }
}

/// `text` on one line, for a failure that travels in views and ends in logs: line breaks
/// become "; " (none at either end) and any other control character a space.
[[nodiscard]] inline std::string one_line(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool pending_break = false;
    for (const char ch : text) {
        if (ch == '\n' || ch == '\r') {
            pending_break = !out.empty();
            continue;
        }
        if (pending_break) {
            out += "; ";
            pending_break = false;
        }
        out += static_cast<unsigned char>(ch) < 0x20 || ch == '\x7f' ? ' ' : ch;
    }
    return out;
}

/// The version of the encoding of `control_body` (its Cereal class version, written
/// before its fields). A newer version only appends fields: a reader of an older one
/// reads the fields it knows and leaves the rest unread. Version 2 appended `key`,
/// version 3 `barrier_seq` and `passed_barriers`; an older body is read without them.
inline constexpr std::uint32_t control_body_version = 3;

/// The body of a control message or reply; which fields matter depends on `op`.
struct control_body {
    control_op op = control_op::heartbeat;
    std::string job_id;
    // join
    node_role role = node_role::worker;
    std::uint32_t rank = 0;
    std::uint32_t local = 0;
    std::string address;
    std::string worker_group; ///< join: the worker group (readers: their read-only group)
    // barrier
    group barrier_group = group::all;
    /// barrier: the node's number for this barrier of its group: 1 for its first, counted
    /// on from `passed_barriers` of its join reply (0: not numbered, from a node of an
    /// older version). A manager that took the job over learns from it which barriers the
    /// old manager released (version 3 on).
    std::uint64_t barrier_seq = 0;
    // replies and view pushes
    node_id id = no_node;
    std::uint64_t version = 0;
    std::string text; ///< failed replies: what went wrong, for the node's log; leave: why
                      ///< the node failed (none: it is done)
    /// join replies to servers only: the job's server secret, which marks the updates
    /// servers send each other (replication) so that no other node can forge them.
    std::uint64_t secret = 0;
    std::optional<membership_view> view;
    // the scheduler
    std::optional<data_set> data;          ///< assign
    std::optional<block_schedule> blocks;  ///< round
    std::optional<round_assignment> round; ///< round replies
    /// join: what the node's process declares (tables, remote functions); none from a
    /// node that declares nothing (it is not compared).
    std::optional<declarations> declared;
    /// join replies: the node's own key; a join as a known node (`id` set): the key it
    /// was given (version 2 on).
    node_key key{};
    /// join replies to a node joining a running job: the barriers each group (`all`,
    /// `servers`, `workers`) has passed, from which the node numbers its own (version 3
    /// on).
    std::array<std::uint64_t, 3> passed_barriers{};
    /// The version of the encoding this body was read from (`control_body_version` for
    /// one made here); not sent.
    std::uint32_t read_version = control_body_version;

    template <class Archive>
    void save(Archive& ar, std::uint32_t /*version*/) const {
        ar(op, role, rank, local, barrier_group, id, version, secret);
        save_text(ar, job_id);
        save_text(ar, address);
        save_text(ar, text);
        save_text(ar, worker_group);
        save_optional(ar, view);
        save_optional(ar, data);
        save_optional(ar, blocks);
        save_optional(ar, round);
        const bool has_declared = declared.has_value();
        ar(has_declared);
        if (has_declared) {
            save_declarations(ar, *declared);
        }
        ar(key[0], key[1]);
        ar(barrier_seq, passed_barriers[0], passed_barriers[1], passed_barriers[2]);
    }

    template <class Archive>
    void load(Archive& ar, std::uint32_t encoding) {
        if (encoding < 1) {
            throw std::domain_error("a control body of an unknown older encoding");
        }
        read_version = encoding;
        ar(op, role, rank, local, barrier_group, id, version, secret);
        load_text(ar, job_id);
        load_text(ar, address);
        load_text(ar, text);
        load_text(ar, worker_group);
        load_optional(ar, view);
        load_optional(ar, data);
        load_optional(ar, blocks);
        load_optional(ar, round);
        if (load_flag(ar)) {
            declared.emplace();
            load_declarations(ar, *declared);
        }
        if (encoding >= 2) {
            ar(key[0], key[1]);
        }
        if (encoding >= 3) {
            ar(barrier_seq, passed_barriers[0], passed_barriers[1], passed_barriers[2]);
        }
        if (op < control_op::join || op > control_op::unreachable || role < node_role::manager ||
            role > node_role::reader || barrier_group < group::all ||
            barrier_group > group::workers) {
            throw std::domain_error("unknown control operation, role or group");
        }
    }
};

/// Whether a peer admitted with a reader's credential (`access::read_only`) may ask for
/// `b`: a join as a new reader, heartbeats, and its own leave (a leave names no node: its
/// connection does). Joins as a worker or a server, re-registration as a known node,
/// barriers, reports of unreachable nodes, data sets and rounds are refused.
[[nodiscard]] inline bool read_only_may_send(const control_body& b) noexcept {
    switch (b.op) {
    case control_op::join:
        return b.role == node_role::reader && b.id == no_node;
    case control_op::heartbeat:
    case control_op::leave:
        return true;
    default:
        return false;
    }
}

/// A control request (or, with `reply_to`, its reply) carrying `body`. A failed reply
/// (`status` set) carries its body too, so that its text reaches the node's log.
[[nodiscard]] inline wire::message make_control(const control_body& body,
                                                const wire::message_header* reply_to = nullptr,
                                                std::error_code status = {}) {
    auto bytes = std::make_shared<std::vector<std::byte>>();
    {
        wire::detail::vector_sink sink(*bytes);
        std::ostream out(&sink);
        cereal::BinaryOutputArchive ar(out);
        ar(body);
    }
    wire::message m;
    if (reply_to) {
        m = wire::make_reply(*reply_to, wire::message_kind::control_reply);
        m.header.key_count = 0;
    } else {
        m.header.kind = wire::message_kind::control;
    }
    m.header.status = static_cast<std::uint32_t>(
        status ? (status.category() == error_category() ? status.value()
                                                        : static_cast<int>(errc::remote_error))
               : 0);
    {
        const std::byte* p = bytes->data();
        const std::size_t n = bytes->size();
        m.set_segment(wire::values_segment,
                      shared_bytes(std::shared_ptr<const void>(std::move(bytes), p),
                                   std::span<const std::byte>(p, n)));
    }
    return m;
}

/// Reads a control body; nothing when the bytes are not a valid one.
[[nodiscard]] inline std::optional<control_body> read_control(const wire::message& m) {
    if (m.header.kind != wire::message_kind::control &&
        m.header.kind != wire::message_kind::control_reply) {
        return std::nullopt;
    }
    const auto bytes = m.values();
    try {
        wire::detail::span_source source(bytes.span());
        std::istream in(&source);
        cereal::BinaryInputArchive ar(in);
        control_body body;
        ar(body);
        if (!source.at_end() && body.read_version <= control_body_version) {
            return std::nullopt; // trailing bytes: not what a node of this version writes
        }
        return body; // (a newer version's fields, appended, left unread)
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

} // namespace petrel::detail

CEREAL_CLASS_VERSION(petrel::detail::control_body, petrel::detail::control_body_version);
