/* alloc: the latency of a cudaMalloc + cudaFree pair, per size.
 *
 * For each size: the first (cold) pair, a few warm-up pairs, then N timed
 * pairs, N chosen so the size takes about --budget-ms; the median pair is
 * the result. scripts/bench runs this natively and under the shim. With
 * --async the pair is cudaMallocAsync + cudaFreeAsync on one stream, with
 * no synchronization between pairs (what a stream-ordered allocator does
 * between a program's own waits).
 *
 *     bench-alloc [--budget-ms 400] [--sizes 256,65536,...] [--async] */
#define GT_FAIL_EXITS
#include "gpu_test.h"

#include <dlfcn.h>

using namespace gt;

int main(int argc, char **argv)
{
    watchdog(120);
    double budget_ms = 400;
    bool async = false;
    std::vector<size_t> sizes = {256, 64 * KiB, 2 * MiB, 64 * MiB, 1 * GiB};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--async")) {
            async = true;
        } else if (!strcmp(argv[i], "--budget-ms") && i + 1 < argc) {
            budget_ms = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            sizes.clear();
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ","))
                sizes.push_back((size_t)strtoull(tok, nullptr, 0));
        } else {
            fprintf(stderr, "usage: %s [--budget-ms MS] [--sizes N,N,...] [--async]\n", argv[0]);
            return 2;
        }
    }
    device_count_or_skip();
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));   /* the context exists before anything is timed */
    bool shim = dlsym(RTLD_DEFAULT, "gvm_query") != nullptr;
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    cudaStream_t s = nullptr;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto alloc = [&](void **p, size_t n) { CK(async ? cudaMallocAsync(p, n, s) : cudaMalloc(p, n)); };
    auto release = [&](void *p) { CK(async ? cudaFreeAsync(p, s) : cudaFree(p)); };

    std::vector<std::string> rows;
    printf("%-10s %12s %12s %12s %12s %8s\n", "size", "first us", "median us", "alloc us", "free us", "N");
    for (size_t size : sizes) {
        char nb[32];
        if (size + 256 * MiB > free_b) {
            printf("%-10s skipped: only %zu MiB free\n", human(size, nb, sizeof nb), free_b / MiB);
            continue;
        }
        void *p = nullptr;
        double t0 = now_us();
        alloc(&p, size);
        double t1 = now_us();
        release(p);
        double t2 = now_us();
        double first = t2 - t0, first_alloc = t1 - t0, first_free = t2 - t1;

        for (int w = 0; w < 3; w++) {
            alloc(&p, size);
            release(p);
        }
        /* How many pairs fit the budget. */
        double e0 = now_us();
        for (int w = 0; w < 5; w++) {
            alloc(&p, size);
            release(p);
        }
        double per = (now_us() - e0) / 5;
        long n = (long)(budget_ms * 1000 / std::max(per, 0.05));
        n = std::max(5L, std::min(n, 20000L));

        std::vector<double> pair(n), a(n), f(n);
        for (long k = 0; k < n; k++) {
            double s0 = now_us();
            alloc(&p, size);
            double s1 = now_us();
            release(p);
            double s2 = now_us();
            pair[k] = s2 - s0;
            a[k] = s1 - s0;
            f[k] = s2 - s1;
        }
        Obj row;
        row.n("size", (double)size).n("first_us", first).n("first_alloc_us", first_alloc).n("first_free_us", first_free);
        row.n("median_us", median(pair)).n("p10_us", percentile(pair, 0.1)).n("p90_us", percentile(pair, 0.9));
        row.n("alloc_median_us", median(a)).n("free_median_us", median(f)).n("n", (double)n);
        rows.push_back(row.done());
        printf("%-10s %12.2f %12.3f %12.3f %12.3f %8ld\n", human(size, nb, sizeof nb), first, median(pair),
               median(a), median(f), n);
        fflush(stdout);
        CK(cudaStreamSynchronize(s));
    }
    CK(cudaStreamDestroy(s));
    CK(cudaDeviceSynchronize());
    Obj o = header("alloc", shim);
    o.add("async", async ? "true" : "false");
    o.add("rows", list(rows));
    emit(o);
    return 0;
}
