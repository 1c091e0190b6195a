/*
 * zcnet's stand-in for the CUDA driver library (libcuda.so.1), for tests on machines without a
 * GPU. NOT A GPU: nothing measured against it is a GPU figure. It implements only the driver
 * API entry points zcnet-sys/src/cuda/mod.rs resolves, from the documented contract (cuda.h and the
 * CUDA Driver API reference: error codes, flags, enum values), and enforces what the real driver
 * requires, plus what zcnet promises on top:
 *
 * - cuInit before anything else (CUDA_ERROR_NOT_INITIALIZED);
 * - a current, retained context on the calling thread for every memory, stream and event call
 *   (CUDA_ERROR_INVALID_CONTEXT);
 * - device memory the CPU cannot touch: cuMemAlloc returns the address of a PROT_NONE mapping,
 *   the "device" contents live in a private shadow mapping, so a CPU dereference segfaults;
 * - asynchronous copies complete only when the program waits for them (cuEventSynchronize,
 *   cuStreamSynchronize, or a cuEventQuery after it answered CUDA_ERROR_NOT_READY
 *   ZCNET_STANDIN_NOT_READY times, default 1); until then the destination holds a poison byte,
 *   and the host side is read or written at completion: a host source changed, or a host
 *   destination written, before completion is a fatal violation (stderr, abort());
 * - cuMemGetHandleForAddressRange: host-page-aligned address and size, handle type DMA_BUF_FD,
 *   flags 0 or CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (1, CUDA 12.8+, only when the driver
 *   version says 12.8+); the handle is a real fd (a memfd) for the caller to close;
 * - no cuMemFree / cuMemHostUnregister / cuStreamDestroy, and no synchronous copy or memset,
 *   over memory or a stream with a copy pending (fatal; the real driver would defer a stream's
 *   destruction, zcnet's rule is stricter: it waits first);
 * - nothing leaked at exit: a destructor lists leaked allocations, registrations, streams,
 *   events, retained contexts and dma-buf fds on stderr and _exit(86)s when there are any.
 *
 * Environment:
 *   ZCNET_STANDIN_SUMMARY=FILE          write "key=value" counters to FILE at exit (and on a
 *                                       fatal violation)
 *   ZCNET_STANDIN_FAIL=cuEventCreate,.. these entry points fail with CUDA_ERROR_OUT_OF_MEMORY
 *   ZCNET_STANDIN_DRIVER_VERSION=N      what cuDriverGetVersion reports (default 12080; 11040
 *                                       in the build without dma-buf export)
 *   ZCNET_STANDIN_NOT_READY=N           NOT_READY answers per event before a query completes it
 *
 * Built with -DSTANDIN_NO_DMABUF it lacks cuMemGetHandleForAddressRange, as a driver older than
 * CUDA 11.7 does, and refuses CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED as an unknown attribute.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct standin_ctx *CUcontext;
typedef struct standin_stream *CUstream;
typedef struct standin_event *CUevent;

/* cuda.h, enum cudaError_enum. */
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

/* cuda.h flags and enum values used here. */
#define CU_MEMHOSTREGISTER_ALL 0xFu /* PORTABLE 1 | DEVICEMAP 2 | IOMEMORY 4 | READ_ONLY 8 */
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_ALL 0x7u /* BLOCKING_SYNC 1 | DISABLE_TIMING 2 | INTERPROCESS 4 */
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_EVENT_INTERPROCESS 0x4u
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1
#define CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE 1ull /* CUDA 12.8 */
#define ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED 110
#define ATTR_GPU_DIRECT_RDMA_SUPPORTED 116
#define ATTR_DMA_BUF_SUPPORTED 124
#define ATTR_COMPUTE_CAPABILITY_MAJOR 75
#define ATTR_COMPUTE_CAPABILITY_MINOR 76
#define ATTR_LAST_KNOWN 150
/* Not a cuda.h attribute (CUdevice_attribute ends far below it; a real driver answers
 * CUDA_ERROR_INVALID_VALUE): this stand-in answers 1, so that zcnet marks its device as a
 * stand-in and labels every figure measured against it (zcnet_sys::cuda::STANDIN_ATTRIBUTE). */
#define ATTR_ZCNET_STANDIN 0x7a636e74 /* "zcnt" */

#define DEVICE_NAME "zcnet stand-in"
#define PCI_BUS_ID "ffff:ff:1f.7" /* a domain no machine has: no sysfs device */
#define TOTAL_MEM (16ull << 30)
#define POISON 0xA5

