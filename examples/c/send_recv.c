/*
 * send_recv.c: zcnet's C API in one process.
 *
 * A receiver listens on 127.0.0.1 (a port the kernel picks), a sender thread connects to it
 * and sends 8 MiB of a known pattern written straight into the sender's buffers, and the
 * receiver checks every byte it is lent before giving the buffer back. Prints what each side
 * did (bytes the kernel sent without copying vs copied) and exits 0 only when every byte
 * arrived, in order, and the accounting adds up.
 *
 * Build (from the repository root, after `cargo build -p zcnet-ffi`):
 *   cc -std=c11 -Wall -Wextra -O2 -Iinclude examples/c/send_recv.c \
 *      -Ltarget/debug -lzcnet_ffi -Wl,-rpath,$PWD/target/debug -lpthread -o send_recv
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcnet.h"

#define TOTAL_BYTES ((uint64_t)8 << 20)

/* Byte i of the stream: position-dependent, so loss, duplication and reordering all show. */
static uint8_t pattern_byte(uint64_t i) {
    uint64_t x = (i / 8 + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (uint8_t)(x >> (8 * (i % 8)));
}

/* Prints the failed call with its status name and zcnet's message; returns 0. */
static int report(const char *what, zcnet_status st) {
    fprintf(stderr, "send_recv: %s failed: %s: %s\n", what, zcnet_status_name(st),
            zcnet_last_error());
    return 0;
}

#define CHECK(call)                                                                            \
    do {                                                                                       \
        zcnet_status st_ = (call);                                                             \
        if (st_ != ZCNET_OK) {                                                                 \
            report(#call, st_);                                                                \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

struct sender_job {
    uint16_t port;
    atomic_int done; /* 1: finished, 2: failed */
    zcnet_tx_stats stats;
    const char *mode;
};

static void *sender_main(void *arg) {
    struct sender_job *job = arg;
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)job->port);
    zcnet_tx_config cfg = {0}; /* every default: ZCNET_TX_AUTO, 8 x 64 KiB buffers */
    zcnet_sender *tx = NULL;
    zcnet_status st = zcnet_sender_connect(addr, &cfg, NULL, &tx);
    if (st != ZCNET_OK) {
        /* The receiver waits in accept for this connection: nothing else can end it. */
        report("zcnet_sender_connect", st);
        exit(1);
    }
    CHECK(zcnet_sender_mode(tx, &job->mode));
    for (uint64_t off = 0; off < TOTAL_BYTES;) {
        zcnet_txbuf buf;
        CHECK(zcnet_sender_buffer(tx, &buf)); /* waits until the kernel let go of one */
        uint64_t n = TOTAL_BYTES - off < buf.capacity ? TOTAL_BYTES - off : buf.capacity;
        for (uint64_t i = 0; i < n; i++)
            buf.data[i] = pattern_byte(off + i); /* written in place: no copy of ours */
        CHECK(zcnet_sender_send(tx, buf.id, (size_t)n));
        off += n;
    }
    CHECK(zcnet_sender_finish(tx, &job->stats)); /* every completion and notification in */
    zcnet_sender_free(tx);
    atomic_store(&job->done, 1);
    return NULL;
fail:
    zcnet_sender_free(tx); /* closes the connection: the receiver sees its end */
    atomic_store(&job->done, 2);
    return NULL;
}

int main(void) {
    printf("zcnet %s\n", zcnet_version());

    /* The error path: a NULL where a pointer is needed is refused, with a message. */
    zcnet_status st = zcnet_receiver_new(NULL, NULL);
    const char *msg = zcnet_last_error();
    printf("error path: %s: %s\n", zcnet_status_name(st), msg);
    if (st != ZCNET_E_INVALID || msg[0] == '\0')
        return 1;

    zcnet_receiver *rx = NULL;
    zcnet_rx_config rcfg = {0}; /* ZCNET_RX_AUTO: the best receive mode that works here */
    struct sender_job job = {0};
    pthread_t sender;
    int started = 0;
    uint64_t conn = 0, got = 0, bad_at = UINT64_MAX;
    int eof = 0;
    const char *rx_mode = "?";

    CHECK(zcnet_receiver_new(&rcfg, &rx));
    CHECK(zcnet_receiver_mode(rx, &rx_mode));
    CHECK(zcnet_receiver_listen(rx, "127.0.0.1:0"));
    CHECK(zcnet_receiver_local_port(rx, &job.port));
    printf("receiver: listening on 127.0.0.1:%u with %s\n", (unsigned)job.port, rx_mode);
    if (pthread_create(&sender, NULL, sender_main, &job) != 0) {
        fprintf(stderr, "send_recv: pthread_create failed\n");
        goto fail;
    }
    started = 1;
    CHECK(zcnet_receiver_accept(rx, &conn));

    while (!eof) {
        zcnet_rx_event ev[16];
        size_t n = 0;
        CHECK(zcnet_receiver_poll(rx, ev, 16, 100, &n));
        for (size_t k = 0; k < n; k++) {
            if (ev[k].kind == ZCNET_RX_DATA) {
                for (uint64_t i = 0; i < ev[k].len; i++)
                    if (ev[k].data[i] != pattern_byte(got + i) && bad_at == UINT64_MAX)
                        bad_at = got + i;
                got += ev[k].len;
                CHECK(zcnet_receiver_release(rx, ev[k].buf)); /* back to the kernel */
            } else if (ev[k].kind == ZCNET_RX_EOF) {
                eof = 1;
            } else {
                fprintf(stderr, "send_recv: receive failed: %s\n", ev[k].error);
                goto fail;
            }
        }
        if (n == 0 && atomic_load(&job.done) == 2)
            goto fail;
    }
    pthread_join(sender, NULL);
    started = 0;

    zcnet_rx_stats rs;
    CHECK(zcnet_receiver_stats(rx, &rs));
    zcnet_tx_stats *ts = &job.stats;
    printf("sender: mode=%s bytes=%" PRIu64 " zerocopy=%" PRIu64 " copied=%" PRIu64
           " notifications=%" PRIu64 " switches=%" PRIu64 "\n",
           job.mode, ts->bytes, ts->zerocopy_bytes, ts->copied_bytes, ts->notifications,
           ts->switches);
    printf("receiver: mode=%s bytes=%" PRIu64 " zerocopy=%" PRIu64 " copied=%" PRIu64
           " buffers=%" PRIu64 " held=%" PRIu64 "\n",
           rx_mode, rs.bytes, rs.zerocopy_bytes, rs.copied_bytes, rs.buffers, rs.held);
    zcnet_receiver_free(rx);
    rx = NULL;

    if (atomic_load(&job.done) != 1 || got != TOTAL_BYTES || bad_at != UINT64_MAX ||
        ts->bytes != TOTAL_BYTES || ts->zerocopy_bytes + ts->copied_bytes != ts->bytes ||
        rs.held != 0) {
        fprintf(stderr,
                "send_recv: FAILED: %" PRIu64 " of %" PRIu64 " bytes, first wrong byte %" PRId64
                " (-1: none)\n",
                got, TOTAL_BYTES, bad_at == UINT64_MAX ? (int64_t)-1 : (int64_t)bad_at);
        return 1;
    }
    printf("verified %" PRIu64 " bytes: OK\n", got);
    return 0;

fail:
    zcnet_receiver_free(rx);
    if (started)
        pthread_join(sender, NULL);
    return 1;
}
