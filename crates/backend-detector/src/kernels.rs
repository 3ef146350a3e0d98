//! The detector's operators other than convolution, on plain `f32` slices, each one pass
//! over memory shared by the threads: candle runs these on strided views element by element
//! (an addition of two tensors in different memory orders took 2.4 ms of a 62 ms forward).

use rayon::prelude::*;

/// Elements per parallel task in the element-wise loops.
const CHUNK: usize = 1 << 14;

/// `n` matrices of `rows × cols` (row-major, one after another) transposed: `[n, cols,
/// rows]`. NCHW to NHWC is `(n, c, h·w)`, NHWC to NCHW `(n, h·w, c)`.
pub fn transpose(x: &[f32], n: usize, rows: usize, cols: usize) -> Option<Vec<f32>> {
    if x.len() != n * rows * cols || rows == 0 || cols == 0 {
        return None;
    }
    // Each task writes a band of output rows (input columns), reading the input a few
    // columns at a time so its lines stay in cache; at least a few thousand elements, so
    // that short rows (an RGB picture's three channels) do not make tasks of a few bytes.
    let band = (CHUNK / 4 / rows).max(32);
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(band * rows)
        .enumerate()
        .for_each(|(i, dst)| {
            let first = i * band;
            let (mut b, mut col) = (first / cols, first % cols);
            for line in dst.chunks_exact_mut(rows) {
                let src = &x[b * rows * cols..(b + 1) * rows * cols];
                for (row, v) in line.iter_mut().enumerate() {
                    *v = src[row * cols + col];
                }
                col += 1;
                if col == cols {
                    (b, col) = (b + 1, 0);
                }
            }
        });
    Some(out)
}

/// `f` of each element.
pub fn map(x: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(x);
            }
        });
    out
}

/// `f(a, b)` element by element, for slices of one length.
pub fn zip(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) -> Option<Vec<f32>> {
    if a.len() != b.len() {
        return None;
    }
    let mut out = vec![0f32; a.len()];
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(o, (a, b))| {
            for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
                *o = f(a, b);
            }
        });
    Some(out)
}

/// `f(x, v[channel])` for each element of `x`, whose last axis has `v.len()` channels, with
/// `images` images of `x.len() / images` elements each, and `v` holding `images × channels`
/// values (one row per image): a per-channel scale or shift, as a squeeze-and-excite's.
pub fn per_channel(
    x: &[f32],
    v: &[f32],
    images: usize,
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Option<Vec<f32>> {
    let c = v.len().checked_div(images).filter(|&c| c > 0)?;
    if images == 0 || v.len() != images * c || !x.len().is_multiple_of(images * c) {
        return None;
    }
    let per_image = x.len() / images;
    let rows = (CHUNK / c).max(1);
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(rows * c)
        .enumerate()
        .for_each(|(i, dst)| {
            let at = i * rows * c;
            for (k, px) in dst.chunks_exact_mut(c).enumerate() {
                let start = at + k * c;
                let row = &v[(start / per_image) * c..(start / per_image + 1) * c];
                for ((o, &a), &b) in px.iter_mut().zip(&x[start..start + c]).zip(row) {
                    *o = f(a, b);
                }
            }
        });
    Some(out)
}

/// The mean of each channel of `[n, h, w, c]` over its pixels: `[n, c]`.
pub fn spatial_mean(x: &[f32], (n, h, w, c): (usize, usize, usize, usize)) -> Option<Vec<f32>> {
    let pixels = h * w;
    if x.len() != n * pixels * c || pixels == 0 || c == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n * c);
    for image in x.chunks_exact(pixels * c) {
        let band = (CHUNK / c).max(1);
        let sum = image
            .par_chunks(band * c)
            .map(|rows| {
                let mut acc = vec![0f32; c];
                for px in rows.chunks_exact(c) {
                    for (a, &v) in acc.iter_mut().zip(px) {
                        *a += v;
                    }
                }
                acc
            })
            .reduce(
                || vec![0f32; c],
                |mut a, b| {
                    for (x, y) in a.iter_mut().zip(b) {
                        *x += y;
                    }
                    a
                },
            );
        out.extend(sum.into_iter().map(|v| v / pixels as f32));
    }
    Some(out)
}

