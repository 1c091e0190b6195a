// SPDX-License-Identifier: MIT OR Apache-2.0
//
// What libplugin_ZCNET.so needs of NIXL's backend plugin ABI, declared here so that the plugin
// builds without NIXL's headers (the wheel ships none, and CI cannot reach GitHub).
//
// Written for zcnet from the facts of NIXL's published headers, not copied from them: the
// release is the one the stock `nixl-cu12==1.5.1` wheel matches. The newest source reachable
// here is ai-dynamo/nixl main of 2026-08-21 (8770b655, version 1.4.0), whose backend headers
// equal tag v1.4.0's; the citations below are "file:line" of that commit. The 1.5.1 wheel's
// own plugins agree (tests/test_nixl_abi.py reads the vtable of the wheel's libplugin_OBJ.so
// slot by slot and compares it with this plugin's; the base class's data offsets below are the
// ones nixlObjEngine's constructor in that wheel writes: 0x8, 0x28, 0x60, 0x78, 0xa0, 0xa8).
//
// Only layout and calling convention matter across the boundary; the names are NIXL's so that
// the demangled vtable slots of both plugins compare equal once the namespace is removed. Every
// type lives in namespace zcnet_nixl: nothing here defines a symbol NIXL also defines.
//
// NIXL_PLUGIN_API_VERSION stayed 1 while the backend class changed between releases: the loader
// cannot tell a mismatch, so the declarations must match the wheel's release exactly.

#ifndef ZCNET_NIXL_ABI_HPP
#define ZCNET_NIXL_ABI_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zcnet_nixl {

// ---- src/api/cpp/nixl_types.h ----

// nixl_types.h:41. Segment kinds; the plugin handles DRAM_SEG and VRAM_SEG.
enum nixl_mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };

// nixl_types.h:47.
enum nixl_xfer_op_t { NIXL_READ, NIXL_WRITE };

// nixl_types.h:53-68. The values are what crosses the boundary (src/transport.rs returns them).
enum nixl_status_t {
    NIXL_IN_PROG = 1,
    NIXL_SUCCESS = 0,
    NIXL_ERR_NOT_POSTED = -1,
    NIXL_ERR_INVALID_PARAM = -2,
    NIXL_ERR_BACKEND = -3,
    NIXL_ERR_NOT_FOUND = -4,
    NIXL_ERR_MISMATCH = -5,
    NIXL_ERR_NOT_ALLOWED = -6,
    NIXL_ERR_REPOST_ACTIVE = -7,
    NIXL_ERR_UNKNOWN = -8,
    NIXL_ERR_NOT_SUPPORTED = -9,
    NIXL_ERR_REMOTE_DISCONNECT = -10,
    NIXL_ERR_CANCELED = -11,
    NIXL_ERR_NO_TELEMETRY = -12,
};

// nixl_types.h:74-79 (an int-sized enum class; only its size matters here).
enum class nixl_thread_sync_t { NIXL_THREAD_SYNC_NONE, NIXL_THREAD_SYNC_STRICT, NIXL_THREAD_SYNC_RW };

// nixl_types.h:152-154.
enum class nixl_cost_t { ANALYTICAL_BACKEND = 0 };

// nixl_types.h:98, 111, 116, 122, 161, 245.
using nixl_backend_t = std::string;
using nixl_blob_t = std::string;
using nixl_mem_list_t = std::vector<nixl_mem_t>;
using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_query_resp_t = std::optional<nixl_b_params_t>;
using nixlMemViewH = void *;

// nixl_types.h:168 (nixlAgentOptionalArgs): only ever passed by pointer to a slot this plugin
// does not implement (estimateXferCost), so it stays incomplete.
struct nixlAgentOptionalArgs;

// ---- src/api/cpp/nixl_descriptors.h ----

// nixl_descriptors.h:32-39: three 8-byte fields, no vtable (24 bytes).
class nixlBasicDesc {
public:
    uintptr_t addr;
    size_t len;
    uint64_t devId;
};

