// Petrel: what one store's operations share (see <petrel/client/detail/store_core.hpp>).
#ifndef PETREL_CLIENT_IMPL_STORE_CORE_IPP
#define PETREL_CLIENT_IMPL_STORE_CORE_IPP

#include <petrel/client/detail/store_core.hpp>
#include <petrel/cluster/member.hpp>
#include <petrel/cluster/worker_node.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>

#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>

namespace petrel::detail {

namespace store_core_helpers {

/// A random start for a store's update ids, so that stores never share one.
inline std::uint64_t first_update_id() {
    std::random_device rd;
    const std::uint64_t hi = rd();
    const std::uint64_t lo = rd();
    return ((hi << 32) | lo) | 1; // never 0 (no id)
}

inline void check_width(std::size_t width) {
    if (width == 0 || width > std::numeric_limits<std::uint32_t>::max()) {
        throw std::invalid_argument("petrel::kv_store: width must be at least 1");
    }
}

/// The largest key of a key type: reserved (it ends the key space).
inline std::uint64_t reserved_key(wire::scalar_type key_type) {
    return key_type == wire::scalar_type::u32 ? key_space_end<std::uint32_t>
                                              : key_space_end<std::uint64_t>;
}

} // namespace store_core_helpers

PETREL_DECL store_core::store_core(any_transport transport, store_settings s)
    : transport_(std::move(transport)), s_(std::move(s)), log_(transport_.options().log),
      next_update_(store_core_helpers::first_update_id()) {
    if (s_.id.width == 0) {
        s_.id.width = 1;
    }
    store_core_helpers::check_width(s_.id.width);
    if (s_.servers.empty()) {
        throw std::invalid_argument("petrel::kv_store: no servers given");
    }
    membership_view v;
    v.version = 1;
    std::vector<node_id> ids;
    for (std::size_t i = 0; i < s_.servers.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (s_.servers[i] == s_.servers[j]) {
                throw std::invalid_argument("petrel::kv_store: server " + s_.servers[i] +
                                            " is listed twice");
            }
        }
        const auto id = static_cast<node_id>(i + 1);
        v.nodes.push_back({id,
                           node_role::server,
                           node_state::alive,
                           s_.servers[i],
                           0,
                           static_cast<std::uint32_t>(i),
                           {},
                           {}});
        ids.push_back(id);
    }
    v.ring = ring::balanced(s_.ring, ids); // throws on bad ring options
    clock_ = std::make_shared<worker_clock>();
    make_parts();
    links_->adopt(std::make_shared<const membership_view>(std::move(v)));
}

PETREL_DECL store_core::store_core(worker_node& worker, store_settings s)
    : transport_(worker.transport()), s_(std::move(s)), log_(transport_.options().log),
      owns_transport_(false), member_(worker.membership_ptr()),
      next_update_(store_core_helpers::first_update_id()) {
    adopt_declaration(worker);
    store_core_helpers::check_width(s_.id.width);
    s_.id.node = worker.id();
    s_.id.worker = worker.read_only() ? wire::no_worker : worker.rank();
    read_only_ = worker.read_only();
    s_.request_timeout = worker.request_timeout();
    s_.checkpoint_root = worker.checkpoint_root();
    clock_ = worker.clock_of(s_.id.table);
    if (auto v = worker.view(); !v || v->ring.empty()) {
        throw std::invalid_argument("petrel::kv_store: the worker has no view of its job");
    }
    make_parts();
    // Subscribe first, so that no view between the read below and the subscription is
    // missed (adopt ignores views that are not newer).
    std::weak_ptr<server_links> links = links_;
    std::weak_ptr<resender> resends = resender_;
    subscription_ = member_->subscribe([links, resends](const member::view_ptr& nv) {
        if (auto l = links.lock()) {
            l->adopt(nv);
        }
        if (auto r = resends.lock()) {
            r->review_all(); // requests dropped by a server that failed go elsewhere
        }
    });
    links_->adopt(worker.view()); // servers failed before this store existed fail at once
    if (s_.policy.ordered) {
        resender_->review_all(); // servers that took keys over learn this store has no resends
    }
}

PETREL_DECL store_core::~store_core() {
    if (member_) {
        member_->unsubscribe(subscription_);
    }
    close();
}

PETREL_DECL void store_core::adopt_declaration(const worker_node& worker) {
    const auto d = worker.declared(s_.id.table);
    if (d) {
        auto name = [](wire::scalar_type t) { return std::string(wire::type_name(t)); };
        const auto table = std::to_string(s_.id.table);
        if (d->key_type != s_.id.key_type || d->value_type != s_.id.value_type) {
            throw std::invalid_argument(
                "petrel::kv_store: table " + table + " is declared with keys " + name(d->key_type) +
                " and values " + name(d->value_type) + ", but this store has keys " +
                name(s_.id.key_type) + " and values " + name(s_.id.value_type));
        }
        dense_ = d->dense;
        declared_width_ = true;
        if (s_.id.width == 0) {
            s_.id.width = d->width;
        } else if (s_.id.width != d->width) {
            throw std::invalid_argument(
                "petrel::kv_store: kv_store_options::width is " + std::to_string(s_.id.width) +
                " but table " + table + " is declared with width " + std::to_string(d->width) +
                " (table_spec::width); leave kv_store_options::width unset to take the "
                "declared one");
        }
    }
    if (s_.id.width == 0) {
        s_.id.width = 1;
    }
}

