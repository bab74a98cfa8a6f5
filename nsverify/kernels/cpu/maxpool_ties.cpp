// Fused tie-aware max-pool backward (nsverify.kernels): the minimal (even split, Boustany Def. 10) and hybrid(beta)
// Jacobians of a 2-d max pool, one pass over x, the pooled output and the incoming gradient, one write of the input
// gradient.  The pure-PyTorch path in nsverify/ad.py (_TieWindows, _maxpool_vjp) is the reference: this kernel
// performs the same floating-point operations in the same order, so that their results are equal.
//
//   minimal, window j with tie set A_j (entries equal to out_j) and upstream g_j:   r_j = g_j / |A_j| on A_j
//   hybrid:  r_j = (g_j * beta) / |A_j| on A_j, plus g_j * (1 - beta) on the first index of A_j;
//            tie-free windows (|A_j| = 1) get exactly g_j
//   a window whose max is NaN (|A_j| = 0) sends g_j to PyTorch's own index (the saved argmax)
//
// Every value is rounded to the tensor's dtype after each operation, as PyTorch's elementwise ops do (16-bit types
// compute in float32).  Overlapping windows add up in the reference's order: the spread contributions of the
// windows covering an input position in decreasing row-major window order (the reference loops over kernel
// offsets), then the first-index (native) parts in increasing window order (the reference's scatter_add).
//
// Built at first use by nsverify/kernels/loader.py with torch.utils.cpp_extension (ninja, OpenMP via
// at::parallel_for); registered as torch.ops.nsverify_kernels.maxpool2d_tie_backward.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

template <typename T>
struct OpMath {
  using type = float;
};
template <>
struct OpMath<double> {
  using type = double;
};

struct Geom {
  int64_t H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
  bool overlap;
};

// Calls f(flat index) for every entry of the window whose top-left corner is (h0, w0), row-major, padding skipped.
template <typename F>
inline void each_in_window(const Geom& G, int64_t h0, int64_t w0, F&& f) {
  for (int64_t a = 0; a < G.kh; ++a) {
    const int64_t ih = h0 + a * G.dh;
    if (ih < 0 || ih >= G.H) continue;
    for (int64_t b = 0; b < G.kw; ++b) {
      const int64_t iw = w0 + b * G.dw;
      if (iw >= 0 && iw < G.W) f(ih * G.W + iw);
    }
  }
}

// The size of a window's tie set A_j (entries equal to its max m, compared in op_t) and its first index.
template <typename scalar_t, typename op_t>
inline int64_t tie_set(const Geom& G, int64_t h0, int64_t w0, const scalar_t* x, op_t m, int64_t& first) {
  int64_t count = 0;
  first = -1;
  each_in_window(G, h0, w0, [&](int64_t q) {
    const bool hit = static_cast<op_t>(x[q]) == m;
    if (hit && count == 0) first = q;
    count += hit;
  });
  return count;
}

// The value a window's tie set receives, and the first-index (native) part, under the chosen Jacobian.
template <typename scalar_t, typename op_t>
inline void window_values(scalar_t gj, int64_t count, bool hybrid, bool beta_is_one, op_t beta, op_t omb, scalar_t& r,
                          scalar_t& native) {
  native = static_cast<scalar_t>(0);
  if (!hybrid || beta_is_one) {
    r = static_cast<scalar_t>(static_cast<op_t>(gj) / static_cast<op_t>(count));
  } else if (count == 1) {
    r = gj;
  } else {
    const scalar_t t = static_cast<scalar_t>(static_cast<op_t>(gj) * beta);
    r = static_cast<scalar_t>(static_cast<op_t>(t) / static_cast<op_t>(count));
  }
  if (hybrid && count > 1) native = static_cast<scalar_t>(static_cast<op_t>(gj) * omb);
}

template <typename scalar_t>
inline void add_to(scalar_t& acc, scalar_t v) {
  using op_t = typename OpMath<scalar_t>::type;
  acc = static_cast<scalar_t>(static_cast<op_t>(acc) + static_cast<op_t>(v));
}

// Non-overlapping windows: each input position is in at most one window, so the order of windows does not matter and
// every covered position is written once (members r_j, the others 0; the first index r_j + native part).
template <typename scalar_t>
void plane_disjoint(const scalar_t* x, const scalar_t* out, const int64_t* idx, const scalar_t* g, scalar_t* gx,
                    const Geom& G, bool hybrid, bool beta_is_one, typename OpMath<scalar_t>::type beta,
                    typename OpMath<scalar_t>::type omb) {
  using op_t = typename OpMath<scalar_t>::type;
  const bool full = G.ph == 0 && G.pw == 0 && G.sh == G.kh && G.sw == G.kw && G.dh == 1 && G.dw == 1 &&
                    G.Ho * G.kh == G.H && G.Wo * G.kw == G.W;
  if (!full) std::memset(static_cast<void*>(gx), 0, sizeof(scalar_t) * G.H * G.W);
  for (int64_t oh = 0; oh < G.Ho; ++oh) {
    const int64_t h0 = oh * G.sh - G.ph;
    for (int64_t ow = 0; ow < G.Wo; ++ow) {
      const int64_t j = oh * G.Wo + ow;
      const op_t m = static_cast<op_t>(out[j]);
      const int64_t w0 = ow * G.sw - G.pw;
      if (m != m) {  // NaN window: PyTorch's own index gets g_j, the other entries 0
        each_in_window(G, h0, w0, [&](int64_t q) {
          gx[q] = static_cast<scalar_t>(0);
        });
        add_to(gx[idx[j]], g[j]);
        continue;
      }
      int64_t first = -1;
      const int64_t count = tie_set(G, h0, w0, x, m, first);
      scalar_t r, native;
      window_values<scalar_t, op_t>(g[j], count, hybrid, beta_is_one, beta, omb, r, native);
      each_in_window(G, h0, w0, [&](int64_t q) {
        gx[q] = static_cast<op_t>(x[q]) == m ? r : static_cast<scalar_t>(0);
      });
      if (hybrid) add_to(gx[first], native);
    }
  }
}

