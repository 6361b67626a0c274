//! Error types, with upstream's exact texts.
//!
//! A webhook must answer with the same status code, field path and message that
//! kube-apiserver would. So allocator errors keep upstream's `Error()` strings
//! (AL-2.5, AL-7.1), field errors render like apimachinery's
//! `field.Error` (WH-8), and [`ServiceError`] says whether upstream answers
//! 422 Invalid or 500 (AL-5.2, AL-7.2, AL-7.3, WH-9).

use std::fmt;
use std::net::IpAddr;

/// Errors of one ClusterIP range or of a family's set of ranges (upstream `ipallocator`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpAllocError {
    /// `ErrFull`: no free address in any band.
    #[error("range is full")]
    Full,
    /// `ErrAllocated`: the requested address is taken.
    #[error("provided IP is already allocated")]
    Allocated,
    /// `ErrMismatchedNetwork`: no (ready) range of the family contains the address.
    /// This is what upstream 1.33+ reports for out-of-range static requests.
    #[error("the provided network does not match the current range")]
    MismatchedNetwork,
    /// `ErrNotReady`: the range's ServiceCIDR is not ready or is terminating.
    #[error("allocator not ready")]
    NotReady,
    /// svcplane: the address is in a ready range, but not one serving the Service's
    /// namespace (`svcplane.io/namespace-selector` on the ServiceCIDRs).
    #[error(
        "the provided IP is not in a ServiceCIDR serving namespace {namespace:?} (serving it: {serving}; see the svcplane.io/namespace-selector annotation of the cluster's ServiceCIDRs)"
    )]
    NotServed {
        /// The Service's namespace.
        namespace: String,
        /// The ranges serving it, as `CIDR (ServiceCIDR NAME)`, or `none`.
        serving: String,
    },
    /// svcplane: no range serves the Service's namespace.
    #[error(
        "no ServiceCIDR serves namespace {namespace:?} (see the svcplane.io/namespace-selector annotation of the cluster's ServiceCIDRs)"
    )]
    NoneServes {
        /// The Service's namespace.
        namespace: String,
    },
    /// `ErrNotInRange`, reported by a single range.
    #[error(
        "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {valid_range}"
    )]
    NotInRange {
        /// The requested address.
        ip: IpAddr,
        /// The range's CIDR.
        valid_range: String,
    },
}

/// Errors of the NodePort allocator (upstream `portallocator`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortAllocError {
    /// `ErrFull`.
    #[error("range is full")]
    Full,
    /// `ErrAllocated`.
    #[error("provided port is already allocated")]
    Allocated,
    /// `ErrNotInRange`.
    #[error("provided port is not in the valid range. The range of valid ports is {valid_ports}")]
    NotInRange {
        /// The range as `LOW-HIGH`.
        valid_ports: String,
    },
    /// `ErrMismatchedNetwork` (restore from a snapshot of another range).
    #[error("the provided port range does not match the current port range")]
    MismatchedRange,
}

/// A CIDR the IPAddress allocator refuses to serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// IPv6 prefixes shorter than /64 (upstream `NewIPAllocator`).
    #[error("shortest allowed prefix length for service CIDR is 64, got {0}")]
    PrefixTooShort(u8),
}

/// Bad `--service-cluster-ip-range` / `--service-node-port-range` values, or ranges
/// this allocator cannot serve. Each message names the flag and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A CIDR that does not parse.
    #[error("invalid {flag} value {value:?}: {reason}")]
    InvalidCidr {
        /// The flag name, with leading dashes.
        flag: &'static str,
        /// The offending value (one list element, or the whole value).
        value: String,
        /// Why.
        reason: String,
    },
    /// Wrong number of CIDRs, or two of one family.
    #[error("invalid {flag} value {value:?}: {reason}")]
    InvalidCidrList {
        /// The flag name.
        flag: &'static str,
        /// The whole flag value.
        value: String,
        /// Why (upstream wording where upstream has one).
        reason: String,
    },
    /// A port range that does not parse or is empty.
    #[error("invalid {flag} value {value:?}: {reason}")]
    InvalidPortRange {
        /// The flag name.
        flag: &'static str,
        /// The offending value.
        value: String,
        /// Why.
        reason: String,
    },
}

/// apimachinery `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `Invalid value`.
    Invalid,
    /// `Required value`.
    Required,
    /// `Duplicate value`.
    Duplicate,
    /// `Unsupported value`.
    NotSupported,
    /// `Forbidden`.
    Forbidden,
}

impl FieldErrorType {
    /// The text apimachinery prints, e.g. `Invalid value`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "Invalid value",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
        }
    }

    /// `details.causes[].reason` in a Status.
    pub fn cause_reason(self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
}

