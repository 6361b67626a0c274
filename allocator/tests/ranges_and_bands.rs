//! AL-2 (ranges, usable addresses, bands, errors) and AL-7.1 (NodePort bands),
//! one table per rule.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::net::IpAddr;

use rstest::rstest;
use svcplane_allocator::range::{
    cidr_band_offset, legacy_bitmap_size, port_band_offset, usable_size,
};
use svcplane_allocator::{
    Cidr, CidrAllocator, IpAllocError, PortAllocError, PortAllocator, PortRange, Rng,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// AL-2.2 usable addresses of the IPAddress allocator.
#[rstest]
#[case::v4_24("192.168.1.0/24", 254)]
#[case::v4_15("10.0.0.0/15", 131_070)]
#[case::v4_30("192.168.1.0/30", 2)]
#[case::v4_31_is_empty("192.168.1.0/31", 0)]
#[case::v4_32_is_empty("192.168.1.1/32", 0)]
#[case::v6_112("2001:db8::/112", 65_535)]
#[case::v6_116("2001:db8::/116", 4_095)]
#[case::v6_108("2000::/108", 1_048_575)]
#[case::v6_127("2001:db8::/127", 1)]
#[case::v6_128_is_empty("2001:db8::1/128", 0)]
#[case::v6_65("2001:db8::/65", (1u64 << 63) - 1)]
#[case::v6_64_saturates("2001:db8::/64", u64::MAX)]
fn usable_addresses_per_family(#[case] cidr: &str, #[case] size: u64) {
    let c = Cidr::parse(cidr).unwrap();
    assert_eq!(usable_size(&c), size);
    assert_eq!(CidrAllocator::new(c).unwrap().size(), size);
}

/// AL-2.2 legacy bitmap caps IPv6 at 65535.
#[rstest]
#[case::v6_108_capped("2000::/108", 65_535)]
#[case::v6_48_capped("2001:db8::/48", 65_535)]
#[case::v6_116("2001:db8::/116", 4_095)]
#[case::v4_24("192.168.1.0/24", 254)]
fn legacy_bitmap_size_caps_ipv6(#[case] cidr: &str, #[case] size: u64) {
    assert_eq!(legacy_bitmap_size(&Cidr::parse(cidr).unwrap()), size);
}

/// AL-2.2 IPv6 prefixes shorter than /64 have no allocator.
#[rstest]
#[case::v6_48(
    "2001:db8::/48",
    "shortest allowed prefix length for service CIDR is 64, got 48"
)]
#[case::v6_12(
    "2000::/12",
    "shortest allowed prefix length for service CIDR is 64, got 12"
)]
fn ipv6_shorter_than_64_is_refused(#[case] cidr: &str, #[case] msg: &str) {
    let err = CidrAllocator::new(Cidr::parse(cidr).unwrap()).unwrap_err();
    assert_eq!(err.to_string(), msg);
}

/// AL-2.2 first/last usable address per family.
#[rstest]
#[case::v4("10.0.0.0/24", "10.0.0.1", "10.0.0.254")]
#[case::v6_all_ones_allocatable("fd00::/120", "fd00::1", "fd00::ff")]
fn first_and_last_usable(#[case] cidr: &str, #[case] first: &str, #[case] last: &str) {
    let mut r = CidrAllocator::parse(cidr).unwrap();
    assert_eq!(r.first_address(), ip(first));
    assert_eq!(r.last_address(), Some(ip(last)));
    r.allocate(ip(first)).unwrap();
    r.allocate(ip(last)).unwrap();
}

/// AL-2.2 a size-0 range fails every dynamic allocation with `range is full`.
#[rstest]
#[case::v4_32("10.0.0.1/32")]
#[case::v4_31("10.0.0.0/31")]
#[case::v6_128("fd00::1/128")]
fn size_zero_range_is_full(#[case] cidr: &str) {
    let mut r = CidrAllocator::parse(cidr).unwrap();
    assert_eq!(r.allocate_next(&mut Rng::new(0)), Err(IpAllocError::Full));
}

