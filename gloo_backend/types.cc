#include "gloo_backend/types.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace hvd::gloo_backend {
namespace {

// IEEE binary16 and bfloat16 stored as raw 16-bit words; arithmetic happens in float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

float toFloat(Half h) {
  const uint32_t sign = (h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

Half toHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return {static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0))};
  }
  if (absx >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // overflow to inf
  if (absx < 0x38800000u) {  // subnormal half or zero: round to nearest even via float addition
    const uint32_t magicBits = 0x3f000000u;  // 0.5f: aligns the half subnormal ulp with float's
    const float a = std::bit_cast<float>(absx) + std::bit_cast<float>(magicBits);
    return {static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(a) - magicBits))};
  }
  // normal: rebias and round to nearest even
  const uint32_t mantOdd = (absx >> 13) & 1u;
  uint32_t r = absx + ((15u - 127u) << 23) + 0xfffu + mantOdd;
  return {static_cast<uint16_t>(sign | (r >> 13))};
}

float toFloat(BFloat16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}

BFloat16 toBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x40u)};  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return {static_cast<uint16_t>(x >> 16)};
}

template <typename T>
T apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return static_cast<T>(a + b);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return static_cast<T>(a * b);
  }
  return a;
}

bool applyBool(ReduceOp op, bool a, bool b) {
  switch (op) {
    case ReduceOp::kMin:
    case ReduceOp::kProduct:
      return a && b;
    default:
      return a || b;
  }
}

template <typename T>
void reduceTyped(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  // The switch outside the loop lets the compiler vectorise each case.
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(x[i] + y[i]);
      break;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) o[i] = x[i] < y[i] ? x[i] : y[i];
      break;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) o[i] = x[i] > y[i] ? x[i] : y[i];
      break;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(x[i] * y[i]);
      break;
  }
}

template <typename T>
void reduce16(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float r = apply(op, toFloat(x[i]), toFloat(y[i]));
    if constexpr (std::is_same_v<T, Half>) {
      o[i] = toHalf(r);
    } else {
      o[i] = toBFloat16(r);
    }
  }
}

template <typename T>
void scaleTyped(void* data, size_t n, double factor) {
  auto* d = static_cast<T*>(data);
  if constexpr (std::is_floating_point_v<T>) {
    const T f = static_cast<T>(factor);
    for (size_t i = 0; i < n; ++i) d[i] *= f;
  } else {
    // Horovod's rule: scale in float64, then truncate toward zero (an average of 7 over 2 ranks is 3, of -3
    // over 2 is -1). Except where the product is an integer up to float64's rounding: 6 * (1/3.0) is
    // 1.9999999999999998, whose truncation (Horovod's 1) is an artefact; that is 2.
    for (size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(d[i]) * factor;
      const double nearest = std::nearbyint(v);
      const bool integral = std::fabs(v - nearest) <= 4 * std::numeric_limits<double>::epsilon() * std::fabs(v);
      d[i] = static_cast<T>(integral ? nearest : std::trunc(v));
    }
  }
}

template <typename T>
void scale16(void* data, size_t n, double factor) {
  auto* d = static_cast<T*>(data);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, Half>) {
      d[i] = toHalf(toFloat(d[i]) * f);
    } else {
      d[i] = toBFloat16(toFloat(d[i]) * f);
    }
  }
}

}  // namespace

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  HVD_INTERNAL_ASSERT(false, "unknown data type ", static_cast<int>(type));
}

const char* name(DataType type) {
  switch (type) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  return "invalid";
}

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "invalid";
}

bool isValid(DataType type) { return type >= DataType::kUInt8 && type <= DataType::kInt16; }

bool isValid(ReduceOp op) {
  return op == ReduceOp::kAverage || op == ReduceOp::kSum || (op >= ReduceOp::kMin && op <= ReduceOp::kProduct);
}

void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (type) {
    case DataType::kUInt8: return reduceTyped<uint8_t>(op, out, a, b, n);
    case DataType::kInt8: return reduceTyped<int8_t>(op, out, a, b, n);
    case DataType::kInt16: return reduceTyped<int16_t>(op, out, a, b, n);
    case DataType::kInt32: return reduceTyped<int32_t>(op, out, a, b, n);
    case DataType::kInt64: return reduceTyped<int64_t>(op, out, a, b, n);
    case DataType::kFloat16: return reduce16<Half>(op, out, a, b, n);
    case DataType::kBFloat16: return reduce16<BFloat16>(op, out, a, b, n);
    case DataType::kFloat32: return reduceTyped<float>(op, out, a, b, n);
    case DataType::kFloat64: return reduceTyped<double>(op, out, a, b, n);
    case DataType::kBool: {
      auto* o = static_cast<uint8_t*>(out);
      const auto* x = static_cast<const uint8_t*>(a);
      const auto* y = static_cast<const uint8_t*>(b);
      for (size_t i = 0; i < n; ++i) o[i] = applyBool(op, x[i] != 0, y[i] != 0) ? 1 : 0;
      return;
    }
  }
}

void scale(DataType type, void* data, size_t n, double factor) {
  if (factor == 1.0) return;
  switch (type) {
    case DataType::kUInt8: return scaleTyped<uint8_t>(data, n, factor);
    case DataType::kInt8: return scaleTyped<int8_t>(data, n, factor);
    case DataType::kInt16: return scaleTyped<int16_t>(data, n, factor);
    case DataType::kInt32: return scaleTyped<int32_t>(data, n, factor);
    case DataType::kInt64: return scaleTyped<int64_t>(data, n, factor);
    case DataType::kFloat16: return scale16<Half>(data, n, factor);
    case DataType::kBFloat16: return scale16<BFloat16>(data, n, factor);
    case DataType::kFloat32: return scaleTyped<float>(data, n, factor);
    case DataType::kFloat64: return scaleTyped<double>(data, n, factor);
    case DataType::kBool: HVD_INTERNAL_ASSERT(false, "scaling a bool tensor");
  }
}

}  // namespace hvd::gloo_backend
