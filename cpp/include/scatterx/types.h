// Element types and their arithmetic, free of Python.
//
// Every operation reproduces what NumPy (and ml_dtypes for bfloat16) computes when it applies
// the same operation one step at a time, so that a scatter-reduction is bitwise identical to the
// sequential reference: integers wrap modulo 2^n, 16-bit floats compute in float32 and round to
// nearest-even after every step, complex products use the plain four-multiply formula.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace scatterx {

// bool elements are read as bytes: NumPy bool arrays can hold bytes other than 0 and 1 (views of
// uint8 data), and loading such a byte as a C++ bool is undefined behaviour. Nonzero is true.
struct boolean { uint8_t v; };
struct float16 { uint16_t bits; };
struct bfloat16 { uint16_t bits; };
template <class F> struct complex_t { F re, im; };
using complex64 = complex_t<float>;
using complex128 = complex_t<double>;

inline float half_to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        // Subnormal (or zero): man * 2^-24 is exact in float.
        float v = float(man) * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN, payload kept
    }
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
    if (ax < 0x38800000u) {
        // Below the smallest normal half: scaling by 2^24 is exact, then round half to even
        // (the default rounding mode). A result of 1024 is the smallest normal, encoded alike.
        float scaled = std::bit_cast<float>(ax) * 16777216.0f;
        return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
    }
    uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);
    return uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

// float_to_half with NumPy's rule for a NaN (npy_floatbits_to_halfbits): its sign and the top ten
// bits of its payload, not quieted; 0x7c01 (with the sign) if those bits are all zero.
inline uint16_t float_to_half_numpy(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) <= 0x7f800000u) return float_to_half(f);
    const uint16_t payload = uint16_t((x >> 13) & 0x3ffu);
    return uint16_t(((x >> 16) & 0x8000u) | 0x7c00u | (payload ? payload : 1u));
}

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t(((x >> 16) & 0x8000u) | 0x7fc0u);
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// max (Max) or min of NumPy's step semantics, as a 0/1 "take b" flag and as a value: the update
// b replaces the current value a when it lies strictly beyond a, or when b is NaN and a is not
// (ties and a NaN current value keep a). On x86 the flag comes from SSE compares and the value
// from a mask blend, so no branch depends on the data: written as a C++ condition, GCC turns
// `a = keep ? a : b` into a conditional store behind two branches, which random data
// mispredicts about half the time (standalone, 6.4M random float32 max updates into 100000x32,
// one thread, five interleaved runs: median 122 ms with the branches, 87 ms with the blend;
// "add" took 77 ms).
#if defined(__x86_64__)
// All ones in the low lane where b replaces a (the rule above), from SSE compares.
template <bool Max> inline __m128 take_mask(__m128 A, __m128 B) {
    const __m128 beyond = Max ? _mm_cmpgt_ss(B, A) : _mm_cmplt_ss(B, A);
    return _mm_or_ps(beyond, _mm_and_ps(_mm_cmpunord_ss(B, B), _mm_cmpord_ss(A, A)));
}
template <bool Max> inline __m128d take_mask(__m128d A, __m128d B) {
    const __m128d beyond = Max ? _mm_cmpgt_sd(B, A) : _mm_cmplt_sd(B, A);
    return _mm_or_pd(beyond, _mm_and_pd(_mm_cmpunord_sd(B, B), _mm_cmpord_sd(A, A)));
}
#endif
template <bool Max, class F> inline int takes_update(F a, F b) {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<F, float>)
        return _mm_movemask_ps(take_mask<Max>(_mm_set_ss(a), _mm_set_ss(b))) & 1;
    else if constexpr (std::is_same_v<F, double>)
        return _mm_movemask_pd(take_mask<Max>(_mm_set_sd(a), _mm_set_sd(b))) & 1;
#endif
    return int(Max ? b > a : b < a) | int(b != b && a == a);
}
template <bool Max, class F> inline F extreme(F a, F b) {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<F, float>) {
        const __m128 A = _mm_set_ss(a), B = _mm_set_ss(b), take = take_mask<Max>(A, B);
        return _mm_cvtss_f32(_mm_or_ps(_mm_and_ps(take, B), _mm_andnot_ps(take, A)));
    } else if constexpr (std::is_same_v<F, double>) {
        const __m128d A = _mm_set_sd(a), B = _mm_set_sd(b), take = take_mask<Max>(A, B);
        return _mm_cvtsd_f64(_mm_or_pd(_mm_and_pd(take, B), _mm_andnot_pd(take, A)));
    }
