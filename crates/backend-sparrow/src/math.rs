//! The numeric pieces of the forward, in f32 as the package computes them.

/// A dense layer: `rows x cols` weights (row-major) and one bias per row.
pub(crate) struct Matrix {
    pub w: Vec<f32>,
    pub b: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
}

impl Matrix {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.w[i * self.cols..(i + 1) * self.cols]
    }
    /// `W x + b`.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        (0..self.rows)
            .map(|i| dot(self.row(i), x) + self.b[i])
            .collect()
    }
}

/// A dot product summed in 32 lanes, so the compiler can keep it in vector registers.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    let mut ca = a.chunks_exact(32);
    let mut cb = b.chunks_exact(32);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..32 {
            lanes[l] += x[l] * y[l];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        sum += x * y;
    }
    sum
}

/// Scale to unit length (a zero vector stays zero).
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// Abramowitz and Stegun 7.1.26, the error function the package's GELU uses (absolute error
/// 1.5e-7).
fn erf(x: f32) -> f32 {
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152) * t) + 1.421_413_8) * t - 0.284_496_74) * t
            + 0.254_829_6)
            * t
            * (-a * a).exp();
    s * y
}

/// Exact-form GELU through [`erf`].
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_gelu_match_known_values() {
        // erf(0.5) = 0.5204999, erf(-1) = -0.8427008; gelu(1) = 0.8413447.
        assert!((erf(0.5) - 0.520_499_9).abs() < 2e-7);
        assert!((erf(-1.0) + 0.842_700_8).abs() < 2e-7);
        assert!((gelu(1.0) - 0.841_344_7).abs() < 2e-7);
        assert_eq!(gelu(0.0), 0.0);
    }

    #[test]
    fn dot_and_normalize() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        assert_eq!(dot(&a, &a), (0..19).map(|i| (i * i) as f32).sum::<f32>());
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }
}
