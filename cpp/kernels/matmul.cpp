// Matrix product (see attnkit/matmul.h): a Goto/BLIS-style packed GEMM written once against Vec<T>.
//
// Each thread owns a rectangle of C (whole MR x NR tiles) and walks it as
//   columns in NC blocks -> k in KC blocks: pack B's KC x NC block into NR-column micro-panels
//     -> rows in MR panels: pack A's MR x KC micro-panel -> NR columns: register-tile micro-kernel.
// The A micro-panel (MR x KC) stays in L1 while the micro-kernel sweeps the B block, which stays in L2.
// Edges are zero-padded in the packed panels, and an edge tile is computed in full into a local tile.
//
// Determinism: element (i, j) of C always gets the same roundings, s_b = an FMA chain from 0 over k in
// KC block b (in k order), then c = s_0 (or c + s_0 when accumulating), c = c + s_b for each later
// block, c = c + bias_j after the last. The blocks start at fixed multiples of KC and the tile layout
// never changes a lane's arithmetic, so neither the thread count nor the strides of A and B can.
#include <atomic>
#include <cstdint>
#include <memory>

#include "attention_tiles.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct GemmShape {
  using V = Vec<T>;
  static constexpr int W = V::W;
  static constexpr int kRegs = W * int(sizeof(T)) == 64 ? 32 : 16;  // vector registers of the ISA
  static constexpr int NV = 2;                                      // vectors per tile row
  static constexpr int NR = NV * W;                                 // columns per tile
  // Rows per tile: MR x NV accumulators, NV vectors of B and one broadcast of A fill the registers.
  static constexpr int MR = kRegs * 3 / 4 / NV;
  // A's MR x KC micro-panel (2 KB a row: 12 KB on AVX2, 24 KB on AVX-512) stays in L1 while the
  // B micro-panels stream by from B's KC x NC block (1 MB in float, L2/L3). Measured on Zen 4:
  // KC of 1 KB a row lost 10-15% at k = 384 and 1536 (C re-read per block), 3 KB gained nothing;
  // NC of 256 or 384 lost up to 15% at k = 1536, 1024 gained nothing.
  static constexpr std::int64_t KC = 2048 / sizeof(T);
  static constexpr std::int64_t NC = 512;
  static_assert(NC % NR == 0, "NC must be whole tiles");
};

// Products below this many multiply-adds run on one thread. Measured when attnkit's threads were OpenMP's, waiting
// passively: a parallel region paid for waking the other thread and for being woken at its end, and the woken
// thread may land on the waker's core (as a sleeping worker of attnkit/thread_pool.h still does). On the 2-core KVM
// guest it was measured on, a second thread lost 10-25% up to 8M (1-core time ~0.2 ms) and won 1.3x or more from
// 16M; with spinning threads (OMP_WAIT_POLICY=ACTIVE) it already won 1.35x at 0.26M. It is a time: half the
// multiply-adds where a vector holds half the lanes (16M for AVX-512's float, 8M for AVX2's). Zen 5 held to AVX2
// won 1.2-1.5x with two threads at 6-12M (768 x 128 x 128: 204 -> 134-145 us), which 16M had kept on one; AVX-512
// won only from ~9M there.
template <class T>
constexpr std::int64_t kMinParallelWork = (std::int64_t(1) << 24) * Vec<T>::W / 16;
// With a worker spinning (team_awake) the hand-off costs ~1 us: two threads won 1.4x at 64 x 64 x 64 (0.26M, 7 us on
// one), 1.9x at 768 x 128 x 65 (6.4M), on Zen 5 held to AVX2.
constexpr std::int64_t kMinParallelWorkAwake = std::int64_t(1) << 18;

template <class T>
std::int64_t min_parallel_work() {
  return team_awake() ? kMinParallelWorkAwake : kMinParallelWork<T>;
}

