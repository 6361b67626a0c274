//! What a failed watch does next (ES-1.8): resume from the last resourceVersion, or
//! list again. Pure, so each rule is a unit test.
//!
//! Why: resuming costs the events missed while the connection was down; a re-list
//! costs every object of the resource (30 000 Pods: tens of megabytes, per replica,
//! per API-server restart). A resume is always correct while the API server still
//! has the history after that resourceVersion, and it tells us when it has not
//! (410 Gone / `Expired`), so only that answer forces a list — as client-go's
//! reflector does.

use kube::core::Status;

/// The next step after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    /// Watch again from the last resourceVersion seen (object or bookmark).
    Resume,
    /// The history is gone (or the stream cannot be trusted): list again.
    Relist,
}

/// Does `status` say the resourceVersion is too old to watch from? 410 Gone, reason
/// `Expired` or `Gone`, or (servers and proxies that answer with another code) the
/// API server's "too old resource version" message.
pub(super) fn is_expired(status: &Status) -> bool {
    status.code == 410
        || matches!(status.reason.as_str(), "Expired" | "Gone")
        || status.message.contains("too old resource version")
}

/// After an ERROR event in the watch stream, or a watch request answered with it.
pub(super) fn after_status(status: &Status) -> Recovery {
    if is_expired(status) {
        Recovery::Relist
    } else {
        // 429, 5xx, 403 while RBAC is being fixed, ...: the history is still there.
        Recovery::Resume
    }
}

/// After a failed request or a broken stream.
pub(super) fn after_error(error: &kube::Error) -> Recovery {
    match error {
        kube::Error::Api(status) => after_status(status),
        // An event that does not decode cannot be skipped (the cache would miss it)
        // nor replayed (it would fail again): a list reads it afresh.
        kube::Error::SerdeError(_) => Recovery::Relist,
        // Connection refused or reset, timeouts, TLS and HTTP transport errors.
        _ => Recovery::Resume,
    }
}

/// Did the API server refuse a streaming list (`sendInitialEvents`) as an option it
/// does not serve (the WatchList feature off: 422, or 400)? Then paginated lists.
pub(super) fn streaming_refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if matches!(s.code, 400 | 422))
}

/// Should an operator act on it (credentials, RBAC, a missing API)? Logged at ERROR
/// instead of the outage's warning.
pub(super) fn needs_operator(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if matches!(s.code, 401 | 403 | 404))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Status {
        let mut s = Status::failure(message, reason);
        s.code = code;
        s
    }

    #[test]
    fn rule_1_8_gone_and_expired_mean_relist() {
        assert_eq!(after_status(&status(410, "Gone", "")), Recovery::Relist);
        assert_eq!(after_status(&status(410, "Expired", "")), Recovery::Relist);
        assert_eq!(
            after_status(&status(
                500,
                "InternalError",
                "too old resource version: 5 (9)"
            )),
            Recovery::Relist
        );
        assert_eq!(
            after_error(&kube::Error::Api(status(410, "Expired", "").into())),
            Recovery::Relist
        );
    }

    #[test]
    fn rule_1_8_retriable_statuses_resume() {
        for code in [429, 500, 502, 503, 504] {
            assert_eq!(
                after_status(&status(code, "ServiceUnavailable", "try again")),
                Recovery::Resume,
                "{code}"
            );
        }
    }

    #[test]
    fn rule_1_8_undecodable_events_relist() {
        let bad = serde_json::from_str::<u8>("x").unwrap_err();
        assert_eq!(after_error(&kube::Error::SerdeError(bad)), Recovery::Relist);
    }

    #[test]
    fn rule_1_8_streaming_lists_fall_back_only_when_refused() {
        let api = |code| kube::Error::Api(status(code, "Invalid", "").into());
        assert!(streaming_refused(&api(422)));
        assert!(streaming_refused(&api(400)));
        assert!(!streaming_refused(&api(503)));
        assert!(!streaming_refused(&api(410)));
        assert!(needs_operator(&api(403)));
        assert!(!needs_operator(&api(503)));
    }
}
