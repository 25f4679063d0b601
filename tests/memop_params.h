/* One 32 or 64-bit wait or write of a stream memory-operation batch
 * (cuStreamBatchMemOp), as the cpu tests (C, simulated driver) and the gpu
 * tests (CUDA C++) build them. A wait waits for equality. */
#ifndef GVM_TEST_MEMOP_PARAMS_H
#define GVM_TEST_MEMOP_PARAMS_H

#include <cuda.h>
#include <stdint.h>
#include <string.h>

static inline CUstreamBatchMemOpParams test_value_op(CUstreamBatchMemOpType kind, CUdeviceptr at, uint64_t v)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.operation = kind;
    if (kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 || kind == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
        op.waitValue.address = at;
        op.waitValue.value64 = v;
        op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    } else {
        op.writeValue.address = at;
        op.writeValue.value64 = v;
    }
    return op;
}

#endif