// Layouts of A's MR x kc micro-panel, both read by the micro-kernel in k order:
//   columns:    element (i, p) at p * MR + i, filled from MR-long pieces of A's columns;
//   row chunks: the first kv = kc - kc % W columns in blocks of W, element (i, p) at (p / W) * MR * W +
//               i * W + p % W, filled with whole vectors of A's rows; the last kc % W as in columns.
// Row chunks serve row-major A, which columns would transpose element by element (16% of a
// 2304 x 128 x 128 product); columns serve column-major A (x.T), which it copies in MR-long runs.
enum class Panel { columns, row_chunks };

// ap: A's rows [i0, i0 + mr) x columns [p0, p0 + kc) as an MR x kc micro-panel; rows past mr are zeros.
template <class T, Panel kLayout>
void pack_a(const MatmulArgs<T>& g, std::int64_t i0, int mr, std::int64_t p0, std::int64_t kc, T* ap) {
  using V = Vec<T>;
  constexpr int W = V::W, MR = GemmShape<T>::MR;
  const std::int64_t rs = g.a_row_stride, cs = g.a_col_stride;
  const T* src = g.a + i0 * rs + p0 * cs;
  const std::int64_t kv = kLayout == Panel::row_chunks ? kc - kc % W : 0;
  T* tail = ap + kv * MR;  // the columns kv.. in the columns layout
  for (std::int64_t p = 0; p < kv; p += W)
    for (int i = 0; i < MR; ++i) (i < mr ? V::load(src + i * rs + p) : V::zero()).store(ap + p * MR + i * W);
  constexpr int kRun = (MR + W - 1) / W * W;  // MR values rounded up to whole vectors
  if (cs == 1 || (rs != 1 && (cs < 0 ? -cs : cs) <= (rs < 0 ? -rs : rs))) {
    for (int i = 0; i < mr; ++i) {
      const T* row = src + i * rs;
      for (std::int64_t p = kv; p < kc; ++p) tail[(p - kv) * MR + i] = row[p * cs];
    }
  } else if (rs == 1 && mr == MR && i0 + kRun <= g.m) {
    // A transposed (x.T: a training step's weight gradients): each column's MR values are one run, copied as
    // whole vectors; the kRun - MR values past it land in the next column's slot (written after) or the
    // panel's padding. (512 x 4096).T @ (4096 x 512), 1 thread on the Xeon: 24.8 -> 23.6 ms under AVX2,
    // 14.9 -> 14.3 under AVX-512 (row-major A: 20.0, 12.4; the rest of the gap is not in this copy).
    for (std::int64_t p = kv; p < kc; ++p)
#pragma GCC unroll 4
      for (int v = 0; v < kRun; v += W) V::load(src + p * cs + v).store(tail + (p - kv) * MR + v);
    return;
  } else {
    for (std::int64_t p = kv; p < kc; ++p)
      for (int i = 0; i < mr; ++i) tail[(p - kv) * MR + i] = src[p * cs + i * rs];
  }
  for (std::int64_t p = kv; p < kc; ++p)
    for (int i = mr; i < MR; ++i) tail[(p - kv) * MR + i] = T(0);
}

