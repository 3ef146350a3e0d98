//! Fitting and measuring heads: softmax layers on standardised features by AdamW, the
//! temperature chosen on held-out answers, accuracy, NLL and ECE; and the progress bar
//! `adapt` shows while it reads cases.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use engine::adapter::Head;
use serde_json::Value;

/// Temperatures cross-validation chooses from: 1 to 8, evenly on a log scale. A head that
/// fits its training cases more closely than it answers new ones reads too sure; dividing its
/// logits by the temperature that best answers the held-out folds corrects that. None is
/// below 1: where the held-out folds are all answered right, their NLL falls as the answers
/// get surer without end, and a head made surer than its fit on that evidence reads too sure
/// on the first case unlike its training.
const TEMPERATURES: usize = 31;
/// Optimiser steps of one fit.
pub(super) const STEPS: usize = 300;
/// Rows one step reads: every row of a question's cases (full batch) up to this many; a span
/// head's many words are read this many a step, in turn.
const BATCH_ROWS: usize = 2048;
/// A bar of cases read on a terminal (cases done, rate, time left); nothing elsewhere.
pub(super) fn progress(cases: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(cases as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} cases  {per_sec}  {eta} left")
    {
        bar.set_style(style);
    }
    bar
}

/// Mean and standard deviation of each feature.
pub(super) fn standardiser<R: AsRef<[f32]>>(x: &[R]) -> (Vec<f32>, Vec<f32>) {
    let d = x.first().map_or(0, |r| r.as_ref().len());
    let n = x.len().max(1) as f64;
    let mut mean = vec![0f64; d];
    for row in x {
        for (m, v) in mean.iter_mut().zip(row.as_ref()) {
            *m += f64::from(*v) / n;
        }
    }
    let mut var = vec![0f64; d];
    for row in x {
        for ((s, v), m) in var.iter_mut().zip(row.as_ref()).zip(&mean) {
            *s += (f64::from(*v) - m).powi(2) / n;
        }
    }
    (
        mean.iter().map(|m| *m as f32).collect(),
        var.iter().map(|v| (v.sqrt() as f32).max(1e-4)).collect(),
    )
}

/// A softmax layer fitted on `x` (rows) against targets `t`: cross-entropy plus `l2`/2 times
/// the weights' squared norm, full-batch AdamW. Returns the head's weights (class rows),
/// biases, and the standardiser it was fitted under (none, mean 0 and scale 1, where
/// `standardise` is false: n-gram vectors, whose rare buckets standardising would blow up).
pub(super) fn fit(
    x: &[Vec<f32>],
    t: &[Vec<f32>],
    k: usize,
    l2: f64,
    standardise: bool,
) -> candle_core::Result<Head> {
    if !standardise {
        return Ok(fit_sparse(x, t, k, l2));
    }
    let (mean, scale) = standardiser(x);
    let d = mean.len();
    let n = x.len();
    let flat: Vec<f32> = x
        .iter()
        .flat_map(|row| {
            row.iter()
                .zip(mean.iter().zip(&scale))
                .map(|(v, (m, s))| (v - m) / s)
        })
        .collect();
    let dev = Device::Cpu;
    // Rows in a fixed shuffled order, so a step's rows are a fair sample of every case.
    let order = shuffled(n);
    let flat: Vec<f32> = order
        .iter()
        .flat_map(|&i| flat[i * d..(i + 1) * d].iter().copied())
        .collect();
    let xs = Tensor::from_vec(flat, (n, d), &dev)?;
    let ts = Tensor::from_vec(
        order
            .iter()
            .flat_map(|&i| t[i].iter().copied())
            .collect::<Vec<_>>(),
        (n, k),
        &dev,
    )?;
    let batch = n.min(BATCH_ROWS);
    let w = Var::zeros((d, k), DType::F32, &dev)?;
    let b = Var::zeros(k, DType::F32, &dev)?;
    let mut opt = AdamW::new(
        vec![w.clone(), b.clone()],
        ParamsAdamW {
            lr: 0.02,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    for step in 0..STEPS {
        // Every row at once, or for many rows (a span head's words) the next `batch` of them.
        let start = (step * batch) % n;
        let start = start.min(n - batch);
        let (xb, tb) = (xs.narrow(0, start, batch)?, ts.narrow(0, start, batch)?);
        let logits = xb.matmul(w.as_tensor())?.broadcast_add(b.as_tensor())?;
        // Cross-entropy against each case's target distribution (one-hot for a truth).
        let logp = candle_nn::ops::log_softmax(&logits, 1)?;
        let loss = ((tb * logp)?.sum_all()? * (-1.0 / batch as f64))?;
        let penalty = (w.as_tensor().sqr()?.sum_all()? * (l2 / 2.0))?;
        opt.backward_step(&(loss + penalty)?)?;
    }
    let wt = w.as_tensor().t()?.to_vec2::<f32>()?;
    let bias = b.as_tensor().to_vec1::<f32>()?;
    Ok(Head {
        question: Value::Null,
        classes: Vec::new(),
        mean,
        scale,
        weights: wt,
        bias,
        hidden: None,
        lexical: None,
        fit: Value::Null,
    })
}

/// [`fit`] for rows that are mostly zeros (n-gram vectors), unstandardised: the same loss and
/// AdamW steps (full batch), each step reading only the rows' non-zero values.
fn fit_sparse(x: &[Vec<f32>], t: &[Vec<f32>], k: usize, l2: f64) -> Head {
    const LR: f64 = 0.02;
    const BETAS: (f64, f64) = (0.9, 0.999);
    const EPS: f64 = 1e-8;
    let d = x.first().map_or(0, Vec::len);
    let n = x.len().max(1) as f64;
    let rows: Vec<Vec<(usize, f64)>> = x
        .iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .filter(|(_, v)| **v != 0.0)
                .map(|(j, v)| (j, f64::from(*v)))
                .collect()
        })
        .collect();
    // Weights as `d × k` then the `k` biases, one vector, as AdamW sees its parameters.
    let params = d * k + k;
    let (mut theta, mut m, mut v) = (vec![0f64; params], vec![0f64; params], vec![0f64; params]);
    let mut grad = vec![0f64; params];
    let mut z = vec![0f64; k];
    for step in 1..=STEPS {
        for (g, w) in grad[..d * k].iter_mut().zip(&theta) {
            *g = l2 * w;
        }
        grad[d * k..].iter_mut().for_each(|g| *g = 0.0);
        for (row, target) in rows.iter().zip(t) {
            z.copy_from_slice(&theta[d * k..]);
            for &(j, xj) in row {
                for (c, zc) in z.iter_mut().enumerate() {
                    *zc += theta[j * k + c] * xj;
                }
            }
            let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = z.iter().map(|v| (v - top).exp()).sum();
            for (c, zc) in z.iter_mut().enumerate() {
                // d(loss)/d(logit): softmax minus target, over the batch.
                *zc = ((*zc - top).exp() / sum - f64::from(target[c])) / n;
            }
            for &(j, xj) in row {
                for (c, zc) in z.iter().enumerate() {
                    grad[j * k + c] += zc * xj;
                }
            }
            for (g, zc) in grad[d * k..].iter_mut().zip(&z) {
                *g += zc;
            }
        }
        let (c1, c2) = (
            1.0 - BETAS.0.powi(step as i32),
            1.0 - BETAS.1.powi(step as i32),
        );
        for i in 0..params {
            m[i] = BETAS.0 * m[i] + (1.0 - BETAS.0) * grad[i];
            v[i] = BETAS.1 * v[i] + (1.0 - BETAS.1) * grad[i] * grad[i];
            theta[i] -= LR * (m[i] / c1) / ((v[i] / c2).sqrt() + EPS);
        }
    }
    Head {
        question: Value::Null,
        classes: Vec::new(),
        mean: vec![0.0; d],
        scale: vec![1.0; d],
        weights: (0..k)
            .map(|c| (0..d).map(|j| theta[j * k + c] as f32).collect())
            .collect(),
        bias: theta[d * k..].iter().map(|b| *b as f32).collect(),
        hidden: None,
        lexical: None,
        fit: Value::Null,
    }
}