/// `1 / (1 + e^-x)` of each element.
pub fn sigmoid(x: &[f32]) -> Vec<f32> {
    map(x, |x| 1.0 / (1.0 + exp(-x)))
}

/// `e^x` within 4·10⁻⁷ of it (relative, as its test checks) in a form the compiler vectorises (the
/// library's `exp` is one call per element): `x = n·ln 2 + r` with `|r| ≤ ½ ln 2`, `e^r` by
/// its Taylor polynomial to the sixth power, `2^n` written into the exponent bits. `x` is
/// clamped to ±87, where `e^x` is still a normal float.
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 87.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r / 720.0)))));
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Tensors of `pixels` rows joined along their last axis (`parts`: each one's elements and
/// its row width): `[pixels, Σ widths]`.
pub fn concat_last(parts: &[(&[f32], usize)], pixels: usize) -> Option<Vec<f32>> {
    let width: usize = parts.iter().map(|p| p.1).sum();
    if width == 0 || parts.iter().any(|(s, w)| s.len() != pixels * w) {
        return None;
    }
    let per = (CHUNK / width).max(1);
    let mut out = vec![0f32; pixels * width];
    out.par_chunks_mut(per * width)
        .enumerate()
        .for_each(|(i, dst)| {
            for (k, px) in dst.chunks_exact_mut(width).enumerate() {
                let p = i * per + k;
                let mut at = 0;
                for &(s, w) in parts {
                    px[at..at + w].copy_from_slice(&s[p * w..(p + 1) * w]);
                    at += w;
                }
            }
        });
    Some(out)
}

/// Max pooling of `[n, h, w, c]` with a `kernel` window moved by `stride`, the input padded
/// by `pad` on every side with `value`: `[n, oh, ow, c]`, and `(oh, ow)`.
pub fn max_pool(
    x: &[f32],
    (n, h, w, c): (usize, usize, usize, usize),
    kernel: (usize, usize),
    stride: (usize, usize),
    (pad, value): (usize, f32),
) -> Option<(Vec<f32>, (usize, usize))> {
    let ((kh, kw), (sh, sw)) = (kernel, stride);
    if x.len() != n * h * w * c
        || c == 0
        || [kh, kw, sh, sw].contains(&0)
        || h + 2 * pad < kh
        || w + 2 * pad < kw
    {
        return None;
    }
    let (oh, ow) = ((h + 2 * pad - kh) / sh + 1, (w + 2 * pad - kw) / sw + 1);
    let mut out = vec![f32::NEG_INFINITY; n * oh * ow * c];
    out.par_chunks_mut(ow * c)
        .enumerate()
        .for_each(|(r, line)| {
            let (b, oy) = (r / oh, r % oh);
            for (ox, dst) in line.chunks_exact_mut(c).enumerate() {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let iy = (oy * sh + ky) as isize - pad as isize;
                        let ix = (ox * sw + kx) as isize - pad as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            dst.iter_mut().for_each(|d| *d = d.max(value));
                            continue;
                        }
                        let from = ((b * h + iy as usize) * w + ix as usize) * c;
                        for (d, &v) in dst.iter_mut().zip(&x[from..from + c]) {
                            *d = d.max(v);
                        }
                    }
                }
            }
        });
    Some((out, (oh, ow)))
}

