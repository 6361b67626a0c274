//! The 1000-address cap of the Endpoints controller (EP-4.3).

use k8s_openapi::api::core::v1::EndpointSubset;

/// Most addresses (ready + not ready, all subsets) one Endpoints object holds.
pub const MAX_CAPACITY: usize = 1000;

/// How many entries of a list of `n` to keep when `budget` is shared over
/// `total` entries: upstream's float arithmetic, reproduced bit for bit
/// (`ceil(n / total * budget)`), so rounding matches in every case.
fn share(n: usize, total: usize, budget: usize) -> usize {
    if total == 0 {
        return 0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let take = ((n as f64) / (total as f64) * (budget as f64)).ceil() as usize;
    take
}

/// How many entries each list keeps under the cap, given the `(ready,
/// not_ready)` list lengths of the subsets in their order; `None` when
/// everything fits. Ready addresses come first: when they fit, the remaining
/// budget is shared over the not-ready lists in proportion; when they do not,
/// every not-ready address is dropped and the 1000 are shared over the ready
/// lists. Only lengths matter, so callers can decide the cut before sorting
/// or copying the addresses.
pub fn keep_counts(lens: &[(usize, usize)]) -> Option<Vec<(usize, usize)>> {
    let total_ready: usize = lens.iter().map(|l| l.0).sum();
    let total_not_ready: usize = lens.iter().map(|l| l.1).sum();
    if total_ready + total_not_ready <= MAX_CAPACITY {
        return None;
    }
    let truncate_ready = total_ready > MAX_CAPACITY;
    let (budget, total) = if truncate_ready {
        (MAX_CAPACITY, total_ready)
    } else {
        (MAX_CAPACITY - total_ready, total_not_ready)
    };
    let mut left = budget;
    let keep = lens
        .iter()
        .map(|&(ready, not_ready)| {
            let n = if truncate_ready { ready } else { not_ready };
            let take = share(n, total, budget).min(left).min(n);
            left -= take;
            if truncate_ready {
                (take, 0)
            } else {
                (ready, take)
            }
        })
        .collect();
    Some(keep)
}

/// Truncates `subsets` (in their order) to [`MAX_CAPACITY`] addresses as
/// [`keep_counts`] decides and returns whether anything was dropped. Each
/// list keeps its first entries; a list left empty becomes `None`.
pub fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let len = |v: &Option<Vec<_>>| v.as_ref().map_or(0, Vec::len);
    let lens: Vec<(usize, usize)> = subsets
        .iter()
        .map(|s| (len(&s.addresses), len(&s.not_ready_addresses)))
        .collect();
    let Some(keep) = keep_counts(&lens) else {
        return false;
    };
    for (s, (ready, not_ready)) in subsets.iter_mut().zip(keep) {
        for (list, take) in [
            (&mut s.addresses, ready),
            (&mut s.not_ready_addresses, not_ready),
        ] {
            if let Some(v) = list.as_mut() {
                v.truncate(take);
            }
            if list.as_ref().is_some_and(Vec::is_empty) {
                *list = None;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EndpointAddress;
    use rstest::rstest;

    fn addrs(prefix: usize, n: usize) -> Option<Vec<EndpointAddress>> {
        (n > 0).then(|| {
            (0..n)
                .map(|i| EndpointAddress {
                    ip: format!("10.{prefix}.{}.{}", i / 256, i % 256),
                    ..EndpointAddress::default()
                })
                .collect()
        })
    }

    fn subsets(ready: &[usize], not_ready: &[usize]) -> Vec<EndpointSubset> {
        ready
            .iter()
            .zip(not_ready)
            .enumerate()
            .map(|(i, (r, n))| EndpointSubset {
                addresses: addrs(i, *r),
                not_ready_addresses: addrs(100 + i, *n),
                ports: None,
            })
            .collect()
    }

    fn counts(s: &[EndpointSubset]) -> (Vec<usize>, Vec<usize>) {
        let len = |v: &Option<Vec<_>>| v.as_ref().map_or(0, Vec::len);
        (
            s.iter().map(|s| len(&s.addresses)).collect(),
            s.iter().map(|s| len(&s.not_ready_addresses)).collect(),
        )
    }

    #[rstest]
    #[case::not_ready_shared(
        &[90, 110, 50, 10, 20], &[101, 200, 200, 201, 298],
        &[90, 110, 50, 10, 20], &[73, 144, 144, 145, 214], true)]
    #[case::ready_shared_not_ready_dropped(
        &[205, 400, 402, 400, 693], &[100, 100, 100, 100, 100],
        &[98, 191, 192, 191, 328], &[0, 0, 0, 0, 0], true)]
    #[case::ready_997_plus_4(&[997], &[4], &[997], &[3], true)]
    #[case::ready_1000_plus_10(&[1000], &[10], &[1000], &[0], true)]
    #[case::exactly_1000(&[500], &[500], &[500], &[500], false)]
    #[case::under(&[10, 20], &[1, 2], &[10, 20], &[1, 2], false)]
    fn rule_4_3_truncation_examples(
        #[case] ready: &[usize],
        #[case] not_ready: &[usize],
        #[case] want_ready: &[usize],
        #[case] want_not_ready: &[usize],
        #[case] truncated: bool,
    ) {
        let mut s = subsets(ready, not_ready);
        assert_eq!(truncate(&mut s), truncated);
        assert_eq!(counts(&s), (want_ready.to_vec(), want_not_ready.to_vec()));
    }

    #[test]
    fn rule_4_3_truncation_keeps_the_first_entries_of_each_list() {
        let mut s = subsets(&[1001], &[0]);
        let first: Vec<String> = s[0]
            .addresses
            .iter()
            .flatten()
            .take(1000)
            .map(|a| a.ip.clone())
            .collect();
        assert!(truncate(&mut s));
        let kept: Vec<String> = s[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.clone())
            .collect();
        assert_eq!(kept, first);
    }
}
