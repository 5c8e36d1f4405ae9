// Element types and reduction operations understood by the Gloo backend, and the element-wise kernels
// the collectives use. Values equal the public C API's hvd_dtype / hvd_reduce_op (checked there with
// static_assert), and ReduceOp uses Horovod's numbering (message.h: AVERAGE=0, SUM=1, MIN=3, MAX=4,
// PRODUCT=5; 2 is Adasum, not supported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::gloo_backend {

enum class DataType : int {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kInt16 = 9,
};

enum class ReduceOp : int {
  kAverage = 0,
  kSum = 1,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};

size_t elementSize(DataType type);
const char* name(DataType type);  // "float32", ...
const char* name(ReduceOp op);    // "sum", ...
bool isValid(DataType type);
bool isValid(ReduceOp op);

// out[i] = op(a[i], b[i]) for n elements. kAverage reduces as kSum (the division is a postscale).
// out may alias a or b. Bool: sum and max are logical or, min and product logical and.
void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t n);

// data[i] *= factor for n elements (float16/bfloat16 through float; integers rounded to nearest).
// No-op for factor == 1. Bool: unsupported, the caller rejects scaling of bool.
void scale(DataType type, void* data, size_t n, double factor);

}  // namespace hvd::gloo_backend
