//! The per-object figures behind the three slice gauges the EndpointSlice and the
//! mirroring controllers both export (endpoints desired, slices, slices desired;
//! ES-2.13 and its mirroring twin): each object's last figures are kept so a new
//! pass, or the object's removal, moves the gauges by the difference alone.

use std::collections::HashMap;

use prometheus_client::metrics::gauge::Gauge;

/// One object's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) desired: i64,
    pub(crate) slices: i64,
    pub(crate) desired_slices: i64,
}

impl Figures {
    pub(crate) fn new(desired: usize, slices: usize, desired_slices: usize) -> Self {
        let to_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        Self {
            desired: to_i64(desired),
            slices: to_i64(slices),
            desired_slices: to_i64(desired_slices),
        }
    }
}

/// The gauges the figures sum into.
pub(crate) struct SliceGauges<'a> {
    pub(crate) endpoints_desired: &'a Gauge,
    pub(crate) slices: &'a Gauge,
    pub(crate) desired_slices: &'a Gauge,
}

/// Every object's last figures.
#[derive(Debug, Default)]
pub(crate) struct FigureBook(HashMap<String, Figures>);

impl FigureBook {
    /// Records `key`'s new figures (`None`: the object is gone) and moves `gauges` by
    /// the difference from its last ones.
    pub(crate) fn set(&mut self, key: &str, new: Option<Figures>, gauges: &SliceGauges<'_>) {
        let old = match new {
            Some(figures) => self.0.insert(key.to_owned(), figures),
            None => self.0.remove(key),
        }
        .unwrap_or_default();
        let new = new.unwrap_or_default();
        gauges.endpoints_desired.inc_by(new.desired - old.desired);
        gauges.slices.inc_by(new.slices - old.slices);
        gauges
            .desired_slices
            .inc_by(new.desired_slices - old.desired_slices);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauges_move_by_the_difference_and_return_to_zero_when_an_object_goes() {
        let (a, b, c) = (Gauge::default(), Gauge::default(), Gauge::default());
        let gauges = SliceGauges {
            endpoints_desired: &a,
            slices: &b,
            desired_slices: &c,
        };
        let mut book = FigureBook::default();
        book.set("ns/web", Some(Figures::new(150, 2, 2)), &gauges);
        book.set("ns/db", Some(Figures::new(3, 1, 1)), &gauges);
        assert_eq!((a.get(), b.get(), c.get()), (153, 3, 3));
        book.set("ns/web", Some(Figures::new(90, 2, 1)), &gauges);
        assert_eq!((a.get(), b.get(), c.get()), (93, 3, 2));
        book.set("ns/web", None, &gauges);
        book.set("ns/db", None, &gauges);
        assert_eq!((a.get(), b.get(), c.get()), (0, 0, 0));
        // Forgetting an unknown object changes nothing.
        book.set("ns/none", None, &gauges);
        assert_eq!((a.get(), b.get(), c.get()), (0, 0, 0));
    }
}