// bp: the kc x nc block as NR-column micro-panels (panel q at q * kc * NR, element (p, j) at p * NR + j);
// columns past nc are zeros. With sums (the block's nc columns), each column's values are also added onto
// it in row order, as they are packed.
template <class T>
void pack_b(const MatmulArgs<T>& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, std::int64_t nc, T* bp,
            T* sums) {
  using V = Vec<T>;
  constexpr int W = V::W, NV = GemmShape<T>::NV, NR = GemmShape<T>::NR;
  const std::int64_t rs = g.b_row_stride, cs = g.b_col_stride;
  for (std::int64_t jr = 0; jr < nc; jr += NR, bp += kc * NR) {
    const int nr = int(min_scalar<std::int64_t>(NR, nc - jr));
    const T* src = g.b + p0 * rs + (j0 + jr) * cs;
    if (cs == 1 && nr == NR && sums) {
      V s[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[v] = V::load(sums + jr + v * W);
      for (std::int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const V x = V::load(src + p * rs + v * W);
          x.store(bp + p * NR + v * W);
          s[v] = s[v] + x;
        }
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[v].store(sums + jr + v * W);
      continue;
    }
    if (cs == 1 && nr == NR) {
      for (std::int64_t p = 0; p < kc; ++p)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) V::load(src + p * rs + v * W).store(bp + p * NR + v * W);
      continue;
    }
    if (sums)  // rare layouts (B transposed, an edge panel): the sums on their own, in row order
      for (int j = 0; j < nr; ++j)
        for (std::int64_t p = 0; p < kc; ++p) sums[jr + j] += src[p * rs + j * cs];
    if (cs == 1 || (rs != 1 && (cs < 0 ? -cs : cs) <= (rs < 0 ? -rs : rs))) {
      for (std::int64_t p = 0; p < kc; ++p)
        for (int j = 0; j < nr; ++j) bp[p * NR + j] = src[p * rs + j * cs];
    } else {
      // B transposed (columns contiguous): a tile of kTile values of each column at a time, so the tile's
      // kTile x NR panel rows stay in L1 while the columns are read one cache line each (the panel's whole
      // kc x NR, 64 KB, did not: 2.2x slower at 576 x 3072).
      constexpr std::int64_t kTile = 64 / sizeof(T);
      for (std::int64_t p0 = 0; p0 < kc; p0 += kTile) {
        const std::int64_t p1 = min_scalar(kc, p0 + kTile);
        for (int j = 0; j < nr; ++j)
          for (std::int64_t p = p0; p < p1; ++p) bp[p * NR + j] = src[p * rs + j * cs];
      }
    }
    for (std::int64_t p = 0; p < kc; ++p)
      for (int j = nr; j < NR; ++j) bp[p * NR + j] = T(0);
  }
}

// c = s (first block, not accumulating) or c + s, then + bias when given (the last block).
template <class T>
inline Vec<T> combine(Vec<T> s, const T* c, bool overwrite, const T* bias) {
  using V = Vec<T>;
  if (!overwrite) s = V::load(c) + s;
  if (bias) s = s + V::load(bias);
  return s;
}

// One step of the FMA chains: acc[i][v] += a[i * kStride] * b[v * W ...], all MR rows.
template <class T, int kStride>
inline void fma_step(Vec<T> (&acc)[GemmShape<T>::MR][GemmShape<T>::NV], const T* a, const T* b) {
  using V = Vec<T>;
  using S = GemmShape<T>;
  V bv[S::NV];
#pragma GCC unroll 4
  for (int v = 0; v < S::NV; ++v) bv[v] = V::load(b + v * S::W);
#pragma GCC unroll 32
  for (int i = 0; i < S::MR; ++i) {
    const V ai = V::set1(a[i * kStride]);
#pragma GCC unroll 4
    for (int v = 0; v < S::NV; ++v) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
  }
}

// The mr x nr tile of C at c gets the kc-long products of the packed panels ap (laid out as kLayout)
// and bp (see combine).
template <class T, Panel kLayout>
inline void micro_tile(std::int64_t kc, const T* __restrict ap, const T* __restrict bp, T* c, std::int64_t ldc,
                       int mr, int nr, bool overwrite, const T* bias) {
  using V = Vec<T>;
  using S = GemmShape<T>;
  constexpr int W = S::W, NV = S::NV, MR = S::MR, NR = S::NR;
  // A tile of C that will be read (a later KC block, or accumulating), fetched while the FMA chain
  // runs: between KC blocks it leaves the cache. (Also fetching a tile that is only written slowed
  // two threads by 10% at k = 128.)
  for (int i = 0; i < mr && !overwrite; ++i) {
    __builtin_prefetch(c + i * ldc, 1);
    __builtin_prefetch(c + i * ldc + nr - 1, 1);
  }
  V acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  std::int64_t p = 0;
  if (kLayout == Panel::row_chunks)
    for (; p + W <= kc; p += W, ap += MR * W, bp += W * NR)
#pragma GCC unroll 16
      for (int q = 0; q < W; ++q) fma_step<T, W>(acc, ap + q, bp + q * NR);
#pragma GCC unroll 8
  for (; p < kc; ++p, ap += MR, bp += NR) fma_step<T, 1>(acc, ap, bp);
  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        T* cv = c + i * ldc + v * W;
        combine(acc[i][v], cv, overwrite, bias ? bias + v * W : nullptr).store(cv);
      }
    return;
  }
  // Edge tile: the same additions, lane by lane, on the valid part only.
  alignas(64) T tile[MR * NR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v].store(tile + i * NR + v * W);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      T s = tile[i * NR + j];
      T* cij = c + i * ldc + j;
      if (!overwrite) s = *cij + s;
      if (bias) s = s + bias[j];
      *cij = s;
    }
}

