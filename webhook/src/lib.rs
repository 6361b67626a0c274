//! Admission webhook for Services (filled by the webhook work).
