/* Adam's step for the tensors whose beta1, beta2 or epsilon differ between the runs of an
 * ensemble: one pass over memory, each run at its own settings. lrtransfer compiles this file
 * on first use (`native.py`) and falls back to PyTorch's operations where it cannot.
 *
 * A tensor is (runs, n), run-major and contiguous. Per run k, the caller gives:
 *   w1 = 1 - beta1, w2 = 1 - beta2   the moving averages' weights
 *   scale, shift                     the denominator: sqrt(v) * scale + shift
 *   keep (or NULL)                   1 - decay, the weights' decoupled decay
 * and the pass computes, per element,
 *   m <- lerp(m, g, w1);  v <- lerp(v, g * g, w2);  den = sqrt(v) * scale + shift
 * then either out = m / den (Adam's direction; w untouched) or w <- w * keep - m / den.
 * lerp is PyTorch's (its vectorised form): self + w (end - self) for w < 0.5, else
 * end - (end - self)(1 - w). Compiled without contracting a * b + c into one rounding, so each
 * other operation rounds as PyTorch's does.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define DEFINE_ALONG(NAME, T, FMA, SQRT)                                                          \
    void NAME(int64_t runs, int64_t n, T *restrict w, const T *restrict g, T *restrict m,         \
              T *restrict v, T *restrict out, const T *w1, const T *w2, const T *scale,           \
              const T *shift, const T *keep) {                                                    \
        for (int64_t k = 0; k < runs; k++) {                                                      \
            const T a = w1[k], b = w2[k], s = scale[k], c = shift[k];                             \
            const T d = keep ? keep[k] : (T)1;                                                    \
            const int small_a = a < (T)0.5, small_b = b < (T)0.5;                                 \
            const T *gk = g + k * n;                                                              \
            T *mk = m + k * n, *vk = v + k * n;                                                   \
            T *ok = out ? out + k * n : NULL, *wk = w ? w + k * n : NULL;                         \
            for (int64_t j = 0; j < n; j++) {                                                     \
                const T gj = gk[j], gg = gj * gj;                                                 \
                const T mj = small_a ? FMA(a, gj - mk[j], mk[j]) : FMA(-(gj - mk[j]), 1 - a, gj); \
                const T vj = small_b ? FMA(b, gg - vk[j], vk[j]) : FMA(-(gg - vk[j]), 1 - b, gg); \
                mk[j] = mj;                                                                       \
                vk[j] = vj;                                                                       \
                const T den = SQRT(vj) * s + c;                                                   \
                if (ok)                                                                           \
                    ok[j] = mj / den;                                                             \
                else if (keep)                                                                    \
                    wk[j] = wk[j] * d - mj / den;                                                 \
                else                                                                              \
                    wk[j] = wk[j] - mj / den;                                                     \
            }                                                                                     \
        }                                                                                         \
    }

DEFINE_ALONG(adam_along_f32, float, fmaf, sqrtf)
DEFINE_ALONG(adam_along_f64, double, fma, sqrt)
