/*
 * nic_recv.c: receive one TCP stream on a NIC queue through zcnet's C API and check every byte.
 *
 *   nic_recv --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem] [--mem host|udmabuf]
 *            [--area BYTES] [--seed N] [--timeout SECONDS]
 *
 * zcrx (io_uring zero-copy receive) into a host area zcnet registers (--mem host), or into a
 * udmabuf region (--mem udmabuf: host pages the NIC writes through a dma-buf, bound with
 * zcnet_receiver_new_in); devmem TCP into a udmabuf region. Bytes in host memory are read where
 * the NIC wrote them (the event's `data`); bytes in the dma-buf (`data` NULL) are copied out with
 * zcnet_receiver_read before the buffer goes back. Every byte is compared with zcnet's seeded
 * pattern (what `zcnet send --verify --seed N` sends); the receiver's accounting is printed as
 * one JSON object on stdout. The flow must already be steered to the queue with header split on:
 * `zcnet nic setup --iface IF --queue Q --port PORT -- ./nic_recv ...` (scripts/hw-suite.sh's
 * c-zcrx, c-zcrx-udmabuf and c-devmem tests run it so on the software NIC, kmod/zcnic).
 *
 * Exit status: 0 every byte verified; 1 a refusal (the kernel's, with zcnet's line naming the
 * fix), a wrong byte, or the time limit (SIGALRM); 2 bad arguments.
 *
 * Build (from the repository root, after `cargo build -p zcnet-ffi`):
 *   cc -std=c11 -Wall -Wextra -O2 -Iinclude examples/c/nic_recv.c \
 *      -Ltarget/debug -lzcnet_ffi -Wl,-rpath,$PWD/target/debug -o nic_recv
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zcnet.h"

#define USAGE                                                                                  \
    "nic_recv --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem] [--mem host|udmabuf] " \
    "[--area BYTES] [--seed N] [--timeout SECONDS]"

/* The one-line refusal of a bad argument: exit 2. */
static void bad(const char *what, const char *value) {
    fprintf(stderr, "nic_recv: %s%s%s (usage: %s)\n", what, value ? ": " : "", value ? value : "",
            USAGE);
    exit(2);
}

/* A number, with an optional K, M or G (binary) suffix. */
static uint64_t number(const char *flag, const char *v) {
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 10);
    uint64_t mul = 1;
    if (end == v)
        bad(flag, "wants a number");
    if (*end == 'K' || *end == 'k')
        mul = 1 << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1 << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1 << 30, end++;
    if (*end != '\0' || n > UINT64_MAX / mul)
        bad(flag, "wants a number (K, M, G allowed)");
    return (uint64_t)n * mul;
}