struct standin_ctx {
    int refs;
};

struct alloc {
    uintptr_t dev; /* PROT_NONE to the CPU */
    unsigned char *shadow;
    size_t len;
};

struct reg {
    uintptr_t p;
    size_t len;
};

enum op_kind { OP_HTOD, OP_DTOH };

struct op {
    enum op_kind kind;
    uint64_t seq;
    unsigned char *host;
    uintptr_t dev;
    unsigned char *shadow;
    size_t len;
    uint64_t sum; /* HtoD: of the source at enqueue; DtoH: of the poisoned destination */
};

struct standin_stream {
    struct op *ops;
    size_t head, n, cap;
    uint64_t enq_seq, done_seq;
};

struct standin_event {
    struct standin_stream *stream; /* NULL: never recorded, or recorded work done */
    uint64_t seq;
    unsigned not_ready_left;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static pid_t owner_pid;
static struct standin_ctx primary;
static __thread struct standin_ctx *current;

#define TABLE(T, name)                                                                           \
    static T **name;                                                                             \
    static size_t name##_n, name##_cap;
TABLE(struct alloc, allocs)
TABLE(struct reg, regs)
TABLE(struct standin_stream, streams)
TABLE(struct standin_event, events)

struct dmabuf {
    int fd;
    ino_t ino;
    dev_t dev;
};
static struct dmabuf *dmabufs;
static size_t dmabufs_n, dmabufs_cap __attribute__((unused));

static struct {
    unsigned long long allocs, frees, registers, unregisters, streams, events, async_htod,
        async_dtoh, pageable_async, sync_htod, sync_dtoh, memsets, ctx_syncs, exports, export_flags_pcie,
        not_ready, injected, errors, max_pending;
    size_t mem_in_use;
} st;

static void write_summary(const char *violation);

static void fatal(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "zcnet stand-in libcuda (not a GPU): FATAL: %s\n", msg);
    write_summary(msg);
    abort();
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q)
        fatal("out of host memory for bookkeeping");
    *cap = c;
    return q;
}

