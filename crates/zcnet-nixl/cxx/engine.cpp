// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The C++ half of libplugin_ZCNET.so: NIXL's plugin struct and a backend engine that checks
// NIXL's arguments and hands the work to the Rust transport (src/lib.rs, src/transport.rs).
// The NIXL types are declared in nixl_abi.hpp (written here from NIXL's headers).

#include "nixl_abi.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

extern "C" {
struct zcnet_nixl_engine;
struct zcnet_nixl_xfer;
// One descriptor pair (src/transport.rs, `Desc`).
struct zcnet_nixl_desc {
    uint64_t local_addr;
    uint64_t len;
    uint64_t remote_addr;
    uint64_t remote_key;
    uint64_t local_key; // the local registration (VRAM is reached through it)
};
typedef void (*zcnet_nixl_notif_fn)(void *ctx, const char *agent, size_t agent_len,
                                    const char *msg, size_t msg_len);

int zcnet_nixl_rs_engine_new(const char *agent, size_t agent_len, const char *ip, size_t ip_len,
                             uint16_t port, const char *tx, size_t tx_len, const char *streams,
                             size_t streams_len, zcnet_nixl_engine **out, char *err, size_t errcap);
void zcnet_nixl_rs_engine_free(zcnet_nixl_engine *e);
int zcnet_nixl_rs_conn_info(const zcnet_nixl_engine *e, char *out, size_t cap, size_t *len);
int zcnet_nixl_rs_load_remote(const zcnet_nixl_engine *e, const char *agent, size_t agent_len,
                              const char *info, size_t info_len);
int zcnet_nixl_rs_connect(const zcnet_nixl_engine *e, const char *agent, size_t agent_len);
int zcnet_nixl_rs_disconnect(const zcnet_nixl_engine *e, const char *agent, size_t agent_len);
int zcnet_nixl_rs_register(const zcnet_nixl_engine *e, uint64_t addr, uint64_t len,
                           uint64_t *key);
int zcnet_nixl_rs_register_vram(const zcnet_nixl_engine *e, uint64_t dev, uint64_t addr,
                                uint64_t len, uint64_t *key);
int zcnet_nixl_rs_deregister(const zcnet_nixl_engine *e, uint64_t key);
const zcnet_nixl_xfer *zcnet_nixl_rs_xfer_new(const zcnet_nixl_engine *e, uint32_t op,
                                              const char *agent, size_t agent_len,
                                              const zcnet_nixl_desc *descs, size_t n);
int zcnet_nixl_rs_xfer_post(const zcnet_nixl_engine *e, const zcnet_nixl_xfer *x, int has_notif,
                            const char *notif, size_t notif_len);
int zcnet_nixl_rs_xfer_check(const zcnet_nixl_xfer *x);
void zcnet_nixl_rs_xfer_free(const zcnet_nixl_xfer *x);
int zcnet_nixl_rs_gen_notif(const zcnet_nixl_engine *e, const char *agent, size_t agent_len,
                            const char *msg, size_t msg_len);
int zcnet_nixl_rs_take_notifs(const zcnet_nixl_engine *e, zcnet_nixl_notif_fn f, void *ctx);
}

