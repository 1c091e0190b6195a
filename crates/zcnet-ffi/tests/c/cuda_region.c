/* The C ABI where it touches CUDA memory, run by tests/cuda_standin.rs against the CUDA driver
 * stand-in (not a GPU). argv[1]: "IP:PORT" of a listener that reads what this program sends,
 * or "-" to send nothing.
 * Prints "name=value" facts for the test to check; exits 1 at the first unexpected result. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zcnet.h"

#define SEED 7
#define TOTAL (4u << 20)

static int fail(const char *what, enum zcnet_status s) {
    printf("FAILED %s: %s: %s\n", what, zcnet_status_name(s), zcnet_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
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
