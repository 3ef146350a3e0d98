//! The convolution that is most of a detector's forward, on plain `f32` slices in NHWC.
//!
//! The output pixels are cut into blocks that the threads take in turn; for each block a
//! thread lays out the receptive fields as rows (im2col, zeros where the padding is), runs
//! one matrix product with the `[kh·kw·cin, cout]` filter matrix (the `gemm` crate, on that
//! thread alone), and then adds the bias and applies the leaky ReLU while the block is still
//! in its cache. A 1×1 convolution with stride 1 reads its input rows directly; a 3×3 one
//! with stride 1 and many channels may run as Winograd's instead ([`winograd`]). Nothing here
//! runs per element of a tensor library: the bias add and the activation that followed each
//! convolution were two more passes over memory, about a sixth of the forward.

use rayon::prelude::*;

/// What a convolution does besides the product: a per-channel bias, then an optional
/// leaky ReLU (`max(x, alpha·x)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub leaky: Option<f32>,
}

/// Shapes of one convolution: input `[n, h, w, ci]`, filter `[kh, kw, ci, co]` (HWIO,
/// row-major, which is the `[kh·kw·ci, co]` matrix), stride, and zero padding on every side.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub ci: usize,
    pub kh: usize,
    pub kw: usize,
    pub co: usize,
    pub stride: (usize, usize),
    pub pad: usize,
}

impl Shape {
    /// Output height and width, or `None` when the filter does not fit the padded input.
    pub fn out(&self) -> Option<(usize, usize)> {
        let (sh, sw) = self.stride;
        if sh == 0 || sw == 0 || self.h + 2 * self.pad < self.kh || self.w + 2 * self.pad < self.kw
        {
            return None;
        }
        Some((
            (self.h + 2 * self.pad - self.kh) / sh + 1,
            (self.w + 2 * self.pad - self.kw) / sw + 1,
        ))
    }
}

/// Output pixels per block: enough rows that the product amortises packing the filter, few
/// enough that a block's im2col rows stay near the thread's cache, and at least two blocks
/// per thread where the output allows it.
fn block_rows(m: usize, row: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let by_cache = ((256 * 1024) / (row.max(1) * 4)).clamp(64, 512);
    m.div_ceil(2 * threads).clamp(16, by_cache)
}

/// The convolution of `x` (`[n, h, w, ci]`) with `filter` (`[kh, kw, ci, co]`), then the
/// epilogue: `[n, oh, ow, co]`, or `None` when a slice does not match the shape.
pub fn conv2d(x: &[f32], filter: &[f32], s: Shape, epi: Epilogue<'_>) -> Option<Vec<f32>> {
    let (oh, ow) = s.out()?;
    let row = s.kh * s.kw * s.ci;
    if x.len() != s.n * s.h * s.w * s.ci
        || filter.len() != row * s.co
        || epi.bias.is_some_and(|b| b.len() != s.co)
        || s.co == 0
        || row == 0
    {
        return None;
    }
    let m = s.n * oh * ow;
    let mut out = vec![0f32; m * s.co];
    let direct = s.kh == 1 && s.kw == 1 && s.stride == (1, 1) && s.pad == 0;
    let rows = block_rows(m, row);
    out.par_chunks_mut(rows * s.co)
        .enumerate()
        .for_each(|(i, dst)| {
            let first = i * rows;
            let count = dst.len() / s.co;
            if direct {
                let lhs = &x[first * row..(first + count) * row];
                product(lhs, row, filter, dst, (count, row, s.co));
            } else {
                with_scratch(|(col, _)| {
                    im2col(x, s, (oh, ow), first, count, col);
                    product(col, row, filter, dst, (count, row, s.co));
                });
            }
            finish(dst, s.co, epi);
        });
    Some(out)
}

