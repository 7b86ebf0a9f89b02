// course_lib/half.py's kernel: y (M, N) float32 = x (M, K) float32 @ W (N, K) float16 ^T.
// Each weight is converted to float32 in registers (F16C) as it is loaded and multiplied in
// float32 (FMA): the float16 matrix is read once per call and never copied. Blocks of 4
// weight rows x 4 input rows; the weight rows are split over the OpenMP threads. Signature:
// MindSpore's ops.Custom(func_type="aot") (mindspore/ops/operations/custom_ops.py, Custom).
#include <immintrin.h>
#include <cstdint>

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float half_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

extern "C" int HalfMatMul(int nparam, void **params, int *ndims, int64_t **shapes,
                          const char **dtypes, void *stream, void *extra) {
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  const float *x = static_cast<const float *>(params[0]);
  const uint16_t *w = static_cast<const uint16_t *>(params[1]);
  float *y = static_cast<float *>(params[2]);
  const int64_t M = shapes[0][0], K = shapes[0][1], N = shapes[1][0];
  if (shapes[1][1] != K) return 2;
  const int64_t K8 = K - K % 8;
  #pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += 4) {
    const int64_t nb = (N - n0 < 4) ? N - n0 : 4;
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int64_t mb = (M - m0 < 4) ? M - m0 : 4;
      __m256 acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
      for (int64_t k = 0; k < K8; k += 8) {
        __m256 wv[4];
        for (int j = 0; j < nb; ++j)
          wv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (n0 + j) * K + k)));
        for (int i = 0; i < mb; ++i) {
          const __m256 xv = _mm256_loadu_ps(x + (m0 + i) * K + k);
          for (int j = 0; j < nb; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
      }
      for (int i = 0; i < mb; ++i)
        for (int j = 0; j < nb; ++j) {
          float s = hsum(acc[i][j]);
          for (int64_t k = K8; k < K; ++k)
            s += x[(m0 + i) * K + k] * half_to_float(w[(n0 + j) * K + k]);
          y[(m0 + i) * N + n0 + j] = s;
        }
    }
  }
  return 0;
}