// Rows [r0, r1) (r0 a multiple of MR) x columns [jc, jc + nc) of C against one packed kc x nc block of B (bp, from
// row pc of B): each MR rows of A packed into ap, then their tiles. overwrite / bias as micro_tile's.
template <class T, Panel kLayout>
void block_rows(const MatmulArgs<T>& g, std::int64_t r0, std::int64_t r1, std::int64_t pc, std::int64_t kc,
                std::int64_t jc, std::int64_t nc, T* ap, const T* bp, bool overwrite, const T* bias) {
  using S = GemmShape<T>;
  constexpr int MR = S::MR, NR = S::NR;
  const std::int64_t ldc = g.c_row_stride;
  for (std::int64_t ir = r0; ir < r1; ir += MR) {
    const int mr = int(min_scalar<std::int64_t>(MR, r1 - ir));
    pack_a<T, kLayout>(g, ir, mr, pc, kc, ap);
    T* crow = g.c + ir * ldc + jc;
    for (std::int64_t jr = 0; jr < nc; jr += NR)
      micro_tile<T, kLayout>(kc, ap, bp + jr * kc, crow + jr, ldc, mr, int(min_scalar<std::int64_t>(NR, nc - jr)),
                             overwrite, bias ? bias + jr : nullptr);
  }
}

// Rows [r0, r1) x columns [c0, c1) of C, with one thread's scratch (ap: MR x KC, bp: KC x NC); with sums (zeros
// on entry), also B's column sums of columns [c0, c1), added as B's blocks are packed, in row order.
template <class T, Panel kLayout>
void rectangle(const MatmulArgs<T>& g, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, T* ap,
               T* bp, T* sums) {
  using S = GemmShape<T>;
  const std::int64_t k = g.k;
  const std::int64_t kblocks = k > 0 ? (k + S::KC - 1) / S::KC : 1;  // k = 0: one empty block
  for (std::int64_t jc = c0; jc < c1; jc += S::NC) {
    const std::int64_t nc = min_scalar(S::NC, c1 - jc);
    for (std::int64_t blk = 0; blk < kblocks; ++blk) {
      const std::int64_t pc = blk * S::KC, kc = min_scalar(S::KC, k - pc);
      const T* bias = blk == kblocks - 1 && g.bias ? g.bias + jc : nullptr;
      pack_b(g, pc, kc, jc, nc, bp, sums ? sums + jc : nullptr);
      block_rows<T, kLayout>(g, r0, r1, pc, kc, jc, nc, ap, bp, blk == 0 && !g.accumulate, bias);
    }
  }
}

// All of C for a product of one k block (0 < k <= KC) whose threads split the rows: per NC block of columns, each
// thread packs the block of B, then claims `chunk` rows at a time (a multiple of MR) from next[block] until none
// are left. A thread that starts late (woken from sleep: 60-80 us on a 2-core VM) finds fewer rows
// left, where a fixed half kept the first thread waiting for it. The tiles are rectangle's (block_rows), so the
// bits do not depend on who computed them. With sums, B's column sums as rectangle adds them.
template <class T, Panel kLayout>
void claimed_rows(const MatmulArgs<T>& g, std::atomic<std::int64_t>* next, std::int64_t chunk, T* ap, T* bp,
                  T* sums) {
  using S = GemmShape<T>;
  const std::int64_t m = g.m, k = g.k;
  for (std::int64_t jc = 0, block = 0; jc < g.n; jc += S::NC, ++block) {
    if (!sums && next[block].load(std::memory_order_relaxed) >= m) continue;  // its rows all taken: no packing
    const std::int64_t nc = min_scalar(S::NC, g.n - jc);
    pack_b(g, 0, k, jc, nc, bp, sums ? sums + jc : nullptr);
    const T* bias = g.bias ? g.bias + jc : nullptr;
    for (std::int64_t r0; (r0 = next[block].fetch_add(chunk, std::memory_order_relaxed)) < m;)
      block_rows<T, kLayout>(g, r0, min_scalar(m, r0 + chunk), 0, k, jc, nc, ap, bp, !g.accumulate, bias);
  }
}