/// The receptive fields of output pixels `first..first + count` as rows of `kh·kw·ci`
/// (filter taps in HWIO order; zeros where a tap falls in the padding).
fn im2col(
    x: &[f32],
    s: Shape,
    (oh, ow): (usize, usize),
    first: usize,
    count: usize,
    col: &mut Vec<f32>,
) {
    let row = s.kh * s.kw * s.ci;
    col.resize(count * row, 0.0);
    let (sh, sw) = s.stride;
    // The first pixel's place by division, the others' by counting on.
    let (mut b, mut oy, mut ox) = (first / (oh * ow), (first / ow) % oh, first % ow);
    for out in col.chunks_exact_mut(row).take(count) {
        let image = &x[b * s.h * s.w * s.ci..(b + 1) * s.h * s.w * s.ci];
        for ky in 0..s.kh {
            let iy = (oy * sh + ky) as isize - s.pad as isize;
            let taps = &mut out[ky * s.kw * s.ci..(ky + 1) * s.kw * s.ci];
            if iy < 0 || iy >= s.h as isize {
                taps.fill(0.0);
                continue;
            }
            let line = &image[iy as usize * s.w * s.ci..(iy as usize + 1) * s.w * s.ci];
            let x0 = (ox * sw) as isize - s.pad as isize;
            if x0 >= 0 && x0 as usize + s.kw <= s.w {
                // The whole row of taps is inside the image: one copy.
                let from = x0 as usize * s.ci;
                taps.copy_from_slice(&line[from..from + s.kw * s.ci]);
                continue;
            }
            for (kx, tap) in taps.chunks_exact_mut(s.ci).enumerate() {
                let ix = x0 + kx as isize;
                if ix < 0 || ix >= s.w as isize {
                    tap.fill(0.0);
                } else {
                    let from = ix as usize * s.ci;
                    tap.copy_from_slice(&line[from..from + s.ci]);
                }
            }
        }
        ox += 1;
        if ox == ow {
            ox = 0;
            oy += 1;
            if oy == oh {
                (oy, b) = (0, b + 1);
            }
        }
    }
}

/// The epilogue on a block of output rows of `co` channels.
fn finish(dst: &mut [f32], co: usize, epi: Epilogue<'_>) {
    match (epi.bias, epi.leaky) {
        (None, None) => {}
        (Some(bias), None) => {
            for px in dst.chunks_exact_mut(co) {
                for (v, b) in px.iter_mut().zip(bias) {
                    *v += b;
                }
            }
        }
        (bias, Some(alpha)) => {
            for px in dst.chunks_exact_mut(co) {
                match bias {
                    Some(bias) => {
                        for (v, b) in px.iter_mut().zip(bias) {
                            let y = *v + b;
                            *v = y.max(y * alpha);
                        }
                    }
                    None => {
                        for v in px.iter_mut() {
                            *v = v.max(*v * alpha);
                        }
                    }
                }
            }
        }
    }
}

/// Winograd's F(2×2, 3×3) for 3×3 convolutions with stride 1 and padding 1: each 2×2 block
/// of output pixels costs 16 multiplications per input and output channel instead of 36.
/// The input is cut into 4×4 tiles (overlapping by two), each tile transformed (`Bᵀ d B`);
/// for each of the 16 tile positions one matrix product with the transformed filter
/// (`G g Gᵀ`, made once by [`winograd_filter`]) sums over the input channels; each result
/// is transformed back (`Aᵀ m A`) into its 2×2 output block, then the epilogue runs.
pub fn winograd(x: &[f32], u: &[f32], s: Shape, epi: Epilogue<'_>) -> Option<Vec<f32>> {
    if (s.kh, s.kw, s.stride, s.pad) != (3, 3, (1, 1), 1)
        || x.len() != s.n * s.h * s.w * s.ci
        || u.len() != 16 * s.ci * s.co
        || epi.bias.is_some_and(|b| b.len() != s.co)
        || s.ci == 0
        || s.co == 0
    {
        return None;
    }
    let (h, w, ci, co) = (s.h, s.w, s.ci, s.co);
    let (_, tiles) = tile_grid(s);
    let mut out = vec![0f32; s.n * h * w * co];
    with_scratch(|(v, m)| {
        // Transformed tiles `[tile][16][ci]`, and the products `[16][tile][co]`; every
        // element is written before it is read.
        let (v, m) = (grown(v, tiles * 16 * ci), grown(m, 16 * tiles * co));
        winograd_images(x, u, s, epi, (v, m), &mut out);
    });
    Some(out)
}