// nixl_descriptors.h:145-148: the basic descriptor and a blob (the backend's public metadata
// in loadRemoteMD, the user's string in registerMem).
class nixlBlobDesc : public nixlBasicDesc {
public:
    nixl_blob_t metaInfo;
};

// nixl_descriptors.h:261-267 and 305: a vtable (virtual destructor and more, :305-440), then
// `nixl_mem_t type` and `std::vector<T> descs`. The plugin only reads lists NIXL made, through
// the accessors NIXL inlines too (:310-334); it never makes, copies or destroys one, so no
// virtual function of it is declared beyond the destructor that gives it its vtable pointer.
template <class T> class nixlDescList {
protected:
    nixl_mem_t type;
    std::vector<T> descs;

public:
    nixlDescList() = delete;
    nixlDescList(const nixlDescList &) = delete;
    nixlDescList &operator=(const nixlDescList &) = delete;
    virtual ~nixlDescList() = default;

    nixl_mem_t getType() const { return type; }
    int descCount() const { return static_cast<int>(descs.size()); }
    const T &operator[](size_t index) const { return descs[index]; }
};

// ---- src/api/cpp/backend/backend_aux.h ----

// backend_aux.h:29.
using notif_list_t = std::vector<std::pair<std::string, std::string>>;

// backend_aux.h:32-37.
struct nixlBackendOptionalArgs {
    nixl_blob_t notifMsg;
    bool hasNotif = false;
    nixl_blob_t customParam;
};
using nixl_opt_b_args_t = nixlBackendOptionalArgs;

// backend_aux.h:46-57 (nixlTime::us_t is uint64_t: src/utils/common/nixl_time.h:27).
class nixlBackendInitParams {
public:
    std::string localAgent;
    nixl_backend_t type;
    nixl_b_params_t *customParams = nullptr;
    bool enableProgTh = false;
    uint64_t pthrDelay = 0;
    nixl_thread_sync_t syncMode;
    bool enableTelemetry_ = false;
};

// backend_aux.h:60-64: a polymorphic base for the backend's request handles (NIXL only passes
// them back to the backend).
class nixlBackendReqH {
public:
    nixlBackendReqH() {}
    virtual ~nixlBackendReqH() {}
};

// backend_aux.h:67-78: a polymorphic base for the backend's memory metadata.
class nixlBackendMD {
protected:
    bool isPrivateMD;

public:
    explicit nixlBackendMD(bool is_private) : isPrivateMD(is_private) {}
    virtual ~nixlBackendMD() {}
};

// backend_aux.h:92-95: a basic descriptor and the backend's metadata for it (32 bytes).
class nixlMetaDesc : public nixlBasicDesc {
public:
    nixlBackendMD *metadataP;
};

// backend_aux.h:119-120 (only named by the remote prepMemView slot).
struct nixlRemoteMetaDesc : public nixlMetaDesc {
    std::string remoteAgent;
};

// backend_aux.h:135-136.
using nixl_meta_dlist_t = nixlDescList<nixlMetaDesc>;
using nixl_remote_meta_dlist_t = nixlDescList<nixlRemoteMetaDesc>;
// nixl_descriptors.h:471 (only named by the queryMem slot).
using nixl_reg_dlist_t = nixlDescList<nixlBlobDesc>;

// ---- src/core/telemetry/telemetry_event.h ----

// telemetry_event.h:306-315 (and v1.4.0's :269-278): a 4-byte event type and a value. The
// engine's base holds a vector of these; the plugin adds none (phase 1), but the base's
// destructor, compiled here, destroys the vector, so the element type must be complete.
struct nixlTelemetryEvent {
    uint32_t eventType_;
    uint64_t value_;
};

// ---- src/api/cpp/backend/backend_engine.h ----

