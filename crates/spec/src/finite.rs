//! Finding NaN and infinite elements (what anomaly mode reads values through).

use std::fmt;

/// The first non-finite element of a value, and how many there are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFinite {
    /// Flat row-major index of the first NaN or infinite element.
    pub index: usize,
    /// Its value (`NaN`, `inf` or `-inf`).
    pub value: f64,
    /// How many elements are non-finite.
    pub count: usize,
}

impl NonFinite {
    /// Scans `data` (fast path: a branch-free check per block of 64 elements, so the common
    /// all-finite case vectorises; the exact position and count only on the failure path).
    pub fn scan<T>(
        data: &[T],
        is_finite: impl Fn(&T) -> bool,
        to_f64: impl Fn(&T) -> f64,
    ) -> Option<NonFinite> {
        const BLOCK: usize = 64;
        let (block, chunk) = data
            .chunks(BLOCK)
            .enumerate()
            .find(|(_, c)| !c.iter().fold(true, |ok, x| ok & is_finite(x)))?;
        let index = block * BLOCK + chunk.iter().position(|x| !is_finite(x))?;
        Some(NonFinite {
            index,
            value: to_f64(&data[index]),
            count: data[index..].iter().filter(|x| !is_finite(x)).count(),
        })
    }
}

impl fmt::Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at flat index {} ({} non-finite element{})",
            self.value,
            self.index,
            self.count,
            if self.count == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_the_first_non_finite_element_and_counts_them() {
        let mut data = vec![1.0f64; 200];
        assert_eq!(NonFinite::scan(&data, |x| x.is_finite(), |x| *x), None);
        data[130] = f64::NEG_INFINITY;
        data[150] = f64::NAN;
        data[199] = f64::INFINITY;
        let found =
            NonFinite::scan(&data, |x| x.is_finite(), |x| *x).expect("three are non-finite");
        assert_eq!(
            (found.index, found.value, found.count),
            (130, f64::NEG_INFINITY, 3)
        );
        data[0] = f64::NAN;
        let found = NonFinite::scan(&data, |x| x.is_finite(), |x| *x).expect("four are non-finite");
        assert_eq!((found.index, found.count), (0, 4));
        assert!(found.value.is_nan());
    }

    #[test]
    fn the_message_names_the_value_the_index_and_the_count() {
        let one = NonFinite {
            index: 1,
            value: f64::INFINITY,
            count: 1,
        };
        assert_eq!(
            one.to_string(),
            "inf at flat index 1 (1 non-finite element)"
        );
        let many = NonFinite {
            index: 70,
            value: f64::NAN,
            count: 4,
        };
        assert_eq!(
            many.to_string(),
            "NaN at flat index 70 (4 non-finite elements)"
        );
    }

    #[test]
    fn scan_of_an_empty_value_finds_nothing() {
        assert_eq!(
            NonFinite::scan(&[] as &[f32], |x| x.is_finite(), |x| f64::from(*x)),
            None
        );
    }

    #[test]
    fn tensors_report_their_first_non_finite_element_and_rationals_never_do() {
        let t = crate::Tensor::new([3], vec![1.0f32, f32::INFINITY, f32::NAN]).expect("3 elements");
        let found = t.non_finite().expect("two are non-finite");
        assert_eq!(
            (found.index, found.value, found.count),
            (1, f64::INFINITY, 2)
        );
        let q = t.convert::<crate::Rational>();
        // an infinity has no rational value; finite data converts and stays finite
        assert!(q.is_err());
        let q = crate::Tensor::new([2], vec![0.5f64, -3.0])
            .and_then(|t| t.convert::<crate::Rational>())
            .expect("finite values are rationals");
        assert_eq!(q.non_finite(), None);
    }
}