#define PUSH(name, v)                                                                            \
    do {                                                                                         \
        name = grow(name, &name##_cap, name##_n + 1, sizeof *name);                              \
        name[name##_n++] = (v);                                                                  \
    } while (0)

/* Removes element i (order not kept). */
#define REMOVE(name, i) (name[i] = name[--name##_n])

static CUresult err(CUresult e) {
    if (e != CUDA_SUCCESS)
        st.errors++;
    return e;
}

static int injected(const char *fn) {
    const char *l = getenv("ZCNET_STANDIN_FAIL");
    if (!l)
        return 0;
    size_t n = strlen(fn);
    for (const char *p = l; (p = strstr(p, fn)); p += n) {
        int starts = p == l || p[-1] == ',';
        int ends = p[n] == 0 || p[n] == ',';
        if (starts && ends) {
            st.injected++;
            return 1;
        }
    }
    return 0;
}

static int driver_version(void) {
    const char *v = getenv("ZCNET_STANDIN_DRIVER_VERSION");
    if (v && *v)
        return atoi(v);
#ifdef STANDIN_NO_DMABUF
    return 11040;
#else
    return 12080;
#endif
}

static unsigned not_ready_answers(void) {
    const char *v = getenv("ZCNET_STANDIN_NOT_READY");
    return v && *v ? (unsigned)atoi(v) : 1;
}

static uint64_t checksum(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int overlaps(uintptr_t a, size_t alen, uintptr_t b, size_t blen) {
    return a < b + blen && b < a + alen;
}

/* The allocation holding all of [p, p+n), or NULL. */
static struct alloc *find_alloc(uintptr_t p, size_t n) {
    for (size_t i = 0; i < allocs_n; i++) {
        struct alloc *a = allocs[i];
        if (p >= a->dev && n <= a->len && p - a->dev <= a->len - n)
            return a;
    }
    return NULL;
}

static struct reg *find_reg(uintptr_t p, size_t n) {
    for (size_t i = 0; i < regs_n; i++) {
        struct reg *r = regs[i];
        if (p >= r->p && n <= r->len && p - r->p <= r->len - n)
            return r;
    }
    return NULL;
}

static long index_of(void **table, size_t n, const void *x) {
    for (size_t i = 0; i < n; i++)
        if (table[i] == x)
            return (long)i;
    return -1;
}

static size_t pending_ops(void) {
    size_t n = 0;
    for (size_t i = 0; i < streams_n; i++)
        n += streams[i]->n;
    return n;
}

/* A pending copy that touches device range [p, p+n) or host range [h, h+hn), or NULL. */
static struct op *pending_over(uintptr_t p, size_t n, uintptr_t h, size_t hn) {
    for (size_t i = 0; i < streams_n; i++) {
        struct standin_stream *s = streams[i];
        for (size_t k = 0; k < s->n; k++) {
            struct op *o = &s->ops[(s->head + k) % s->cap];
            if ((n && overlaps(o->dev, o->len, p, n)) ||
                (hn && overlaps((uintptr_t)o->host, o->len, h, hn)))
                return o;
        }
    }
    return NULL;
}

static const char *op_name(const struct op *o) {
    return o->kind == OP_HTOD ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync";
}

/* Runs a queued copy: now, not when it was queued, is when the host memory is read/written. */
static void complete(struct op *o) {
    if (o->kind == OP_HTOD) {
        if (checksum(o->host, o->len) != o->sum)
            fatal("the host source of a cuMemcpyHtoDAsync (%zu B at %p) changed before the "
                  "copy completed: it was given back (e.g. to the kernel) before its event or "
                  "stream was waited for",
                  o->len, (void *)o->host);
        memcpy(o->shadow, o->host, o->len);
    } else {
        if (checksum(o->host, o->len) != o->sum)
            fatal("the host destination of a cuMemcpyDtoHAsync (%zu B at %p) was written by the "
                  "CPU before the copy completed",
                  o->len, (void *)o->host);
        memcpy(o->host, o->shadow, o->len);
    }
}

/* Completes stream s's copies up to and including sequence number seq. */
static void run_until(struct standin_stream *s, uint64_t seq) {
    while (s->n && s->ops[s->head].seq <= seq) {
        complete(&s->ops[s->head]);
        s->done_seq = s->ops[s->head].seq;
        s->head = (s->head + 1) % s->cap;
        s->n--;
    }
    if (s->done_seq < seq)
        s->done_seq = seq;
}

static void enqueue(struct standin_stream *s, struct op o) {
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        struct op *q = malloc(c * sizeof *q);
        if (!q)
            fatal("out of host memory for bookkeeping");
        for (size_t k = 0; k < s->n; k++)
            q[k] = s->ops[(s->head + k) % s->cap];
        free(s->ops);
        s->ops = q;
        s->cap = c;
        s->head = 0;
    }
    o.seq = ++s->enq_seq;
    s->ops[(s->head + s->n) % s->cap] = o;
    s->n++;
    size_t p = pending_ops();
    if (p > st.max_pending)
        st.max_pending = p;
}

/* Every entry point but the version, the error strings and cuInit needs cuInit first. */
#define NEED_INIT()                                                                              \
    do {                                                                                         \
        if (!initialized) {                                                                      \
            pthread_mutex_unlock(&mu);                                                           \
            return err(CUDA_ERROR_NOT_INITIALIZED);                                              \
        }                                                                                        \
    } while (0)
/* ...and the memory, stream and event calls a current context that is still retained. */
#define NEED_CTX()                                                                               \
    do {                                                                                         \
        NEED_INIT();                                                                             \
        if (current != &primary || primary.refs == 0) {                                          \
            pthread_mutex_unlock(&mu);                                                           \
            return err(CUDA_ERROR_INVALID_CONTEXT);                                              \
        }                                                                                        \
    } while (0)
#define RETURN(e)                                                                                \
    do {                                                                                         \
        CUresult r_ = (e);                                                                       \
        pthread_mutex_unlock(&mu);                                                               \
        return err(r_);                                                                          \
    } while (0)

__attribute__((constructor)) static void standin_loaded(void) { owner_pid = getpid(); }

EXPORT CUresult cuInit(unsigned int flags) {
    pthread_mutex_lock(&mu);
    if (flags != 0)
        RETURN(CUDA_ERROR_INVALID_VALUE); /* "Flags: must be 0" */
    initialized = 1;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v)
        return err(CUDA_ERROR_INVALID_VALUE);
    *v = driver_version();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!count)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *count = 1;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!dev)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (ordinal != 0)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *dev = 0;
    RETURN(CUDA_SUCCESS);
}

