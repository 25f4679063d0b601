/* Fuzz target: what a process under the shim parses from bytes another
 * process controls: CUDA IPC handles (anyone may pass one to
 * cuIpcOpenMemHandle), socket messages (what a client sends a server: on
 * the import socket, any user of the network namespace) and the
 * exporter's replies to an importer. Built with clang
 * -fsanitize=fuzzer (see meson.build); any crash, sanitizer report or
 * broken property is a bug.
 *
 * Properties: a handle that decodes encodes back to the same 64 bytes and
 * its fields add up; a message that parses frames back to the same bytes;
 * a reply that parses stays inside its buffer and its batch. */
#include "ctl/proto.h"
#include "preload/ipc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void handle(const uint8_t *data, size_t size)
{
    struct gvm_ipc_handle h;
    if (gvm_ipc_decode(data, size, &h) != GVM_IPC_OK) return;
    uint8_t again[CU_IPC_HANDLE_SIZE];
    gvm_ipc_encode(&h, again);
    if (memcmp(again, data, sizeof again)) abort();
    if (h.offset >= h.extent || h.size > h.extent - h.offset || !h.npieces || !h.endpoint) abort();
}

static void message(const uint8_t *data, size_t size)
{
    struct gvm_ctl_msg m;
    if (gvm_ctl_parse(data, size, &m)) return;
    static uint8_t again[GVM_CTL_MSG_MAX];
    size_t n = gvm_ctl_frame(again, sizeof again, m.type, m.payload, m.len);
    /* Flags are not framed yet: compare what is. */
    if (n != size || memcmp(again + 4, data + 4, n - 4) || again[0] != data[0] || again[1] != data[1]) abort();
    struct gvm_ipc_reply r;
    if (gvm_ipc_parse_reply(m.payload, m.len, &r)) return;
    if (r.count > GVM_IPC_BATCH || r.sizes + 8 * (size_t)r.count > m.payload + m.len) abort();
    if (!r.status && (r.first >= r.total || r.count > r.total - r.first)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    handle(data, size);
    /* A valid checksum is out of the fuzzer's reach by chance: also try
     * the input as handle fields, sealed. */
    if (size >= 44) {
        struct gvm_ipc_handle h = {0};
        memcpy(&h.endpoint, data, 8);
        memcpy(h.id, data + 8, 16);
        memcpy(&h.offset, data + 24, 8);
        memcpy(&h.size, data + 32, 8);
        memcpy(&h.extent, data + 40, 4);
        h.npieces = size > 44 ? data[44] : 1;
        uint8_t b[CU_IPC_HANDLE_SIZE];
        gvm_ipc_encode(&h, b);
        handle(b, sizeof b);
    }
    message(data, size);
    return 0;
}
