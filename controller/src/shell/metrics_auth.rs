//! Who may read `/metrics` on the secure port: delegated to the API server, as
//! kube-controller-manager's secure port does it.
//!
//! A bearer token is checked with a TokenReview; the user it names (or
//! `system:anonymous` when no token came) is checked with a SubjectAccessReview for
//! `get` on the non-resource path. So the cluster's RBAC decides, with the rule
//! Prometheus setups already grant (`nonResourceURLs: ["/metrics"], verbs: ["get"]`).
//! Answers are cached briefly (10 s, upstream's default for both reviews) so a scrape
//! every few seconds costs the API server nothing after the first one.
//!
//! The decision logic ([`Credentials`], [`TtlCache`], [`Verdict`]) is pure; [`Delegated`]
//! does the two API calls.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long a review's answer is reused (kube-controller-manager's defaults).
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(10);

/// Entries a cache holds before it drops what has expired (and, if that is not enough,
/// everything): a bound against a flood of made-up tokens.
const CACHE_LIMIT: usize = 4096;

/// What a request presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// No `Authorization` header: the request is `system:anonymous`.
    Anonymous,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// An `Authorization` header that is not a usable bearer token.
    Unusable(&'static str),
}

impl Credentials {
    /// Reads the `Authorization` header value, if any.
    pub(crate) fn from_header(value: Option<&[u8]>) -> Self {
        let Some(raw) = value else {
            return Self::Anonymous;
        };
        let Ok(text) = std::str::from_utf8(raw) else {
            return Self::Unusable("the Authorization header is not UTF-8");
        };
        let mut parts = text.trim().splitn(2, ' ');
        let scheme = parts.next().unwrap_or_default();
        let token = parts.next().map(str::trim).unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Self::Unusable("only bearer tokens are accepted");
        }
        if token.is_empty() {
            return Self::Unusable("the bearer token is empty");
        }
        Self::Bearer(token.to_owned())
    }
}

/// The user a request acts as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: Vec<(String, Vec<String>)>,
}

impl User {
    /// The user of requests without credentials.
    pub(crate) fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: Vec::new(),
        }
    }

    fn from_info(info: UserInfo) -> Self {
        let mut extra: Vec<(String, Vec<String>)> =
            info.extra.unwrap_or_default().into_iter().collect();
        extra.sort();
        Self {
            name: info.username.unwrap_or_default(),
            uid: info.uid.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
            extra,
        }
    }
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// 401: the credentials do not name a user.
    Unauthorized(String),
    /// 403: the user may not read the path.
    Forbidden(String),
    /// 500: the API server could not be asked.
    Unavailable(String),
}

impl Verdict {
    /// The HTTP status code of this verdict.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::Allowed => 200,
            Self::Unauthorized(_) => 401,
            Self::Forbidden(_) => 403,
            Self::Unavailable(_) => 500,
        }
    }
}

/// The message of a denied SubjectAccessReview, in the API server's words.
pub(crate) fn forbidden_message(user: &str, verb: &str, path: &str, reason: &str) -> String {
    let mut m = format!("forbidden: User {user:?} cannot {verb} path {path:?}");
    if !reason.is_empty() {
        m.push_str(": ");
        m.push_str(reason);
    }
    m
}

/// The API server's own message for an API error, else the error's text.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// A small map whose entries expire; time is passed in.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    ttl: Duration,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: HashMap::new(),
        }
    }

    /// The value stored for `key` if it has not expired at `now`.
    pub(crate) fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(expires, _)| now < *expires)
            .map(|(_, v)| v.clone())
    }

    /// Stores `value`, valid until `now + ttl`.
    pub(crate) fn put(&mut self, key: K, value: V, now: Instant) {
        if self.entries.len() >= CACHE_LIMIT {
            self.entries.retain(|_, (expires, _)| now < *expires);
            if self.entries.len() >= CACHE_LIMIT {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (now + self.ttl, value));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The outcome of a TokenReview: the user, or why the token names none.
type Authenticated = Result<User, String>;
/// The outcome of a SubjectAccessReview: allowed, or the reason given.
type Authorized = Result<(), String>;

/// Delegated authentication and authorization against the API server.
pub(crate) struct Delegated {
    client: Client,
    tokens: Mutex<TtlCache<String, Authenticated>>,
    decisions: Mutex<TtlCache<(User, String), Authorized>>,
}

impl std::fmt::Debug for Delegated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegated").finish_non_exhaustive()
    }
}