static CUresult fill_string(char *out, int len, CUdevice dev, const char *s) {
    if (!out || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(out, (size_t)len, "%s", s);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    RETURN(fill_string(name, len, dev, DEVICE_NAME));
}

EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    RETURN(fill_string(id, len, dev, PCI_BUS_ID));
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!v || attr <= 0 || (attr > ATTR_LAST_KNOWN && attr != ATTR_ZCNET_STANDIN))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    switch (attr) {
    case ATTR_ZCNET_STANDIN:
        *v = 1;
        break;
    case ATTR_DMA_BUF_SUPPORTED:
#ifdef STANDIN_NO_DMABUF
        RETURN(CUDA_ERROR_INVALID_VALUE); /* a driver before 11.7 does not know it */
#else
        *v = 1;
        break;
#endif
    case ATTR_GPU_DIRECT_RDMA_SUPPORTED:
    case ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
        *v = 1;
        break;
    case ATTR_COMPUTE_CAPABILITY_MAJOR:
        *v = 9;
        break;
    default:
        *v = 0;
    }
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!bytes)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    *bytes = TOTAL_MEM;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!ctx)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    primary.refs++;
    *ctx = &primary;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (dev != 0)
        RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (primary.refs == 0)
        RETURN(CUDA_ERROR_INVALID_CONTEXT); /* released more often than retained */
    if (primary.refs == 1 && (allocs_n || regs_n || streams_n || events_n))
        fatal("the primary context's last reference was released with %zu allocations, %zu "
              "host registrations, %zu streams and %zu events alive (the real driver destroys "
              "them with it)",
              allocs_n, regs_n, streams_n, events_n);
    primary.refs--;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (!ctx)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *ctx = current;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    pthread_mutex_lock(&mu);
    NEED_INIT();
    if (ctx && (ctx != &primary || primary.refs == 0))
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    current = ctx;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!dptr || size == 0)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (injected("cuMemAlloc") || size > TOTAL_MEM - st.mem_in_use)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size + page - 1) / page * page;
    void *dev = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dev == MAP_FAILED || shadow == MAP_FAILED) {
        if (dev != MAP_FAILED)
            munmap(dev, len);
        if (shadow != MAP_FAILED)
            munmap(shadow, len);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    memset(shadow, POISON, len); /* cuMemAlloc does not clear the memory */
    struct alloc *a = malloc(sizeof *a);
    if (!a)
        fatal("out of host memory for bookkeeping");
    *a = (struct alloc){(uintptr_t)dev, shadow, len};
    PUSH(allocs, a);
    st.allocs++;
    st.mem_in_use += len;
    *dptr = (CUdeviceptr)(uintptr_t)dev;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    long i = -1;
    for (size_t k = 0; k < allocs_n; k++)
        if (allocs[k]->dev == (uintptr_t)dptr)
            i = (long)k;
    if (i < 0)
        RETURN(CUDA_ERROR_INVALID_VALUE); /* not the start of an allocation */
    struct alloc *a = allocs[i];
    struct op *o = pending_over(a->dev, a->len, 0, 0);
    if (o)
        fatal("cuMemFree of %zu B of device memory while a %s of %zu B into/out of it is "
              "pending",
              a->len, op_name(o), o->len);
    munmap((void *)a->dev, a->len);
    munmap(a->shadow, a->len);
    st.mem_in_use -= a->len;
    free(a);
    REMOVE(allocs, i);
    st.frees++;
    RETURN(CUDA_SUCCESS);
}

/* Device ranges written by a synchronous cuMemcpyHtoD or a cuMemsetD8 that a non-blocking stream
 * may not see written yet: the real driver returns from cuMemcpyHtoD from pageable memory once
 * the source is staged, "but the DMA to final destination may not have completed" (CUDA driver
 * API, API synchronization behavior), and cuMemsetD8 is asynchronous with respect to the host for
 * device memory; both run on the legacy stream, which a CU_STREAM_NON_BLOCKING stream does not
 * wait for. Seen on an H100: a staged send's device-to-host copy read zeros a cuMemcpyHtoD had
 * not yet written. cuCtxSynchronize (or a synchronous copy, which orders the legacy stream)
 * makes them visible. */
#define MAX_DIRTY 64
static struct { uintptr_t p; size_t n; } dirty[MAX_DIRTY];
static size_t ndirty;

