// Element types and reduction operations understood by the Gloo backend, and the element-wise kernels
// the collectives use. Both enums are on the wire and behind the public C API: their values equal
// hvd_dtype / hvd_reduce_op (c_api.cc checks every one at compile time), so new values go at the end.
// ReduceOp uses Horovod's numbering (message.h: AVERAGE=0, SUM=1, MIN=3, MAX=4, PRODUCT=5; 2 is Adasum,
// which is not supported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::gloo_backend {

enum class DataType : int {
  kUInt8 = 0,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kBool,
  kInt16,  // the last value: isValid() relies on it
};

enum class ReduceOp : int {
  kAverage = 0,
  kSum,
  kMin = 3,
  kMax,
  kProduct,  // the last value: isValid() relies on it
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
