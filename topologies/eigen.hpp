#pragma once
// Eigen, included here and nowhere else. With -march=native on AVX-512 machines, GCC 12
// reports "'__Y' may be used uninitialized" inside its own avx512fintrin.h once Eigen's
// packet functions are inlined (GCC bug 105593, fixed in GCC 13): the pragma silences that
// one warning for the text of these headers only (GCC matches a diagnostic's location, here
// inside the intrinsics header, against the pragma state there), never for project code.

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // first, under the pragma (Eigen includes it too)
#endif
#include <Eigen/Dense>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