// Loads and stores in the compute type (float32 for the 16-bit types).  bfloat16 is converted with the bit
// operations of c10::BFloat16 (round to nearest even) written without branches, so that loops over it vectorize.
template <typename scalar_t>
inline typename OpMath<scalar_t>::type ld(scalar_t v) {
  return static_cast<typename OpMath<scalar_t>::type>(v);
}
template <>
inline float ld<c10::BFloat16>(c10::BFloat16 v) {
  const uint32_t u = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
template <typename scalar_t>
inline scalar_t st(typename OpMath<scalar_t>::type v) {
  return static_cast<scalar_t>(v);
}
template <>
inline c10::BFloat16 st<c10::BFloat16>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  const uint32_t rounded = (u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16;
  return c10::BFloat16(static_cast<uint16_t>(v != v ? 0x7FC0u : rounded), c10::BFloat16::from_bits());
}
template <typename scalar_t>
inline typename OpMath<scalar_t>::type rnd(typename OpMath<scalar_t>::type v) {  // round to the tensor's dtype
  return ld<scalar_t>(st<scalar_t>(v));
}

// The common case, 2x2 windows with stride 2 and no padding or dilation, written without branches so that the
// compiler vectorizes the loop over a row of windows.  NaN windows (count 0) are fixed up from a second pass over the
// pooled row.  HYBRID: the hybrid Jacobian; SCALED: beta != 1 (otherwise the tie set gets g / count as in minimal).
template <typename scalar_t, bool HYBRID, bool SCALED>
void plane_2x2(const scalar_t* x, const scalar_t* out, const int64_t* idx, const scalar_t* g, scalar_t* gx,
               const Geom& G, typename OpMath<scalar_t>::type beta, typename OpMath<scalar_t>::type omb) {
  using op_t = typename OpMath<scalar_t>::type;
  const int64_t W = G.W, Wo = G.Wo;
  if (G.Ho * 2 != G.H || Wo * 2 != W) std::memset(static_cast<void*>(gx), 0, sizeof(scalar_t) * G.H * W);
  for (int64_t oh = 0; oh < G.Ho; ++oh) {
    const scalar_t* __restrict__ r0 = x + 2 * oh * W;
    const scalar_t* __restrict__ r1 = r0 + W;
    scalar_t* __restrict__ q0 = gx + 2 * oh * W;
    scalar_t* __restrict__ q1 = q0 + W;
    const scalar_t* __restrict__ orow = out + oh * Wo;
    const scalar_t* __restrict__ grow = g + oh * Wo;
    for (int64_t ow = 0; ow < Wo; ++ow) {  // indicators as floats, not bools: the form GCC vectorizes
      const op_t m = ld<scalar_t>(orow[ow]);
      const op_t a = ld<scalar_t>(r0[2 * ow]), b = ld<scalar_t>(r0[2 * ow + 1]);
      const op_t c = ld<scalar_t>(r1[2 * ow]), d = ld<scalar_t>(r1[2 * ow + 1]);
      const op_t ia = a == m ? op_t(1) : op_t(0), ib = b == m ? op_t(1) : op_t(0);
      const op_t ic = c == m ? op_t(1) : op_t(0), id = d == m ? op_t(1) : op_t(0);
      const op_t cnt = ia + ib + ic + id;
      const op_t gj = ld<scalar_t>(grow[ow]);
      op_t num = gj;
      if constexpr (SCALED) num = cnt > op_t(1) ? rnd<scalar_t>(gj * beta) : gj;
      const op_t r = rnd<scalar_t>(num / cnt);
      op_t rn = r;  // the first index of the tie set: r plus the native part
      if constexpr (HYBRID) rn = rnd<scalar_t>(r + (cnt > op_t(1) ? rnd<scalar_t>(gj * omb) : op_t(0)));
      q0[2 * ow] = st<scalar_t>(a == m ? rn : op_t(0));
      q0[2 * ow + 1] = st<scalar_t>(b == m ? (ia > op_t(0) ? r : rn) : op_t(0));
      q1[2 * ow] = st<scalar_t>(c == m ? (ia + ib > op_t(0) ? r : rn) : op_t(0));
      q1[2 * ow + 1] = st<scalar_t>(d == m ? (ia + ib + ic > op_t(0) ? r : rn) : op_t(0));
    }
    for (int64_t ow = 0; ow < Wo; ++ow) {  // NaN windows: PyTorch's own index gets g_j, the rest 0
      const op_t m = ld<scalar_t>(orow[ow]);
      if (m != m) {
        q0[2 * ow] = q0[2 * ow + 1] = q1[2 * ow] = q1[2 * ow + 1] = static_cast<scalar_t>(0);
        add_to(gx[idx[oh * Wo + ow]], grow[ow]);
      }
    }
  }
}

// Overlapping windows.  Pass 1 (increasing window order, streaming x into cache) finds each window's count, first
// index and values; pass 2 adds the spread parts in decreasing window order; pass 3 the native parts in increasing
// window order (the reference's order, see the header).
template <typename scalar_t>
void plane_overlap(const scalar_t* x, const scalar_t* out, const int64_t* idx, const scalar_t* g, scalar_t* gx,
                   const Geom& G, bool hybrid, bool beta_is_one, typename OpMath<scalar_t>::type beta,
                   typename OpMath<scalar_t>::type omb, int64_t* first_buf, scalar_t* r_buf, scalar_t* native_buf,
                   typename OpMath<scalar_t>::type* acc_buf) {
  using op_t = typename OpMath<scalar_t>::type;
  std::memset(static_cast<void*>(gx), 0, sizeof(scalar_t) * G.H * G.W);
  for (int64_t oh = 0; oh < G.Ho; ++oh) {
    const int64_t h0 = oh * G.sh - G.ph;
    for (int64_t ow = 0; ow < G.Wo; ++ow) {
      const int64_t j = oh * G.Wo + ow, w0 = ow * G.sw - G.pw;
      const op_t m = static_cast<op_t>(out[j]);
      if (m != m) {  // NaN window: no tie set; PyTorch's own index gets g_j in pass 3
        first_buf[j] = idx[j];
        r_buf[j] = static_cast<scalar_t>(0);
        native_buf[j] = g[j];
        continue;
      }
      int64_t first = -1;
      const int64_t count = tie_set(G, h0, w0, x, m, first);
      window_values<scalar_t, op_t>(g[j], count, hybrid, beta_is_one, beta, omb, r_buf[j], native_buf[j]);
      first_buf[j] = hybrid ? first : -1;
    }
  }
  for (int64_t oh = G.Ho - 1; oh >= 0; --oh) {
    const int64_t h0 = oh * G.sh - G.ph;
    for (int64_t ow = G.Wo - 1; ow >= 0; --ow) {
      const int64_t j = oh * G.Wo + ow, w0 = ow * G.sw - G.pw;
      const op_t m = static_cast<op_t>(out[j]);
      if (m != m) continue;
      const scalar_t r = r_buf[j];
      each_in_window(G, h0, w0, [&](int64_t q) {
        if (static_cast<op_t>(x[q]) == m) add_to(gx[q], r);
      });
    }
  }
  // PyTorch's scatter_add accumulates 16-bit tensors in float32 and rounds once per position: so does this pass
  const int64_t nwin = G.Ho * G.Wo;
  if constexpr (std::is_same_v<op_t, scalar_t>) {
    for (int64_t j = 0; j < nwin; ++j) {
      if (first_buf[j] >= 0) gx[first_buf[j]] += native_buf[j];
    }
  } else {
    for (int64_t i = 0; i < G.H * G.W; ++i) acc_buf[i] = static_cast<op_t>(gx[i]);
    for (int64_t j = 0; j < nwin; ++j) {
      if (first_buf[j] >= 0) acc_buf[first_buf[j]] += static_cast<op_t>(native_buf[j]);
    }
    for (int64_t i = 0; i < G.H * G.W; ++i) gx[i] = static_cast<scalar_t>(acc_buf[i]);
  }
}

at::Tensor maxpool2d_tie_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& out,
                                  const at::Tensor& idx, at::IntArrayRef kernel, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool hybrid, double beta,
                                  double one_minus_beta) {
  TORCH_CHECK(x.dim() == 4 && out.dim() == 4 && g.sizes() == out.sizes() && idx.sizes() == out.sizes(),
              "maxpool2d_tie_backward: x (N, C, H, W), out/g/idx (N, C, Ho, Wo)");
  TORCH_CHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1), "maxpool2d_tie_backward: N, C differ");
  TORCH_CHECK(x.is_contiguous() && out.is_contiguous() && g.is_contiguous() && idx.is_contiguous(),
              "maxpool2d_tie_backward: contiguous tensors only");
  TORCH_CHECK(g.scalar_type() == x.scalar_type() && out.scalar_type() == x.scalar_type(),
              "maxpool2d_tie_backward: x, out and g must share a dtype");
  TORCH_CHECK(idx.scalar_type() == at::kLong, "maxpool2d_tie_backward: idx must be int64");
  TORCH_CHECK(kernel.size() == 2 && stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "maxpool2d_tie_backward: 2-d geometry");
  Geom G{x.size(2), x.size(3), out.size(2), out.size(3), kernel[0], kernel[1], stride[0], stride[1],
         padding[0], padding[1], dilation[0], dilation[1], false};
  // windows overlap when the stride is smaller than the window's footprint in some dimension
  G.overlap = G.sh < (G.kh - 1) * G.dh + 1 || G.sw < (G.kw - 1) * G.dw + 1;
  at::Tensor gx = at::empty_like(x);
  const int64_t planes = x.size(0) * x.size(1);
  const int64_t in_plane = G.H * G.W, out_plane = G.Ho * G.Wo;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "maxpool2d_tie_backward", [&] {
    using op_t = typename OpMath<scalar_t>::type;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* op = out.const_data_ptr<scalar_t>();
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    scalar_t* gxp = gx.mutable_data_ptr<scalar_t>();
    const op_t b = static_cast<op_t>(beta), omb = static_cast<op_t>(one_minus_beta);
    const bool beta_is_one = beta == 1.0;
    const bool two_by_two = G.kh == 2 && G.kw == 2 && G.sh == 2 && G.sw == 2 && G.ph == 0 && G.pw == 0 &&
                            G.dh == 1 && G.dw == 1 && 2 * G.Ho <= G.H && 2 * G.Wo <= G.W;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in_plane));
    at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> first_buf(G.overlap ? out_plane : 0);
      std::vector<scalar_t> r_buf(G.overlap ? out_plane : 0), native_buf(G.overlap ? out_plane : 0);
      std::vector<op_t> acc_buf(G.overlap && !std::is_same_v<op_t, scalar_t> ? in_plane : 0);
      for (int64_t p = begin; p < end; ++p) {
        const scalar_t* xq = xp + p * in_plane;
        const scalar_t* oq = op + p * out_plane;
        const int64_t* iq = ip + p * out_plane;
        const scalar_t* gq = gp + p * out_plane;
        scalar_t* gxq = gxp + p * in_plane;
        if (G.overlap) {
          plane_overlap<scalar_t>(xq, oq, iq, gq, gxq, G, hybrid, beta_is_one, b, omb, first_buf.data(), r_buf.data(),
                                  native_buf.data(), acc_buf.data());
        } else if (two_by_two && !hybrid) {
          plane_2x2<scalar_t, false, false>(xq, oq, iq, gq, gxq, G, b, omb);
        } else if (two_by_two && beta_is_one) {
          plane_2x2<scalar_t, true, false>(xq, oq, iq, gq, gxq, G, b, omb);
        } else if (two_by_two) {
          plane_2x2<scalar_t, true, true>(xq, oq, iq, gq, gxq, G, b, omb);
        } else {
          plane_disjoint<scalar_t>(xq, oq, iq, gq, gxq, G, hybrid, beta_is_one, b, omb);
        }
      }
    });
  });
  return gx;
}