/// AL-2.3 KEP-3070 band offset table.
#[rstest]
#[case::v4_32("10.0.0.0/32", 0)]
#[case::v4_30("10.0.0.0/30", 0)]
#[case::v4_28("10.0.0.0/28", 0)]
#[case::v4_27("10.0.0.0/27", 16)]
#[case::v4_24("10.0.0.0/24", 16)]
#[case::v4_22("10.0.0.0/22", 64)]
#[case::v4_20("10.0.0.0/20", 256)]
#[case::v4_16("10.0.0.0/16", 256)]
#[case::v4_12("10.96.0.0/12", 256)]
#[case::v4_8("10.0.0.0/8", 256)]
#[case::v6_128("fd00::/128", 0)]
#[case::v6_126("fd00::/126", 0)]
#[case::v6_124("fd00::/124", 0)]
#[case::v6_122("fd00::/122", 16)]
#[case::v6_118("fd00::/118", 64)]
#[case::v6_112("fd00::/112", 256)]
#[case::v6_108("fd00::/108", 256)]
#[case::v6_64("fd00::/64", 256)]
#[case::v6_12("2000::/12", 256)]
fn static_band_size(#[case] cidr: &str, #[case] offset: u64) {
    assert_eq!(cidr_band_offset(&Cidr::parse(cidr).unwrap()), offset);
}

/// AL-2.3 band boundaries count from the first usable address.
#[rstest]
#[case::v4_12(
    "10.96.0.0/12",
    "10.96.0.1",
    "10.96.1.0",
    "10.96.1.1",
    "10.111.255.254"
)]
#[case::v4_24(
    "192.168.1.0/24",
    "192.168.1.1",
    "192.168.1.16",
    "192.168.1.17",
    "192.168.1.254"
)]
fn band_boundaries(
    #[case] cidr: &str,
    #[case] lo0: &str,
    #[case] lo1: &str,
    #[case] up0: &str,
    #[case] up1: &str,
) {
    let r = CidrAllocator::parse(cidr).unwrap();
    assert!(!r.in_upper_band(ip(lo0)));
    assert!(!r.in_upper_band(ip(lo1)));
    assert!(r.in_upper_band(ip(up0)));
    assert!(r.in_upper_band(ip(up1)));
    assert_eq!(r.first_address(), ip(lo0));
    assert_eq!(r.last_address(), Some(ip(up1)));
}

/// AL-2.3 dynamic picks fill the upper band first, then fall back to the lower band.
#[rstest]
#[case::v4_24("192.168.1.0/24")]
#[case::v4_27("10.0.0.0/27")]
#[case::v6_120("fd00::/120")]
#[case::v4_28_one_band("10.0.0.0/28")]
fn dynamic_upper_band_first(#[case] cidr: &str) {
    let mut r = CidrAllocator::parse(cidr).unwrap();
    let mut rng = Rng::new(99);
    let upper = r.size() - r.band_offset();
    for _ in 0..upper {
        let a = r.allocate_next(&mut rng).unwrap();
        assert!(r.in_upper_band(a), "{a} should be in the upper band");
    }
    for _ in 0..r.band_offset() {
        let a = r.allocate_next(&mut rng).unwrap();
        assert!(!r.in_upper_band(a), "{a} should be in the lower band");
    }
    assert_eq!(r.allocate_next(&mut rng), Err(IpAllocError::Full));
}

/// AL-2.3 static requests may use either band.
#[rstest]
#[case::lower("10.96.0.10")]
#[case::upper("10.100.0.10")]
#[case::first("10.96.0.1")]
#[case::last("10.111.255.254")]
fn static_request_anywhere(#[case] addr: &str) {
    let mut r = CidrAllocator::parse("10.96.0.0/12").unwrap();
    r.allocate(ip(addr)).unwrap();
    assert!(r.has(ip(addr)));
}