namespace zcnet_nixl {
namespace {

const char *const kName = "ZCNET";
const char *const kVersion = "0.1.0";
// Tags that tell this plugin's metadata objects from anything else NIXL might hand back.
constexpr uint64_t kLocalTag = 0x7a636e65744c4d44ull;  // "zcnetLMD"
constexpr uint64_t kRemoteTag = 0x7a636e6574524d44ull; // "zcnetRMD"

void log_error(const std::string &msg) { std::fprintf(stderr, "zcnet-nixl: %s\n", msg.c_str()); }

nixl_status_t st(int v) { return static_cast<nixl_status_t>(v); }

// Runs `f`, turning a C++ exception (std::bad_alloc from a string or a vector) into
// NIXL_ERR_BACKEND with its message: nothing thrown here reaches the agent.
template <class F> nixl_status_t guarded(const char *what, F &&f) noexcept {
    try {
        return f();
    } catch (const std::exception &e) {
        log_error(std::string(what) + ": " + e.what());
    } catch (...) {
        log_error(std::string(what) + ": an unknown exception");
    }
    return NIXL_ERR_BACKEND;
}

// A registration of this engine.
struct LocalMD final : nixlBackendMD {
    uint64_t tag = kLocalTag;
    uint64_t key, addr, len;
    LocalMD(uint64_t k, uint64_t a, uint64_t l) : nixlBackendMD(true), key(k), addr(a), len(l) {}
};

// A peer's registration, from its public metadata.
struct RemoteMD final : nixlBackendMD {
    uint64_t tag = kRemoteTag;
    std::string agent;
    uint64_t key, addr, len;
    RemoteMD(std::string ag, uint64_t k, uint64_t a, uint64_t l)
        : nixlBackendMD(false), agent(std::move(ag)), key(k), addr(a), len(l) {}
};

struct ReqH final : nixlBackendReqH {
    const zcnet_nixl_xfer *x;
    nixl_xfer_op_t op;
    explicit ReqH(const zcnet_nixl_xfer *xf, nixl_xfer_op_t o) : x(xf), op(o) {}
    ~ReqH() override { zcnet_nixl_rs_xfer_free(x); }
};

bool inside(uint64_t base, uint64_t size, uint64_t addr, uint64_t len) {
    return addr >= base && addr - base <= size && len <= size - (addr - base);
}

class ZcnetEngine final : public nixlBackendEngine {
    zcnet_nixl_engine *rs_ = nullptr;

public:
    explicit ZcnetEngine(const nixlBackendInitParams *p) : nixlBackendEngine(p) {
        std::string ip = "127.0.0.1", port = "0", tx = "auto", streams = "1";
        getInitParam("ip_addr", ip);
        getInitParam("port", port);
        getInitParam("tx", tx);
        getInitParam("streams", streams);
        char *end = nullptr;
        unsigned long pv = std::strtoul(port.c_str(), &end, 10);
        if (port.empty() || *end != '\0' || pv > 65535) {
            log_error("backend parameter port=" + port + " is not a port number");
            initErr = true;
            return;
        }
        char err[512] = {0};
        if (zcnet_nixl_rs_engine_new(localAgent.data(), localAgent.size(), ip.data(), ip.size(),
                                     static_cast<uint16_t>(pv), tx.data(), tx.size(),
                                     streams.data(), streams.size(), &rs_, err, sizeof err) != 0) {
            log_error(std::string("cannot start the engine: ") + err);
            initErr = true;
        }
    }
    ~ZcnetEngine() override { zcnet_nixl_rs_engine_free(rs_); }

    bool supportsRemote() const override { return true; }
    // Transfers within one agent (loadLocalMD) are not implemented (phase 1).
    bool supportsLocal() const override { return false; }
    bool supportsNotif() const override { return true; }
    // VRAM through zcnet's GPU code (src/transport/device.rs: staged through host memory).
    nixl_mem_list_t getSupportedMems() const override { return {DRAM_SEG, VRAM_SEG}; }

    nixl_status_t registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem,
                              nixlBackendMD *&out) override {
        return guarded("registerMem", [&]() -> nixl_status_t {
            if (nixl_mem != DRAM_SEG && nixl_mem != VRAM_SEG) return NIXL_ERR_NOT_SUPPORTED;
            uint64_t key = 0;
            // VRAM: devId is the device (nixl_descriptors.h:38-39, "deviceID"), a CUDA ordinal.
            nixl_status_t r =
                st(nixl_mem == VRAM_SEG
                       ? zcnet_nixl_rs_register_vram(rs_, mem.devId, mem.addr, mem.len, &key)
                       : zcnet_nixl_rs_register(rs_, mem.addr, mem.len, &key));
            if (r != NIXL_SUCCESS) return r;
            out = new LocalMD(key, mem.addr, mem.len);
            return NIXL_SUCCESS;
        });
    }

    nixl_status_t deregisterMem(nixlBackendMD *meta) override {
        auto *md = static_cast<LocalMD *>(meta);
        if (!md || md->tag != kLocalTag) return NIXL_ERR_INVALID_PARAM;
        nixl_status_t r = st(zcnet_nixl_rs_deregister(rs_, md->key));
        delete md;
        return r;
    }