// ---------------------------------------------------------------------------------------------------------------
// Tie detection for the training monitor (nsverify.papers.park.monitor): one read of x and out per pool layer, and
// in monitor_pool_scan the kink touches of the layer's pre-activations in the same call (one pass per layer).
//
// The pool's windows are scanned output row by output row over all (n, c) planes at once: row R is row
// R % Ho of plane R / Ho, so that small planes (8x8, 4x4) cost no per-plane set-up.  Per row: |A_j| >= 2 (tie),
// the maximum not a saturated value (keep), the counts, and the kept windows as (sample, window) pairs when asked.
// The saturated values are compared in the compute type, those it cannot represent dropped (no entry equals them:
// the same answer as comparing in double); up to two (ReLU's 0, ReLU6's and HardTanh's two ends) go through the
// branch-free loop, padded with NaN (equal to nothing).

// The saturated values as the compute type sees them: sat[0..1] (NaN-padded) for the fast loop, all of them in rest.
template <typename op_t>
struct Saturated {
  op_t s0, s1;
  std::vector<op_t> rest;  // more than two representable values (then every value is here)
  Saturated(const std::vector<double>& sat) {
    const op_t nan = std::numeric_limits<op_t>::quiet_NaN();
    std::vector<op_t> rep;
    for (double v : sat) {
      const op_t c = static_cast<op_t>(v);
      if (static_cast<double>(c) == v) rep.push_back(c);
    }
    s0 = rep.size() > 0 && rep.size() <= 2 ? rep[0] : nan;
    s1 = rep.size() == 2 ? rep[1] : nan;
    if (rep.size() > 2) rest = rep;
  }
  inline bool has(op_t m) const {
    bool s = (m == s0) | (m == s1);
    for (op_t v : rest) s |= m == v;
    return s;
  }
};