impl Delegated {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            tokens: Mutex::new(TtlCache::new(CACHE_TTL)),
            decisions: Mutex::new(TtlCache::new(CACHE_TTL)),
        }
    }

    /// May the request with these credentials `get` `path`?
    pub(crate) async fn check(&self, credentials: Credentials, path: &str) -> Verdict {
        let user = match credentials {
            Credentials::Unusable(why) => return Verdict::Unauthorized(why.to_owned()),
            Credentials::Anonymous => User::anonymous(),
            Credentials::Bearer(token) => match self.authenticate(token).await {
                Ok(Ok(user)) => user,
                Ok(Err(why)) => return Verdict::Unauthorized(why),
                Err(e) => {
                    // Misconfiguration (svcplane may not create TokenReviews) or an
                    // unreachable API server: the operator must hear of it.
                    let why = format!("token review failed: {}", api_message(&e));
                    tracing::warn!(error = %why, "cannot authenticate a /metrics scrape");
                    return Verdict::Unauthorized(why);
                }
            },
        };
        match self.authorize(&user, path).await {
            Ok(Ok(())) => Verdict::Allowed,
            Ok(Err(reason)) => {
                Verdict::Forbidden(forbidden_message(&user.name, "get", path, &reason))
            }
            Err(e) => {
                Verdict::Unavailable(format!("subject access review failed: {}", api_message(&e)))
            }
        }
    }

    async fn authenticate(&self, token: String) -> Result<Authenticated, kube::Error> {
        if let Some(hit) = self.tokens.lock().await.get(&token, Instant::now()) {
            return Ok(hit);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.clone(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        let outcome = match (status.authenticated, status.user) {
            (Some(true), Some(info)) => Ok(User::from_info(info)),
            _ => Err(status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "the token was not accepted".into())),
        };
        self.tokens
            .lock()
            .await
            .put(token, outcome.clone(), Instant::now());
        Ok(outcome)
    }

    async fn authorize(&self, user: &User, path: &str) -> Result<Authorized, kube::Error> {
        let key = (user.clone(), path.to_owned());
        if let Some(hit) = self.decisions.lock().await.get(&key, Instant::now()) {
            return Ok(hit);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.iter().cloned().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".into()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        let outcome = if status.allowed && !status.denied.unwrap_or(false) {
            Ok(())
        } else {
            Err(status.reason.unwrap_or_default())
        };
        self.decisions
            .lock()
            .await
            .put(key, outcome.clone(), Instant::now());
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_header_is_the_anonymous_user() {
        assert_eq!(Credentials::from_header(None), Credentials::Anonymous);
        let anon = User::anonymous();
        assert_eq!(anon.name, "system:anonymous");
        assert_eq!(anon.groups, ["system:unauthenticated"]);
    }

    #[test]
    fn a_bearer_token_is_read_whatever_the_scheme_case() {
        assert_eq!(
            Credentials::from_header(Some(b"Bearer abc.def")),
            Credentials::Bearer("abc.def".into())
        );
        assert_eq!(
            Credentials::from_header(Some(b"bearer  abc ")),
            Credentials::Bearer("abc".into())
        );
    }

    #[test]
    fn other_schemes_and_empty_tokens_are_unauthorized_not_anonymous() {
        for header in [&b"Basic dXNlcjpwdw=="[..], b"Bearer", b"Bearer   ", b"\xff"] {
            let c = Credentials::from_header(Some(header));
            assert!(
                matches!(c, Credentials::Unusable(_)),
                "{header:?} gave {c:?}"
            );
        }
    }

    #[test]
    fn verdicts_map_to_the_api_servers_status_codes() {
        assert_eq!(Verdict::Allowed.status(), 200);
        assert_eq!(Verdict::Unauthorized(String::new()).status(), 401);
        assert_eq!(Verdict::Forbidden(String::new()).status(), 403);
        assert_eq!(Verdict::Unavailable(String::new()).status(), 500);
    }

    #[test]
    fn the_forbidden_message_names_user_verb_and_path() {
        assert_eq!(
            forbidden_message("system:anonymous", "get", "/metrics", ""),
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
        );
        assert!(
            forbidden_message("u", "get", "/metrics", "no RBAC policy matched")
                .ends_with(": no RBAC policy matched")
        );
    }

    #[test]
    fn cached_answers_expire_after_the_ttl() {
        let mut cache = TtlCache::new(CACHE_TTL);
        let t0 = Instant::now();
        cache.put("tok", 1, t0);
        assert_eq!(cache.get(&"tok", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(cache.get(&"tok", t0 + CACHE_TTL), None);
    }

    #[test]
    fn the_cache_stays_bounded_under_a_flood_of_keys() {
        let mut cache = TtlCache::new(CACHE_TTL);
        let t0 = Instant::now();
        for i in 0..(CACHE_LIMIT * 2) {
            cache.put(i, (), t0);
        }
        assert!(cache.len() <= CACHE_LIMIT);
        // Expired entries go first when the limit is reached.
        let later = t0 + CACHE_TTL;
        cache.put(usize::MAX, (), later);
        assert_eq!(cache.len(), 1);
    }
}