// tm x tn rectangles of C for up to `threads` threads, the busiest thread's work least: its tiles' multiply-adds
// and, at kPackCost multiply-adds an element, its packing (its rows of A once per NC block of its columns, its
// columns of B once), then rows split before columns. Tiles alone split 4096 x 128 @ 128 x 128 by columns (2 x
// 683 x 4 tiles against 342 x 8 + 341 x 8, a 0.15% difference), so each thread packed all of A for half the
// work: 2 threads took 1.53 ms of CPU to 1 thread's 1.21 (AVX2, Xeon). (128 x 128 outputs, 11 x 4 tiles: 6 + 5
// rows of tiles left a thread idle 9% of the time, 2 + 2 columns none.)
struct Grid {
  int rows = 1, cols = 1;
};

constexpr std::int64_t kPackCost = 4;

template <class T>
Grid split(std::int64_t tiles_m, std::int64_t tiles_n, int threads) {
  using S = GemmShape<T>;
  Grid best;
  std::int64_t best_cost = -1;
  for (int tm = min_scalar<std::int64_t>(threads, tiles_m); tm >= 1; --tm)
    for (int tn = min_scalar<std::int64_t>(threads / tm, tiles_n); tn >= 1; --tn) {
      const std::int64_t rows = (tiles_m + tm - 1) / tm, cols = (tiles_n + tn - 1) / tn;  // in tiles
      const std::int64_t nc_blocks = (cols * S::NR + S::NC - 1) / S::NC;
      // Per unit of k: the busiest thread's multiply-adds and packed elements.
      const std::int64_t cost = rows * cols * S::MR * S::NR + kPackCost * (rows * S::MR * nc_blocks + cols * S::NR);
      if (best_cost < 0 || cost < best_cost) {
        best = {tm, tn};
        best_cost = cost;
      }
    }
  return best;
}

// Products of at most this many rows take the thin path below: a decoding step (one token per sequence) would
// otherwise pack all of B for one row and fill MR-row tiles with zeros (1 x 256 x 8192 with B transposed, a
// language model's tied output: 2.4 ms packed, 5x slower than OpenBLAS's GEMV).
constexpr std::int64_t kThinRows = 4;
constexpr int kThinVectors = 64;  // W-column vectors per run of a row of B (256 floats on AVX2: 1 KB)
constexpr int kThinScalars = 8;  // independent scalar chains where B's rows are strided (B transposed)
// A thin product streams B once and does k n multiply-adds per row: it is bound by memory, not arithmetic, and
// a second thread adds its core's bandwidth. From this many elements of B (1 MB in float) it takes the threads:
// a tied 256 x 8192 output layer decoding from DRAM took 1.1-1.3 ms on one thread of a 2-core Zen 3.
constexpr std::int64_t kThinParallelElements = std::int64_t(1) << 18;

// Columns [j, j + NV W) of row i of C, B's rows contiguous (see thin): for each p, a run of NV W elements of B's
// row p, read in order, updates NV W chains kept in ``sum`` (L1), as an axpy: B is read as it lies in memory
// (runs of W columns walking down B, one cache line per row, ran at a third of the speed).
template <class T>
inline void thin_vectors(const MatmulArgs<T>& g, std::int64_t i, std::int64_t j, int NV, std::int64_t kblocks,
                         T* sum) {
  using V = Vec<T>;
  using S = GemmShape<T>;
  constexpr int W = V::W;
  const T* a = g.a + i * g.a_row_stride;
  T* c = g.c + i * g.c_row_stride + j;
  for (std::int64_t blk = 0; blk < kblocks; ++blk) {
    const std::int64_t p0 = blk * S::KC, p1 = min_scalar(g.k, p0 + S::KC);
    for (int v = 0; v < NV; ++v) V::zero().store(sum + v * W);
    for (std::int64_t p = p0; p < p1; ++p) {
      const V ap = V::set1(a[p * g.a_col_stride]);
      const T* b = g.b + p * g.b_row_stride + j;
      for (int v = 0; v < NV; ++v) V::fma(ap, V::load(b + v * W), V::load(sum + v * W)).store(sum + v * W);
    }
    for (int v = 0; v < NV; ++v) {
      const V s = V::load(sum + v * W);
      (blk > 0 || g.accumulate ? V::load(c + v * W) + s : s).store(c + v * W);
    }
  }
  if (g.bias)
    for (int v = 0; v < NV; ++v) (V::load(c + v * W) + V::load(g.bias + j + v * W)).store(c + v * W);
}