// What one range of rows found: counts, and the kept windows' (sample, window) pairs in row-major order.
struct ScanPart {
  int64_t begin = 0, tied = 0, positive = 0;
  std::vector<int64_t> pairs;
};

// cnt[ow] += (x row xr at column ow * stride + off == mrow[ow]) for ow in [lo, hi]; STRIDE 0: the stride sw.
template <int STRIDE, typename scalar_t, typename op_t>
inline void count_offset(const scalar_t* xr, int64_t off, int64_t lo, int64_t hi, int64_t sw, const op_t* mrow,
                         op_t* cnt) {
  const int64_t s = STRIDE > 0 ? STRIDE : sw;
  for (int64_t ow = lo; ow <= hi; ++ow) cnt[ow] += ld<scalar_t>(xr[ow * s + off]) == mrow[ow] ? op_t(1) : op_t(0);
}

// Scan output rows [r0, r1) of x (N, C, H, W) / out (N, C, Ho, Wo): counts into part, the kept windows' pairs when
// ``pairs``, and the kept windows of out's row R at mask + R * Wo when mask is not null.  per_sample = C * Ho * Wo.
template <typename scalar_t>
void scan_rows(const scalar_t* x, const scalar_t* out, bool* mask, const Geom& G, const Saturated<
                   typename OpMath<scalar_t>::type>& sat, int64_t r0, int64_t r1, int64_t per_sample, bool pairs,
               ScanPart& part) {
  using op_t = typename OpMath<scalar_t>::type;
  const bool two_by_two = G.kh == 2 && G.kw == 2 && G.sh == 2 && G.sw == 2 && G.ph == 0 && G.pw == 0 && G.dh == 1 &&
                          G.dw == 1 && 2 * G.Ho <= G.H && 2 * G.Wo <= G.W;
  const bool three_by_two = G.kh == 3 && G.kw == 3 && G.sh == 2 && G.sw == 2 && G.ph == 1 && G.pw == 1 &&
                            G.dh == 1 && G.dw == 1;
  const bool fast_sat = sat.rest.empty();
  std::vector<op_t> cnt(G.Wo), mrow(G.Wo), keep_buf(G.Wo);
  op_t* keep = keep_buf.data();
  const op_t s0 = sat.s0, s1 = sat.s1;
  for (int64_t R = r0; R < r1; ++R) {
    const int64_t plane = R / G.Ho, oh = R - plane * G.Ho;
    const scalar_t* xp = x + plane * G.H * G.W;
    const scalar_t* orow = out + R * G.Wo;
    // per window: tie (|A_j| >= 2) and keep (a tie whose maximum is not saturated) as 0/1 in op_t, branch-free
    // (ties are frequent, their side unpredictable): the form GCC vectorizes; row sums are exact (< 2^24)
    op_t t = 0, q = 0;
    if (two_by_two && fast_sat) {
      const scalar_t* a = xp + 2 * oh * G.W;
      const scalar_t* b = a + G.W;
      for (int64_t ow = 0; ow < G.Wo; ++ow) {
        const op_t m = ld<scalar_t>(orow[ow]);
        const op_t c = (ld<scalar_t>(a[2 * ow]) == m ? op_t(1) : op_t(0)) +
                       (ld<scalar_t>(a[2 * ow + 1]) == m ? op_t(1) : op_t(0)) +
                       (ld<scalar_t>(b[2 * ow]) == m ? op_t(1) : op_t(0)) +
                       (ld<scalar_t>(b[2 * ow + 1]) == m ? op_t(1) : op_t(0));
        const op_t tie = c > op_t(1) ? op_t(1) : op_t(0);
        const op_t k = ((m == s0) | (m == s1)) ? op_t(0) : tie;
        t += tie;
        q += k;
        keep[ow] = k;
      }
    } else if (three_by_two) {  // ResNet's stem pool: 3 rows (0/1 weights for the padding rows), 9 loads a window
      const scalar_t* xr[3];
      op_t rv[3];
      for (int64_t ka = 0; ka < 3; ++ka) {
        const int64_t ih = 2 * oh - 1 + ka;
        rv[ka] = ih >= 0 && ih < G.H ? op_t(1) : op_t(0);
        xr[ka] = xp + std::min<int64_t>(std::max<int64_t>(ih, 0), G.H - 1) * G.W;
      }
      const int64_t hi_in = std::min<int64_t>(G.Wo - 1, (G.W - 2) / 2);  // columns 2ow-1 .. 2ow+1 inside for ow >= 1
      const scalar_t *x0 = xr[0], *x1 = xr[1], *x2 = xr[2];
      const op_t v0 = rv[0], v1 = rv[1], v2 = rv[2];
      auto eq = [](scalar_t v, op_t m) { return ld<scalar_t>(v) == m ? op_t(1) : op_t(0); };
      for (int64_t ow = 1; ow <= hi_in; ++ow) {
        const op_t m = ld<scalar_t>(orow[ow]);
        const int64_t c = 2 * ow - 1;  // the window's first column
        cnt[ow] = v0 * (eq(x0[c], m) + eq(x0[c + 1], m) + eq(x0[c + 2], m)) +
                  v1 * (eq(x1[c], m) + eq(x1[c + 1], m) + eq(x1[c + 2], m)) +
                  v2 * (eq(x2[c], m) + eq(x2[c + 1], m) + eq(x2[c + 2], m));
        mrow[ow] = m;
      }
      for (int64_t ow = 0; ow < G.Wo; ++ow) {  // the edge windows (ow = 0, and past hi_in), entry by entry
        if (ow >= 1 && ow <= hi_in) continue;
        const op_t m = ld<scalar_t>(orow[ow]);
        op_t c = op_t(0);
        for (int64_t ka = 0; ka < 3; ++ka) {
          for (int64_t iw = 2 * ow - 1; iw <= 2 * ow + 1; ++iw) {
            if (iw >= 0 && iw < G.W && ld<scalar_t>(xr[ka][iw]) == m) c += rv[ka];
          }
        }
        mrow[ow] = m;
        cnt[ow] = c;
      }
    } else {  // any geometry: kernel offset by kernel offset, a loop over the row's windows that GCC vectorizes
      for (int64_t ow = 0; ow < G.Wo; ++ow) {
        mrow[ow] = ld<scalar_t>(orow[ow]);
        cnt[ow] = op_t(0);
      }
      for (int64_t ka = 0; ka < G.kh; ++ka) {
        const int64_t ih = oh * G.sh - G.ph + ka * G.dh;
        if (ih < 0 || ih >= G.H) continue;  // a padding row
        const scalar_t* xr = xp + ih * G.W;
        for (int64_t kb = 0; kb < G.kw; ++kb) {
          const int64_t off = kb * G.dw - G.pw;  // input column of window ow: ow * sw + off
          const int64_t lo = off >= 0 ? 0 : (-off + G.sw - 1) / G.sw;
          const int64_t hi = G.W - 1 - off < 0 ? -1 : std::min<int64_t>(G.Wo - 1, (G.W - 1 - off) / G.sw);
          if (G.sw == 1) {  // strides 1 and 2 (ResNet's 3x3/2 stem pool) as constants: loops GCC vectorizes
            count_offset<1>(xr, off, lo, hi, G.sw, mrow.data(), cnt.data());
          } else if (G.sw == 2) {
            count_offset<2>(xr, off, lo, hi, G.sw, mrow.data(), cnt.data());
          } else {
            count_offset<0>(xr, off, lo, hi, G.sw, mrow.data(), cnt.data());
          }
        }
      }
    }
    if (!(two_by_two && fast_sat)) {  // ties and keep from the counts (the 2x2 loop made them itself)
      for (int64_t ow = 0; ow < G.Wo; ++ow) {
        const op_t tie = cnt[ow] > op_t(1) ? op_t(1) : op_t(0);
        const op_t k = sat.has(mrow[ow]) ? op_t(0) : tie;
        t += tie;
        q += k;
        keep[ow] = k;
      }
    }
    if (mask) {
      bool* mrow_out = mask + R * G.Wo;
      for (int64_t ow = 0; ow < G.Wo; ++ow) mrow_out[ow] = keep[ow] != op_t(0);
    }
    const int64_t ti = static_cast<int64_t>(t), qi = static_cast<int64_t>(q);
    part.tied += ti;
    part.positive += qi;
    if (pairs && qi) {
      for (int64_t ow = 0; ow < G.Wo; ++ow) {
        if (keep[ow] != op_t(0)) {
          const int64_t J = R * G.Wo + ow;  // flat index into out: (sample, window) = divmod(J, per_sample)
          part.pairs.push_back(J / per_sample);
          part.pairs.push_back(J % per_sample);
        }
      }
    }
  }
}