/* Seconds on the monotonic clock. */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Prints the failed call with its status name and zcnet's message; exits 1. */
static void die(const char *what, zcnet_status st) {
    fprintf(stderr, "nic_recv: %s: %s: %s\n", what, zcnet_status_name(st), zcnet_last_error());
    exit(1);
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        zcnet_status st_ = (call);                                                             \
        if (st_ != ZCNET_OK)                                                                   \
            die(#call, st_);                                                                   \
    } while (0)

int main(int argc, char **argv) {
    const char *listen = NULL, *iface = NULL, *rx_name = "zcrx", *mem = "host";
    uint64_t queue = UINT64_MAX, area = 0, seed = 1, timeout = 120;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            printf("usage: %s\n", USAGE);
            return 0;
        }
        if (i + 1 >= argc)
            bad(flag, "wants a value");
        const char *v = argv[++i];
        if (strcmp(flag, "--listen") == 0)
            listen = v;
        else if (strcmp(flag, "--iface") == 0)
            iface = v;
        else if (strcmp(flag, "--queue") == 0)
            queue = number(flag, v);
        else if (strcmp(flag, "--rx") == 0)
            rx_name = v;
        else if (strcmp(flag, "--mem") == 0)
            mem = v;
        else if (strcmp(flag, "--area") == 0)
            area = number(flag, v);
        else if (strcmp(flag, "--seed") == 0)
            seed = number(flag, v);
        else if (strcmp(flag, "--timeout") == 0)
            timeout = number(flag, v);
        else
            bad("unknown argument", flag);
    }
    if (!listen)
        bad("--listen IP:PORT is needed", NULL);
    if (!iface)
        bad("--iface IF is needed: the NIC whose queue the flow is steered to", NULL);
    if (strlen(iface) >= sizeof(((zcnet_rx_config *)0)->iface))
        bad("--iface names no interface (15 characters at most)", iface);
    if (queue != UINT64_MAX && queue > UINT32_MAX)
        bad("--queue wants a queue number", NULL);
    if (timeout == 0 || timeout > UINT32_MAX)
        bad("--timeout wants whole seconds above 0", NULL);
    int udmabuf = strcmp(mem, "udmabuf") == 0;
    if (!udmabuf && strcmp(mem, "host") != 0)
        bad("--mem: give host or udmabuf", mem);
    zcnet_rx_config cfg = {0};
    if (strcmp(rx_name, "zcrx") == 0)
        cfg.mode = ZCNET_RX_ZCRX;
    else if (strcmp(rx_name, "devmem") == 0)
        cfg.mode = ZCNET_RX_DEVMEM;
    else
        bad("--rx: give zcrx or devmem (a NIC queue's receive modes)", rx_name);
    if (cfg.mode == ZCNET_RX_DEVMEM && !udmabuf)
        bad("--rx devmem lands the payload in a dma-buf: add --mem udmabuf to read it back", NULL);
    memcpy(cfg.iface, iface, strlen(iface) + 1);
    if (queue != UINT64_MAX) {
        cfg.queue = (uint32_t)queue;
        cfg.flags |= ZCNET_RX_QUEUE;
    }
    /* The time limit: SIGALRM's default action ends the process (exit status 1 in the suite's
     * eyes: not 0). */
    alarm((unsigned)timeout);

    zcnet_receiver *rx = NULL;
    if (udmabuf) {
        /* The NIC writes into this memory through its dma-buf; the receiver takes it. */
        zcnet_region *region = NULL;
        CHECK(zcnet_region_new("udmabuf", area ? (size_t)area : (size_t)64 << 20, &region));
        zcnet_status st = zcnet_receiver_new_in(&cfg, region, &rx);
        zcnet_region_free(region); /* the handle, either way */
        if (st != ZCNET_OK)
            die("zcnet_receiver_new_in", st);
    } else {
        cfg.area_len = area; /* 0: zcnet's default area */
        CHECK(zcnet_receiver_new(&cfg, &rx));
    }
    const char *mode = "?";
    CHECK(zcnet_receiver_mode(rx, &mode));
    CHECK(zcnet_receiver_listen(rx, listen));
    fprintf(stderr, "nic_recv: listening on %s with %s\n", listen, mode);
    uint64_t conn = 0;
    CHECK(zcnet_receiver_accept(rx, &conn));

    uint8_t *want = NULL, *got = NULL;
    size_t room = 0;
    uint64_t at = 0, device_bytes = 0;
    double start = 0, end = 0; /* from the first byte to the end of the stream */
    for (int eof = 0; !eof;) {
        zcnet_rx_event ev[16];
        size_t n = 0;
        CHECK(zcnet_receiver_poll(rx, ev, 16, 100, &n));
        for (size_t k = 0; k < n; k++) {
            if (ev[k].kind == ZCNET_RX_EOF) {
                eof = 1;
                end = now();
                continue;
            }
            if (ev[k].kind != ZCNET_RX_DATA) {
                fprintf(stderr, "nic_recv: receive failed: %s: %s\n",
                        zcnet_status_name(ev[k].status), ev[k].error);
                return 1;
            }
            size_t len = (size_t)ev[k].len;
            if (at == 0)
                start = now();
            if (len > room) {
                free(want);
                free(got);
                room = len;
                want = malloc(room);
                got = malloc(room);
                if (!want || !got) {
                    fprintf(stderr, "nic_recv: out of memory\n");
                    return 1;
                }
            }
            const uint8_t *bytes = ev[k].data;
            if (!bytes) {
                /* In the dma-buf: copied out while the buffer is still lent. */
                CHECK(zcnet_receiver_read(rx, ev[k].buf, got, len));
                bytes = got;
                device_bytes += len;
            }
            CHECK(zcnet_pattern_fill(seed, at, want, len));
            if (memcmp(bytes, want, len) != 0) {
                size_t i = 0;
                while (bytes[i] == want[i])
                    i++;
                fprintf(stderr,
                        "nic_recv: wrong byte at stream offset %" PRIu64 ": 0x%02x, not 0x%02x\n",
                        at + i, bytes[i], want[i]);
                return 1;
            }
            at += len;
            CHECK(zcnet_receiver_release(rx, ev[k].buf)); /* back to the kernel */
        }
    }
    CHECK(zcnet_receiver_close(rx, conn));
    zcnet_rx_stats s;
    CHECK(zcnet_receiver_stats(rx, &s));
    if (at == 0) {
        fprintf(stderr, "nic_recv: nothing to verify: 0 B of payload arrived\n");
        return 1;
    }
    printf("{\"api\": \"c\", \"rx\": \"%s\", \"mem\": \"%s\", \"bytes\": %" PRIu64
           ", \"seconds\": %.3f, \"verified\": true, \"zerocopy_bytes\": %" PRIu64 ", \"copied_bytes\": %" PRIu64
           ", \"unknown_copy_bytes\": %" PRIu64 ", \"device_bytes\": %" PRIu64
           ", \"unsteered\": %" PRIu64 ", \"linear_fallbacks\": %" PRIu64 ", \"buffers\": %" PRIu64
           ", \"held\": %" PRIu64 "}\n",
           mode, mem, at, end - start, s.zerocopy_bytes, s.copied_bytes, s.unknown_copy_bytes, device_bytes,
           s.unsteered, s.linear_fallbacks, s.buffers, s.held);
    free(want);
    free(got);
    zcnet_receiver_free(rx);
    return 0;
}
