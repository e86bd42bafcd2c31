// Storage types and their exact conversions to and from float.
//
// fp16 and bf16 are held as raw 16-bit patterns and converted with integer
// and float arithmetic only (round to nearest, ties to even; NaN stays NaN),
// the same code on the host and the device. So a CPU and a CUDA step store
// the same bits, and the CPU loops stay free of library calls and vectorize.
#pragma once

#include <cstdint>
#include <cstring>

#include "optim_math.h"

namespace optim {

struct bf16_t { uint16_t bits; };
struct half_t { uint16_t bits; };

// Which storage type a tensor has; the same numbering as fused/_dtypes.py.
enum class Dtype : int { f32 = 0, f16 = 1, bf16 = 2 };

OPTIM_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

OPTIM_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

OPTIM_HD float to_float(float x) { return x; }
OPTIM_HD float to_float(bf16_t x) { return bits_float(uint32_t(x.bits) << 16); }

// Half to float: shifting the exponent and mantissa into float position and
// multiplying by 2^112 rebiases normals and subnormals alike, exactly;
// inf and NaN keep an all-ones exponent.
OPTIM_HD float to_float(half_t x) {
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  const uint32_t magnitude = uint32_t(x.bits & 0x7fffu) << 13;
  const float finite = bits_float(magnitude) * 0x1p112f;
  const uint32_t special = magnitude | 0x7f800000u;
  const uint32_t out = magnitude >= (0x7c00u << 13) ? special : float_bits(finite);
  return bits_float(out | sign);
}

template <class T> OPTIM_HD T from_float(float x);

template <> OPTIM_HD float from_float<float>(float x) { return x; }

// Float to bf16: add half an ulp minus one, plus the lowest kept bit (ties to even).
template <> OPTIM_HD bf16_t from_float<bf16_t>(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return bf16_t{uint16_t(nan ? ((u >> 16) | 0x40u) : rounded)};
}

// Float to half, three regimes computed branch-free and selected:
//  - |x| >= 2^16 (or inf/NaN): inf, or a quiet NaN;
//  - |x| < 2^-14 (half subnormals): adding 0.5 makes the FPU round |x| to a
//    multiple of 2^-24, the half subnormal quantum, ties to even;
//  - normals: rebias the exponent and round the 13 dropped mantissa bits.
template <> OPTIM_HD half_t from_float<half_t>(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t sub = float_bits(bits_float(a) + 0.5f) - float_bits(0.5f);
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t h = a >= (143u << 23) ? big : (a < (113u << 23) ? sub : normal);
  return half_t{uint16_t(h | sign)};
}

}  // namespace optim