thread_local! {
    /// Scratch memory a thread keeps between convolutions: allocating and zeroing
    /// megabytes for each one cost about as much as the Winograd transforms themselves.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs `f` with this thread's scratch memory (fresh memory in the unlikely case that
/// the thread is already using it: a thread that waits inside a parallel loop may run
/// another loop's work meanwhile).
fn with_scratch<R>(f: impl FnOnce((&mut Vec<f32>, &mut Vec<f32>)) -> R) -> R {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut held) => {
            let (a, b) = &mut *held;
            f((a, b))
        }
        Err(_) => f((&mut Vec::new(), &mut Vec::new())),
    })
}

/// The first `len` elements of `buf`, grown to hold them.
fn grown(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    &mut buf[..len]
}

/// [`winograd`]'s tiles: 2×2 output blocks across a row, and in all.
fn tile_grid(s: Shape) -> (usize, usize) {
    let (th, tw) = (s.h.div_ceil(2), s.w.div_ceil(2));
    (tw, th * tw)
}

/// [`winograd`]'s work on checked shapes, with its scratch memory.
fn winograd_images(
    x: &[f32],
    u: &[f32],
    s: Shape,
    epi: Epilogue<'_>,
    (v, m): (&mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    let (h, w, ci, co) = (s.h, s.w, s.ci, s.co);
    let (tw, tiles) = tile_grid(s);
    for (image, y) in x
        .chunks_exact(h * w * ci)
        .zip(out.chunks_exact_mut(h * w * co))
    {
        let zeros = vec![0f32; ci];
        v.par_chunks_mut(16 * ci)
            .enumerate()
            .for_each(|(t, dst)| tile_in(image, &zeros, (h, w, ci), (t / tw, t % tw), dst));
        m.par_chunks_mut(tiles * co)
            .enumerate()
            .for_each(|(xi, dst)| {
                product(
                    &v[xi * ci..],
                    16 * ci,
                    &u[xi * ci * co..(xi + 1) * ci * co],
                    dst,
                    (tiles, ci, co),
                )
            });
        y.par_chunks_mut(2 * w * co)
            .enumerate()
            .for_each(|(ty, rows)| {
                for tx in 0..tw {
                    tile_out(m, (tiles, co), ty * tw + tx, rows, (w, tx), epi);
                }
            });
    }
}

/// The filter `[3, 3, ci, co]` transformed for [`winograd`]: `G g Gᵀ` for each input and
/// output channel, laid out `[16][ci][co]`.
pub fn winograd_filter(filter: &[f32], ci: usize, co: usize) -> Option<Vec<f32>> {
    if filter.len() != 9 * ci * co {
        return None;
    }
    const G: [[f32; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    let mut u = vec![0f32; 16 * ci * co];
    for c in 0..ci {
        for o in 0..co {
            let g = |ky: usize, kx: usize| filter[((ky * 3 + kx) * ci + c) * co + o];
            let mut gg = [[0f32; 3]; 4];
            for (i, row) in gg.iter_mut().enumerate() {
                for (kx, cell) in row.iter_mut().enumerate() {
                    *cell = (0..3).map(|ky| G[i][ky] * g(ky, kx)).sum();
                }
            }
            for i in 0..4 {
                for j in 0..4 {
                    let val: f32 = (0..3).map(|kx| gg[i][kx] * G[j][kx]).sum();
                    u[((i * 4 + j) * ci + c) * co + o] = val;
                }
            }
        }
    }
    Some(u)
}

/// Tile `(ty, tx)` of `image` (`[h, w, ci]`, zero outside) transformed, `Bᵀ d B`, into
/// `dst` (`[16][ci]`).
fn tile_in(
    image: &[f32],
    zeros: &[f32],
    (h, w, ci): (usize, usize, usize),
    (ty, tx): (usize, usize),
    dst: &mut [f32],
) {
    let at = |r: usize, c: usize| -> &[f32] {
        let (iy, ix) = ((2 * ty + r) as isize - 1, (2 * tx + c) as isize - 1);
        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
            zeros
        } else {
            let from = (iy as usize * w + ix as usize) * ci;
            &image[from..from + ci]
        }
    };
    let d: [[&[f32]; 4]; 4] = std::array::from_fn(|r| std::array::from_fn(|c| at(r, c)));
    let (out, _) = dst.split_at_mut(16 * ci);
    for c in 0..ci {
        // Bᵀ d: rows d0 − d2, d1 + d2, d2 − d1, d1 − d3; then the same on columns.
        let col = |k: usize| {
            let (d0, d1, d2, d3) = (d[0][k][c], d[1][k][c], d[2][k][c], d[3][k][c]);
            [d0 - d2, d1 + d2, d2 - d1, d1 - d3]
        };
        let (c0, c1, c2, c3) = (col(0), col(1), col(2), col(3));
        for r in 0..4 {
            out[(r * 4) * ci + c] = c0[r] - c2[r];
            out[(r * 4 + 1) * ci + c] = c1[r] + c2[r];
            out[(r * 4 + 2) * ci + c] = c2[r] - c1[r];
            out[(r * 4 + 3) * ci + c] = c1[r] - c3[r];
        }
    }
}

/// Products of tile `t` (`m`: `[16][tiles][co]`) transformed back, `Aᵀ m A`, with the
/// epilogue, into the output rows of its tile row (`rows`: one or two rows of `[w, co]`).
fn tile_out(
    m: &[f32],
    (tiles, co): (usize, usize),
    t: usize,
    rows: &mut [f32],
    (w, tx): (usize, usize),
    epi: Epilogue<'_>,
) {
    let nrows = rows.len() / (w * co);
    let ncols = (w - 2 * tx).min(2);
    let at = |xi: usize| &m[(xi * tiles + t) * co..(xi * tiles + t + 1) * co];
    let q: [&[f32]; 16] = std::array::from_fn(at);
    for o in 0..co {
        let mm = |r: usize, c: usize| q[r * 4 + c][o];
        // Aᵀ m: rows m0 + m1 + m2, m1 − m2 − m3; then the same on columns.
        let t0: [f32; 4] = std::array::from_fn(|c| mm(0, c) + mm(1, c) + mm(2, c));
        let t1: [f32; 4] = std::array::from_fn(|c| mm(1, c) - mm(2, c) - mm(3, c));
        let bias = epi.bias.map_or(0.0, |b| b[o]);
        for (r, tr) in [t0, t1].iter().enumerate().take(nrows) {
            let y = [tr[0] + tr[1] + tr[2], tr[1] - tr[2] - tr[3]];
            for (c, &val) in y.iter().enumerate().take(ncols) {
                let mut val = val + bias;
                if let Some(alpha) = epi.leaky {
                    val = val.max(val * alpha);
                }
                rows[(r * w + 2 * tx + c) * co + o] = val;
            }
        }
    }
}

/// `dst[m, n] = lhs[m, k] · rhs[k, n]` where `lhs`'s rows are `lhs_rs` apart, on the calling
/// thread.
fn product(
    lhs: &[f32],
    lhs_rs: usize,
    rhs: &[f32],
    dst: &mut [f32],
    (m, k, n): (usize, usize, usize),
) {
    if m == 0 || lhs.len() < (m - 1) * lhs_rs + k || rhs.len() < k * n || dst.len() < m * n {
        debug_assert!(false, "matrix product on slices shorter than its shape");
        return;
    }
    // SAFETY: `lhs` holds m rows of k elements `lhs_rs` apart, `rhs` the k×n and `dst` the
    // m×n row-major matrices (checked above); `dst` is a unique borrow.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            1,
            lhs_rs as isize,
            rhs.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