/// `0..n` in a fixed pseudo-random order (the same for the same `n`).
pub(super) fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        order.swap(i, (state >> 33) as usize % (i + 1));
    }
    order
}

/// Accuracy, mean NLL and ECE (15 bins of the top answer's probability) of answers `p`.
pub(super) fn scores(p: &[Vec<f64>], y: &[usize]) -> (f64, f64, f64) {
    let n = p.len().max(1) as f64;
    let mut right = 0.0;
    let mut nll = 0.0;
    let mut bins = [(0.0f64, 0.0f64, 0usize); 15];
    for (pi, &yi) in p.iter().zip(y) {
        let top = pi
            .iter()
            .enumerate()
            .fold(0, |b, (i, v)| if *v > pi[b] { i } else { b });
        let hit = f64::from(u8::from(top == yi));
        right += hit;
        nll -= pi[yi].max(1e-12).ln();
        let bin = ((pi[top] * 15.0) as usize).min(14);
        bins[bin].0 += pi[top];
        bins[bin].1 += hit;
        bins[bin].2 += 1;
    }
    let ece = bins
        .iter()
        .map(|(c, h, m)| (c - h).abs() * (*m as f64 > 0.0) as u8 as f64)
        .sum::<f64>()
        / n;
    (right / n, nll / n, ece)
}

/// Answers `p` at temperature `t`: each probability raised to 1/t and renormalised, which is
/// the softmax of the head's logits divided by `t`.
pub(super) fn temper(p: &[Vec<f64>], t: f64) -> Vec<Vec<f64>> {
    p.iter()
        .map(|pi| {
            let logs: Vec<f64> = pi.iter().map(|v| v.max(1e-300).ln() / t).collect();
            let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logs.iter().map(|l| (l - top).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.into_iter().map(|v| v / sum).collect()
        })
        .collect()
}

/// The temperature (of the grid) under which answers `p` have the lowest NLL against `y`.
pub(super) fn best_temperature(p: &[Vec<f64>], y: &[usize]) -> f64 {
    let grid = (0..TEMPERATURES).map(|i| 8f64.powf(i as f64 / (TEMPERATURES - 1) as f64));
    grid.map(|t| (t, scores(&temper(p, t), y).1))
        .fold((1.0, f64::INFINITY), |best, (t, nll)| {
            if nll < best.1 {
                (t, nll)
            } else {
                best
            }
        })
        .0
}