// Columns [j, j + nj) of row i of C (nj <= NS), one scalar chain per column reading B's column in k order.
template <class T, int NS>
inline void thin_scalars(const MatmulArgs<T>& g, std::int64_t i, std::int64_t j, int nj, std::int64_t kblocks) {
  using S = GemmShape<T>;
  const std::int64_t cs = g.b_col_stride;
  const T* a = g.a + i * g.a_row_stride;
  T* c = g.c + i * g.c_row_stride + j;
  T total[NS], sum[NS];
  for (std::int64_t blk = 0; blk < kblocks; ++blk) {
    const std::int64_t p0 = blk * S::KC, p1 = min_scalar(g.k, p0 + S::KC);
#pragma GCC unroll 16
    for (int q = 0; q < NS; ++q) sum[q] = T(0);
    for (std::int64_t p = p0; p < p1; ++p) {
      const T ap = a[p * g.a_col_stride];
      const T* b = g.b + p * g.b_row_stride + j * cs;
#pragma GCC unroll 16
      for (int q = 0; q < NS; ++q) sum[q] = fma_scalar(ap, b[(q < nj ? q : 0) * cs], sum[q]);
    }
#pragma GCC unroll 16
    for (int q = 0; q < NS; ++q) total[q] = blk > 0 ? total[q] + sum[q] : g.accumulate && q < nj ? c[q] + sum[q] : sum[q];
  }
  for (int q = 0; q < nj; ++q) c[q] = g.bias ? total[q] + g.bias[j + q] : total[q];
}

// C's rows [0, m) x columns [c0, c1) without packing, with the packed path's roundings per element: an FMA
// chain from 0 over k in order within each KC block, c = s_0 (or c + s_0 when accumulating), c = c + s_b for
// each later block, then + bias_j. A row's result is then the same bits whatever rows come with it.
template <class T>
void thin(const MatmulArgs<T>& g, std::int64_t c0, std::int64_t c1) {
  using S = GemmShape<T>;
  constexpr int W = Vec<T>::W, NV = kThinVectors, NS = kThinScalars;
  const std::int64_t kblocks = g.k > 0 ? (g.k + S::KC - 1) / S::KC : 1;
  std::int64_t j = c0;
  if (g.b_col_stride == 1) {  // B's rows are contiguous: runs of up to NV x W columns
    alignas(64) T sum[NV * W];
    for (std::int64_t run; (run = min_scalar<std::int64_t>(NV, (c1 - j) / W)) > 0; j += run * W)
      for (std::int64_t i = 0; i < g.m; ++i) thin_vectors<T>(g, i, j, int(run), kblocks, sum);
  }
  // The other columns (all of them when B's rows are strided, B transposed): NS scalar chains at a time.
  for (; j < c1; j += NS)
    for (std::int64_t i = 0; i < g.m; ++i)
      thin_scalars<T, NS>(g, i, j, int(min_scalar<std::int64_t>(NS, c1 - j)), kblocks);
}

// B's column sums in row order without a product (the thin path packs nothing, and m = 0 computes nothing).
template <class T>
void column_sums(const MatmulArgs<T>& g) {
  for (std::int64_t p = 0; p < g.k; ++p) {
    const T* row = g.b + p * g.b_row_stride;
    for (std::int64_t j = 0; j < g.n; ++j) g.b_column_sums[j] += row[j * g.b_col_stride];
  }
}

}  // namespace