    nixl_status_t connect(const std::string &agent) override {
        return st(zcnet_nixl_rs_connect(rs_, agent.data(), agent.size()));
    }
    nixl_status_t disconnect(const std::string &agent) override {
        return st(zcnet_nixl_rs_disconnect(rs_, agent.data(), agent.size()));
    }

    nixl_status_t unloadMD(nixlBackendMD *input) override {
        auto *md = static_cast<RemoteMD *>(input);
        if (!md || md->tag != kRemoteTag) return NIXL_ERR_INVALID_PARAM;
        delete md;
        return NIXL_SUCCESS;
    }

    nixl_status_t getPublicData(const nixlBackendMD *meta, std::string &str) const override {
        return guarded("getPublicData", [&]() -> nixl_status_t {
            auto *md = static_cast<const LocalMD *>(meta);
            if (!md || md->tag != kLocalTag) return NIXL_ERR_INVALID_PARAM;
            char buf[96];
            std::snprintf(buf, sizeof buf, "zcnet1 %" PRIx64 " %" PRIx64 " %" PRIx64, md->key,
                          md->addr, md->len);
            str = buf;
            return NIXL_SUCCESS;
        });
    }

    nixl_status_t getConnInfo(std::string &str) const override {
        return guarded("getConnInfo", [&]() -> nixl_status_t {
            char buf[256];
            size_t len = 0;
            nixl_status_t r = st(zcnet_nixl_rs_conn_info(rs_, buf, sizeof buf, &len));
            if (r == NIXL_SUCCESS) str.assign(buf, len);
            return r;
        });
    }

    nixl_status_t loadRemoteConnInfo(const std::string &agent, const std::string &info) override {
        return st(zcnet_nixl_rs_load_remote(rs_, agent.data(), agent.size(), info.data(),
                                            info.size()));
    }

    nixl_status_t loadRemoteMD(const nixlBlobDesc &input, const nixl_mem_t &nixl_mem,
                               const std::string &agent, nixlBackendMD *&output) override {
        return guarded("loadRemoteMD", [&]() -> nixl_status_t {
            // The peer's kind of memory is its business: it reaches it by the key.
            if (nixl_mem != DRAM_SEG && nixl_mem != VRAM_SEG) return NIXL_ERR_NOT_SUPPORTED;
            uint64_t key, addr, len;
            char tail;
            if (std::sscanf(input.metaInfo.c_str(), "zcnet1 %" SCNx64 " %" SCNx64 " %" SCNx64 "%c",
                            &key, &addr, &len, &tail) != 3) {
                log_error("metadata of agent " + agent + " is not ZCNET's");
                return NIXL_ERR_INVALID_PARAM;
            }
            output = new RemoteMD(agent, key, addr, len);
            return NIXL_SUCCESS;
        });
    }

    nixl_status_t prepXfer(const nixl_xfer_op_t &op, const nixl_meta_dlist_t &local,
                           const nixl_meta_dlist_t &remote, const std::string &agent,
                           nixlBackendReqH *&handle,
                           const nixl_opt_b_args_t *opt_args) const override {
        return guarded("prepXfer", [&]() -> nixl_status_t {
            if (op != NIXL_READ && op != NIXL_WRITE) return NIXL_ERR_INVALID_PARAM;
            auto ours = [](nixl_mem_t m) { return m == DRAM_SEG || m == VRAM_SEG; };
            if (!ours(local.getType()) || !ours(remote.getType())) return NIXL_ERR_NOT_SUPPORTED;
            const int n = local.descCount();
            if (n != remote.descCount()) {
                log_error("a request's local and remote lists differ in length");
                return NIXL_ERR_MISMATCH;
            }
            std::vector<zcnet_nixl_desc> descs;
            descs.reserve(static_cast<size_t>(n));
            for (int i = 0; i < n; i++) {
                const nixlMetaDesc &l = local[static_cast<size_t>(i)];
                const nixlMetaDesc &r = remote[static_cast<size_t>(i)];
                auto *lmd = static_cast<const LocalMD *>(l.metadataP);
                auto *rmd = static_cast<const RemoteMD *>(r.metadataP);
                if (l.len != r.len) {
                    log_error("descriptor " + std::to_string(i) + ": local and remote lengths differ");
                    return NIXL_ERR_MISMATCH;
                }
                if (!lmd || lmd->tag != kLocalTag || !inside(lmd->addr, lmd->len, l.addr, l.len)) {
                    log_error("descriptor " + std::to_string(i) + ": local range not registered");
                    return NIXL_ERR_INVALID_PARAM;
                }
                if (!rmd || rmd->tag != kRemoteTag || rmd->agent != agent ||
                    !inside(rmd->addr, rmd->len, r.addr, r.len)) {
                    log_error("descriptor " + std::to_string(i) + ": remote range not registered by " +
                              agent);
                    return NIXL_ERR_INVALID_PARAM;
                }
                descs.push_back({l.addr, l.len, r.addr, rmd->key, lmd->key});
            }
            const zcnet_nixl_xfer *x = zcnet_nixl_rs_xfer_new(
                rs_, op == NIXL_WRITE ? 1u : 0u, agent.data(), agent.size(), descs.data(), descs.size());
            if (!x) return NIXL_ERR_BACKEND;
            handle = new ReqH(x, op);
            return NIXL_SUCCESS;
        });
    }