// The scans' inputs checked (contiguous 4-d x and out of one dtype) and their pool geometry.
Geom scan_geom(const at::Tensor& x, const at::Tensor& out, at::IntArrayRef kernel, at::IntArrayRef stride,
               at::IntArrayRef padding, at::IntArrayRef dilation, const char* name) {
  TORCH_CHECK(x.dim() == 4 && out.dim() == 4 && x.is_contiguous() && out.is_contiguous() &&
                  x.scalar_type() == out.scalar_type() && x.size(0) == out.size(0) && x.size(1) == out.size(1),
              name, ": contiguous x (N, C, H, W) and out (N, C, Ho, Wo) of one dtype");
  TORCH_CHECK(out.size(3) < (int64_t(1) << 24), name, ": rows of fewer than 2^24 windows (the row counts are exact)");
  return Geom{x.size(2), x.size(3), out.size(2), out.size(3), kernel[0], kernel[1], stride[0], stride[1],
              padding[0], padding[1], dilation[0], dilation[1], false};
}

// Rows per parallel task: a parallel region only where each of the threads gets at least kMinTask input entries
// (small layers run inline: on a loaded machine a parallel region waits for every descheduled thread).
constexpr int64_t kMinTask = 1 << 17;

inline int64_t row_grain(const Geom& G) {
  const int64_t per_row = std::max<int64_t>(1, G.W * std::max<int64_t>(1, G.kh));
  return std::max<int64_t>(1, kMinTask / per_row);
}

// The scan over all rows, in parallel ranges, parts in row order.  mask: nullptr, or (N, C, Ho, Wo) bool.
template <typename scalar_t>
std::vector<ScanPart> scan_all(const at::Tensor& x, const at::Tensor& out, bool* mask, const Geom& G,
                               const std::vector<double>& saturated, bool pairs) {
  const Saturated<typename OpMath<scalar_t>::type> sat(saturated);
  const int64_t rows = x.size(0) * x.size(1) * G.Ho, per_sample = x.size(1) * G.Ho * G.Wo;
  const scalar_t* xp = x.const_data_ptr<scalar_t>();
  const scalar_t* op = out.const_data_ptr<scalar_t>();
  std::vector<ScanPart> parts;
  std::mutex mu;
  at::parallel_for(0, rows, row_grain(G), [&](int64_t b, int64_t e) {
    ScanPart part;
    part.begin = b;
    scan_rows<scalar_t>(xp, op, mask, G, sat, b, e, per_sample, pairs, part);
    std::lock_guard<std::mutex> lock(mu);
    parts.push_back(std::move(part));
  });
  std::sort(parts.begin(), parts.end(), [](const ScanPart& a, const ScanPart& b) { return a.begin < b.begin; });
  return parts;
}

