//! What an API-server restart costs svcplane to recover, at 30 000 Pods (ES-1.8):
//! bytes and objects fetched, requests, and CPU, for the two ways a watch can
//! recover — resuming from its last resourceVersion (what a restart costs now, while
//! the server still has the history) and re-listing (what *every* failure cost
//! before, and what a 410 still costs).
//!
//! ```text
//! cargo bench -p svcplane-tests --bench watch_recovery            # 30 000 Pods
//! cargo bench -p svcplane-tests --bench watch_recovery -- 5000    # another count
//! ```
//!
//! Runs `svcplane run` in-process against the fake API server on a paused clock. The
//! restart: every list and watch answers 503 for 5 s and every open watch is closed;
//! meanwhile 100 Pods are deleted. "re-list" additionally compacts the fake's history
//! during the outage, so the resume is answered 410 Gone — the path the old code took
//! on every failure (then a paginated list; now a streaming list, the same objects).
//! Bytes are the fake's response bodies; objects are Pod bytes ÷ the bytes one Pod
//! cost in the first sync; CPU is this process' (svcplane *and* the fake server).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use svcplane_controller::core::fixtures::{node, pod};
use svcplane_tests::fake_api::{Counter, FakeApi, Fault, Stats, Verb};
use svcplane_tests::run_env::{Instance, options, settle};

const LIMIT: Duration = Duration::from_secs(3600);
const OUTAGE: Duration = Duration::from_secs(5);
const CHANGED_DURING_OUTAGE: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    Resume,
    Relist,
}

#[derive(Debug, Default)]
struct Figures {
    pod_bytes: u64,
    all_bytes: u64,
    pod_objects: u64,
    lists: u64,
    watches: u64,
    cpu: Duration,
    first_sync_pod_bytes: u64,
}

/// This process' user + system CPU time (Linux; zero elsewhere).
fn cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may contain spaces) end with ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'; in
    // clock ticks (100 per second on Linux).
    let ticks = fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0);
    Duration::from_millis(ticks * 10)
}

fn pods_counter(s: &Stats) -> Counter {
    let (l, w) = (s.get(Verb::List, "pods"), s.get(Verb::Watch, "pods"));
    Counter {
        requests: l.requests + w.requests,
        response_bytes: l.response_bytes + w.response_bytes,
        ..Counter::default()
    }
}

fn reads(s: &Stats, verb: Verb) -> (u64, u64) {
    s.by_call
        .iter()
        .filter(|((v, _), _)| *v == verb)
        .fold((0, 0), |(r, b), (_, c)| {
            (r + c.requests, b + c.response_bytes)
        })
}

async fn scenario(pods: usize, recovery: Recovery) -> Figures {
    let fake = FakeApi::builder().history_limit(pods + 1000).build();
    fake.insert(node("node-a", Some("zone-a"))).unwrap();
    for i in 0..pods {
        fake.insert(
            pod(&format!("p-{i}"), "app")
                .ip(&format!(
                    "10.{}.{}.{}",
                    i / 62500,
                    (i / 250) % 250,
                    i % 250 + 1
                ))
                .node("node-a")
                .ready()
                .build(),
        )
        .unwrap();
    }
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let synced = fake.stats();
    let first_sync_pod_bytes = pods_counter(&synced).response_bytes;

    let cpu_before = cpu();
    let down = [
        fake.inject(Fault::status(503).verb(Verb::Watch)),
        fake.inject(Fault::status(503).verb(Verb::List)),
    ];
    fake.close_watches();
    for i in 0..CHANGED_DURING_OUTAGE {
        fake.delete("v1/pods", Some("default"), &format!("p-{i}"))
            .unwrap();
    }
    tokio::time::sleep(OUTAGE).await;
    if recovery == Recovery::Relist {
        fake.compact();
    }
    for id in down {
        fake.remove_fault(id);
    }
    // Past the longest backoff, then until nothing is left to do.
    tokio::time::sleep(Duration::from_secs(35)).await;
    settle(&fake, &[&run], LIMIT).await;
    let cpu = cpu().saturating_sub(cpu_before);
    let after = fake.stats();
    run.stop().await.unwrap();

    let pod_bytes = pods_counter(&after).response_bytes - first_sync_pod_bytes;
    let (lists_after, list_bytes_after) = reads(&after, Verb::List);
    let (watches_after, watch_bytes_after) = reads(&after, Verb::Watch);
    let (lists_before, list_bytes_before) = reads(&synced, Verb::List);
    let (watches_before, watch_bytes_before) = reads(&synced, Verb::Watch);
    let per_pod = first_sync_pod_bytes / pods.max(1) as u64;
    Figures {
        pod_bytes,
        all_bytes: (list_bytes_after + watch_bytes_after)
            - (list_bytes_before + watch_bytes_before),
        pod_objects: pod_bytes / per_pod.max(1),
        lists: lists_after - lists_before,
        watches: watches_after - watches_before,
        cpu,
        first_sync_pod_bytes,
    }
}

fn main() {
    let pods: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(30_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let relist = scenario(pods, Recovery::Relist).await;
        let resume = scenario(pods, Recovery::Resume).await;
        println!(
            "\nRecovering from an API-server restart ({OUTAGE:?} down, {CHANGED_DURING_OUTAGE} Pods deleted meanwhile), {pods} Pods"
        );
        println!(
            "first sync: {:.1} MB of Pods\n",
            relist.first_sync_pod_bytes as f64 / 1e6
        );
        println!(
            "| recovery | Pod bytes | Pod objects (≈) | all bytes | list requests | watch requests | CPU (svcplane + fake) |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
        for (name, f) in [
            ("re-list (before: every failure; now: 410 only)", &relist),
            ("resume (after)", &resume),
        ] {
            println!(
                "| {name} | {:.2} MB | {} | {:.2} MB | {} | {} | {} ms |",
                f.pod_bytes as f64 / 1e6,
                f.pod_objects,
                f.all_bytes as f64 / 1e6,
                f.lists,
                f.watches,
                f.cpu.as_millis()
            );
        }
    });
}
