// Reduction policies: the scatter kernel body exists once and is parameterised by one of these.
#pragma once

#include "types.h"

namespace scatterx {

enum class Reduction : int { none = 0, add = 1, mul = 2, max = 3, min = 4 };
inline constexpr const char* reduction_names[] = {"none", "add", "mul", "max", "min"};

template <Reduction R> struct Reducer;
template <> struct Reducer<Reduction::none> {
    template <class T> static void apply(T& dst, const T& u) { dst = u; }
};
template <> struct Reducer<Reduction::add> {
    template <class T> static void apply(T& dst, const T& u) { dst = Arith<T>::add(dst, u); }
};
template <> struct Reducer<Reduction::mul> {
    template <class T> static void apply(T& dst, const T& u) { dst = Arith<T>::mul(dst, u); }
};
template <> struct Reducer<Reduction::max> {
    template <class T> static void apply(T& dst, const T& u) { dst = Arith<T>::max(dst, u); }
};
template <> struct Reducer<Reduction::min> {
    template <class T> static void apply(T& dst, const T& u) { dst = Arith<T>::min(dst, u); }
};

// Which (type, reduction) pairs exist natively; the rest never get instantiated.
template <class T, Reduction R>
inline constexpr bool supported_v = !(is_complex_v<T> && (R == Reduction::max || R == Reduction::min));

}  // namespace scatterx