// (tied, positive) of the parts, and their pairs as an (n, 2) int64 tensor in row-major window order.
std::pair<std::array<int64_t, 2>, at::Tensor> gather_parts(const std::vector<ScanPart>& parts, bool pairs) {
  std::array<int64_t, 2> c{0, 0};
  for (const ScanPart& part : parts) {
    c[0] += part.tied;
    c[1] += part.positive;
  }
  at::Tensor idx;
  if (pairs) {
    idx = at::empty({c[1], 2}, at::TensorOptions().dtype(at::kLong));
    int64_t* ip = idx.mutable_data_ptr<int64_t>();
    for (const ScanPart& part : parts) {
      std::copy(part.pairs.begin(), part.pairs.end(), ip);
      ip += part.pairs.size();
    }
  }
  return {c, idx};
}

std::tuple<at::Tensor, at::Tensor> maxpool2d_tie_scan(const at::Tensor& x, const at::Tensor& out,
                                                      at::IntArrayRef kernel, at::IntArrayRef stride,
                                                      at::IntArrayRef padding, at::IntArrayRef dilation,
                                                      at::ArrayRef<double> saturated) {
  const Geom G = scan_geom(x, out, kernel, stride, padding, dilation, "maxpool2d_tie_scan");
  at::Tensor mask = at::empty(out.sizes(), out.options().dtype(at::kBool));
  const std::vector<double> sat(saturated.begin(), saturated.end());
  std::vector<ScanPart> parts;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "maxpool2d_tie_scan", [&] {
    parts = scan_all<scalar_t>(x, out, mask.mutable_data_ptr<bool>(), G, sat, false);
  });
  const auto c = gather_parts(parts, false).first;
  at::Tensor total = at::empty({2}, at::TensorOptions().dtype(at::kLong));
  total.mutable_data_ptr<int64_t>()[0] = c[0];
  total.mutable_data_ptr<int64_t>()[1] = c[1];
  return {total, mask};
}

// The same scan, returning the Algorithm-2-counted windows as (sample, window) index pairs -- window = c * Ho * Wo +
// j, the row-major order of mask.reshape(N, -1).nonzero() -- instead of a mask: the monitor's next step needs the
// list, and the tied windows are few.
std::tuple<at::Tensor, at::Tensor> maxpool2d_tie_scan_windows(const at::Tensor& x, const at::Tensor& out,
                                                              at::IntArrayRef kernel, at::IntArrayRef stride,
                                                              at::IntArrayRef padding, at::IntArrayRef dilation,
                                                              at::ArrayRef<double> saturated) {
  const Geom G = scan_geom(x, out, kernel, stride, padding, dilation, "maxpool2d_tie_scan_windows");
  const std::vector<double> sat(saturated.begin(), saturated.end());
  std::vector<ScanPart> parts;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "maxpool2d_tie_scan_windows", [&] {
    parts = scan_all<scalar_t>(x, out, nullptr, G, sat, true);
  });
  auto [c, idx] = gather_parts(parts, true);
  at::Tensor total = at::empty({2}, at::TensorOptions().dtype(at::kLong));
  total.mutable_data_ptr<int64_t>()[0] = c[0];
  total.mutable_data_ptr<int64_t>()[1] = c[1];
  return {total, idx};
}

// The training monitor's patch test (nsverify.oracle.park.algorithm1.AffineRows): for pairs q of entries (b, pos_s,
// channel ch_s) and (b, pos_i, ch_i) of a convolution's output, are the w_l blocks scale * (patch, [1]) equal --
// the same channel and equal entries, or both all zero? A patch entry k of position pos reads z at the flat offset
// offsets[pos, k] of sample b where valid[pos, k], else the zero padding. The products are z's dtype's, as in
// values(); one pass, no (pairs x K) temporaries.
at::Tensor patch_pairs_equal(const at::Tensor& z, const at::Tensor& offsets, const at::Tensor& valid,
                             const at::Tensor& b, const at::Tensor& pos_s, const at::Tensor& pos_i,
                             const at::Tensor& ch_s, const at::Tensor& ch_i, const at::Tensor& scale_s,
                             const at::Tensor& scale_i, bool bias) {
  TORCH_CHECK(z.is_contiguous() && offsets.is_contiguous() && valid.is_contiguous() && offsets.dim() == 2 &&
                  valid.sizes() == offsets.sizes() && offsets.scalar_type() == at::kLong &&
                  valid.scalar_type() == at::kBool && scale_s.scalar_type() == z.scalar_type() &&
                  scale_i.scalar_type() == z.scalar_type(),
              "patch_pairs_equal: contiguous z, (P, K) int64 offsets and bool valid, scales of z's dtype");
  const int64_t n = b.numel(), K = offsets.size(1), per_sample = z.numel() / std::max<int64_t>(1, z.size(0));
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kBool));
  const at::Tensor bc = b.contiguous(), psc = pos_s.contiguous(), pic = pos_i.contiguous(),
                   csc = ch_s.contiguous(), cic = ch_i.contiguous(), ssc = scale_s.contiguous(),
                   sic = scale_i.contiguous();
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "patch_pairs_equal", [&] {
    const scalar_t* zp = z.const_data_ptr<scalar_t>();
    const int64_t* off = offsets.const_data_ptr<int64_t>();
    const bool* ok = valid.const_data_ptr<bool>();
    const int64_t *bp = bc.const_data_ptr<int64_t>(), *ps = psc.const_data_ptr<int64_t>(),
                  *pi = pic.const_data_ptr<int64_t>(), *cs = csc.const_data_ptr<int64_t>(),
                  *ci = cic.const_data_ptr<int64_t>();
    const scalar_t *ss = ssc.const_data_ptr<scalar_t>(), *si = sic.const_data_ptr<scalar_t>();
    bool* op = out.mutable_data_ptr<bool>();
    at::parallel_for(0, n, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t q = lo; q < hi; ++q) {
        const scalar_t* zb = zp + bp[q] * per_sample;
        const int64_t *os = off + ps[q] * K, *oi = off + pi[q] * K;
        const bool *vs = ok + ps[q] * K, *vi = ok + pi[q] * K;
        const scalar_t a = ss[q], c = si[q];
        bool same = cs[q] == ci[q] && (!bias || a == c), zs = !bias || a == scalar_t(0),
             zi = !bias || c == scalar_t(0);
        for (int64_t k = 0; k < K; ++k) {
          const scalar_t x = a * (vs[k] ? zb[os[k]] : scalar_t(0));
          const scalar_t y = c * (vi[k] ? zb[oi[k]] : scalar_t(0));
          same &= x == y;
          zs &= x == scalar_t(0);
          zi &= y == scalar_t(0);
        }
        op[q] = same || (zs && zi);
      }
    });
  });
  return out;
}