/// The bad value of a field error, rendered as apimachinery's `field.Error` does
/// (1.36): a Go `string` with `%q`, integers bare, anything else as compact JSON
/// (`json.Marshal`), so a nil pointer or slice is `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    /// No value shown (Required, Forbidden).
    Omitted,
    /// A string, printed Go-quoted: `"garbage"`.
    Str(String),
    /// An optional string pointer (a named string type): JSON, `null` when absent.
    OptStr(Option<String>),
    /// An integer, printed bare: `30093`.
    Int(i64),
    /// A slice of strings (or of a named string type): JSON, `["a","b"]`; `None`
    /// for a nil slice, printed `null`.
    StrList(Option<Vec<String>>),
}

/// The escapes Go's `%q` and `json.Marshal` share; `None` for a character each
/// escapes its own way (or not at all).
fn shared_escape(c: char) -> Option<&'static str> {
    match c {
        '"' => Some("\\\""),
        '\\' => Some("\\\\"),
        '\n' => Some("\\n"),
        '\t' => Some("\\t"),
        '\r' => Some("\\r"),
        _ => None,
    }
}

/// `s` double-quoted, each character escaped by `shared_escape`, else by `own`.
fn quote(s: &str, own: impl Fn(char) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match (shared_escape(c), own(c)) {
            (Some(e), _) => out.push_str(e),
            (None, Some(e)) => out.push_str(&e),
            (None, None) => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go `%q` for the ASCII-ish strings that appear in Service fields.
pub fn go_quote(s: &str) -> String {
    quote(s, |c| {
        ((c as u32) < 0x20 || c as u32 == 0x7f).then(|| format!("\\x{:02x}", c as u32))
    })
}

/// A JSON string as Go's `json.Marshal` writes it: `<`, `>` and `&` escaped too
/// (its HTML-safe default), and U+2028/U+2029.
fn json_string(s: &str) -> String {
    quote(s, |c| {
        matches!(
            c,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\0'..='\u{1f}'
        )
        .then(|| format!("\\u{:04x}", c as u32))
    })
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Omitted => Ok(()),
            Self::Str(s) => f.write_str(&go_quote(s)),
            Self::OptStr(Some(s)) => f.write_str(&json_string(s)),
            Self::OptStr(None) | Self::StrList(None) => f.write_str("null"),
            Self::Int(i) => write!(f, "{i}"),
            Self::StrList(Some(v)) => {
                let items: Vec<String> = v.iter().map(|s| json_string(s)).collect();
                write!(f, "[{}]", items.join(","))
            }
        }
    }
}

/// One apimachinery `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Kind of error.
    pub error_type: FieldErrorType,
    /// Field path, e.g. `spec.clusterIPs[0]`.
    pub field: String,
    /// The bad value.
    pub value: FieldValue,
    /// Detail text (may be empty).
    pub detail: String,
}

