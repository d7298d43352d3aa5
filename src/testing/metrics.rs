//! Error metrics of an output against the float64 reference.

/// Norm-relative error `‖actual − expected‖ / ‖expected‖` (absolute norm when `expected` is 0).
pub fn norm_relative_error(actual: &[f64], expected: &[f64]) -> f64 {
    let diff: f64 = actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e) * (a - e))
        .sum();
    let norm: f64 = expected.iter().map(|e| e * e).sum();
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// Largest `|actual − expected|`; NaN anywhere makes it NaN.
pub fn max_abs_error(actual: &[f64], expected: &[f64]) -> f64 {
    actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, |m: f64, d| {
            if d.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            }
        })
}