#endif
    return takes_update<Max>(a, b) ? b : a;
}

// Arith<T>: add, mul, max, min with NumPy's step semantics. max/min keep the current value on
// ties and propagate NaN (like np.maximum(current, update)).
template <class T, class Enable = void> struct Arith;

template <> struct Arith<boolean> {
    static boolean add(boolean a, boolean b) { return boolean{uint8_t((a.v | b.v) != 0)}; }
    static boolean mul(boolean a, boolean b) { return boolean{uint8_t(a.v != 0 && b.v != 0)}; }
    static boolean max(boolean a, boolean b) { return add(a, b); }
    static boolean min(boolean a, boolean b) { return mul(a, b); }
};

template <class T>
struct Arith<T, std::enable_if_t<std::is_integral_v<T>>> {
    // Unsigned arithmetic of at least int's width: wraps modulo 2^n without undefined
    // behaviour (uint16 * uint16 would otherwise promote to signed int and overflow).
    using W = std::common_type_t<std::make_unsigned_t<T>, unsigned int>;
    static T add(T a, T b) { return T(W(a) + W(b)); }
    static T mul(T a, T b) { return T(W(a) * W(b)); }
    static T max(T a, T b) { return a >= b ? a : b; }
    static T min(T a, T b) { return a <= b ? a : b; }
};

template <class T> struct Arith<T, std::enable_if_t<std::is_floating_point_v<T>>> {
    static T add(T a, T b) { return a + b; }
    static T mul(T a, T b) { return a * b; }
    static T max(T a, T b) { return extreme<true>(a, b); }
    static T min(T a, T b) { return extreme<false>(a, b); }
};

