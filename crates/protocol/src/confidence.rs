//! System One's published confidence statistics and the numeric helpers of readout.

/// Confidence of a choice with `n` options: `(p_max - 1/n) / (1 - 1/n)`.
pub fn choice_confidence(probs: &[f64]) -> f64 {
    let n = probs.len();
    if n <= 1 {
        return 1.0;
    }
    let max = probs.iter().cloned().fold(0.0_f64, f64::max);
    let inv = 1.0 / n as f64;
    ((max - inv) / (1.0 - inv)).clamp(0.0, 1.0)
}

/// Confidence of a score over levels `0..n`: `max(0, 1 - sum_i p_i |i - m| / MAD_unif)`, where
/// `m` is the most likely level and `MAD_unif = sum_i |i - (n-1)/2| / n`.
pub fn score_confidence(probs: &[f64]) -> f64 {
    let n = probs.len();
    if n <= 1 {
        return 1.0;
    }
    let m = argmax(probs);
    let centre = (n as f64 - 1.0) / 2.0;
    let mad_unif: f64 = (0..n).map(|i| (i as f64 - centre).abs()).sum::<f64>() / n as f64;
    let spread: f64 = probs
        .iter()
        .enumerate()
        .map(|(i, p)| p * (i as f64 - m as f64).abs())
        .sum();
    (1.0 - spread / mad_unif).clamp(0.0, 1.0)
}

/// Expected level of a score distribution.
pub fn expected_level(probs: &[f64]) -> f64 {
    probs.iter().enumerate().map(|(i, p)| i as f64 * p).sum()
}

/// Index of the largest value (the first one on ties).
pub fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

/// Softmax of `logits / temperature`, computed stably in f64.
pub fn softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let t = if temperature.is_finite() && temperature > 0.0 {
        temperature
    } else {
        1.0
    };
    let scaled: Vec<f64> = logits.iter().map(|l| f64::from(*l) / t).collect();
    let max = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        let n = logits.len().max(1) as f64;
        return vec![1.0 / n; logits.len()];
    }
    let exps: Vec<f64> = scaled.iter().map(|x| (x - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_confidence_matches_the_formula() {
        assert!((choice_confidence(&[1.0, 0.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!(choice_confidence(&[1.0 / 3.0; 3]).abs() < 1e-12);
        // (0.6 - 0.25) / 0.75
        let c = choice_confidence(&[0.6, 0.2, 0.1, 0.1]);
        assert!((c - 0.35 / 0.75).abs() < 1e-12);
    }

    #[test]
    fn score_confidence_matches_the_spec_example() {
        // Torn between Moderate and Hard: confidence 0 (worker-api.txt).
        assert_eq!(score_confidence(&[0.13, 0.43, 0.44]), 0.0);
        assert!((score_confidence(&[0.0, 1.0, 0.0]) - 1.0).abs() < 1e-12);
        // n = 3: MAD_unif = 2/3; m = 2; spread = 0.0342*2 + 0.2359*1 = 0.3043
        let c = score_confidence(&[0.0342, 0.2359, 0.7300]);
        assert!((c - (1.0 - 0.3043 / (2.0 / 3.0))).abs() < 1e-9);
    }

    #[test]
    fn softmax_is_a_distribution_and_respects_temperature() {
        let p = softmax(&[1.0, 2.0, 3.0], 1.0);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(p[2] > p[1] && p[1] > p[0]);
        let hot = softmax(&[1.0, 2.0, 3.0], 10.0);
        assert!(hot[2] < p[2]);
        let flat = softmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY], 1.0);
        assert_eq!(flat, vec![0.5, 0.5]);
    }

    #[test]
    fn expected_level_is_the_expectation() {
        assert!((expected_level(&[0.13, 0.43, 0.44]) - 1.31).abs() < 1e-12);
    }
}
