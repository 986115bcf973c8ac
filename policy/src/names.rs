//! Kubernetes label syntax, the one definition: the policy's validation checks its catalog's node labels
//! and taint keys with it, and the webhooks check what they would write into a Pod with it.

/// The namespace label that carries the tier when the policy names none (`tierLabel`).
pub const DEFAULT_TIER_LABEL: &str = "tenant.kubenexus.io/tier";

/// `true` when `s` is a valid Kubernetes label value (≤ 63 chars, alphanumerics, `-`, `_`, `.`, alphanumeric
/// at both ends). Used for the job-type label and the anti-affinity selectors.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `true` for a valid namespace name (a DNS label: ≤ 63 chars, lowercase alphanumerics and `-`,
/// alphanumeric at both ends).
pub fn is_namespace_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `true` for a valid qualified label key (`[prefix/]name`, DNS-subdomain prefix, name ≤ 63).
pub fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                let b = part.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    prefix_ok && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values() {
        for ok in [
            "gpu.nvidia.com/class",
            "nvidia.com/gpu.product",
            "app",
            "a-b_c.d",
        ] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in ["", "/x", "Upper.com/x", "-a.com/x", "a..b/x", "x/", "a/b/c"] {
            assert!(!is_label_key(bad), "{bad}");
        }
        assert!(is_label_value("H100-80GB") && !is_label_value("-x") && !is_label_value(""));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
