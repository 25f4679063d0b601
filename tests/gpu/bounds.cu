/* Copies and sets at the end of cudaMalloc'd buffers: the cases measured on
 * an H200 (one byte past the end of a 1000-byte and a 3,000,000-byte
 * buffer is cudaErrorInvalidValue for H2D, D2H, D2D and memset alike). The
 * program runs natively and under the shim (gpu-bounds, gpu-bounds-native):
 * both runs must print and accept the same codes, and a refused call must
 * leave the bytes after the buffer (a neighbour's, under the shim) alone.
 *
 *   whole buffer: success; one byte past: invalid value; one byte past
 *   from an offset; 2D copy and 2D memset whose last row runs one byte
 *   past; the neighbouring buffer keeps its bytes. */
#include "gpu_test.h"

#include <vector>

using namespace gt;

static Gvm gvm;

/* The answer of one call, printed so the two runs can be compared. */
static void expect(const char *what, size_t n, cudaError_t got, cudaError_t want)
{
    (void)cudaGetLastError();   /* invalid value is not sticky: clear it */
    printf("     %-34s %9zu bytes: %s\n", what, n, cudaGetErrorName(got));
    EXPECT(got == want, "%s on %zu bytes: %s, want %s", what, n, cudaGetErrorName(got),
           cudaGetErrorName(want));
}

static void one_size(size_t n)
{
    std::vector<unsigned char> host(n + 4096, 0x5a);
    void *buf = nullptr, *scratch = nullptr, *next = nullptr;
    CK(cudaMalloc(&buf, n));
    CK(cudaMalloc(&scratch, n + 4096));
    CK(cudaMalloc(&next, n));   /* under the shim: often the neighbour */
    CK(cudaMemset(next, 0x11, n));
    char *b = (char *)buf;

    expect("H2D whole", n, cudaMemcpy(b, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
    expect("D2H whole", n, cudaMemcpy(host.data(), b, n, cudaMemcpyDeviceToHost), cudaSuccess);
    expect("D2D whole (src)", n, cudaMemcpy(scratch, b, n, cudaMemcpyDeviceToDevice), cudaSuccess);
    expect("D2D whole (dst)", n, cudaMemcpy(b, scratch, n, cudaMemcpyDeviceToDevice), cudaSuccess);
    expect("memset whole", n, cudaMemset(b, 0x22, n), cudaSuccess);

    cudaError_t inval = cudaErrorInvalidValue;
    expect("H2D one byte past", n, cudaMemcpy(b, host.data(), n + 1, cudaMemcpyHostToDevice), inval);
    expect("D2H one byte past", n, cudaMemcpy(host.data(), b, n + 1, cudaMemcpyDeviceToHost), inval);
    expect("D2D one byte past (src)", n, cudaMemcpy(scratch, b, n + 1, cudaMemcpyDeviceToDevice), inval);
    expect("D2D one byte past (dst)", n, cudaMemcpy(b, scratch, n + 1, cudaMemcpyDeviceToDevice), inval);
    expect("memset one byte past", n, cudaMemset(b, 0x33, n + 1), inval);
    expect("H2D from offset, one past", n, cudaMemcpy(b + 100, host.data(), n - 99, cudaMemcpyHostToDevice),
           inval);
    expect("memset from offset, one past", n, cudaMemset(b + 100, 0x33, n - 99), inval);
    expect("H2D async one byte past", n, cudaMemcpyAsync(b, host.data(), n + 1, cudaMemcpyHostToDevice, 0),
           inval);
    expect("memset async one byte past", n, cudaMemsetAsync(b, 0x33, n + 1, 0), inval);

    /* Rows of 100 bytes, pitch 100: n / 100 rows fit, one more row of one
     * byte's width at the end does not. */
    size_t rows = n / 100;
    expect("2D H2D whole rows", n, cudaMemcpy2D(b, 100, host.data(), 100, 100, rows, cudaMemcpyHostToDevice),
           cudaSuccess);
    expect("2D memset whole rows", n, cudaMemset2D(b, 100, 0x44, 100, rows), cudaSuccess);
    expect("2D H2D last row one byte past", n,
           cudaMemcpy2D(b + 1, 100, host.data(), 100, 100, rows, cudaMemcpyHostToDevice), inval);
    expect("2D D2H last row one byte past", n,
           cudaMemcpy2D(host.data(), 100, b + 1, 100, 100, rows, cudaMemcpyDeviceToHost), inval);
    expect("2D memset last row one byte past", n, cudaMemset2D(b + 1, 100, 0x44, 100, rows), inval);

    CK(cudaDeviceSynchronize());
    std::vector<unsigned char> out(n);
    CK(cudaMemcpy(out.data(), next, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        EXPECT(out[i] == 0x11, "the neighbouring buffer changed at byte %zu (%#x)", i, out[i]);
    CK(cudaFree(buf));
    CK(cudaFree(scratch));
    CK(cudaFree(next));
}

int main()
{
    watchdog(100);
    device_count_or_skip();
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        printf("SKIP: cannot create a context on device 0\n0 passed, 0 failed\n");
        return 77;
    }
    gvm = load_gvm();
    printf("gvmshim API %s\n", gvm.present ? "present" : "absent (native run)");
    Runner r;
    r.run("bounds_1000_bytes", [] { one_size(1000); });
    r.run("bounds_3000000_bytes", [] { one_size(3000000); });
    return r.finish();
}