    nixl_status_t postXfer(const nixl_xfer_op_t &op, const nixl_meta_dlist_t &,
                           const nixl_meta_dlist_t &, const std::string &,
                           nixlBackendReqH *&handle,
                           const nixl_opt_b_args_t *opt_args) const override {
        auto *h = static_cast<ReqH *>(handle);
        if (!h || h->op != op) return NIXL_ERR_INVALID_PARAM;
        const bool notif = opt_args && opt_args->hasNotif;
        return st(zcnet_nixl_rs_xfer_post(rs_, h->x, notif ? 1 : 0,
                                          notif ? opt_args->notifMsg.data() : nullptr,
                                          notif ? opt_args->notifMsg.size() : 0));
    }

    nixl_status_t checkXfer(nixlBackendReqH *handle) const override {
        auto *h = static_cast<ReqH *>(handle);
        if (!h) return NIXL_ERR_INVALID_PARAM;
        return st(zcnet_nixl_rs_xfer_check(h->x));
    }

    nixl_status_t releaseReqH(nixlBackendReqH *handle) const override {
        delete static_cast<ReqH *>(handle);
        return NIXL_SUCCESS;
    }

    nixl_status_t getNotifs(notif_list_t &list) override {
        return st(zcnet_nixl_rs_take_notifs(
            rs_,
            [](void *ctx, const char *agent, size_t alen, const char *msg, size_t mlen) {
                try {
                    static_cast<notif_list_t *>(ctx)->emplace_back(std::string(agent, alen),
                                                                   std::string(msg, mlen));
                } catch (const std::exception &e) {
                    log_error(std::string("a notification was dropped: ") + e.what());
                }
            },
            &list));
    }

    nixl_status_t genNotif(const std::string &agent, const std::string &msg) const override {
        return st(zcnet_nixl_rs_gen_notif(rs_, agent.data(), agent.size(), msg.data(), msg.size()));
    }
};

nixlBackendEngine *create_engine(const nixlBackendInitParams *p) {
    // A layout disagreement in the init params shows here first: refuse rather than run on it.
    if (!p || p->type != kName) {
        log_error("the agent's init params do not name this backend: the NIXL release does not "
                  "match the one this plugin was declared for (nixl 1.5.1)");
        return nullptr;
    }
    try {
        return new ZcnetEngine(p);
    } catch (const std::exception &e) {
        log_error(std::string("cannot create the engine: ") + e.what());
        return nullptr;
    }
}

void destroy_engine(nixlBackendEngine *e) { delete e; }
const char *plugin_name() { return kName; }
const char *plugin_version() { return kVersion; }
nixl_b_params_t backend_options() {
    return {{"ip_addr", "127.0.0.1"}, {"port", "0"}, {"tx", "auto"}, {"streams", "1"}};
}
nixl_mem_list_t backend_mems() { return {DRAM_SEG, VRAM_SEG}; }

nixlBackendPlugin plugin = {NIXL_PLUGIN_API_VERSION, create_engine,   destroy_engine, plugin_name,
                            plugin_version,          backend_options, backend_mems};

} // namespace
} // namespace zcnet_nixl

extern "C" void *zcnet_nixl_cxx_plugin_init() { return &zcnet_nixl::plugin; }
extern "C" void zcnet_nixl_cxx_plugin_fini() {}
