// A quick end-to-end check on a real GPU, run natively and under the shim:
// allocations, kernels, copies, queries, a move to host and back, and the
// alloc/free pair cost. (The gpu suite in tests/gpu is the real test.)
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

__global__ void fill(unsigned *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = (unsigned)i * 2654435761u ^ seed;
}
__global__ void check(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != ((unsigned)i * 2654435761u ^ seed)) atomicAdd(bad, 1ull);
}
__global__ void spin(const unsigned *p, unsigned long long *out, long long cycles) {
  long long t0 = clock64(); unsigned long long s = 0; size_t i = 0;
  while (clock64() - t0 < cycles) { s += p[i & 1023]; i++; }
  if (threadIdx.x == 0) *out = s ? 1 : 2;
}

typedef int (*query_fn)(const void *, void *);
typedef int (*migrate_fn)(const void *, int);

static unsigned long long verify(unsigned *p, size_t n, unsigned seed, unsigned long long *bad) {
  CK(cudaMemset(bad, 0, 8)); check<<<1024, 256>>>(p, n, seed, bad); CK(cudaDeviceSynchronize());
  unsigned long long h; CK(cudaMemcpy(&h, bad, 8, cudaMemcpyDeviceToHost)); return h;
}

int main() {
  int n = 0; if (cudaGetDeviceCount(&n) || !n) { printf("no GPU\n"); return 77; }
  query_fn q = (query_fn)dlsym(RTLD_DEFAULT, "gvm_query");
  migrate_fn mig = (migrate_fn)dlsym(RTLD_DEFAULT, "gvm_migrate");
  printf("shim %s, %d device(s)\n", q ? "present" : "absent", n);
  unsigned long long *bad; CK(cudaMalloc(&bad, 8));
  size_t sizes[] = {256, 1000, 65536, 2u << 20, (3u << 20) + 17, 64u << 20, 1u << 30};
  for (size_t s : sizes) {
    unsigned *p; CK(cudaMalloc(&p, s)); size_t cnt = s / 4;
    fill<<<1024, 256>>>(p, cnt, 7); unsigned long long b = verify(p, cnt, 7, bad);
    cudaPointerAttributes a; CK(cudaPointerGetAttributes(&a, (char *)p + s / 2));
    char info[256]; int qs = q ? q((char *)p + s - 1, info) : -99;
    printf("size %zu: bad=%llu type=%d dev=%d query=%d\n", s, b, (int)a.type, a.device, qs);
    CK(cudaFree(p));
  }
  // free while a kernel reads the buffer
  unsigned *b2; unsigned long long *out; CK(cudaMalloc(&b2, 1 << 20)); CK(cudaMalloc(&out, 8)); CK(cudaMemset(b2, 1, 1 << 20));
  spin<<<1, 32>>>(b2, out, 400000000LL); double t0 = now_us(); CK(cudaFree(b2)); double t1 = now_us();
  CK(cudaDeviceSynchronize()); unsigned long long o; CK(cudaMemcpy(&o, out, 8, cudaMemcpyDeviceToHost));
  printf("free during kernel: waited %.0f us, result %llu (1 = ok)\n", t1 - t0, o);
  // move 1 GiB to host and back
  if (mig) {
    unsigned *p; size_t s = 1u << 30; CK(cudaMalloc(&p, s)); fill<<<1024, 256>>>(p, s / 4, 9); CK(cudaDeviceSynchronize());
    for (int r = 0; r < 3; r++) {
      double a0 = now_us(); int st = mig(p, -1); double a1 = now_us();
      unsigned long long bh = verify(p, s / 4, 9, bad);
      unsigned cpu = ((volatile unsigned *)p)[12345];
      double a2 = now_us(); int st2 = mig(p, 0); double a3 = now_us();
      unsigned long long bd = verify(p, s / 4, 9, bad);
      printf("round %d: to host st=%d %.1f ms (%.1f GB/s) bad=%llu cpu=%s | back st=%d %.1f ms (%.1f GB/s) bad=%llu\n", r, st,
             (a1 - a0) / 1e3, s / (a1 - a0) / 1e3, bh, cpu == (12345u * 2654435761u ^ 9u) ? "ok" : "BAD", st2, (a3 - a2) / 1e3,
             s / (a3 - a2) / 1e3, bd);
    }
    CK(cudaFree(p));
  }
  // alloc/free pairs
  size_t bs[] = {256, 65536, 2u << 20, 64u << 20, 1u << 30};
  for (size_t s : bs) {
    void *p; double c0 = now_us(); CK(cudaMalloc(&p, s)); CK(cudaFree(p)); double c1 = now_us();
    int reps = s >= (64u << 20) ? 20 : 200; double best = 1e18, sum = 0;
    for (int i = 0; i < reps; i++) { double x0 = now_us(); CK(cudaMalloc(&p, s)); CK(cudaFree(p)); double x1 = now_us(); sum += x1 - x0; if (x1 - x0 < best) best = x1 - x0; }
    printf("pair %10zu: first %.1f us, mean %.2f us, best %.2f us\n", s, c1 - c0, sum / reps, best);
  }
  printf("done\n");
  return 0;
}