// backend_engine.h:33-251. The agent (libnixl.so) reads the data members through functions it
// inlines (getInitErr, getType, getCustomParams: :97-99; getType also when it destroys the
// engine, src/core/nixl_agent.cpp:53; getTelemetryEvents, :91, is not called by the 1.4.0
// agent), so they are laid out exactly as NIXL's: vptr 0x0, backendType 0x8, customParams 0x28, telemetryEvents_ 0x60,
// telemetryEventsMutex_ 0x78, initErr 0xa0, localAgent 0xa8, enableTelemetry_ 0xc8. The
// virtual functions are in NIXL's order (:89, :105-250): the vtable is what the agent calls.
class nixlBackendEngine {
private:
    nixl_backend_t backendType;
    nixl_b_params_t customParams;
    std::vector<nixlTelemetryEvent> telemetryEvents_;
    std::mutex telemetryEventsMutex_;

protected:
    bool initErr = false;
    const std::string localAgent;
    const bool enableTelemetry_;

    bool getInitParam(const std::string &key, std::string &value) const {
        const auto it = customParams.find(key);
        if (it == customParams.end()) return false;
        value = it->second;
        return true;
    }

public:
    // backend_engine.h:77-81.
    explicit nixlBackendEngine(const nixlBackendInitParams *p)
        : backendType(p->type),
          customParams(p->customParams ? *p->customParams : nixl_b_params_t{}),
          localAgent(p->localAgent),
          enableTelemetry_(p->enableTelemetry_) {}
    nixlBackendEngine(const nixlBackendEngine &) = delete;
    nixlBackendEngine &operator=(const nixlBackendEngine &) = delete;

    // Slots 0 and 1 (complete and deleting destructor): backend_engine.h:89.
    virtual ~nixlBackendEngine() = default;

    // Slots 2-5: backend_engine.h:105, 108, 112, 114.
    virtual bool supportsRemote() const = 0;
    virtual bool supportsLocal() const = 0;
    virtual bool supportsNotif() const = 0;
    virtual nixl_mem_list_t getSupportedMems() const = 0;

    // Slots 6-14: backend_engine.h:120-156.
    virtual nixl_status_t registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem,
                                      nixlBackendMD *&out) = 0;
    virtual nixl_status_t deregisterMem(nixlBackendMD *meta) = 0;
    virtual nixl_status_t connect(const std::string &remote_agent) = 0;
    virtual nixl_status_t disconnect(const std::string &remote_agent) = 0;
    virtual nixl_status_t unloadMD(nixlBackendMD *input) = 0;
    virtual nixl_status_t prepXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                                   const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                                   nixlBackendReqH *&handle,
                                   const nixl_opt_b_args_t *opt_args = nullptr) const = 0;
    virtual nixl_status_t postXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                                   const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                                   nixlBackendReqH *&handle,
                                   const nixl_opt_b_args_t *opt_args = nullptr) const = 0;
    virtual nixl_status_t checkXfer(nixlBackendReqH *handle) const = 0;
    virtual nixl_status_t releaseReqH(nixlBackendReqH *handle) const = 0;

    // Slots 15-17: backend_engine.h:159-176 (the remote overload first).
    virtual nixl_status_t prepMemView(const nixl_remote_meta_dlist_t &, nixlMemViewH &,
                                      const nixl_opt_b_args_t * = nullptr) const {
        return NIXL_ERR_NOT_SUPPORTED;
    }
    virtual nixl_status_t prepMemView(const nixl_meta_dlist_t &, nixlMemViewH &,
                                      const nixl_opt_b_args_t * = nullptr) const {
        return NIXL_ERR_NOT_SUPPORTED;
    }
    virtual void releaseMemView(nixlMemViewH) const {}

    // Slots 18-21: backend_engine.h:181-204 (needed when supportsRemote()).
    virtual nixl_status_t getPublicData(const nixlBackendMD *meta, std::string &str) const {
        return NIXL_ERR_BACKEND;
    }
    virtual nixl_status_t getConnInfo(std::string &str) const { return NIXL_ERR_BACKEND; }
    virtual nixl_status_t loadRemoteConnInfo(const std::string &remote_agent,
                                             const std::string &remote_conn_info) {
        return NIXL_ERR_BACKEND;
    }
    virtual nixl_status_t loadRemoteMD(const nixlBlobDesc &input, const nixl_mem_t &nixl_mem,
                                       const std::string &remote_agent, nixlBackendMD *&output) {
        return NIXL_ERR_BACKEND;
    }

    // Slot 22: backend_engine.h:210 (needed when supportsLocal()).
    virtual nixl_status_t loadLocalMD(nixlBackendMD *input, nixlBackendMD *&output) {
        return NIXL_ERR_BACKEND;
    }

    // Slots 23-24: backend_engine.h:219, 222 (needed when supportsNotif()).
    virtual nixl_status_t getNotifs(notif_list_t &notif_list) { return NIXL_ERR_BACKEND; }
    virtual nixl_status_t genNotif(const std::string &remote_agent, const std::string &msg) const {
        return NIXL_ERR_BACKEND;
    }

    // Slots 25-26: backend_engine.h:231, 240.
    virtual nixl_status_t queryMem(const nixl_reg_dlist_t &descs,
                                   std::vector<nixl_query_resp_t> &resp) const {
        return NIXL_ERR_NOT_SUPPORTED;
    }
    virtual nixl_status_t estimateXferCost(const nixl_xfer_op_t &operation,
                                           const nixl_meta_dlist_t &local,
                                           const nixl_meta_dlist_t &remote,
                                           const std::string &remote_agent,
                                           nixlBackendReqH *const &handle,
                                           std::chrono::microseconds &duration,
                                           std::chrono::microseconds &err_margin,
                                           nixl_cost_t &method,
                                           const nixlAgentOptionalArgs *extra_params = nullptr) const {
        return NIXL_ERR_NOT_SUPPORTED;
    }
};

