//! Zeller's delta debugging (ddmin, "Simplifying and Isolating Failure-Inducing Input", 2002) over a
//! set of items, with three-valued tests: swapping modules for identity is not monotone, so bisection
//! does not apply.

/// The result of ddmin: a subset for which the test holds, and whether it is 1-minimal (removing any
/// one item was tested and the test did not hold); not 1-minimal only when some of those tests were
/// inconclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduced<T> {
    pub items: Vec<T>,
    pub one_minimal: bool,
}

/// ddmin's test of a subset: `Some(true)` when it holds, `None` when it could not be resolved.
pub trait DdTest<T> {
    fn test(&mut self, items: &[T]) -> Option<bool>;
    /// The sets this round will test, in order, until one holds: a test that can run several at
    /// once may start them now.
    fn upcoming(&mut self, _sets: &[Vec<T>]) {}
}

impl<T, F: FnMut(&[T]) -> Option<bool>> DdTest<T> for F {
    fn test(&mut self, items: &[T]) -> Option<bool> {
        self(items)
    }
}

/// Finds a small subset of `items` for which `test` returns `Some(true)`. `test(items)` must hold
/// (the caller checks it). `None` from `test` is "unresolved" and counts as not holding.
pub fn ddmin<T: Clone + PartialEq>(items: &[T], test: &mut dyn DdTest<T>) -> Reduced<T> {
    let mut c: Vec<T> = items.to_vec();
    let mut n = 2usize;
    loop {
        if c.len() <= 1 {
            break;
        }
        let n_eff = n.min(c.len());
        let chunks = split(&c, n_eff);
        let complements: Vec<Vec<T>> = if n_eff > 2 {
            chunks
                .iter()
                .map(|chunk| c.iter().filter(|x| !chunk.contains(x)).cloned().collect())
                .filter(|s: &Vec<T>| !s.is_empty())
                .collect()
        } else {
            vec![]
        };
        test.upcoming(&[chunks.clone(), complements].concat());
        let mut reduced = false;
        // Reduce to a subset.
        for chunk in &chunks {
            if test.test(chunk) == Some(true) {
                c = chunk.clone();
                n = 2;
                reduced = true;
                break;
            }
        }
        if reduced {
            continue;
        }
        // Reduce to a complement.
        if n_eff > 2 {
            for chunk in &chunks {
                let complement: Vec<T> = c.iter().filter(|x| !chunk.contains(x)).cloned().collect();
                if complement.is_empty() {
                    continue;
                }
                if test.test(&complement) == Some(true) {
                    c = complement;
                    n = (n_eff - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if reduced {
            continue;
        }
        if n_eff < c.len() {
            n = (2 * n_eff).min(c.len());
            continue;
        }
        break;
    }
    // 1-minimality: every single removal must have been refuted, not merely left unresolved.
    let withouts: Vec<Vec<T>> = (0..c.len())
        .map(|i| {
            c.iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, x)| x.clone())
                .collect()
        })
        .collect();
    test.upcoming(&withouts);
    let one_minimal = withouts.iter().all(|w| test.test(w) == Some(false));
    Reduced {
        items: c,
        one_minimal,
    }
}

fn split<T: Clone>(c: &[T], n: usize) -> Vec<Vec<T>> {
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let end = start + (c.len() - start) / (n - i);
        out.push(c[start..end].to_vec());
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Runs ddmin with a memoised test and checks the result holds and is 1-minimal.
    fn check(n: usize, holds: &dyn Fn(&[usize]) -> bool) -> Vec<usize> {
        let items: Vec<usize> = (0..n).collect();
        let mut memo: HashMap<Vec<usize>, bool> = HashMap::new();
        let r = ddmin(&items, &mut |s: &[usize]| {
            Some(*memo.entry(s.to_vec()).or_insert_with(|| holds(s)))
        });
        assert!(holds(&r.items), "result must hold: {:?}", r.items);
        assert!(r.one_minimal);
        for i in 0..r.items.len() {
            let mut w = r.items.clone();
            w.remove(i);
            assert!(
                !holds(&w),
                "not 1-minimal: {:?} without {}",
                r.items,
                r.items[i]
            );
        }
        r.items
    }

    #[test]
    fn single_culprit() {
        for n in 1..=16 {
            for k in 0..n {
                assert_eq!(check(n, &|s| s.contains(&k)), vec![k]);
            }
        }
    }

    #[test]
    fn pairs_and_alternatives_non_monotone() {
        // Fits when both 2 and 7 are swapped, or when 3, 4 and 5 are, unless 9 is also swapped (a swap
        // that adds memory: not monotone).
        let holds = |s: &[usize]| {
            let has = |x| s.contains(&x);
            ((has(2) && has(7)) || (has(3) && has(4) && has(5))) && (!has(9) || has(0))
        };
        let r = check(12, &holds);
        assert!(r.len() <= 3, "{r:?}");
    }

    #[test]
    fn threshold_sets() {
        // Fits once the swapped items' weights sum past a threshold (the memory view of swaps).
        let w = [5, 1, 8, 2, 3, 9, 1, 4, 2, 7];
        for t in [1, 9, 15, 20, 30] {
            let holds = |s: &[usize]| s.iter().map(|i| w[*i]).sum::<usize>() >= t;
            check(10, &holds);
        }
    }

    #[test]
    fn unresolved_tests_are_reported_not_guessed() {
        let items: Vec<usize> = (0..6).collect();
        // 3 alone holds; every test of a set without 3 but with 4 is unresolved.
        let r = ddmin(&items, &mut |s: &[usize]| {
            if s.contains(&3) {
                Some(true)
            } else if s.contains(&4) {
                None
            } else {
                Some(false)
            }
        });
        assert_eq!(r.items, vec![3]);
        assert!(r.one_minimal);
        let r = ddmin(&items, &mut |s: &[usize]| {
            if s.len() == 6 {
                Some(true)
            } else {
                None
            }
        });
        assert_eq!(r.items.len(), 6);
        assert!(!r.one_minimal);
    }
}
