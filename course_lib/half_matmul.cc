// course_lib/half.py's kernel: y (M, N) float32 = x (M, K) float32 @ W (N, K) float16 ^T.
// Each weight is converted to float32 in registers (F16C) as it is loaded and multiplied in
// float32 (FMA): the float16 matrix is read where it lies and never copied. Register tiles:
// 4 input rows x 3 weight rows (12 accumulators + 3 weights + 1 input fit AVX2's 16
// registers), and 1 row x 8 weight rows for the rows left over (a decode step's single row).
// The weight rows are split over the CPUs this process may use, by a pool of its own whose
// threads sleep between calls: OpenMP's threads would spin after each product (libgomp's
// default wait policy, fixed when MindSpore loads libgomp at import), taking the cores from
// MindSpore's threads between products. Signature: MindSpore's ops.Custom(func_type="aot")
// (mindspore/ops/operations/custom_ops.py, Custom).
#include <immintrin.h>
#include <sched.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace {
// Runs job(part) for part 0 .. size-1 and returns when all are done: part 0 on the caller,
// the others on threads that wait on a condition variable between calls. One call at a time.
class Pool {
 public:
  explicit Pool(int size) : size_(size), pid_(getpid()) {
    for (int part = 1; part < size; ++part) std::thread([this, part] { Work(part); }).detach();
  }
  int size() const { return size_; }
  pid_t pid() const { return pid_; }
  void Run(const std::function<void(int)> &job) {
    std::lock_guard<std::mutex> call(call_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      left_.store(size_ - 1, std::memory_order_relaxed);
      ++generation_;
    }
    wake_.notify_all();
    job(0);
    while (left_.load(std::memory_order_acquire) != 0) _mm_pause();
  }

 private:
  void Work(int part) {
    for (uint64_t seen = 0;;) {
      const std::function<void(int)> *job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      (*job)(part);
      left_.fetch_sub(1, std::memory_order_release);
    }
  }
  const int size_;
  const pid_t pid_;
  std::mutex call_, mu_;
  std::condition_variable wake_;
  const std::function<void(int)> *job_ = nullptr;
  uint64_t generation_ = 0;
  std::atomic<int> left_{0};
};

Pool &pool() {                       // never destroyed (its threads never end); made again after fork
  static Pool *p = nullptr;
  static std::mutex made;
  std::lock_guard<std::mutex> lock(made);
  if (p == nullptr || p->pid() != getpid()) {
    cpu_set_t cpus;
    const int n = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    p = new Pool(n > 0 ? n : 1);
  }
  return *p;
}
}  // namespace

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows m0 .. m0+mb-1 times weight rows n0 .. n0+nb-1 (mb <= MB, nb <= NB; the missing ones
// repeat the first and are not stored).
template <int MB, int NB>
static inline void tile(const float *x, const uint16_t *w, float *y, int64_t m0, int64_t n0,
                        int mb, int nb, int64_t K, int64_t N) {
  const float *xr[MB];
  const uint16_t *wr[NB];
  for (int i = 0; i < MB; ++i) xr[i] = x + (m0 + (i < mb ? i : 0)) * K;
  for (int j = 0; j < NB; ++j) wr[j] = w + (n0 + (j < nb ? j : 0)) * K;
  __m256 acc[MB][NB];
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t K8 = K - K % 8;
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 wv[NB];
    for (int j = 0; j < NB; ++j)
      wv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wr[j] + k)));
    for (int i = 0; i < MB; ++i) {
      const __m256 xv = _mm256_loadu_ps(xr[i] + k);
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mb; ++i)
    for (int j = 0; j < nb; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t k = K8; k < K; ++k) s += xr[i][k] * _cvtsh_ss(wr[j][k]);
      y[(m0 + i) * N + n0 + j] = s;
    }
}

template <int MB, int NB>
static void rows(const float *x, const uint16_t *w, float *y, int64_t m_begin, int64_t m_end,
                 int64_t K, int64_t N) {
  Pool &threads = pool();
  const int64_t tiles = (N + NB - 1) / NB, parts = threads.size();
  threads.Run([&](int part) {
    for (int64_t t = tiles * part / parts; t < tiles * (part + 1) / parts; ++t) {
      const int64_t n0 = t * NB;
      const int nb = N - n0 < NB ? N - n0 : NB;
      for (int64_t m0 = m_begin; m0 < m_end; m0 += MB)
        tile<MB, NB>(x, w, y, m0, n0, m_end - m0 < MB ? m_end - m0 : MB, nb, K, N);
    }
  });
}

extern "C" int HalfMatMul(int nparam, void **params, int *ndims, int64_t **shapes,
                          const char **dtypes, void *stream, void *extra) {
  if (nparam != 3 || ndims[0] != 2 || ndims[1] != 2) return 1;
  const float *x = static_cast<const float *>(params[0]);
  const uint16_t *w = static_cast<const uint16_t *>(params[1]);
  float *y = static_cast<float *>(params[2]);
  const int64_t M = shapes[0][0], K = shapes[0][1], N = shapes[1][0];
  if (shapes[1][1] != K) return 2;
  const int64_t M4 = M - M % 4;
  if (M4 > 0) rows<4, 3>(x, w, y, 0, M4, K, N);
  if (M4 < M) rows<1, 8>(x, w, y, M4, M, K, N);
  return 0;
}