static void mark_dirty(uintptr_t p, size_t n) {
    if (ndirty == MAX_DIRTY)
        fatal("more than %d device writes outstanding on the legacy stream", MAX_DIRTY);
    dirty[ndirty].p = p;
    dirty[ndirty].n = n;
    ndirty++;
}

/* A legacy-stream write to device range [p, p+n) not yet known complete. */
static int is_dirty(uintptr_t p, size_t n) {
    for (size_t i = 0; i < ndirty; i++)
        if (p < dirty[i].p + dirty[i].n && dirty[i].p < p + n)
            return 1;
    return 0;
}

/* The shadow of device range [p, p+n), or NULL (also when n is 0). */
static unsigned char *shadow_of(CUdeviceptr p, size_t n) {
    struct alloc *a = find_alloc((uintptr_t)p, n);
    return a && n ? a->shadow + ((uintptr_t)p - a->dev) : NULL;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (n == 0)
        RETURN(CUDA_SUCCESS);
    unsigned char *d = shadow_of(dst, n);
    if (!d || !src)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct op *o = pending_over((uintptr_t)dst, n, (uintptr_t)src, n);
    if (o)
        fatal("a synchronous cuMemcpyHtoD of %zu B races with a pending %s over the same memory "
              "(the copy stream is non-blocking: wait for its event first)",
              n, op_name(o));
    memcpy(d, src, n);
    mark_dirty((uintptr_t)dst, n);
    st.sync_htod++;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (n == 0)
        RETURN(CUDA_SUCCESS);
    unsigned char *s = shadow_of(src, n);
    if (!s || !dst)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct op *o = pending_over((uintptr_t)src, n, (uintptr_t)dst, n);
    if (o)
        fatal("a synchronous cuMemcpyDtoH of %zu B races with a pending %s over the same memory "
              "(the copy stream is non-blocking: wait for its event first)",
              n, op_name(o));
    memcpy(dst, s, n);
    ndirty = 0; /* a synchronous copy waits for the legacy stream's earlier work */
    st.sync_dtoh++;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (n == 0)
        RETURN(CUDA_SUCCESS);
    unsigned char *d = shadow_of(dst, n);
    if (!d)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct op *o = pending_over((uintptr_t)dst, n, 0, 0);
    if (o)
        fatal("cuMemsetD8 of %zu B races with a pending %s over the same memory", n, op_name(o));
    memset(d, v, n);
    mark_dirty((uintptr_t)dst, n);
    st.memsets++;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSynchronize(void) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    ndirty = 0;
    st.ctx_syncs++;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!p || size == 0 || (flags & ~CU_MEMHOSTREGISTER_ALL))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < regs_n; i++)
        if (overlaps(regs[i]->p, regs[i]->len, a, size))
            RETURN(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    for (size_t i = 0; i < allocs_n; i++)
        if (overlaps(allocs[i]->dev, allocs[i]->len, a, size))
            RETURN(CUDA_ERROR_INVALID_VALUE); /* device memory is not host memory */
    /* The driver pins the pages: they must be mapped (msync fails with ENOMEM otherwise). */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = a / page * page;
    if (msync((void *)start, a + size - start, MS_ASYNC) != 0)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct reg *r = malloc(sizeof *r);
    if (!r)
        fatal("out of host memory for bookkeeping");
    *r = (struct reg){a, size};
    PUSH(regs, r);
    st.registers++;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemHostUnregister(void *p) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    long i = -1;
    for (size_t k = 0; k < regs_n; k++)
        if (regs[k]->p == (uintptr_t)p)
            i = (long)k;
    if (i < 0)
        RETURN(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED); /* must be the base given to register */
    struct reg *r = regs[i];
    struct op *o = pending_over(0, 0, r->p, r->len);
    if (o)
        fatal("cuMemHostUnregister of %zu B while a %s of %zu B from/into it is pending", r->len,
              op_name(o), o->len);
    free(r);
    REMOVE(regs, i);
    st.unregisters++;
    RETURN(CUDA_SUCCESS);
}