PETREL_DECL void store_core::make_parts() {
    pipe_ = std::make_shared<send_pipeline>();
    pipe_->compression = s_.compression;
    pipe_->pool = transport_.pool();
    pipe_->request_timeout = s_.request_timeout;
    resender_options o;
    o.self = s_.id.node;
    o.policy = s_.policy;
    o.read_only = read_only_;
    o.tick = blank_request(wire::message_kind::clock);
    o.tick.header.range_begin = 0;
    o.tick.header.range_end = key_space_end<std::uint64_t>;
    o.membership = member_;
    o.log = log_;
    worker_gate_options g{o.policy, read_only_, s_.id.worker, o.tick, s_.request_timeout};
    resender_ = std::make_shared<resender>(executor(), pipe_, clock_, std::move(o));
    gate_ = std::make_shared<worker_gate>(executor(), clock_, resender_, pipe_, std::move(g));
    links_ = std::make_shared<server_links>(
        transport_,
        server_links_options{s_.id.node, s_.request_timeout, s_.key_caching, s_.key_cache_bytes},
        log_, resender_);
}

PETREL_DECL std::chrono::steady_clock::time_point store_core::deadline() const {
    return std::chrono::steady_clock::now() + s_.request_timeout;
}

PETREL_DECL std::shared_ptr<const route_table> store_core::placement() const {
    return resender_->table();
}

PETREL_DECL std::shared_ptr<const membership_view> store_core::view() const {
    const auto where = placement();
    return where ? where->view : nullptr;
}

PETREL_DECL wire::message store_core::blank_request(wire::message_kind kind) const {
    wire::message m;
    auto& h = m.header;
    h.kind = kind;
    h.sender = s_.id.node;
    h.table_id = s_.id.table;
    h.key_type = s_.id.key_type;
    h.value_type = s_.id.value_type;
    h.width = static_cast<std::uint32_t>(s_.id.width);
    h.worker = s_.id.worker;
    return m;
}

PETREL_DECL std::error_code store_core::cut(const prepared_request& p, bool with_values,
                                            std::vector<slice>& out) const {
    const slice_source in{p.keys, p.values, p.range, p.count, s_.id.key_type, s_.id.row_bytes()};
    return cut_slices(*placement(), in, with_values, pool(),
                      transport_.options().limits.max_frame_bytes, out);
}

PETREL_DECL failure_report store_core::report_of(const slice& s) const {
    return failure_report::of(s, log_, s_.id.node);
}

PETREL_DECL void store_core::check(prepared_request& p, std::string_view op) const {
    if (!p.error && dense_ && p.count > 0) {
        std::uint64_t low = 0;
        std::uint64_t high = 0;
        if (p.range) {
            low = p.range->begin;
            high = p.range->end - 1;
        } else if (s_.id.key_type == wire::scalar_type::u32) {
            low = p.keys.as<std::uint32_t>()[0];
            high = p.keys.as<std::uint32_t>()[p.count - 1];
        } else {
            low = p.keys.as<std::uint64_t>()[0];
            high = p.keys.as<std::uint64_t>()[p.count - 1];
        }
        if (low < dense_->begin || high >= dense_->end) {
            p.error = errc::key_out_of_range;
            p.why = "key " + std::to_string(low < dense_->begin ? low : high) +
                    " is outside the dense range [" + std::to_string(dense_->begin) + ", " +
                    std::to_string(dense_->end) + ") of table " + std::to_string(s_.id.table);
        }
    }
    if (p.error && !p.why.empty() && log_) {
        log_(log_level::error, "petrel worker " + std::to_string(s_.id.node) + ": " +
                                   std::string(op) + " refused (" + p.error.message() +
                                   "): " + p.why);
    }
}

PETREL_DECL std::string store_core::shape_error(std::span<const std::size_t> shape,
                                                std::size_t keys) const {
    std::string s = "values of shape [";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(shape[i]);
    }
    const auto w = s_.id.width;
    return s + "] for " + std::to_string(keys) + " keys; expected [" + std::to_string(keys) + ", " +
           std::to_string(w) + "] (or [" + std::to_string(keys * w) +
           "]): kv_store_options::width is " + std::to_string(w) +
           (dense_ || declared_width_ ? " (the table's declared width)" : "");
}

PETREL_DECL prepared_request store_core::prepare_range(key_range<std::uint64_t> range,
                                                       bool with_keys) const {
    prepared_request p;
    p.count = range.size();
    p.range = range;
    if (range.end == store_core_helpers::reserved_key(s_.id.key_type) && !range.empty()) {
        p.error = errc::key_out_of_range; // the largest key is reserved
        return p;
    }
    if (with_keys && p.count > 0) {
        const std::size_t ks = wire::size_of(s_.id.key_type);
        if (p.count > transport_.options().limits.max_frame_bytes / ks) {
            p.error = errc::frame_too_large;
            return p;
        }
        pooled_buffer buf = pool().acquire(p.count * ks);
        if (s_.id.key_type == wire::scalar_type::u32) {
            auto* k = buf.as<std::uint32_t>();
            for (std::size_t i = 0; i < p.count; ++i) {
                k[i] = static_cast<std::uint32_t>(range.begin + i);
            }
        } else {
            auto* k = buf.as<std::uint64_t>();
            for (std::size_t i = 0; i < p.count; ++i) {
                k[i] = range.begin + i;
            }
        }
        p.keys = buf.share();
    }
    return p;
}

PETREL_DECL shared_bytes store_core::copy(std::span<const std::byte> bytes) const {
    pooled_buffer buf = pool().acquire(bytes.size());
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    return buf.share();
}

PETREL_DECL void store_core::close() {
    links_->close();
    resender_->close();
    if (owns_transport_) {
        transport_.close(); // a worker's transport is shared by its other stores
    }
}

} // namespace petrel::detail

#endif