/// AL-2.5 allocator error strings.
#[rstest]
#[case::full(IpAllocError::Full, "range is full")]
#[case::allocated(IpAllocError::Allocated, "provided IP is already allocated")]
#[case::mismatched(
    IpAllocError::MismatchedNetwork,
    "the provided network does not match the current range"
)]
#[case::not_ready(IpAllocError::NotReady, "allocator not ready")]
#[case::not_in_range(
    IpAllocError::NotInRange { ip: "1.2.3.4".parse().unwrap(), valid_range: "10.0.0.0/24".into() },
    "the provided IP (1.2.3.4) is not in the valid range. The range of valid IPs is 10.0.0.0/24"
)]
fn ip_allocator_error_text(#[case] e: IpAllocError, #[case] text: &str) {
    assert_eq!(e.to_string(), text);
}

/// AL-2.5 a single range reports out-of-range, network and broadcast as `ErrNotInRange`.
#[rstest]
#[case::outside("10.0.1.1")]
#[case::network("10.0.0.0")]
#[case::broadcast("10.0.0.255")]
#[case::other_family("fd00::1")]
fn single_range_not_in_range(#[case] addr: &str) {
    let mut r = CidrAllocator::parse("10.0.0.0/24").unwrap();
    assert!(matches!(
        r.allocate(ip(addr)),
        Err(IpAllocError::NotInRange { .. })
    ));
}

/// AL-7.1 KEP-3668 NodePort band offset table.
#[rstest]
#[case::s10(10, 0)]
#[case::s16(16, 0)]
#[case::s128(128, 16)]
#[case::s129(129, 16)]
#[case::s2048(2048, 64)]
#[case::s2768_default(2768, 86)]
#[case::s4096(4096, 128)]
#[case::s8192(8192, 128)]
fn node_port_band_offset(#[case] size: u64, #[case] offset: u64) {
    assert_eq!(port_band_offset(size), offset);
}

/// AL-7.1 default range bands: static 30000-30085, dynamic 30086-32767, upper first.
#[test]
fn node_port_default_bands() {
    let mut a = PortAllocator::new(PortRange::parse("30000-32767").unwrap());
    assert_eq!(a.band_offset(), 86);
    assert!(!a.in_upper_band(30085));
    assert!(a.in_upper_band(30086));
    let mut rng = Rng::new(5);
    for _ in 0..(2768 - 86) {
        let p = a.allocate_next(&mut rng).unwrap();
        assert!((30086..=32767).contains(&p), "{p}");
    }
    for _ in 0..86 {
        let p = a.allocate_next(&mut rng).unwrap();
        assert!((30000..=30085).contains(&p), "{p}");
    }
    assert_eq!(a.allocate_next(&mut rng), Err(PortAllocError::Full));
}

/// AL-7.1 NodePort allocator error strings.
#[rstest]
#[case::allocated(PortAllocError::Allocated, "provided port is already allocated")]
#[case::not_in_range(
    PortAllocError::NotInRange { valid_ports: "30000-32767".into() },
    "provided port is not in the valid range. The range of valid ports is 30000-32767"
)]
#[case::full(PortAllocError::Full, "range is full")]
#[case::mismatched(
    PortAllocError::MismatchedRange,
    "the provided port range does not match the current port range"
)]
fn node_port_error_text(#[case] e: PortAllocError, #[case] text: &str) {
    assert_eq!(e.to_string(), text);
}

/// AL-2.2 large IPv6 ranges work without a whole-range bitmap.
#[test]
fn ipv6_64_allocates_lazily() {
    let mut r = CidrAllocator::parse("fd00::/64").unwrap();
    let mut rng = Rng::new(1);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..1000 {
        let a = r.allocate_next(&mut rng).unwrap();
        assert!(r.in_upper_band(a));
        assert!(seen.insert(a));
    }
    r.allocate(ip("fd00::ffff:ffff:ffff:ffff")).unwrap();
    assert_eq!(r.used(), 1001);
}