#ifndef STANDIN_NO_DMABUF
EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                              int type, unsigned long long flags) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!handle || size == 0 || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    /* "dptr and size must be aligned to the host page size" */
    if (dptr % page || size % page)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long known = driver_version() >= 12080 ? CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE : 0;
    if (flags & ~known)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    /* A driver that knows the PCIe mapping flag but will not map this way on this platform
     * (ZCNET_STANDIN_REFUSE_PCIE=1): what a caller must then retry without. */
    const char *refuse = getenv("ZCNET_STANDIN_REFUSE_PCIE");
    if ((flags & CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE) && refuse && *refuse == '1')
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    if (!find_alloc((uintptr_t)dptr, size))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    int fd = memfd_create("zcnet-standin-dmabuf", MFD_CLOEXEC);
    struct stat sb;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    dmabufs = grow(dmabufs, &dmabufs_cap, dmabufs_n + 1, sizeof *dmabufs);
    dmabufs[dmabufs_n++] = (struct dmabuf){fd, sb.st_ino, sb.st_dev};
    st.exports++;
    if (flags & CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)
        st.export_flags_pcie++;
    *(int *)handle = fd;
    RETURN(CUDA_SUCCESS);
}
#endif

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!s || (flags & ~CU_STREAM_NON_BLOCKING))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (injected("cuStreamCreate"))
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    struct standin_stream *x = calloc(1, sizeof *x);
    if (!x)
        fatal("out of host memory for bookkeeping");
    PUSH(streams, x);
    st.streams++;
    *s = x;
    RETURN(CUDA_SUCCESS);
}

static int live_stream(CUstream s) { return index_of((void **)streams, streams_n, s) >= 0; }
static int live_event(CUevent e) { return index_of((void **)events, events_n, e) >= 0; }

EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    long i = index_of((void **)streams, streams_n, s);
    if (i < 0)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (s->n)
        fatal("cuStreamDestroy with %zu copies pending (synchronize the stream first)", s->n);
    for (size_t k = 0; k < events_n; k++)
        if (events[k]->stream == s)
            events[k]->stream = NULL; /* its work is done */
    free(s->ops);
    free(s);
    REMOVE(streams, i);
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuStreamSynchronize(CUstream s) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!s)
        RETURN(CUDA_SUCCESS); /* the legacy stream: zcnet queues nothing on it */
    if (!live_stream(s))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    run_until(s, s->enq_seq);
    RETURN(CUDA_SUCCESS);
}

/* Queues a copy on s, or does it now: on the legacy stream, or from/to pageable host memory
 * (where the real driver's "async" copy is synchronous too). */
static CUresult copy_async(enum op_kind kind, unsigned char *host, CUdeviceptr dev, size_t n,
                           CUstream s) {
    if (s && !live_stream(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (n == 0)
        return CUDA_SUCCESS;
    unsigned char *sh = shadow_of(dev, n);
    if (!sh || !host)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s || !find_reg((uintptr_t)host, n)) {
        struct op *o = pending_over((uintptr_t)dev, n, (uintptr_t)host, n);
        if (o)
            fatal("a synchronous %s of %zu B races with a pending %s over the same memory",
                  kind == OP_HTOD ? "HtoD" : "DtoH", n, op_name(o));
        if (kind == OP_HTOD)
            memcpy(sh, host, n);
        else
            memcpy(host, sh, n);
        if (s)
            st.pageable_async++;
        return CUDA_SUCCESS;
    }
    if (is_dirty((uintptr_t)dev, n))
        fatal("an asynchronous %s of %zu B on a non-blocking stream touches device memory that a "
              "synchronous cuMemcpyHtoD or cuMemsetD8 may still be writing on the legacy stream "
              "(the real driver does not order them): cuCtxSynchronize after the write",
              kind == OP_HTOD ? "HtoD" : "DtoH", n);
    struct op o = {kind, 0, host, (uintptr_t)dev, sh, n, 0};
    if (kind == OP_HTOD) {
        o.sum = checksum(host, n);
        memset(sh, POISON, n); /* the destination holds junk until the copy completes */
        st.async_htod++;
    } else {
        memset(host, POISON, n);
        o.sum = checksum(host, n);
        st.async_dtoh++;
    }
    enqueue(s, o);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    RETURN(copy_async(OP_HTOD, (unsigned char *)src, dst, n, s));
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    RETURN(copy_async(OP_DTOH, dst, src, n, s));
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!e || (flags & ~CU_EVENT_ALL))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (injected("cuEventCreate"))
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    struct standin_event *x = calloc(1, sizeof *x);
    if (!x)
        fatal("out of host memory for bookkeeping");
    PUSH(events, x);
    st.events++;
    *e = x;
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!live_event(e) || (s && !live_stream(s)))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    e->stream = s;
    e->seq = s ? s->enq_seq : 0;
    e->not_ready_left = not_ready_answers();
    RETURN(CUDA_SUCCESS);
}

