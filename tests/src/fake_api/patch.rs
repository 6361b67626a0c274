//! PATCH bodies by content type.
//!
//! - `application/merge-patch+json`: RFC 7386 (`json_patch::merge`).
//! - `application/json-patch+json`: RFC 6902 (`json_patch::patch`); a failed `test` or a bad
//!   path is 422, as upstream.
//! - `application/strategic-merge-patch+json`: approximated as a merge patch. Lists are
//!   replaced wholesale (upstream merges lists with a patch strategy, e.g. containers by
//!   name) and `$patch`/`$retainKeys`/`$setElementOrder` directives are not understood (they
//!   are stored as plain fields). Enough for patches of maps and scalars.
//! - `application/apply-patch+yaml` (server-side apply) and anything else: 415.

use serde_json::Value;

use super::status::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    Strategic,
}

impl PatchKind {
    /// The patch type for a `Content-Type` header; 415 for unsupported ones.
    pub(crate) fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            _ => Err(ApiError::unsupported_media_type(&media)),
        }
    }
}

/// Applies `patch` to `doc` in place.
pub(crate) fn apply(kind: PatchKind, doc: &mut Value, patch: &[u8]) -> Result<(), ApiError> {
    match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            let patch: Value = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(doc, &patch);
            Ok(())
        }
        PatchKind::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(doc, &patch.0).map_err(|e| ApiError::unprocessable(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_and_application() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Ok(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml")
                .unwrap_err()
                .code,
            415
        );
        let mut doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        apply(
            PatchKind::Strategic,
            &mut doc,
            br#"{"a": {"b": null}, "l": [3]}"#,
        )
        .unwrap();
        assert_eq!(doc, json!({"a": {"c": 2}, "l": [3]}));
        let e = apply(
            PatchKind::Json,
            &mut doc,
            br#"[{"op":"test","path":"/l/0","value":9}]"#,
        );
        assert_eq!(e.unwrap_err().code, 422);
        assert_eq!(
            apply(PatchKind::Merge, &mut doc, b"[1]").unwrap_err().code,
            400
        );
    }
}