// ---- src/api/cpp/backend/backend_plugin.h ----

// backend_plugin.h:33. The loader refuses any other value (src/core/nixl_plugin_manager.cpp:114)
// but, as said above, accepts a mismatched class layout under the same value.
constexpr int NIXL_PLUGIN_API_VERSION = 1;

// backend_plugin.h:36-57: what nixl_plugin_init returns. The last two return standard library
// containers by value: the plugin and libnixl.so must share the libstdc++ ABI.
struct nixlBackendPlugin {
    int api_version;
    nixlBackendEngine *(*create_engine)(const nixlBackendInitParams *init_params);
    void (*destroy_engine)(nixlBackendEngine *engine);
    const char *(*get_plugin_name)();
    const char *(*get_plugin_version)();
    nixl_b_params_t (*get_backend_options)();
    nixl_mem_list_t (*get_backend_mems)();
};

// backend_plugin.h:119-127: the entry points are `extern "C" nixlBackendPlugin
// *nixl_plugin_init()` and `void nixl_plugin_fini()`, found with dlsym (nixl_plugin_manager.cpp:
// 49, 98). The shared object is a Rust cdylib, which exports only Rust's symbols: src/lib.rs
// defines both and calls zcnet_nixl_cxx_plugin_init/fini (engine.cpp).

// Layout checks (x86_64, libstdc++): a mismatch here is a build failure, not a crash.
static_assert(sizeof(nixlBasicDesc) == 24, "nixlBasicDesc");
static_assert(sizeof(nixlMetaDesc) == 32, "nixlMetaDesc");
static_assert(sizeof(nixlBlobDesc) == 56, "nixlBlobDesc");
static_assert(sizeof(nixlDescList<nixlMetaDesc>) == 40, "nixlDescList");
static_assert(sizeof(nixlTelemetryEvent) == 16, "nixlTelemetryEvent");
static_assert(sizeof(std::string) == 32 && sizeof(nixl_b_params_t) == 56 &&
                  sizeof(std::mutex) == 40,
              "libstdc++ layout the wheel was built with");
static_assert(sizeof(nixlBackendEngine) == 0xd0, "nixlBackendEngine");

} // namespace zcnet_nixl

#endif