template <class T>
void matmul(const MatmulArgs<T>& g) {
  using S = GemmShape<T>;
  const std::int64_t m = g.m, n = g.n, k = g.k;
  if (g.b_column_sums) {
    for (std::int64_t j = 0; j < n; ++j) g.b_column_sums[j] = T(0);
    if (m <= kThinRows) column_sums(g);
  }
  if (m == 0 || n == 0) return;
  if (m <= kThinRows) {
    constexpr std::int64_t W = Vec<T>::W;
    const int threads = m * n * k >= min_parallel_work<T>() || n * k >= kThinParallelElements ? kernel_threads() : 1;
    const std::int64_t chunks = (n + W - 1) / W;
    team(threads, [&](int t, int count) {
      thin(g, min_scalar(n, chunks * t / count * W), min_scalar(n, chunks * (t + 1) / count * W));
    });
    return;
  }
  const std::int64_t tiles_m = (m + S::MR - 1) / S::MR, tiles_n = (n + S::NR - 1) / S::NR;
  const int threads = m * n * k >= min_parallel_work<T>() ? kernel_threads() : 1;
  const Grid grid = split<T>(tiles_m, tiles_n, threads);
  const int parts = grid.rows * grid.cols;
  // Scratch for the widest rectangle, 64-byte aligned pieces.
  constexpr std::int64_t align = 64 / sizeof(T);
  const std::int64_t kc_max = max_scalar<std::int64_t>(1, min_scalar(S::KC, k));
  const std::int64_t nc_max = min_scalar(S::NC, (tiles_n + grid.cols - 1) / grid.cols * S::NR);
  // A's panel with room for pack_a's whole-vector runs past its end.
  const std::int64_t a_size = round_up(S::MR * kc_max + S::W, align), b_size = round_up(kc_max * nc_max, align);
  auto scratch = aligned_buffer<T>(parts * (a_size + b_size));
  if (parts > 1 && grid.cols == 1 && k > 0 && k <= S::KC) {  // rows split, one k block: rows claimed (above)
    const std::int64_t blocks = (n + S::NC - 1) / S::NC;
    // ~8 claims a thread: the late thread's lag is then shared to within a chunk.
    const std::int64_t chunk = max_scalar<std::int64_t>(1, tiles_m / (8 * std::int64_t(parts))) * S::MR;
    std::unique_ptr<std::atomic<std::int64_t>[]> next(new std::atomic<std::int64_t>[std::size_t(blocks)]);
    for (std::int64_t b = 0; b < blocks; ++b) next[b].store(0, std::memory_order_relaxed);
    team(parts, [&](int t, int) {
      T* ap = scratch.get() + t * (a_size + b_size);
      T* sums = t == 0 ? g.b_column_sums : nullptr;  // one thread packs every block: it sums B's columns
      if (g.a_col_stride == 1)
        claimed_rows<T, Panel::row_chunks>(g, next.get(), chunk, ap, ap + a_size, sums);
      else
        claimed_rows<T, Panel::columns>(g, next.get(), chunk, ap, ap + a_size, sums);
    });
    return;
  }
  team(parts, [&](int part, int) {
    const int r = part / grid.cols, s = part % grid.cols;
    const std::int64_t r0 = tiles_m * r / grid.rows * S::MR, r1 = min_scalar(m, tiles_m * (r + 1) / grid.rows * S::MR);
    const std::int64_t c0 = tiles_n * s / grid.cols * S::NR, c1 = min_scalar(n, tiles_n * (s + 1) / grid.cols * S::NR);
    T* ap = scratch.get() + part * (a_size + b_size);
    T* sums = r == 0 ? g.b_column_sums : nullptr;  // the first row group's threads sum their columns of B
    if (g.a_col_stride == 1)
      rectangle<T, Panel::row_chunks>(g, r0, r1, c0, c1, ap, ap + a_size, sums);
    else
      rectangle<T, Panel::columns>(g, r0, r1, c0, c1, ap, ap + a_size, sums);
  });
}

template void matmul<float>(const MatmulArgs<float>&);
template void matmul<double>(const MatmulArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit
