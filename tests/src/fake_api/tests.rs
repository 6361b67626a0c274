//! Behaviour tests through a real `kube::Client` (and the raw service where headers matter).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use http::Request;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;

use super::*;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        },
        "data": {"k": "v"},
    }))
    .unwrap()
}

fn svc(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
    }))
    .unwrap()
}

fn api_err<T: std::fmt::Debug>(r: kube::Result<T>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn claims_resource() -> ApiResource {
    ApiResource {
        group: "svcplane.io".into(),
        version: "v1alpha1".into(),
        api_version: "svcplane.io/v1alpha1".into(),
        kind: "AllocationClaim".into(),
        plural: "allocationclaims".into(),
    }
}

fn with_claims() -> FakeApi {
    let fake = FakeApi::new();
    fake.register(
        "svcplane.io",
        "v1alpha1",
        "allocationclaims",
        "AllocationClaim",
        false,
        false,
    );
    fake
}

fn claim(name: &str) -> DynamicObject {
    let mut obj = DynamicObject::new(name, &claims_resource());
    obj.data = json!({"spec": {"owner": "default/web"}});
    obj
}

fn rv_of<K: kube::Resource>(k: &K) -> u64 {
    k.meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn create_get_and_already_exists() {
    let fake = with_claims();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let created = cms
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(meta.resource_version.as_deref(), Some("1"));
    assert_eq!(
        meta.uid.as_deref(),
        Some("00000000-0000-4000-8000-000000000001")
    );
    assert_eq!(meta.generation, Some(1));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(cms.get("a").await.unwrap().data, created.data);

    let e = api_err(cms.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, r#"configmaps "a" already exists"#);
    let details = e.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("a", "configmaps")
    );

    let claims: Api<DynamicObject> = Api::all_with(fake.client(), &claims_resource());
    claims
        .create(&PostParams::default(), &claim("x"))
        .await
        .unwrap();
    let e = api_err(claims.create(&PostParams::default(), &claim("x")).await);
    assert_eq!(
        e.message,
        r#"allocationclaims.svcplane.io "x" already exists"#
    );
    assert_eq!(e.details.unwrap().group, "svcplane.io");

    let e = api_err(cms.get("missing").await);
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, r#"configmaps "missing" not found"#);
    assert_eq!(fake.resource_version(), 2);
}

#[tokio::test]
async fn create_rejections_and_unknown_resources() {
    let fake = FakeApi::new();
    let client = fake.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "a");

    let mut nameless = cm("", &[]);
    nameless.metadata.name = None;
    let e = api_err(cms.create(&PostParams::default(), &nameless).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("name or generateName is required"),
        "{}",
        e.message
    );

    let mut elsewhere = cm("x", &[]);
    elsewhere.metadata.namespace = Some("b".into());
    let e = api_err(cms.create(&PostParams::default(), &elsewhere).await);
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));

    let mut with_rv = cm("x", &[]);
    with_rv.metadata.resource_version = Some("5".into());
    assert_eq!(
        api_err(cms.create(&PostParams::default(), &with_rv).await).code,
        400
    );

    let unknown = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &unknown);
    assert_eq!(
        api_err(widgets.list(&ListParams::default()).await).code,
        404
    );

    let ips = ApiResource {
        group: "networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "networking.k8s.io/v1".into(),
        kind: "IPAddress".into(),
        plural: "ipaddresses".into(),
    };
    let ip_api: Api<DynamicObject> = Api::all_with(client.clone(), &ips);
    assert!(ip_api.list(&ListParams::default()).await.is_ok());
    assert!(fake.disable("networking.k8s.io/v1/ipaddresses"));
    assert_eq!(api_err(ip_api.list(&ListParams::default()).await).code, 404);
    assert!(fake.enable("networking.k8s.io/v1/ipaddresses"));
    assert!(ip_api.list(&ListParams::default()).await.is_ok());
    assert_eq!(fake.resource_version(), 0, "nothing was written");
}

#[tokio::test]
async fn list_with_selectors_is_sorted() {
    let fake = FakeApi::new();
    for (ns, name, app) in [
        ("b", "z", "web"),
        ("a", "y", "db"),
        ("a", "x", "web"),
        ("b", "w", ""),
    ] {
        let mut c = cm(name, &[("app", app), ("tier", "t")]);
        c.metadata.namespace = Some(ns.into());
        fake.insert(&c).unwrap();
    }
    let all: Api<ConfigMap> = Api::all(fake.client());
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.as_deref().unwrap(),
                    c.metadata.name.as_deref().unwrap()
                )
            })
            .collect()
    };
    let list = all.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.metadata.resource_version.as_deref(), Some("4"));
    assert_eq!(names(list), ["a/x", "a/y", "b/w", "b/z"]);
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(all.list(&q("app=web")).await.unwrap()),
        ["a/x", "b/z"]
    );
    assert_eq!(
        names(all.list(&q("app!=web")).await.unwrap()),
        ["a/y", "b/w"]
    );
    assert_eq!(
        names(all.list(&q("app in (db, )")).await.unwrap()),
        ["a/y", "b/w"]
    );
    assert_eq!(
        names(all.list(&q("app notin (web),tier")).await.unwrap()),
        ["a/y", "b/w"]
    );
    assert!(names(all.list(&q("!tier")).await.unwrap()).is_empty());
    let f = |s: &str| ListParams::default().fields(s);
    assert_eq!(
        names(all.list(&f("metadata.namespace=b")).await.unwrap()),
        ["b/w", "b/z"]
    );
    assert_eq!(
        names(
            all.list(&f("metadata.name!=x,metadata.namespace==a"))
                .await
                .unwrap()
        ),
        ["a/y"]
    );
    let in_a: Api<ConfigMap> = Api::namespaced(fake.client(), "a");
    assert_eq!(names(in_a.list(&q("app=web")).await.unwrap()), ["a/x"]);
    assert_eq!(api_err(all.list(&q("app in (web")).await).code, 400);

    // The raw list carries the list kind.
    let req = Request::get("/api/v1/configmaps").body(Vec::new()).unwrap();
    let raw: Value = fake.client().request(req).await.unwrap();
    assert_eq!(raw["kind"], "ConfigMapList");
    assert_eq!(raw["apiVersion"], "v1");
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let fake = FakeApi::new();
    for i in 0..25 {
        fake.insert(cm(
            &format!("c{i:02}"),
            &[("even", if i % 2 == 0 { "y" } else { "n" })],
        ))
        .unwrap();
    }
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(10);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = cms.list(&lp).await.unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some("25"));
        pages += 1;
        seen.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        // Changes while paging do not move the reported resourceVersion.
        fake.insert(cm("zz-late", &[])).unwrap();
        token = page.metadata.continue_;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    let mut want: Vec<String> = (0..25).map(|i| format!("c{i:02}")).collect();
    want.push("zz-late".into());
    assert_eq!(seen, want);

    let lp = ListParams::default().labels("even=y").limit(13);
    let page = cms.list(&lp).await.unwrap();
    assert_eq!(page.items.len(), 13);
    assert_eq!(
        page.metadata.continue_, None,
        "exactly 13 matches: no further page"
    );
    let bad = ListParams::default().limit(1).continue_token("garbage");
    assert_eq!(api_err(cms.list(&bad).await).code, 400);
}

#[tokio::test]
async fn large_list_pages_stay_linear() {
    let fake = FakeApi::builder().record_writes(false).build();
    for i in 0..100_000 {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i:06}"), "namespace": format!("ns{}", i % 10)},
        });
        fake.insert(pod).unwrap();
    }
    let pods: Api<Pod> = Api::all(fake.client());
    let started = std::time::Instant::now();
    let mut token: Option<String> = None;
    let mut total = 0;
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = pods.list(&lp).await.unwrap();
        total += page.items.len();
        token = page.metadata.continue_;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(total, 100_000);
    // 200 pages; a rescan from the start per page would be 20M object visits.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let ns3: Api<Pod> = Api::namespaced(fake.client(), "ns3");
    assert_eq!(
        ns3.list(&ListParams::default()).await.unwrap().items.len(),
        10_000
    );
}

#[tokio::test]
async fn update_conflicts_generation_and_noops() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let v1 = cms
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();

    let mut v2 = v1.clone();
    v2.data = Some([("k".to_string(), "changed".to_string())].into());
    let v2 = cms.replace("a", &PostParams::default(), &v2).await.unwrap();
    assert_eq!(rv_of(&v2), rv_of(&v1) + 1);
    assert_eq!(v2.metadata.generation, Some(2));
    assert_eq!(v2.metadata.uid, v1.metadata.uid);

    let e = api_err(cms.replace("a", &PostParams::default(), &v1).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        r#"Operation cannot be fulfilled on configmaps "a": the object has been modified; please apply your changes to the latest version and try again"#
    );

    // Metadata-only changes keep the generation; an identical PUT is not a write.
    let mut v3 = v2.clone();
    v3.metadata.labels = Some([("l".to_string(), "1".to_string())].into());
    let v3 = cms.replace("a", &PostParams::default(), &v3).await.unwrap();
    assert_eq!(v3.metadata.generation, Some(2));
    let again = cms.replace("a", &PostParams::default(), &v3).await.unwrap();
    assert_eq!(rv_of(&again), rv_of(&v3));

    // No resourceVersion: unconditional.
    let mut blind = v1.clone();
    blind.metadata.resource_version = None;
    let v4 = cms
        .replace("a", &PostParams::default(), &blind)
        .await
        .unwrap();
    assert_eq!(v4.data, v1.data);
    assert_eq!(v4.metadata.generation, Some(3));

    let mut other = cm("b", &[]);
    assert_eq!(
        api_err(cms.replace("a", &PostParams::default(), &other).await).code,
        400
    );
    other.metadata.name = Some("missing".into());
    assert_eq!(
        api_err(cms.replace("missing", &PostParams::default(), &other).await).code,
        404
    );
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let v1 = cms
        .create(&PostParams::default(), &cm("a", &[("x", "1")]))
        .await
        .unwrap();
    let pp = PatchParams::default();

    let merged = cms
        .patch(
            "a",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"labels": {"x": null, "y": "2"}}, "data": {"n": "m"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.metadata.labels,
        Some([("y".to_string(), "2".to_string())].into())
    );
    assert_eq!(merged.data.as_ref().unwrap().len(), 2);
    assert_eq!(merged.metadata.generation, Some(2));

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/n", "value": "m"},
        {"op": "remove", "path": "/data/k"},
    ]))
    .unwrap();
    let patched = cms.patch("a", &pp, &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(
        patched.data,
        Some([("n".to_string(), "m".to_string())].into())
    );

    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/n", "value": "other"}]))
            .unwrap();
    assert_eq!(
        api_err(cms.patch("a", &pp, &Patch::Json::<()>(failing)).await).code,
        422
    );

    let strategic = cms
        .patch("a", &pp, &Patch::Strategic(json!({"data": {"s": "1"}})))
        .await
        .unwrap();
    assert_eq!(strategic.data.unwrap().len(), 2);

    let stale =
        json!({"metadata": {"resourceVersion": v1.metadata.resource_version}, "data": {"z": "1"}});
    let e = api_err(cms.patch("a", &pp, &Patch::Merge(stale)).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));

    let apply = PatchParams::apply("test");
    let e = api_err(cms.patch("a", &apply, &Patch::Apply(cm("a", &[]))).await);
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    assert_eq!(
        api_err(cms.patch("nope", &pp, &Patch::Merge(json!({}))).await).code,
        404
    );
}

#[tokio::test]
async fn status_subresource_is_separate() {
    let fake = FakeApi::new();
    let services: Api<Service> = Api::default_namespaced(fake.client());
    let created = services
        .create(&PostParams::default(), &svc("web"))
        .await
        .unwrap();
    assert_eq!(
        created.status, None,
        "create drops status of a resource with /status"
    );

    let mut with_status = created.clone();
    with_status.status = svc("web").status;
    with_status.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.1".into());
    let after = services
        .replace_status("web", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(after.status.is_some());
    assert_eq!(
        after.spec.as_ref().unwrap().cluster_ip,
        None,
        "/status ignores spec"
    );
    assert_eq!(after.metadata.generation, Some(1));

    let mut main = after.clone();
    main.status = None;
    main.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.2".into());
    let main = services
        .replace("web", &PostParams::default(), &main)
        .await
        .unwrap();
    assert!(main.status.is_some(), "main resource keeps stored status");
    assert_eq!(main.metadata.generation, Some(2));

    let patched = services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null, "spec": {"clusterIP": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status, None);
    assert_eq!(
        patched.spec.unwrap().cluster_ip.as_deref(),
        Some("10.0.0.2")
    );
    assert_eq!(services.get_status("web").await.unwrap().status, None);

    // Direct inserts keep status.
    fake.insert(svc("direct")).unwrap();
    assert!(services.get("direct").await.unwrap().status.is_some());
}

#[tokio::test]
async fn delete_preconditions_and_finalizers() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let plain = cms
        .create(&PostParams::default(), &cm("plain", &[]))
        .await
        .unwrap();

    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some("999".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let e = api_err(cms.delete("plain", &wrong).await);
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("Precondition failed: ResourceVersion"),
        "{}",
        e.message
    );
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: None,
            uid: Some("other".into()),
        }),
        ..DeleteParams::default()
    };
    assert_eq!(api_err(cms.delete("plain", &wrong_uid).await).code, 409);

    let right = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: plain.metadata.resource_version.clone(),
            uid: plain.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    let gone = cms.delete("plain", &right).await.unwrap().left().unwrap();
    assert_eq!(gone.metadata.name.as_deref(), Some("plain"));
    assert_eq!(api_err(cms.get("plain").await).code, 404);
    assert_eq!(
        api_err(cms.delete("plain", &DeleteParams::default()).await).code,
        404
    );

    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    let start_rv = fake.resource_version();
    let marked = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    let still = cms.get("held").await.unwrap();
    assert_eq!(
        still.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );
    // A second delete changes nothing.
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    assert_eq!(fake.resource_version(), start_rv + 1);

    let removed = cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(removed.metadata.name.as_deref(), Some("held"));
    assert_eq!(api_err(cms.get("held").await).code, 404);
    assert_eq!(fake.resource_version(), start_rv + 2);
}

#[tokio::test]
async fn generate_name_is_deterministic() {
    async fn names(seed: u64) -> Vec<String> {
        let fake = FakeApi::builder().seed(seed).build();
        let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
        let mut out = Vec::new();
        for _ in 0..3 {
            let mut c = cm("", &[]);
            c.metadata.name = None;
            c.metadata.generate_name = Some("web-".into());
            out.push(
                cms.create(&PostParams::default(), &c)
                    .await
                    .unwrap()
                    .metadata
                    .name
                    .unwrap(),
            );
        }
        out
    }
    let a = names(1).await;
    assert_eq!(a, names(1).await);
    assert_ne!(a, names(2).await);
    for n in &a {
        let suffix = n.strip_prefix("web-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{n}"
        );
    }
    assert_eq!(a.iter().collect::<std::collections::HashSet<_>>().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_have_one_winner() {
    let fake = with_claims();
    let clients = [fake.client(), fake.client()];
    let mut tasks = Vec::new();
    for i in 0..200 {
        let api: Api<DynamicObject> = Api::all_with(clients[i % 2].clone(), &claims_resource());
        tasks.push(tokio::spawn(async move {
            api.create(&PostParams::default(), &claim("10.0.0.7")).await
        }));
    }
    let mut won = 0;
    let mut lost = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" && s.code == 409 => lost += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!((won, lost), (1, 199));
    assert_eq!(fake.resource_version(), 1);
    let creates = fake.stats().get(Verb::Create, "allocationclaims");
    assert_eq!((creates.requests, creates.errors), (200, 199));
    let log = fake.writes();
    assert_eq!(log.len(), 200);
    assert_eq!(log.iter().filter(|w| w.code == 201).count(), 1);
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let preview = cms.create(&dry, &cm("a", &[])).await.unwrap();
    assert_eq!(preview.metadata.name.as_deref(), Some("a"));
    assert_eq!(fake.resource_version(), 0);
    assert_eq!(api_err(cms.get("a").await).code, 404);

    let real = cms
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert_eq!(
        real.metadata.uid, preview.metadata.uid,
        "dry run does not use up uids"
    );
    let mut changed = real.clone();
    changed.data = None;
    let answered = cms.replace("a", &dry, &changed).await.unwrap();
    assert_eq!(answered.data, None);
    let pp = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    cms.patch("a", &pp, &Patch::Merge(json!({"data": null})))
        .await
        .unwrap();
    let dp = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    cms.delete("a", &dp).await.unwrap();
    assert_eq!(fake.resource_version(), 1);
    assert_eq!(cms.get("a").await.unwrap().data, real.data);
    let stats = fake.stats();
    assert_eq!(stats.get(Verb::Create, "configmaps").dry_run, 1);
    assert_eq!(stats.get(Verb::Delete, "configmaps").dry_run, 1);
    assert!(fake.writes().iter().filter(|w| w.dry_run).count() == 4);
}

async fn events<K>(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<K>>>,
    n: usize,
) -> Vec<(String, String, String)>
where
    K: kube::Resource,
{
    let evs: Vec<WatchEvent<K>> =
        tokio::time::timeout(Duration::from_secs(60), stream.take(n).try_collect())
            .await
            .expect("events in time")
            .unwrap();
    evs.into_iter()
        .map(|e| match e {
            WatchEvent::Added(o) => (
                "ADDED".into(),
                o.meta().name.clone().unwrap(),
                o.meta().resource_version.clone().unwrap(),
            ),
            WatchEvent::Modified(o) => (
                "MODIFIED".into(),
                o.meta().name.clone().unwrap(),
                o.meta().resource_version.clone().unwrap(),
            ),
            WatchEvent::Deleted(o) => (
                "DELETED".into(),
                o.meta().name.clone().unwrap(),
                o.meta().resource_version.clone().unwrap(),
            ),
            WatchEvent::Bookmark(b) => (
                "BOOKMARK".into(),
                String::new(),
                b.metadata.resource_version,
            ),
            WatchEvent::Error(s) => ("ERROR".into(), s.reason.clone(), s.message.clone()),
        })
        .collect()
}

fn ev(t: &str, name: &str, rv: u64) -> (String, String, String) {
    (t.into(), name.into(), rv.to_string())
}

#[tokio::test]
async fn watch_from_resource_version_and_selector_transitions() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    cms.create(&PostParams::default(), &cm("old", &[("app", "web")]))
        .await
        .unwrap(); // rv 1
    let from = fake.resource_version();
    let watch = cms
        .watch(&WatchParams::default(), &from.to_string())
        .await
        .unwrap();
    let selected = cms
        .watch(&WatchParams::default().labels("app=web"), &from.to_string())
        .await
        .unwrap();
    let pp = PatchParams::default();
    cms.create(&PostParams::default(), &cm("a", &[("app", "web")]))
        .await
        .unwrap(); // 2
    cms.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap(); // 3
    cms.patch("a", &pp, &Patch::Merge(json!({"data": {"x": "y"}})))
        .await
        .unwrap(); // 4
    cms.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap(); // 5
    cms.delete("a", &DeleteParams::default()).await.unwrap(); // 6
    fake.insert(cm("direct", &[])).unwrap(); // 7

    assert_eq!(
        events(watch, 6).await,
        [
            ev("ADDED", "a", 2),
            ev("MODIFIED", "a", 3),
            ev("MODIFIED", "a", 4),
            ev("MODIFIED", "a", 5),
            ev("DELETED", "a", 6),
            ev("ADDED", "direct", 7)
        ]
    );
    assert_eq!(
        events(selected, 4).await,
        [
            ev("ADDED", "a", 2),
            ev("DELETED", "a", 3),
            ev("ADDED", "a", 5),
            ev("DELETED", "a", 6)
        ]
    );

    // Without a resourceVersion: the current objects first.
    let fresh = cms.watch(&WatchParams::default(), "0").await.unwrap();
    assert_eq!(
        events(fresh, 2).await,
        [ev("ADDED", "direct", 7), ev("ADDED", "old", 1)]
    );
}

#[tokio::test]
async fn watch_from_expired_version_gets_410() {
    let fake = FakeApi::builder().history_limit(3).build();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    for i in 0..6 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    // Kept: rv 4, 5, 6; resuming from 3 is still complete, from 2 it is not.
    let ok = cms.watch(&WatchParams::default(), "3").await.unwrap();
    assert_eq!(
        events(ok, 3).await,
        [
            ev("ADDED", "c3", 4),
            ev("ADDED", "c4", 5),
            ev("ADDED", "c5", 6)
        ]
    );
    let gone = cms.watch(&WatchParams::default(), "2").await.unwrap();
    let all: Vec<_> = gone.collect().await;
    assert_eq!(all.len(), 1, "the stream ends after the error");
    match all.into_iter().next().unwrap().unwrap() {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert_eq!(s.message, "too old resource version: 2 (3)");
        }
        other => panic!("{other:?}"),
    }
    fake.compact();
    let after_compact = cms.watch(&WatchParams::default(), "5").await.unwrap();
    assert_eq!(events(after_compact, 1).await[0].0, "ERROR");
}

async fn next_event<K: std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin),
) -> Result<Event<K>, watcher::Error> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("watcher event in time")
        .expect("stream open")
}

fn applied_name(e: &Event<ConfigMap>) -> Option<(&'static str, String)> {
    match e {
        Event::Apply(o) => Some(("apply", o.metadata.name.clone()?)),
        Event::InitApply(o) => Some(("init-apply", o.metadata.name.clone()?)),
        Event::Delete(o) => Some(("delete", o.metadata.name.clone()?)),
        Event::Init => Some(("init", String::new())),
        Event::InitDone => Some(("init-done", String::new())),
    }
}

async fn watcher_syncs(config: watcher::Config) {
    let fake = FakeApi::new();
    fake.insert(cm("a", &[])).unwrap();
    fake.insert(cm("b", &[])).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    let mut stream = watcher::watcher(cms.clone(), config).boxed();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(applied_name(&next_event(&mut stream).await.unwrap()).unwrap());
    }
    let s = |a: &'static str, b: &str| (a, b.to_string());
    assert_eq!(
        got,
        [
            s("init", ""),
            s("init-apply", "a"),
            s("init-apply", "b"),
            s("init-done", "")
        ]
    );

    cms.create(&PostParams::default(), &cm("c", &[]))
        .await
        .unwrap();
    fake.delete("v1/configmaps", Some("default"), "a").unwrap();
    assert_eq!(
        applied_name(&next_event(&mut stream).await.unwrap()),
        Some(s("apply", "c"))
    );
    assert_eq!(
        applied_name(&next_event(&mut stream).await.unwrap()),
        Some(s("delete", "a"))
    );

    // Other resources move the global resourceVersion past the watcher's; then the history
    // is lost and streams are cut: the watcher resumes, gets 410 and relists.
    fake.insert(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))
        .unwrap();
    fake.compact();
    fake.close_watches();
    let err = next_event(&mut stream).await.unwrap_err();
    assert!(
        err.to_string().contains("Expired") || err.to_string().contains("410"),
        "{err}"
    );
    let mut relist = Vec::new();
    loop {
        let e = applied_name(&next_event(&mut stream).await.unwrap()).unwrap();

        let done = e.0 == "init-done";
        relist.push(e);
        if done {
            break;
        }
    }
    assert_eq!(
        relist,
        [
            s("init", ""),
            s("init-apply", "b"),
            s("init-apply", "c"),
            s("init-done", "")
        ]
    );
    assert!(fake.stats().requests(Verb::Watch, "configmaps") >= 2);
}

#[tokio::test]
async fn kube_watcher_default_config_syncs() {
    watcher_syncs(watcher::Config::default()).await;
}

#[tokio::test]
async fn kube_watcher_streaming_lists_syncs() {
    watcher_syncs(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test(start_paused = true)]
async fn reflector_store_follows_writes() {
    let fake = FakeApi::new();
    for i in 0..3 {
        fake.insert(cm(&format!("c{i}"), &[])).unwrap();
    }
    let cms: Api<ConfigMap> = Api::all(fake.client());
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher::watcher(cms.clone(), watcher::Config::default().page_size(2)),
    )
    .applied_objects();
    tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    reader.wait_until_ready().await.unwrap();
    let names = || {
        let mut v: Vec<String> = reader
            .state()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(), ["c0", "c1", "c2"]);

    let ns: Api<ConfigMap> = Api::default_namespaced(fake.client());
    ns.create(&PostParams::default(), &cm("c3", &[]))
        .await
        .unwrap();
    ns.delete("c0", &DeleteParams::default()).await.unwrap();
    ns.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "new"}})),
    )
    .await
    .unwrap();
    let want = vec!["c1".to_string(), "c2".into(), "c3".into()];
    let c1_data = || {
        let c1 = reader
            .state()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some("c1"));
        c1.and_then(|c| c.data.clone())
            .and_then(|d| d.get("k").cloned())
    };
    for _ in 0..100 {
        if names() == want && c1_data().as_deref() == Some("new") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(names(), want);
    assert_eq!(c1_data().as_deref(), Some("new"));

    // Ten idle minutes on the paused clock: watches time out (290 s) and resume without relisting.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(names(), want);
    let stats = fake.stats();
    assert_eq!(
        stats.requests(Verb::List, "configmaps"),
        2,
        "two pages, no relist"
    );
    assert!(stats.requests(Verb::Watch, "configmaps") >= 3);
}

#[tokio::test(start_paused = true)]
async fn faults_fail_then_succeed() {
    let fake = FakeApi::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    fake.inject(
        Fault::status(500)
            .verb(Verb::Create)
            .resource("configmaps")
            .times(1),
    );
    let e = api_err(cms.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    assert_eq!(fake.resource_version(), 0, "a faulted write does nothing");
    cms.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();

    let id = fake.inject(Fault::latency(Duration::from_secs(3)).verb(Verb::Get));
    let t = Instant::now();
    cms.get("a").await.unwrap();
    assert!(t.elapsed() >= Duration::from_secs(3));
    fake.remove_fault(id);
    let t = Instant::now();
    cms.get("a").await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(1));

    fake.inject(Fault::status(409).verb(Verb::Update).times(1));
    let current = cms.get("a").await.unwrap();
    assert_eq!(
        api_err(cms.replace("a", &PostParams::default(), &current).await).code,
        409
    );

    // A watch faulted with 410 is an ERROR event, not an HTTP error.
    fake.inject(Fault::status(410).verb(Verb::Watch).times(1));
    let s = cms.watch(&WatchParams::default(), "1").await.unwrap();
    assert_eq!(
        events(s, 1).await[0],
        (
            "ERROR".into(),
            "Expired".into(),
            "injected fault: resource version expired".into()
        )
    );
    let writes = fake.writes();
    assert_eq!(
        writes.iter().map(|w| w.code).collect::<Vec<_>>(),
        [500, 201, 409]
    );
    assert_eq!(writes[0].name, "a");
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_carries_retry_after() {
    let fake = FakeApi::new();
    fake.inject(Fault::status(429).resource("configmaps").times(3));
    let req = Request::get("/api/v1/namespaces/default/configmaps")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = fake.service().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);

    // kube's server-aware retry policy honours it: two more 429s, then success.
    let svc = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .map_err(tower::BoxError::from)
        .service(fake.service());
    let client = kube::Client::new(svc, "default");
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let t = Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(fake.stats().get(Verb::List, "configmaps").errors, 3);
}

#[tokio::test]
async fn stats_count_requests_and_bytes() {
    let fake = FakeApi::new();
    let services: Api<Service> = Api::default_namespaced(fake.client());
    services
        .create(&PostParams::default(), &svc("web"))
        .await
        .unwrap();
    services.get("web").await.unwrap();
    services.get("web").await.unwrap();
    services.list(&ListParams::default()).await.unwrap();
    services.get_status("web").await.unwrap();
    let _ = services.get("missing").await;
    let stats = fake.stats();
    assert_eq!(stats.requests(Verb::Create, "services"), 1);
    let gets = stats.get(Verb::Get, "services");
    assert_eq!((gets.requests, gets.errors), (3, 1));
    assert!(gets.response_bytes > 100);
    assert!(stats.get(Verb::Create, "services").request_bytes > 20);
    assert_eq!(stats.requests(Verb::List, "services"), 1);
    assert_eq!(stats.requests(Verb::Get, "services/status"), 1);
    assert_eq!(stats.writes(), 1);
    assert_eq!(stats.total().requests, 6);
    assert_eq!(
        fake.writes(),
        [WriteRecord {
            verb: Verb::Create,
            group: String::new(),
            resource: "services".into(),
            subresource: None,
            namespace: Some("default".into()),
            name: "web".into(),
            code: 201,
            dry_run: false,
        }]
    );
    fake.reset_stats();
    fake.clear_writes();
    assert_eq!(fake.stats().total(), Counter::default());
    assert!(fake.writes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn paused_clock_drives_timestamps_timeouts_and_bookmarks() {
    let fake = FakeApi::builder()
        .bookmark_interval(Duration::from_secs(10))
        .build();
    let cms: Api<ConfigMap> = Api::default_namespaced(fake.client());
    tokio::time::advance(Duration::from_secs(90)).await;
    let c = cms
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(c.metadata.creation_timestamp).unwrap(),
        "2026-01-01T00:01:30Z"
    );

    let t = Instant::now();
    let s = cms
        .watch(&WatchParams::default().timeout(35), "1")
        .await
        .unwrap();
    let writer = {
        let cms = cms.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(15)).await;
            cms.create(&PostParams::default(), &cm("b", &[]))
                .await
                .unwrap();
        })
    };
    let all = events(s, usize::MAX).await;
    writer.await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_secs(35));
    let kinds: Vec<&str> = all.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        kinds,
        ["BOOKMARK", "ADDED", "BOOKMARK", "BOOKMARK", "BOOKMARK"]
    );
    assert_eq!(all[0].2, "1");
    assert_eq!(
        all[4].2, "2",
        "the closing bookmark carries the latest version"
    );

    let quiet = cms
        .watch(&WatchParams::default().disable_bookmarks().timeout(5), "2")
        .await
        .unwrap();
    assert!(events(quiet, usize::MAX).await.is_empty());
}

#[tokio::test]
async fn metadata_only_and_namespaces() {
    let fake = FakeApi::new();
    let namespaces: Api<Namespace> = Api::all(fake.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(
        namespaces
            .get("apps")
            .await
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("apps")
    );
    assert_eq!(
        namespaces
            .get_status("apps")
            .await
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("apps")
    );

    let pods: Api<Pod> = Api::namespaced(fake.client(), "apps");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"containers": []}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let metas = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items.len(), 1);
    assert_eq!(metas.items[0].metadata.labels.as_ref().unwrap()["a"], "b");
    let one = pods.get_metadata("p").await.unwrap();
    assert_eq!(one.metadata.uid, metas.items[0].metadata.uid);
    let typed: Vec<Pod> = fake.objects_of::<Pod>().unwrap();
    assert_eq!(typed.len(), 1);
    assert!(fake.get_of::<Pod>(Some("apps"), "p").unwrap().is_some());
    assert!(fake.get_of::<Pod>(Some("default"), "p").unwrap().is_none());
    assert_eq!(fake.list_json("v1/pods", Some("apps")).len(), 1);
    assert!(fake.list_json("v1/pods", Some("other")).is_empty());
    assert!(matches!(
        fake.insert(json!({"apiVersion": "v9", "kind": "Nope", "metadata": {"name": "x"}})),
        Err(FakeApiError::UnknownKind { .. })
    ));
}