/// Bilinear resize of `[n, h, w, c]` to `[n, oh, ow, c]`. With `half_pixel`, as PyTorch's
/// `align_corners = false` (and candle's `upsample_bilinear2d`): a source coordinate
/// `(d + ½)·in/out − ½`, clamped at zero; without, TensorFlow's legacy `d·in/out`. Either
/// lies between its floor and the next pixel (or the last).
pub fn resize_bilinear(
    x: &[f32],
    (n, h, w, c): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    half_pixel: bool,
) -> Option<Vec<f32>> {
    if x.len() != n * h * w * c || [h, w, c, oh, ow].contains(&0) {
        return None;
    }
    let taps = |out: usize, inp: usize| -> Vec<(usize, usize, f32)> {
        let scale = inp as f32 / out as f32;
        (0..out)
            .map(|d| {
                let src = if half_pixel {
                    (scale * (d as f32 + 0.5) - 0.5).max(0.0)
                } else {
                    scale * d as f32
                };
                let i0 = (src as usize).min(inp - 1);
                let i1 = (i0 + 1).min(inp - 1);
                (i0, i1, src - i0 as f32)
            })
            .collect()
    };
    let (ys, xs) = (taps(oh, h), taps(ow, w));
    let mut out = vec![0f32; n * oh * ow * c];
    out.par_chunks_mut(ow * c)
        .enumerate()
        .for_each(|(r, line)| {
            let (b, oy) = (r / oh, r % oh);
            let (y0, y1, ly) = ys[oy];
            let image = &x[b * h * w * c..(b + 1) * h * w * c];
            let px = |y: usize, xx: usize| &image[(y * w + xx) * c..(y * w + xx + 1) * c];
            for (dst, &(x0, x1, lx)) in line.chunks_exact_mut(c).zip(&xs) {
                let (a, bb, cc, d) = (px(y0, x0), px(y0, x1), px(y1, x0), px(y1, x1));
                for i in 0..c {
                    let top = a[i] * (1.0 - lx) + bb[i] * lx;
                    let bottom = cc[i] * (1.0 - lx) + d[i] * lx;
                    dst[i] = top * (1.0 - ly) + bottom * ly;
                }
            }
        });
    Some(out)
}

/// Shapes of a depthwise convolution: input `[n, h, w, c]`, filter `[kh, kw, c]`, stride,
/// the zero padding before the first row and column, and the output's height and width
/// (the padding after is whatever that leaves).
#[derive(Debug, Clone, Copy)]
pub struct Depthwise {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    pub before: (usize, usize),
    pub out: (usize, usize),
}

/// A depthwise convolution in NHWC (each channel with its own `kh × kw` filter), then the
/// bias and a ReLU where asked: `[n, oh, ow, c]`, or `None` when a slice does not match the
/// shape. Each output pixel sums its window's taps over a whole pixel of channels at a time
/// (taps outside the input are the padding's zeros, skipped).
pub fn depthwise(
    x: &[f32],
    filter: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    s: Depthwise,
) -> Option<Vec<f32>> {
    let (oh, ow) = s.out;
    let (sh, sw) = s.stride;
    let c = s.c;
    if x.len() != s.n * s.h * s.w * c
        || filter.len() != s.kh * s.kw * c
        || bias.is_some_and(|b| b.len() != c)
        || [c, sh, sw, oh, ow].contains(&0)
    {
        return None;
    }
    let mut out = vec![0f32; s.n * oh * ow * c];
    out.par_chunks_mut(ow * c)
        .enumerate()
        .for_each(|(r, line)| {
            let (b, oy) = (r / oh, r % oh);
            let image = &x[b * s.h * s.w * c..(b + 1) * s.h * s.w * c];
            for (ox, acc) in line.chunks_exact_mut(c).enumerate() {
                if let Some(bias) = bias {
                    acc.copy_from_slice(bias);
                }
                for ky in 0..s.kh {
                    let Some(iy) = (oy * sh + ky).checked_sub(s.before.0).filter(|&y| y < s.h)
                    else {
                        continue;
                    };
                    for kx in 0..s.kw {
                        let Some(ix) = (ox * sw + kx).checked_sub(s.before.1).filter(|&v| v < s.w)
                        else {
                            continue;
                        };
                        let px = &image[(iy * s.w + ix) * c..(iy * s.w + ix + 1) * c];
                        let tap = &filter[(ky * s.kw + kx) * c..(ky * s.kw + kx + 1) * c];
                        for ((a, &v), &k) in acc.iter_mut().zip(px).zip(tap) {
                            *a += v * k;
                        }
                    }
                }
                if relu {
                    for a in acc.iter_mut() {
                        *a = a.max(0.0);
                    }
                }
            }
        });
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_is_the_librarys_to_a_few_ulps() {
        for i in -869..=868 {
            let x = i as f32 * 0.1 + 0.037;
            let (ours, theirs) = (super::exp(x), x.exp());
            assert!(
                ((ours - theirs) / theirs).abs() < 4e-7,
                "{x}: {ours} vs {theirs}"
            );
        }
    }
}
