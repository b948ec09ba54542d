//! Where a boundary probably lies, from the peaks of trials that fit: memory is close to affine in the
//! batch and in the number of pixels (quadratic in the input side), so a line through measured peaks
//! predicts the largest value under the ceiling. A prediction only orders probes; it never replaces one.

/// `points`: `(x, peak)` of trials that fit. `base`: memory that does not scale with `x` (parameters,
/// optimizer state, context), when measured. Returns the index of the largest value in `xs` whose
/// predicted peak stays at or under `ceiling`, or `None` when there is nothing to fit a line to.
pub fn predict_boundary(
    points: &[(f64, f64)],
    base: Option<f64>,
    ceiling: f64,
    xs: &[f64],
) -> Option<usize> {
    let mut pts: Vec<(f64, f64)> = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    // The line through the two largest points, closest to the boundary; with one point, through it and
    // the base memory at x = 0.
    let (x1, y1, x2, y2) = match pts.as_slice() {
        [.., (x1, y1), (x2, y2)] => (*x1, *y1, *x2, *y2),
        [(x2, y2)] => (0.0, base?, *x2, *y2),
        [] => return None,
    };
    if x2 <= x1 {
        return None;
    }
    let slope = (y2 - y1) / (x2 - x1);
    if !(slope.is_finite() && slope > 0.0) {
        return None;
    }
    let x_star = x2 + (ceiling - y2) / slope;
    let mut best = None;
    for (i, x) in xs.iter().enumerate() {
        if *x <= x_star {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_batch() {
        // 1 GiB fixed, 0.5 GiB per sample, 4 GiB ceiling: batch 6 fits (4.0), batch 7 does not.
        let xs: Vec<f64> = (1..=16).map(f64::from).collect();
        let g = 1024.0 * 1024.0 * 1024.0;
        let p = predict_boundary(&[(1.0, 1.5 * g)], Some(g), 4.0 * g, &xs);
        assert_eq!(p, Some(5));
        let p = predict_boundary(&[(1.0, 1.5 * g), (2.0, 2.0 * g)], None, 4.0 * g, &xs);
        assert_eq!(p, Some(5));
    }

    #[test]
    fn nothing_to_fit() {
        assert_eq!(predict_boundary(&[], Some(1.0), 10.0, &[1.0, 2.0]), None);
        assert_eq!(
            predict_boundary(&[(1.0, 5.0)], None, 10.0, &[1.0, 2.0]),
            None
        );
        // Flat or falling memory predicts nothing.
        assert_eq!(
            predict_boundary(&[(1.0, 5.0), (2.0, 5.0)], None, 10.0, &[1.0, 2.0]),
            None
        );
    }
}
