/* The C ABI where it touches CUDA memory, run by tests/cuda_standin.rs against the CUDA driver
 * stand-in (not a GPU). argv[1]: "IP:PORT" of a listener that reads what this program sends,
 * "-" to send nothing, or "recv" to receive a pattern a thread here writes over loopback into a
 * CUDA region (zcnet_receiver_copy_to_device) and read it back.
 * Prints "name=value" facts for the test to check; exits 1 at the first unexpected result. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "zcnet.h"

#define SEED 7
#define TOTAL (4u << 20)

static int fail(const char *what, enum zcnet_status s) {
    printf("FAILED %s: %s: %s\n", what, zcnet_status_name(s), zcnet_last_error());
    return 1;
}

#define RX_TOTAL ((3u << 20) + 77)

struct writer_job {
    uint16_t port;
    size_t total;
    int ok;
};

/* Connects to 127.0.0.1:port and writes `total` bytes of the pattern, then closes. */
static void *writer(void *arg) {
    struct writer_job *job = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(job->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        return NULL;
    static uint8_t chunk[65536];
    size_t off = 0;
    while (off < job->total) {
        size_t n = job->total - off < sizeof chunk ? job->total - off : sizeof chunk;
        zcnet_pattern_fill(SEED, off, chunk, n);
        for (size_t w = 0; w < n;) {
            ssize_t k = write(fd, chunk + w, n - w);
            if (k <= 0) {
                close(fd);
                return NULL;
            }
            w += (size_t)k;
        }
        off += n;
    }
    close(fd);
    job->ok = 1;
    return NULL;
}

/* A receiver of `mode` listening on loopback, a writer thread connected to it, and the
 * connection accepted. */
static enum zcnet_status start(uint32_t mode, size_t total, struct zcnet_receiver **rx,
                               pthread_t *t, struct writer_job *job) {
    struct zcnet_rx_config cfg = {0};
    cfg.mode = mode;
    cfg.buf_size = 65536;
    enum zcnet_status s;
    uint64_t conn = 0;
    if ((s = zcnet_receiver_new(&cfg, rx)) != ZCNET_OK ||
        (s = zcnet_receiver_listen(*rx, "127.0.0.1:0")) != ZCNET_OK ||
        (s = zcnet_receiver_local_port(*rx, &job->port)) != ZCNET_OK)
        return s;
    job->total = total;
    job->ok = 0;
    if (pthread_create(t, NULL, writer, job) != 0)
        return ZCNET_E_IO;
    return zcnet_receiver_accept(*rx, &conn);
}

static int receive_into_device(void) {
    struct zcnet_region *dev = NULL, *host = NULL;
    enum zcnet_status s;
    if ((s = zcnet_region_new("cuda", RX_TOTAL, &dev)) != ZCNET_OK ||
        (s = zcnet_region_new("host", 1 << 20, &host)) != ZCNET_OK)
        return fail("zcnet_region_new", s);
    struct zcnet_rx_event ev[16];
    size_t n = 0;

    /* A copy-mode receiver's buffers are not a ring zcnet can pin: refused, the buffer still
     * lent. */
    struct zcnet_receiver *rx = NULL;
    pthread_t t;
    struct writer_job job;
    if ((s = start(ZCNET_RX_COPY, 65536, &rx, &t, &job)) != ZCNET_OK)
        return fail("start (copy)", s);
    do {
        if ((s = zcnet_receiver_poll(rx, ev, 1, 1000, &n)) != ZCNET_OK)
            return fail("zcnet_receiver_poll (copy)", s);
    } while (n == 0);
    if (ev[0].kind != ZCNET_RX_DATA)
        return fail("no data (copy)", ZCNET_OK);
    s = zcnet_receiver_copy_to_device(rx, ev[0].buf, dev, 0);
    printf("copy_mode_status=%s\n", zcnet_status_name(s));
    printf("copy_mode_release=%s\n", zcnet_status_name(zcnet_receiver_release(rx, ev[0].buf)));
    pthread_join(t, NULL);
    zcnet_receiver_free(rx);

    /* uring: every buffer copied to the device at its stream offset, given back by the copy. */
    if ((s = start(ZCNET_RX_URING, RX_TOTAL, &rx, &t, &job)) != ZCNET_OK)
        return fail("start (uring)", s);
    uint64_t off = 0;
    int eof = 0, first = 1;
    while (!eof) {
        if ((s = zcnet_receiver_poll(rx, ev, 16, 1000, &n)) != ZCNET_OK)
            return fail("zcnet_receiver_poll", s);
        for (size_t k = 0; k < n; k++) {
            if (ev[k].kind == ZCNET_RX_EOF) {
                eof = 1;
            } else if (ev[k].kind != ZCNET_RX_DATA) {
                return fail("receive failed", ev[k].status);
            } else {
                if (first) {
                    /* Host memory is no target; an unknown buffer is no buffer. */
                    s = zcnet_receiver_copy_to_device(rx, ev[k].buf, host, 0);
                    printf("host_region_status=%s\n", zcnet_status_name(s));
                    s = zcnet_receiver_copy_to_device(rx, 999999, dev, 0);
                    printf("unknown_buf_status=%s\n", zcnet_status_name(s));
                    first = 0;
                }
                if ((s = zcnet_receiver_copy_to_device(rx, ev[k].buf, dev, off)) != ZCNET_OK)
                    return fail("zcnet_receiver_copy_to_device", s);
                off += ev[k].len;
            }
        }
    }
    if ((s = zcnet_receiver_device_wait(rx)) != ZCNET_OK)
        return fail("zcnet_receiver_device_wait", s);
    pthread_join(t, NULL);
    struct zcnet_rx_stats st;
    if ((s = zcnet_receiver_stats(rx, &st)) != ZCNET_OK)
        return fail("zcnet_receiver_stats", s);
    uint8_t *got = malloc(RX_TOTAL), *want = malloc(RX_TOTAL);
    if (!got || !want)
        return fail("malloc", ZCNET_OK);
    if ((s = zcnet_region_read(dev, 0, got, (size_t)off)) != ZCNET_OK)
        return fail("zcnet_region_read", s);
    zcnet_pattern_fill(SEED, 0, want, (size_t)off);
    printf("writer_ok=%d\nrecv_bytes=%" PRIu64 "\nrecv_verified=%d\nheld=%" PRIu64 "\n", job.ok,
           off, memcmp(got, want, (size_t)off) == 0, st.held);
    size_t dev_len = 0;
    if ((s = zcnet_region_len(dev, &dev_len)) != ZCNET_OK)
        return fail("zcnet_region_len", s);
    s = zcnet_region_read(dev, dev_len - 10, got, 11);
    printf("read_outside_status=%s\n", zcnet_status_name(s));
    free(got);
    free(want);
    zcnet_receiver_free(rx);
    zcnet_region_free(dev);
    zcnet_region_free(host);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    if (strcmp(argv[1], "recv") == 0)
        return receive_into_device();
    struct zcnet_region *bad = NULL;
    enum zcnet_status s = zcnet_region_new("cuda:5", 1 << 20, &bad);
    printf("cuda5_status=%s\ncuda5_error=%s\n", zcnet_status_name(s), zcnet_last_error());
    if (s == ZCNET_OK || bad != NULL)
        return fail("cuda:5 exists?", s);

    char *json = NULL;
    s = zcnet_probe_json("lo", 1, &json);
    if (s != ZCNET_OK)
        return fail("zcnet_probe_json", s);
    printf("probe_names_stand_in=%d\nprobe_export_confirmed=%d\n",
           strstr(json, "\"zcnet stand-in\"") != NULL, strstr(json, "\"confirmed\"") != NULL);
    zcnet_string_free(json);

    struct zcnet_region *region = NULL;
    if ((s = zcnet_region_new("cuda", 1 << 20, &region)) != ZCNET_OK)
        return fail("zcnet_region_new(cuda)", s);
    int32_t ordinal = -2;
    size_t len = 0;
    if ((s = zcnet_region_device(region, &ordinal)) != ZCNET_OK ||
        (s = zcnet_region_len(region, &len)) != ZCNET_OK)
        return fail("region facts", s);
    printf("region_device=%" PRId32 "\nregion_len=%zu\n", ordinal, len);

    if (strcmp(argv[1], "-") == 0) {
        zcnet_region_free(region);
        return 0;
    }
    struct zcnet_sender *tx = NULL;
    s = zcnet_sender_connect(argv[1], NULL, region, &tx);
    printf("connect_status=%s\n", zcnet_status_name(s));
    if (s != ZCNET_OK) {
        printf("connect_error=%s\n", zcnet_last_error());
        zcnet_region_free(region);
        return 0;
    }
    const char *mode = NULL;
    zcnet_sender_mode(tx, &mode);
    printf("mode=%s\n", mode ? mode : "?");
    static uint8_t chunk[65536];
    uint64_t off = 0;
    int null_data = 1;
    while (off < TOTAL) {
        struct zcnet_txbuf b;
        if ((s = zcnet_sender_buffer(tx, &b)) != ZCNET_OK)
            return fail("zcnet_sender_buffer", s);
        null_data &= b.data == NULL;
        size_t n = b.capacity < sizeof chunk ? (size_t)b.capacity : sizeof chunk;
        if (n > TOTAL - off)
            n = (size_t)(TOTAL - off);
        zcnet_pattern_fill(SEED, off, chunk, n);
        size_t written = 0;
        if ((s = zcnet_sender_write(tx, b.id, chunk, n, &written)) != ZCNET_OK || written != n)
            return fail("zcnet_sender_write", s);
        if ((s = zcnet_sender_send(tx, b.id, n)) != ZCNET_OK)
            return fail("zcnet_sender_send", s);
        off += n;
    }
    struct zcnet_tx_stats st;
    if ((s = zcnet_sender_finish(tx, &st)) != ZCNET_OK)
        return fail("zcnet_sender_finish", s);
    printf("device_buffers_have_no_data_pointer=%d\nsent=%" PRIu64 "\n", null_data, st.bytes);
    zcnet_sender_free(tx);
    zcnet_region_free(region);
    return 0;
}