// How many of the n entries at p equal one of ``values`` (kink touches), in one read: blocks of kBlock entries
// counted in int32 (the form GCC vectorizes), in parallel ranges of at least kMinTask entries.
constexpr int64_t kBlock = 1 << 14;

template <typename scalar_t>
int64_t count_equal_ptr(const scalar_t* p, int64_t n, const std::vector<double>& values) {
  using op_t = typename OpMath<scalar_t>::type;
  std::vector<op_t> vals;
  for (double dv : values) {
    const op_t v = static_cast<op_t>(dv);
    if (static_cast<double>(v) == dv) vals.push_back(v);  // not representable: no entry equals it
  }
  if (vals.empty() || n == 0) return 0;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<int64_t> part(blocks, 0);
  at::parallel_for(0, blocks, std::max<int64_t>(1, kMinTask / kBlock), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t lo = c * kBlock, hi = std::min(n, lo + kBlock);
      int32_t hits = 0;
      for (op_t v : vals) {
        for (int64_t i = lo; i < hi; ++i) hits += ld<scalar_t>(p[i]) == v;
      }
      part[c] = hits;
    }
  });
  int64_t total = 0;
  for (int64_t h : part) total += h;
  return total;
}

// How many entries of y equal one of ``values`` (kink touches), in one read of y.
at::Tensor count_equal(const at::Tensor& y, at::ArrayRef<double> values) {
  const at::Tensor yc = y.contiguous();
  const std::vector<double> vals(values.begin(), values.end());
  int64_t total = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, yc.scalar_type(), "count_equal", [&] {
    total = count_equal_ptr<scalar_t>(yc.const_data_ptr<scalar_t>(), yc.numel(), vals);
  });
  at::Tensor out = at::empty({}, at::TensorOptions().dtype(at::kLong));
  out.mutable_data_ptr<int64_t>()[0] = total;
  return out;
}

// The training monitor's detection for one layer with a max pool, in one call: [kink touches of y (any shape; 0
// without y), tied windows, Algorithm-2-counted windows] and the latter's (sample, window) pairs, as
// maxpool2d_tie_scan_windows and count_equal give them.
std::tuple<at::Tensor, at::Tensor> monitor_pool_scan(const c10::optional<at::Tensor>& y, at::ArrayRef<double> kinks,
                                                     const at::Tensor& x, const at::Tensor& out,
                                                     at::IntArrayRef kernel, at::IntArrayRef stride,
                                                     at::IntArrayRef padding, at::IntArrayRef dilation,
                                                     at::ArrayRef<double> saturated) {
  const Geom G = scan_geom(x, out, kernel, stride, padding, dilation, "monitor_pool_scan");
  const bool with_y = y.has_value() && y->defined();
  TORCH_CHECK(!with_y || y->scalar_type() == x.scalar_type(), "monitor_pool_scan: y and x of one dtype");
  const at::Tensor yc = with_y ? y->contiguous() : at::Tensor();
  const std::vector<double> sat(saturated.begin(), saturated.end()), vals(kinks.begin(), kinks.end());
  std::vector<ScanPart> parts;
  int64_t touches = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "monitor_pool_scan", [&] {
    if (with_y) touches = count_equal_ptr<scalar_t>(yc.const_data_ptr<scalar_t>(), yc.numel(), vals);
    parts = scan_all<scalar_t>(x, out, nullptr, G, sat, true);
  });
  auto [c, idx] = gather_parts(parts, true);
  at::Tensor total = at::empty({3}, at::TensorOptions().dtype(at::kLong));
  int64_t* tp = total.mutable_data_ptr<int64_t>();
  tp[0] = touches;
  tp[1] = c[0];
  tp[2] = c[1];
  return {total, idx};
}