// A 16-bit float type: its bits (H::bits), their conversions to and from float32, the bits of
// its infinity, and whether max/min compare the bits (OnBits) or the values as float32.
template <class H, float (*ToF)(uint16_t), uint16_t (*FromF)(float), unsigned Inf, bool OnBits> struct Arith16 {
    static H add(H a, H b) { return H{FromF(ToF(a.bits) + ToF(b.bits))}; }
    static H mul(H a, H b) { return H{FromF(ToF(a.bits) * ToF(b.bits))}; }
    static H max(H a, H b) { return pick(a, b, takes<true>(a.bits, b.bits)); }
    static H min(H a, H b) { return pick(a, b, takes<false>(a.bits, b.bits)); }
    // takes_update's rule. OnBits, with no conversion to float: as sign and magnitude integers
    // (both zeros 0), two numbers compare as their values do; a magnitude above infinity's is a
    // NaN. For float16, whose conversion takes a dozen instructions (half_to_float), against
    // converting both and comparing floats (stop 44, the Zen 5 machine, one build with a switch,
    // one process, six rounds of medians of five calls): max0_f16 13.37 -> 10.79, 13.83 ->
    // 11.22, 13.62 -> 10.79 ms (faster in 6 of 6 each); bitwise the same for every pair of
    // float16 bit patterns, and of bfloat16 ones (scripts/every_16bit_pair.py; the test suite
    // checks a sample of pairs). For bfloat16, whose conversion is a shift, slower: max0_bf16 8.46 ->
    // 10.45, 8.56 -> 10.69, 8.42 -> 11.17 (0 of 6 each; a form without the sign's condition
    // 12.25), so bfloat16 compares floats.
    template <bool Max> static int takes(uint16_t a, uint16_t b) {
        if constexpr (OnBits) {
            const int ma = a & 0x7fff, mb = b & 0x7fff;
            const int ka = (a & 0x8000) ? -ma : ma, kb = (b & 0x8000) ? -mb : mb;
            return int(ma <= int(Inf)) & (int(mb > int(Inf)) | int(Max ? kb > ka : kb < ka));
        } else {
            return takes_update<Max>(ToF(a), ToF(b));
        }
    }
    // b when take is 1, a when it is 0, by arithmetic on the bits.
    static H pick(H a, H b, int take) {
        return H{uint16_t(a.bits ^ ((a.bits ^ b.bits) & (0u - unsigned(take))))};
    }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SCATTERX_HAVE_F16C_PATH 1
// Compilers that know AVX512-FP16 (GCC 12, Clang 14) and AVX512_BF16 (GCC 10, Clang 9): the
// rows' 16-bit float instructions (half_rows_on) are built with these only.
#if defined(__clang__) ? __clang_major__ >= 14 : __GNUC__ >= 12
#define SCATTERX_HAVE_HALF_INSTRUCTIONS 1
#endif
// dst[k] = half(float(dst[k]) + float(src[k])) (with Mul, the product) with the F16C
// conversions: exact widening, one float32 operation, round-to-nearest-even narrowing (quieted NaN
// with its payload kept) -- the same bits as Arith<float16>::add (mul), eight elements at a time.
// Returns how many elements it did.
template <bool Mul>
__attribute__((target("avx,f16c"))) inline int64_t arith_f16_f16c(float16* dst, const float16* src, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + k)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k),
                         _mm256_cvtps_ph(Mul ? _mm256_mul_ps(a, b) : _mm256_add_ps(a, b),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return k;
}
// The same with AVX-512F, sixteen elements at a time (the same conversions, at twice the
// width). Stop 44, the Zen 5 machine, one build with a switch, one process, medians of seven
// calls: mp_add_f16 on two threads 2.81 -> 2.74 and 2.84 -> 2.74 ms (faster in 8 and 6 of 8
// rounds), on one thread 3.98 -> 3.72 (6 of 6).
template <bool Mul>
__attribute__((target("avx512f"))) inline int64_t arith_f16_avx512(float16* dst, const float16* src, int64_t n) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + k)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                            _mm512_cvtps_ph(Mul ? _mm512_mul_ps(a, b) : _mm512_add_ps(a, b),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return k;
}
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
// The same by AVX512-FP16's own add (vaddph), thirty-two elements at a time, in float16 itself:
// the same bits as the conversions, since a float32 sum of two float16 rounded to float16 is
// their sum rounded once (24 bits hold 2 x 11 + 2). Of two NaNs x86 gives the first operand's,
// quieted, its payload kept: written out as assembly with the update first, as the element adds
// have it (f16c_arith), since the compiler may put a commutative add's operands in either order
// (with the intrinsic it put the target row's first here). Where the CPU has it and half_rows_on.
// Stop 77, the Intel virtual machine (family 6 model 167), one build with a switch (half_rows_on),
// one process, two threads, eight rounds of medians of nine calls, bits the same, arith_f16_avx512 /
// this: mp_add_f16 4.15 / 3.93 ms (faster in 8 of 8 rounds), 3.74 / 3.53 (6 of 8); mp_add, which
// does not go here, 9.17 / 9.39 (5 of 8). Standalone, rows of 64 into 64 target rows (in L1),
// 200000 rows on one thread: 0.90-0.93 / 0.45-0.46 ms; the same bits as f16c_arith on 4 M random
// pairs of bit patterns, NaNs included. With Mul, vmulph: a product of two float16 is exact in
// float32 (22 bits), so its float16 is the conversions' as well.
template <bool Mul>
__attribute__((target("avx512f,avx512bw,avx512fp16"))) inline int64_t arith_f16_avx512fp16(float16* dst,
                                                                                        const float16* src, int64_t n) {
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512h a = _mm512_castsi512_ph(_mm512_loadu_si512(dst + k));
        const __m512h b = _mm512_castsi512_ph(_mm512_loadu_si512(src + k));
        __m512h r;
        if constexpr (Mul) asm("vmulph %[a], %[b], %[r]" : [r] "=v"(r) : [a] "v"(a), [b] "v"(b));  // b * a, b first
        else asm("vaddph %[a], %[b], %[r]" : [r] "=v"(r) : [a] "v"(a), [b] "v"(b));  // b + a, b first
        _mm512_storeu_si512(dst + k, _mm512_castph_si512(r));
    }
    return k;
}
#endif
inline bool cpu_has_avx512f() {
    static const bool has = __builtin_cpu_supports("avx512f");
    return has;
}
inline bool cpu_has_avx512dq() {
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    return has;
}
inline bool cpu_has_f16c() {
    static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return has;
}

// One float16 add or product by F16C's conversions (as arith_f16_f16c, one element): exact
// widening, one float32 operation, round to nearest even. The module is built for baseline
// x86-64, whose functions cannot inline one built for another target, so the instructions are
// written out here; VEX.128 forms, which leave no upper state for the SSE code around them. Of
// two NaNs x86 returns its first operand's, here b's (the update's), quieted, as the element loop
// and the vector rows (arith_f16_avx512) compiled from C++ give it; the compiler may order the
// operands either way there, and NaN payloads lie outside the bitwise promise.
template <bool Mul> inline uint16_t f16c_arith(uint16_t a, uint16_t b) {
    uint32_t out;
    __m128 x, y;
    if constexpr (Mul)
        asm("vmovd %[a], %[x]\n\tvmovd %[b], %[y]\n\tvcvtph2ps %[x], %[x]\n\tvcvtph2ps %[y], %[y]\n\t"
            "vmulss %[x], %[y], %[x]\n\tvcvtps2ph $0, %[x], %[x]\n\tvmovd %[x], %[o]"
            : [o] "=r"(out), [x] "=&x"(x), [y] "=&x"(y)
            : [a] "r"(uint32_t(a)), [b] "r"(uint32_t(b)));
    else
        asm("vmovd %[a], %[x]\n\tvmovd %[b], %[y]\n\tvcvtph2ps %[x], %[x]\n\tvcvtph2ps %[y], %[y]\n\t"
            "vaddss %[x], %[y], %[x]\n\tvcvtps2ph $0, %[x], %[x]\n\tvmovd %[x], %[o]"
            : [o] "=r"(out), [x] "=&x"(x), [y] "=&x"(y)
            : [a] "r"(uint32_t(a)), [b] "r"(uint32_t(b)));
    return uint16_t(out);
}
inline bool f16c_arith_supported() {
    __builtin_cpu_init();  // this runs among the module's static initialisers
    return cpu_has_f16c();
}
// Whether float16 adds and products element by element go through f16c_arith (the default where
// the CPU has F16C; never where it has not; tests turn it off to reach the conversions in C++): a
// variable, not a function's static, since every element reads it. Stop 65, the Intel virtual
// machine (family 6 model 167), one build with a switch, one process, two threads, six rounds of
// medians of seven calls, 1e7 updates, bits the same but for NaN + NaN: float16 adds into 1e5
// random bins 26.57 -> 13.21 ms (int32 index 25.43 -> 12.10), products 23.99 -> 13.45, into 1000
// bins 41.37 -> 15.93, into 4e6 bins 69.26 -> 30.27, sorted into 1e5 bins (runs in chains) 26.79
// -> 17.92, products 23.90 -> 18.71 (faster in 6 of 6 rounds each); float64 adds, which do not go
// there, 12.51 / 12.72.
inline bool f16c_arith_on = f16c_arith_supported();

// The bfloat16 bits of eight float32 sums c = a + b, in the low half of each 32-bit lane: round
// to nearest even; with `nan`, a NaN as sign | 0x7fc0 (float_to_bf16's rules), its sign that of
// the first NaN operand (a, else b, else c: the default NaN of inf - inf), as the x86 add of
// the element-by-element path gives it, whatever order the compiler puts the vector add's
// operands in (IEEE leaves the sign open; ml_dtypes' add gives the second operand's).
__attribute__((target("avx2"))) inline __m256i round_to_bf16(__m256 c, __m256 a, __m256 b, bool nan) {
    const __m256i x = _mm256_castps_si256(c), high = _mm256_srli_epi32(x, 16);
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    if (nan) {
        const __m256 first = _mm256_blendv_ps(_mm256_blendv_ps(c, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q)), a,
                                              _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
        const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(first), 16), _mm256_set1_epi32(0x8000));
        rounded = _mm256_blendv_epi8(rounded, _mm256_or_si256(sign, _mm256_set1_epi32(0x7fc0)),
                                     _mm256_castps_si256(_mm256_cmp_ps(c, c, _CMP_UNORD_Q)));
    }
    return rounded;
}

// dst[k] = bf16(float(dst[k]) + float(src[k])) (with Mul, the product) with AVX2: widening is
// placing the 16 bits in the high half of a 32-bit lane, then one float32 add (product: the same
// float32 product as Arith<bfloat16>::mul's, underflow included) and the same rounding as float_to_bf16
// (round_to_bf16). Sixteen at a time: the two halves of each 128-bit lane are widened by
// unpacking with zeros, which takes elements 0-3 and 8-11, then 4-7 and 12-15, an order that
// packing the two results back undoes; the NaN rule is applied only to sixteen that hold a
// NaN. Then eight at a time. Stop 33, standalone, 200 000 rows of 64 in L1 (one thread): 2.5
// ms eight at a time with the NaN rule always applied, 1.6-1.8 ms so; bitwise the same as
// Arith<bfloat16>::add on 4 M random pairs of bit patterns, NaNs of either sign included
// (a first version that let the vector add decide a NaN's sign was not, compiled alone: the
// compiler had swapped the operands). In scatterx, mp_add_bf16 4.98 -> 4.61 ms, two threads,
// and 6.54 -> 4.76 on one (medians of six alternating rounds, faster in 4 of 6 each).
template <bool Mul>
__attribute__((target("avx2"))) inline int64_t arith_bf16_avx2(bfloat16* dst, const bfloat16* src, int64_t n) {
    const __m256i zero = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + k));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
        const __m256 alo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, a));
        const __m256 blo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, b));
        const __m256 ahi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, a));
        const __m256 bhi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, b));
        const __m256 lo = Mul ? _mm256_mul_ps(alo, blo) : _mm256_add_ps(alo, blo);
        const __m256 hi = Mul ? _mm256_mul_ps(ahi, bhi) : _mm256_add_ps(ahi, bhi);
        const __m256 unordered = _mm256_or_ps(_mm256_cmp_ps(lo, lo, _CMP_UNORD_Q), _mm256_cmp_ps(hi, hi, _CMP_UNORD_Q));
        __m256i packed;
        if (__builtin_expect(_mm256_testz_ps(unordered, unordered), 1))
            packed = _mm256_packus_epi32(round_to_bf16(lo, alo, blo, false), round_to_bf16(hi, ahi, bhi, false));
        else
            packed = _mm256_packus_epi32(round_to_bf16(lo, alo, blo, true), round_to_bf16(hi, ahi, bhi, true));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), packed);
    }
    for (; k + 8 <= n; k += 8) {
        const __m256 a = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + k))), 16));
        const __m256 b = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))), 16));
        const __m256i rounded = round_to_bf16(Mul ? _mm256_mul_ps(a, b) : _mm256_add_ps(a, b), a, b, true);
        // 32 -> 16 bits: packus works per 128-bit lane, so gather the two low quadwords.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm256_castsi256_si128(packed));
    }
    return k;
}
// round_to_bf16 for sixteen sums at a time (AVX-512F), the NaN rule by masks.
__attribute__((target("avx512f"))) inline __m512i round_to_bf16_512(__m512 c, __m512 a, __m512 b, bool nan) {
    const __m512i x = _mm512_castps_si512(c), high = _mm512_srli_epi32(x, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    if (nan) {
        const __m512 first = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q),
                                                  _mm512_mask_blend_ps(_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), c, b), a);
        const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(first), 16), _mm512_set1_epi32(0x8000));
        rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q),
                                        _mm512_or_si512(sign, _mm512_set1_epi32(0x7fc0)));
    }
    return rounded;
}
// arith_bf16_avx2 at twice the width (AVX-512F and BW), thirty-two at a time: the same widening
// by unpacking with zeros within each 128-bit lane, the same rounding (round_to_bf16_512), the
// same packing back; arith_bf16_avx2 does what is left. A row of the message-passing case (64
// bfloat16) is two such vectors instead of four. Stop 61, the Intel virtual machine (family 6
// model 167), one build with a switch, one process, two threads, eight rounds of medians of
// nine calls, bits the same: mp_add_bf16 4.72 -> 4.38 ms and 4.66 -> 4.50 (faster in 8 of 8
// rounds each); mp_add_f16, which does not use it, 3.76 / 3.77 beside it.
template <bool Mul>
__attribute__((target("avx512f,avx512bw"))) inline int64_t arith_bf16_avx512(bfloat16* dst, const bfloat16* src,
                                                                             int64_t n) {
    const __m512i zero = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512i a = _mm512_loadu_si512(dst + k), b = _mm512_loadu_si512(src + k);
        const __m512 alo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, a));
        const __m512 blo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, b));
        const __m512 ahi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, a));
        const __m512 bhi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, b));
        const __m512 lo = Mul ? _mm512_mul_ps(alo, blo) : _mm512_add_ps(alo, blo);
        const __m512 hi = Mul ? _mm512_mul_ps(ahi, bhi) : _mm512_add_ps(ahi, bhi);
        const bool nan = (_mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q)) != 0;
        __m512i packed;
        if (__builtin_expect(!nan, 1))
            packed = _mm512_packus_epi32(round_to_bf16_512(lo, alo, blo, false), round_to_bf16_512(hi, ahi, bhi, false));
        else
            packed = _mm512_packus_epi32(round_to_bf16_512(lo, alo, blo, true), round_to_bf16_512(hi, ahi, bhi, true));
        _mm512_storeu_si512(dst + k, packed);
    }
    return k;
}
inline bool cpu_has_avx512bw() {
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    return has;
}
inline bool cpu_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
}
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
// arith_bf16_avx512 with the rounding of AVX512_BF16 (vcvtne2ps2bf16: to nearest even, one
// instruction for thirty-two sums), thirty-two at a time: the even elements widened by a shift,
// the odd ones by a mask, one float32 add each, the sums rounded together and put back in order by
// one permutation. That instruction takes a subnormal float32 as zero and quiets a NaN keeping its
// payload, so thirty-two whose sums hold either go through round_to_bf16_512 instead; a sum of
// two bfloat16 is otherwise a normal float32 or zero, which it rounds as float_to_bf16 does (a
// normal float32 never rounds to a subnormal bfloat16: their exponents are the same). With Mul,
// products: a float32 product of two bfloat16 is exact unless it underflows, to a subnormal (which
// goes the other way) or a zero (which that instruction rounds as float_to_bf16 does). Stop 77, the
// Intel virtual machine (family 6 model 167), one build with a switch (half_rows_on), one
// process, two threads, rounds of medians of nine calls, bits the same, arith_bf16_avx512 / this:
// mp_add_bf16 4.63 / 4.33 ms (faster in 7 of 8 rounds), 4.85 / 4.58 and 4.93 / 4.60 (8 of 8
// each); with the float16 rows' change beside it, 4.55 / 4.34 (7 of 8) and 4.50 / 4.21 (6 of 8).
// Standalone, rows of 64 into 64 target rows (in L1), 200000 rows on one thread: 1.41-1.68 /
// 1.28-1.46 ms (float16's rows 0.90, float32's 0.83). Against ml_dtypes on 33.6 M random pairs of
// bit patterns through scatterx: none differed (NaNs where ml_dtypes has them).
template <bool Mul>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) inline int64_t arith_bf16_avx512bf16(bfloat16* dst,
                                                                                                  const bfloat16* src,
                                                                                                  int64_t n) {
    // Element i of the result: the sum of even i from the low half of the rounded vector, odd i
    // from the high half.
    alignas(64) static constexpr uint16_t order[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8,  24, 9,  25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u)), perm = _mm512_load_si512(order);
    constexpr int kNanOrSubnormal = 0x01 | 0x80 | 0x20;  // vfpclassps: quiet NaN, signalling NaN, denormal
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512i a = _mm512_loadu_si512(dst + k), b = _mm512_loadu_si512(src + k);
        const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
        const __m512 be = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
        const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(a, high));
        const __m512 bo = _mm512_castsi512_ps(_mm512_and_si512(b, high));
        const __m512 se = Mul ? _mm512_mul_ps(ae, be) : _mm512_add_ps(ae, be);
        const __m512 so = Mul ? _mm512_mul_ps(ao, bo) : _mm512_add_ps(ao, bo);
        const bool rare = (_mm512_fpclass_ps_mask(se, kNanOrSubnormal) | _mm512_fpclass_ps_mask(so, kNanOrSubnormal)) != 0;
        __m512i packed;
        if (__builtin_expect(!rare, 1))
            packed = _mm512_permutexvar_epi16(perm, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(so, se)));
        else
            packed = _mm512_or_si512(round_to_bf16_512(se, ae, be, true),
                                     _mm512_slli_epi32(round_to_bf16_512(so, ao, bo, true), 16));
        _mm512_storeu_si512(dst + k, packed);
    }
    return k;
}
inline bool cpu_has_avx512fp16() {
    static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512fp16");
    return has;
}
inline bool cpu_has_avx512bf16() {
    static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                            __builtin_cpu_supports("avx512bf16");
    return has;
}
#endif
// Whether rows of float16 and bfloat16 adds and products take the CPU's 16-bit float instructions
// where it has them (arith_f16_avx512fp16, arith_bf16_avx512bf16): the default; tests turn it off
// to reach the conversions by float32 on the same CPU. A variable, as f16c_arith_on, since every
// row reads it.
inline bool half_rows_on = true;
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
// One float16 add or product by AVX512-FP16's scalar instructions (vaddsh, vmulsh), in float16
// itself, where f16c_arith converts to float32 and back: three instructions fewer, the same bits
// (the sum or product rounded once, as in arith_f16_avx512fp16). The update is the first operand,
// whose NaN x86 gives of two, as in f16c_arith. Standalone, all 2^32 pairs of bit patterns, add
// and product: none differed from f16c_arith's. Written out, as f16c_arith is, for the module
// built for baseline x86-64; EVEX.128 forms, which leave no upper state.
template <bool Mul> inline uint16_t fp16_arith(uint16_t a, uint16_t b) {
    uint32_t out;
    __m128 x, y;
    if constexpr (Mul)
        asm("vmovw %[a], %[x]\n\tvmovw %[b], %[y]\n\tvmulsh %[x], %[y], %[x]\n\tvmovw %[x], %[o]"
            : [o] "=r"(out), [x] "=&x"(x), [y] "=&x"(y)
            : [a] "r"(uint32_t(a)), [b] "r"(uint32_t(b)));
    else
        asm("vmovw %[a], %[x]\n\tvmovw %[b], %[y]\n\tvaddsh %[x], %[y], %[x]\n\tvmovw %[x], %[o]"
            : [o] "=r"(out), [x] "=&x"(x), [y] "=&x"(y)
            : [a] "r"(uint32_t(a)), [b] "r"(uint32_t(b)));
    return uint16_t(out);
}
inline bool fp16_arith_supported() {
    __builtin_cpu_init();  // this runs among the module's static initialisers
    return cpu_has_avx512fp16();
}
// Whether float16 adds and products element by element go through fp16_arith (the default where
// the CPU has AVX512-FP16; tests turn it off to reach f16c_arith and the C++ conversions), before
// f16c_arith_on is asked: a variable, as that one.
inline bool fp16_arith_on = fp16_arith_supported();
#endif
// dst[k] = dst[k] + src[k] (with Mul, dst[k] * src[k]) for float32 or float64, a vector of
// sixteen or eight (AVX-512F) or eight or four (AVX2) at a time: one IEEE operation per element,
// as Arith's, with dst the first operand as in the element loop (x86 returns the first operand's
// NaN when both are NaN). Returns how many elements it did. The compiler's own vectorisation of
// the element loop is baseline x86-64's, 16 bytes at a time; a row of the message-passing case
// (64 float32) is four 64-byte vectors. Measured in apply_row, their caller.
template <class T, bool Mul>
__attribute__((target("avx512f"))) inline int64_t arith_row_avx512(T* dst, const T* src, int64_t n) {
    int64_t k = 0;
    if constexpr (std::is_same_v<T, float>) {
        for (; k + 16 <= n; k += 16) {
            const __m512 a = _mm512_loadu_ps(dst + k), b = _mm512_loadu_ps(src + k);
            _mm512_storeu_ps(dst + k, Mul ? _mm512_mul_ps(a, b) : _mm512_add_ps(a, b));
        }
    } else {
        for (; k + 8 <= n; k += 8) {
            const __m512d a = _mm512_loadu_pd(dst + k), b = _mm512_loadu_pd(src + k);
            _mm512_storeu_pd(dst + k, Mul ? _mm512_mul_pd(a, b) : _mm512_add_pd(a, b));
        }
    }
    return k;
}
template <class T, bool Mul>
__attribute__((target("avx2"))) inline int64_t arith_row_avx2(T* dst, const T* src, int64_t n) {
    int64_t k = 0;
    if constexpr (std::is_same_v<T, float>) {
        for (; k + 8 <= n; k += 8) {
            const __m256 a = _mm256_loadu_ps(dst + k), b = _mm256_loadu_ps(src + k);
            _mm256_storeu_ps(dst + k, Mul ? _mm256_mul_ps(a, b) : _mm256_add_ps(a, b));
        }
    } else {
        for (; k + 4 <= n; k += 4) {
            const __m256d a = _mm256_loadu_pd(dst + k), b = _mm256_loadu_pd(src + k);
            _mm256_storeu_pd(dst + k, Mul ? _mm256_mul_pd(a, b) : _mm256_add_pd(a, b));
        }
    }
    return k;
}
// float32 to float16, eight at a time (F16C, round to nearest even, as float_to_half) while
// no NaN is among them; returns how many it did, stopping before the first eight that hold a
// NaN (NumPy keeps a NaN's payload where F16C quiets it: float_to_half_numpy goes on from there).
__attribute__((target("avx,f16c"))) inline int64_t narrow_f16_f16c(float16* dst, const float* src, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256 v = _mm256_loadu_ps(src + k), nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (!_mm256_testz_ps(nan, nan)) break;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return k;
}
// float16 to float32, eight at a time (F16C, exact) while no NaN is among them; returns how
// many it did (F16C quiets a signalling NaN, which NumPy keeps: half_to_float goes on from there).
__attribute__((target("avx,f16c"))) inline int64_t widen_f16_f16c(float* dst, const float16* src, int64_t n) {
    const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf))) break;
        _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(h));
    }
    return k;
}
// float32 to bfloat16, sixteen at a time (AVX2, float_to_bf16's rounding to nearest even:
// round_to_bf16 without its NaN rule), while no NaN is among them; returns how many it did (as
// narrow_f16_f16c).
__attribute__((target("avx2"))) inline int64_t narrow_bf16_avx2(bfloat16* dst, const float* src, int64_t n) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m256 a = _mm256_loadu_ps(src + k), b = _mm256_loadu_ps(src + k + 8);
        const __m256 nan = _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
        if (!_mm256_testz_ps(nan, nan)) break;
        // packus interleaves the 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permutation restores them.
        const __m256i packed = _mm256_permute4x64_epi64(
            _mm256_packus_epi32(round_to_bf16(a, a, a, false), round_to_bf16(b, b, b, false)), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), packed);
    }
    return k;
}
#endif
template <> struct Arith<float16> : Arith16<float16, half_to_float, float_to_half, 0x7c00, true> {
    using Base = Arith16<float16, half_to_float, float_to_half, 0x7c00, true>;
    static float16 add(float16 a, float16 b) {
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
        if (fp16_arith_on) return float16{fp16_arith<false>(a.bits, b.bits)};
#endif
#ifdef SCATTERX_HAVE_F16C_PATH
        if (f16c_arith_on) return float16{f16c_arith<false>(a.bits, b.bits)};
#endif
        return Base::add(a, b);
    }
    static float16 mul(float16 a, float16 b) {
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
        if (fp16_arith_on) return float16{fp16_arith<true>(a.bits, b.bits)};
#endif
#ifdef SCATTERX_HAVE_F16C_PATH
        if (f16c_arith_on) return float16{f16c_arith<true>(a.bits, b.bits)};
#endif
        return Base::mul(a, b);
    }
};
template <> struct Arith<bfloat16> : Arith16<bfloat16, bf16_to_float, float_to_bf16, 0x7f80, false> {};

template <class F> struct Arith<complex_t<F>> {
    using C = complex_t<F>;
    static C add(C a, C b) { return C{a.re + b.re, a.im + b.im}; }
    static C mul(C a, C b) { return C{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
};

template <class T> inline constexpr bool is_complex_v = false;
template <class F> inline constexpr bool is_complex_v<complex_t<F>> = true;

// The one list of native element types. Its order defines the type codes that the binding
// exports to Python (by name), so no other file repeats it.
template <class... Ts> struct type_list {};
using element_types = type_list<boolean, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                                uint32_t, uint64_t, float16, bfloat16, float, double, complex64,
                                complex128>;
inline constexpr const char* element_type_names[] = {
    "bool",    "int8",    "int16",    "int32",   "int64",   "uint8",     "uint16",    "uint32",
    "uint64",  "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};

}  // namespace scatterx