impl FieldError {
    /// `field.Invalid`.
    pub fn invalid(field: impl Into<String>, value: FieldValue, detail: impl Into<String>) -> Self {
        Self {
            error_type: FieldErrorType::Invalid,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Required`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            error_type: FieldErrorType::Required,
            field: field.into(),
            value: FieldValue::Omitted,
            detail: detail.into(),
        }
    }

    /// `field.Duplicate`.
    pub fn duplicate(field: impl Into<String>, value: FieldValue) -> Self {
        Self {
            error_type: FieldErrorType::Duplicate,
            field: field.into(),
            value,
            detail: String::new(),
        }
    }

    /// `field.NotSupported`; `supported` is listed quoted, in the order given.
    pub fn not_supported(field: impl Into<String>, value: FieldValue, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        Self {
            error_type: FieldErrorType::NotSupported,
            field: field.into(),
            value,
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            error_type: FieldErrorType::Forbidden,
            field: field.into(),
            value: FieldValue::Omitted,
            detail: detail.into(),
        }
    }

    /// `ErrorBody()`: the message without the field, as in `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = self.error_type.as_str().to_string();
        let shows_value = !matches!(
            self.error_type,
            FieldErrorType::Required | FieldErrorType::Forbidden
        ) && self.value != FieldValue::Omitted;
        if shows_value {
            s.push_str(": ");
            s.push_str(&self.value.to_string());
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A Service create/update failure, shaped like the apiserver's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// 422 `Invalid` with field causes.
    #[error("{}", invalid_message(name, errors))]
    Invalid {
        /// The Service name (for the `Service "<name>" is invalid` prefix).
        name: String,
        /// The causes, in upstream order.
        errors: Vec<FieldError>,
    },
    /// 500 `InternalError`; the text is what follows `Internal error occurred: `.
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// 500 with reason `Unknown` (a plain Go error reached the client, e.g. `duplicate nodePort: {TCP 30001}`).
    #[error("{0}")]
    Unknown(String),
}

fn invalid_message(name: &str, errors: &[FieldError]) -> String {
    let mut rendered: Vec<String> = Vec::with_capacity(errors.len());
    for e in errors {
        let s = e.to_string();
        if !rendered.contains(&s) {
            rendered.push(s);
        }
    }
    if rendered.len() == 1 {
        format!("Service {} is invalid: {}", go_quote(name), rendered[0])
    } else {
        format!(
            "Service {} is invalid: [{}]",
            go_quote(name),
            rendered.join(", ")
        )
    }
}

impl ServiceError {
    /// Shorthand for a one-cause 422.
    pub fn invalid(name: &str, error: FieldError) -> Self {
        Self::Invalid {
            name: name.to_string(),
            errors: vec![error],
        }
    }

    /// HTTP status code upstream answers with: 422 or 500.
    pub fn code(&self) -> u16 {
        match self {
            Self::Invalid { .. } => 422,
            Self::Internal(_) | Self::Unknown(_) => 500,
        }
    }

    /// `true` for 422 Invalid (the user's fault), `false` for a 500.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Self::Invalid { .. })
    }

    /// The Status `reason`: `Invalid`, `InternalError` or `Unknown`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "Invalid",
            Self::Internal(_) => "InternalError",
            Self::Unknown(_) => "Unknown",
        }
    }

    /// The field causes (empty for 500s).
    pub fn causes(&self) -> &[FieldError] {
        match self {
            Self::Invalid { errors, .. } => errors,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_render_as_apimachinery_1_36_does() {
        let list = FieldValue::StrList(Some(vec!["10.0.0.1".into(), "fd00::1".into()]));
        assert_eq!(list.to_string(), r#"["10.0.0.1","fd00::1"]"#);
        assert_eq!(FieldValue::StrList(None).to_string(), "null");
        assert_eq!(FieldValue::OptStr(None).to_string(), "null");
        assert_eq!(
            FieldValue::OptStr(Some("SingleStack".into())).to_string(),
            r#""SingleStack""#
        );
        // json.Marshal's HTML-safe escapes; %q for plain strings.
        assert_eq!(
            FieldValue::StrList(Some(vec!["a<b>&\"".into()])).to_string(),
            r#"["a\u003cb\u003e\u0026\""]"#
        );
        assert_eq!(FieldValue::Str("a<b".into()).to_string(), r#""a<b""#);
        assert_eq!(FieldValue::Int(30093).to_string(), "30093");
    }

    #[test]
    fn invalid_message_matches_upstream_example() {
        let e = ServiceError::invalid(
            "web",
            FieldError::invalid(
                "spec.clusterIPs",
                FieldValue::StrList(Some(vec!["10.0.0.5".into()])),
                "failed to allocate IP 10.0.0.5: provided IP is already allocated",
            ),
        );
        assert_eq!(
            e.to_string(),
            "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.0.5\"]: failed to allocate IP 10.0.0.5: provided IP is already allocated"
        );
        assert_eq!(e.code(), 422);
        assert_eq!(e.reason(), "Invalid");
    }

    #[test]
    fn several_causes_are_bracketed_and_deduplicated() {
        let a = FieldError::required("spec.clusterIPs", "");
        let b = FieldError::not_supported(
            "spec.ipFamilies[0]",
            FieldValue::Str("IPv5".into()),
            &["IPv4", "IPv6"],
        );
        let e = ServiceError::Invalid {
            name: "x".into(),
            errors: vec![a.clone(), b, a],
        };
        assert_eq!(
            e.to_string(),
            "Service \"x\" is invalid: [spec.clusterIPs: Required value, spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"]"
        );
    }

    #[test]
    fn internal_error_is_500() {
        let e = ServiceError::Internal("failed to allocate a serviceIP: range is full".into());
        assert_eq!(
            e.to_string(),
            "Internal error occurred: failed to allocate a serviceIP: range is full"
        );
        assert_eq!(e.code(), 500);
        assert!(!e.is_invalid());
    }

    #[test]
    fn nil_pointer_value_prints_null() {
        let e = FieldError::invalid("spec.ipFamilyPolicy", FieldValue::OptStr(None), "x");
        assert_eq!(e.to_string(), "spec.ipFamilyPolicy: Invalid value: null: x");
    }
}