static int event_done(CUevent e) { return !e->stream || e->stream->done_seq >= e->seq; }

EXPORT CUresult cuEventQuery(CUevent e) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!live_event(e))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (event_done(e))
        RETURN(CUDA_SUCCESS);
    if (e->not_ready_left > 0) {
        e->not_ready_left--;
        st.not_ready++;
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_NOT_READY; /* not an error: the work is pending */
    }
    run_until(e->stream, e->seq);
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuEventSynchronize(CUevent e) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    if (!live_event(e))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!event_done(e))
        run_until(e->stream, e->seq);
    RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    pthread_mutex_lock(&mu);
    NEED_CTX();
    long i = index_of((void **)events, events_n, e);
    if (i < 0)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* A pending event may be destroyed: the driver releases it once its work completed. */
    free(e);
    REMOVE(events, i);
    RETURN(CUDA_SUCCESS);
}

static const struct {
    int code;
    const char *name, *text;
} ERRORS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_text(CUresult code, const char **out, int name) {
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == code) {
            *out = name ? ERRORS[i].name : ERRORS[i].text;
            return CUDA_SUCCESS;
        }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult code, const char **s) { return error_text(code, s, 1); }
EXPORT CUresult cuGetErrorString(CUresult code, const char **s) { return error_text(code, s, 0); }

/* How many exported dma-buf fds are still open in this process (the same file). */
static size_t open_dmabufs(void) {
    size_t n = 0;
    for (size_t i = 0; i < dmabufs_n; i++) {
        struct stat sb;
        if (fstat(dmabufs[i].fd, &sb) == 0 && sb.st_ino == dmabufs[i].ino &&
            sb.st_dev == dmabufs[i].dev)
            n++;
    }
    return n;
}

static void write_summary(const char *violation) {
    const char *path = getenv("ZCNET_STANDIN_SUMMARY");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f,
            "standin=zcnet stand-in libcuda (not a GPU)\ndevice=%s\ndriver_version=%d\n"
            "dmabuf_export=%s\nviolation=%s\n"
            "leaked_allocations=%zu\nleaked_registrations=%zu\nleaked_streams=%zu\n"
            "leaked_events=%zu\nleaked_contexts=%d\nleaked_dmabuf_fds=%zu\npending_copies=%zu\n"
            "allocs=%llu\nfrees=%llu\nregisters=%llu\nunregisters=%llu\nstreams=%llu\n"
            "events=%llu\nasync_htod=%llu\nasync_dtoh=%llu\npageable_async=%llu\n"
            "sync_htod=%llu\nsync_dtoh=%llu\nmemsets=%llu\nctx_syncs=%llu\nexports=%llu\n"
            "export_flags_pcie=%llu\nnot_ready=%llu\ninjected_failures=%llu\nerrors=%llu\n"
            "max_pending=%llu\n",
            DEVICE_NAME, driver_version(),
#ifdef STANDIN_NO_DMABUF
            "absent",
#else
            "present",
#endif
            violation ? violation : "none", allocs_n, regs_n, streams_n, events_n, primary.refs,
            open_dmabufs(), pending_ops(), st.allocs, st.frees, st.registers, st.unregisters,
            st.streams, st.events, st.async_htod, st.async_dtoh, st.pageable_async, st.sync_htod,
            st.sync_dtoh, st.memsets, st.ctx_syncs, st.exports, st.export_flags_pcie, st.not_ready, st.injected,
            st.errors, st.max_pending);
    fclose(f);
}

__attribute__((destructor)) static void standin_unloaded(void) {
    if (getpid() != owner_pid)
        return; /* a forked child: the parent owns (and reports) this state */
    pthread_mutex_lock(&mu);
    size_t dmabuf = open_dmabufs();
    size_t leaks = allocs_n + regs_n + streams_n + events_n + (size_t)primary.refs + dmabuf;
    write_summary(NULL);
    if (leaks) {
        fprintf(stderr,
                "zcnet stand-in libcuda (not a GPU): leaked at exit: %zu allocations, %zu host "
                "registrations, %zu streams, %zu events, %d primary context references, %zu "
                "dma-buf fds\n",
                allocs_n, regs_n, streams_n, events_n, primary.refs, dmabuf);
        _exit(86);
    }
    pthread_mutex_unlock(&mu);
}