// Algorithm 1's tied pairs of the training monitor's tied windows (nsverify.oracle.park.algorithm1, the "auto" T_j
// test), in one pass: for each window r (sample rows[r, 0], window rows[r, 1] of the table win, -1 = padding), its
// tie set (entries of a equal to the window's maximum; none when the maximum is NaN), i* = the first member, and for
// each other member i the pair (i*, i) -- unless D^AD rho is 0 at both (counted in stats[0], tj_flat).  D^AD rho is
// the slope of the piece of y: slopes[p] for the first breakpoint bps[p] above y, else the last slope; a member
// whose pre-activation sits at a breakpoint or is NaN (where AD's rule decides) sets stats[1] (the caller takes the
// autograd path instead).  Returns ints (m, 4) = (r, sample, i*, i), vals (m, 4) = (rho'(y_i*), rho'(y_i), y_i*, y_i)
// in a's dtype (float32 or float64), stats = [both-flat pairs, fallback].
std::tuple<at::Tensor, at::Tensor, at::Tensor> pool_tie_pairs(const at::Tensor& a, const at::Tensor& y,
                                                              const at::Tensor& rows, const at::Tensor& win,
                                                              at::ArrayRef<double> bps, at::ArrayRef<double> slopes) {
  TORCH_CHECK(a.dim() == 2 && y.sizes() == a.sizes() && y.scalar_type() == a.scalar_type() && rows.dim() == 2 &&
                  rows.size(1) == 2 && rows.scalar_type() == at::kLong && win.dim() == 2 &&
                  win.scalar_type() == at::kLong && slopes.size() == bps.size() + 1,
              "pool_tie_pairs: a, y (B, M) of one dtype, rows (n, 2) and win (windows, K) int64, one slope per piece");
  const at::Tensor ac = a.contiguous(), yc = y.contiguous(), rc = rows.contiguous(), wc = win.contiguous();
  const int64_t n = rc.size(0), K = wc.size(1), M = ac.size(1);
  std::vector<int64_t> ints;
  std::vector<double> vals;
  int64_t flat = 0, fallback = 0;
  at::Tensor vt;
  AT_DISPATCH_FLOATING_TYPES(ac.scalar_type(), "pool_tie_pairs", [&] {  // float32, float64: op_t = scalar_t
    using op_t = scalar_t;
    const scalar_t* ap = ac.const_data_ptr<scalar_t>();
    const scalar_t* yp = yc.const_data_ptr<scalar_t>();
    const int64_t* rp = rc.const_data_ptr<int64_t>();
    const int64_t* wp = wc.const_data_ptr<int64_t>();
    std::vector<int64_t> members(K);
    // D^AD rho off the breakpoints; NaN (= "AD decides") at a breakpoint or for a NaN pre-activation
    // (compared in the tensor's dtype, as PyTorch compares a tensor with a Python number)
    std::vector<op_t> bp(bps.size());
    for (size_t p = 0; p < bps.size(); ++p) bp[p] = static_cast<op_t>(bps[p]);
    auto slope = [&](op_t v) -> double {
      if (v != v) return std::numeric_limits<double>::quiet_NaN();
      for (size_t p = 0; p < bp.size(); ++p) {
        if (v == bp[p]) return std::numeric_limits<double>::quiet_NaN();
        if (v < bp[p]) return slopes[p];
      }
      return slopes[bp.size()];
    };
    for (int64_t r = 0; r < n; ++r) {
      const int64_t b = rp[2 * r], j = rp[2 * r + 1];
      const scalar_t* arow = ap + b * M;
      const scalar_t* yrow = yp + b * M;
      const int64_t* w = wp + j * K;
      op_t mx = -std::numeric_limits<op_t>::infinity();
      bool nan = false;
      for (int64_t k = 0; k < K; ++k) {
        if (w[k] < 0) continue;
        const op_t v = ld<scalar_t>(arow[w[k]]);
        nan |= v != v;
        mx = v > mx ? v : mx;
      }
      if (nan) continue;  // torch.max is NaN: no entry equals it, no tie set
      int64_t m = 0;
      for (int64_t k = 0; k < K; ++k) {
        if (w[k] >= 0 && ld<scalar_t>(arow[w[k]]) == mx) members[m++] = w[k];
      }
      if (m < 2) continue;
      const int64_t istar = members[0];
      const op_t ys = ld<scalar_t>(yrow[istar]);
      const double ss = slope(ys);
      for (int64_t q = 1; q < m; ++q) {
        const int64_t i = members[q];
        const op_t yi = ld<scalar_t>(yrow[i]);
        const double si = slope(yi);
        if (ss != ss || si != si) {
          fallback = 1;
          continue;
        }
        if (ss == 0.0 && si == 0.0) {
          ++flat;
          continue;
        }
        ints.insert(ints.end(), {r, b, istar, i});
        vals.insert(vals.end(), {ss, si, static_cast<double>(ys), static_cast<double>(yi)});
      }
    }
    const int64_t pairs = static_cast<int64_t>(ints.size() / 4);
    vt = at::empty({pairs, 4}, ac.options());
    scalar_t* vp = vt.mutable_data_ptr<scalar_t>();
    for (int64_t q = 0; q < 4 * pairs; ++q) vp[q] = static_cast<scalar_t>(vals[q]);  // one rounding, as full_like
  });
  const int64_t pairs = static_cast<int64_t>(ints.size() / 4);
  at::Tensor it = at::empty({pairs, 4}, at::TensorOptions().dtype(at::kLong));
  std::copy(ints.begin(), ints.end(), it.mutable_data_ptr<int64_t>());
  at::Tensor stats = at::empty({2}, at::TensorOptions().dtype(at::kLong));
  stats.mutable_data_ptr<int64_t>()[0] = flat;
  stats.mutable_data_ptr<int64_t>()[1] = fallback;
  return {it, vt, stats};
}

}  // namespace

TORCH_LIBRARY(nsverify_kernels, m) {
  m.def(
      "maxpool2d_tie_backward(Tensor g, Tensor x, Tensor out, Tensor idx, int[] kernel, int[] stride, "
      "int[] padding, int[] dilation, bool hybrid, float beta, float one_minus_beta) -> Tensor");
  m.def(
      "maxpool2d_tie_scan(Tensor x, Tensor out, int[] kernel, int[] stride, int[] padding, int[] dilation, "
      "float[] saturated) -> (Tensor, Tensor)");
  m.def(
      "maxpool2d_tie_scan_windows(Tensor x, Tensor out, int[] kernel, int[] stride, int[] padding, int[] dilation, "
      "float[] saturated) -> (Tensor, Tensor)");
  m.def(
      "patch_pairs_equal(Tensor z, Tensor offsets, Tensor valid, Tensor b, Tensor pos_s, Tensor pos_i, Tensor ch_s, "
      "Tensor ch_i, Tensor scale_s, Tensor scale_i, bool bias) -> Tensor");
  m.def("count_equal(Tensor y, float[] values) -> Tensor");
  m.def(
      "monitor_pool_scan(Tensor? y, float[] kinks, Tensor x, Tensor out, int[] kernel, int[] stride, int[] padding, "
      "int[] dilation, float[] saturated) -> (Tensor, Tensor)");
  m.def(
      "pool_tie_pairs(Tensor a, Tensor y, Tensor rows, Tensor win, float[] bps, float[] slopes) -> "
      "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(nsverify_kernels, CPU, m) {
  m.impl("maxpool2d_tie_backward", &maxpool2d_tie_backward);
  m.impl("maxpool2d_tie_scan", &maxpool2d_tie_scan);
  m.impl("maxpool2d_tie_scan_windows", &maxpool2d_tie_scan_windows);
  m.impl("patch_pairs_equal", &patch_pairs_equal);
  m.impl("count_equal", &count_equal);
  m.impl("monitor_pool_scan", &monitor_pool_scan);
  m.impl("pool_tie_pairs", &pool_tie_pairs);
}
