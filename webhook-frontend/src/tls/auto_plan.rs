//! Automatic certificates, the pure part: given what the Secret holds and the time, decide whether to keep
//! it or issue a new serving certificate (reusing the CA while it lives long enough), and issue it.
//!
//! The Secret holds `ca.crt` (the CA bundle patched into the webhook configuration: the signing CA first,
//! then, after a CA rotation, the previous CA until it expires, so replicas still serving a certificate of
//! the old CA stay trusted), `ca.key` (the signing CA's key, so the CA survives serving-certificate
//! renewals and the caBundle rarely changes), `tls.crt` and `tls.key` (the serving pair).
//! No I/O here: the Kubernetes side is in `auto_rotate.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use base64::Engine as _;
use rcgen::{CertifiedIssuer, Issuer, KeyPair, PublicKeyData};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use time::{Duration, OffsetDateTime};

use super::certs;
use super::self_signed::{ca_params, serving_params, serving_sans};

pub(crate) const CA_CRT: &str = "ca.crt";
pub(crate) const CA_KEY: &str = "ca.key";
pub(crate) const TLS_CRT: &str = "tls.crt";
pub(crate) const TLS_KEY: &str = "tls.key";

/// Common name of the CA the frontend creates for itself.
const CA_COMMON_NAME: &str = "gpu-admission webhook CA";
/// Certificates start this long before "now" (clock skew between replicas and the apiserver).
const BACKDATE: Duration = Duration::minutes(5);

/// The four PEM documents of the Secret (a missing key is empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Material {
    pub(crate) ca_crt: Vec<u8>,
    pub(crate) ca_key: Vec<u8>,
    pub(crate) tls_crt: Vec<u8>,
    pub(crate) tls_key: Vec<u8>,
}

impl Material {
    /// From a Secret's `data` (missing keys become empty documents).
    pub(crate) fn from_data<'a>(data: impl IntoIterator<Item = (&'a String, &'a [u8])>) -> Self {
        let mut m = Material::default();
        for (k, v) in data {
            let slot = match k.as_str() {
                CA_CRT => &mut m.ca_crt,
                CA_KEY => &mut m.ca_key,
                TLS_CRT => &mut m.tls_crt,
                TLS_KEY => &mut m.tls_key,
                _ => continue,
            };
            *slot = v.to_vec();
        }
        m
    }

    /// As a Secret's `data`.
    pub(crate) fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        [
            (CA_CRT, &self.ca_crt),
            (CA_KEY, &self.ca_key),
            (TLS_CRT, &self.tls_crt),
            (TLS_KEY, &self.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
    }
}

/// How long certificates live and when they are renewed.
#[derive(Clone, Debug)]
pub(crate) struct Lifetimes {
    /// Lifetime of a serving certificate.
    pub(crate) serving: Duration,
    /// Lifetime of a new CA (much longer: a new CA changes the caBundle).
    pub(crate) ca: Duration,
    /// Renew a serving certificate when less than this is left; `None` = a third of its lifetime.
    pub(crate) renew_before: Option<Duration>,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            serving: Duration::days(90),
            ca: Duration::days(3650),
            renew_before: None,
        }
    }
}

/// What to do with the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// It holds a good serving certificate: serve it.
    Keep,
    /// Issue a new serving certificate, under a new CA when `new_ca`.
    Issue { new_ca: bool, reason: String },
}

/// Decides what to do with `stored` (`None` = no Secret) at `now` for a certificate naming `sans` (the
/// default SANs are added).
pub(crate) fn plan(
    stored: Option<&Material>,
    extra_sans: &[String],
    now: OffsetDateTime,
    lifetimes: &Lifetimes,
) -> Plan {
    let issue = |new_ca: bool, reason: String| Plan::Issue { new_ca, reason };
    let Some(m) = stored else {
        return issue(true, "no Secret yet".into());
    };
    let ca_not_after = match signing_ca(m) {
        Ok((_, _, not_after)) => not_after,
        Err(why) => return issue(true, format!("CA unusable: {why}")),
    };
    // A new serving certificate must fit inside the CA's lifetime; otherwise it is time for a new CA.
    let ca_lasts = ca_not_after - now >= lifetimes.serving;
    let (not_before, not_after) = match serving_validity(m, extra_sans, now) {
        Ok(v) => v,
        Err(why) => return issue(!ca_lasts, format!("serving certificate unusable: {why}")),
    };
    let renew_before = lifetimes
        .renew_before
        .unwrap_or((not_after - not_before) / 3);
    if not_after - now <= renew_before {
        return issue(
            !ca_lasts,
            format!("serving certificate expires at {not_after} (renewal window {renew_before})"),
        );
    }
    Plan::Keep
}

/// Issues a serving certificate (and a CA when `new_ca`, or when `previous` has no usable CA). The CA bundle
/// keeps the previous CA after a rotation while it is still valid.
pub(crate) fn issue(
    previous: Option<&Material>,
    new_ca: bool,
    extra_sans: &[String],
    now: OffsetDateTime,
    lifetimes: &Lifetimes,
) -> anyhow::Result<Material> {
    let reusable = previous
        .filter(|_| !new_ca)
        .and_then(|m| signing_ca(m).ok().map(|ca| (m, ca)));
    let (issuer, ca_pem, ca_key_pem, ca_not_after, retained) = match reusable {
        Some((m, (ca_der, key, not_after))) => {
            let issuer = Issuer::from_ca_cert_der(&ca_der, key)
                .context("reading the stored CA certificate")?;
            let pem = der_to_pem(&ca_der);
            (issuer, pem, m.ca_key.clone(), not_after, ca_bundle(m))
        }
        None => {
            let ca_not_after = now + lifetimes.ca;
            let ca_key = KeyPair::generate()?;
            let key_pem = ca_key.serialize_pem();
            let ca = CertifiedIssuer::self_signed(
                ca_params(CA_COMMON_NAME, now - BACKDATE, ca_not_after)?,
                ca_key,
            )?;
            let pem = ca.pem();
            // The previous CA (if any) stays trusted next to the new one.
            let retained = previous.map(ca_bundle).unwrap_or_default();
            let issuer = Issuer::from_ca_cert_der(ca.der(), KeyPair::from_pem(&key_pem)?)?;
            let key_pem = key_pem.into_bytes();
            (issuer, pem, key_pem, ca_not_after, retained)
        }
    };
    let key = KeyPair::generate()?;
    let not_after = (now + lifetimes.serving).min(ca_not_after);
    let cert = serving_params(serving_sans(extra_sans), now - BACKDATE, not_after)?
        .signed_by(&key, &issuer)?;

    let mut bundle = ca_pem.clone();
    for der in retained {
        let pem = der_to_pem(&der);
        let still_valid = validity(&der).is_some_and(|(_, na)| na > now);
        if pem != ca_pem && still_valid && !bundle.contains(&pem) {
            bundle.push_str(&pem);
        }
    }
    Ok(Material {
        ca_crt: bundle.into_bytes(),
        ca_key: ca_key_pem,
        tls_crt: cert.pem().into_bytes(),
        tls_key: key.serialize_pem().into_bytes(),
    })
}

/// Not-before and not-after of the first certificate of a PEM document.
pub(crate) fn first_cert_validity(pem: &[u8]) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let der = rustls_pemfile::certs(&mut &pem[..]).next()?.ok()?;
    validity(&der)
}

fn validity(der: &[u8]) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = x509.validity();
    Some((
        OffsetDateTime::from_unix_timestamp(v.not_before.timestamp()).ok()?,
        OffsetDateTime::from_unix_timestamp(v.not_after.timestamp()).ok()?,
    ))
}

/// Every certificate of `ca.crt`, in order (the first signs new serving certificates).
fn ca_bundle(m: &Material) -> Vec<CertificateDer<'static>> {
    rustls_pemfile::certs(&mut &m.ca_crt[..])
        .filter_map(Result::ok)
        .collect()
}

/// The signing CA: the first certificate of `ca.crt`, its key from `ca.key` (checked to match), and its
/// not-after.
fn signing_ca(m: &Material) -> Result<(CertificateDer<'static>, KeyPair, OffsetDateTime), String> {
    let der = ca_bundle(m)
        .into_iter()
        .next()
        .ok_or("no certificate in ca.crt")?;
    let key_pem = std::str::from_utf8(&m.ca_key).map_err(|_| "ca.key is not PEM")?;
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("ca.key: {e}"))?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| format!("ca.crt: {e}"))?;
    if !x509.is_ca() {
        return Err("ca.crt is not a CA certificate".into());
    }
    if x509.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err("ca.key does not belong to ca.crt".into());
    }
    let (_, not_after) = validity(&der).ok_or("ca.crt has no readable validity")?;
    Ok((der, key, not_after))
}

/// The serving pair matches, verifies against `ca.crt` at `now` for every wanted SAN; returns its validity.
fn serving_validity(
    m: &Material,
    extra_sans: &[String],
    now: OffsetDateTime,
) -> Result<(OffsetDateTime, OffsetDateTime), String> {
    let ck = certs::certified_key_from_pem(&m.tls_crt, &m.tls_key).map_err(|e| format!("{e:#}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for der in ca_bundle(m) {
        roots.add(der).map_err(|e| format!("ca.crt: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .map_err(|e| format!("ca.crt: {e}"))?;
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(now.unix_timestamp()).unwrap_or(0),
    ));
    for san in serving_sans(extra_sans) {
        let name = ServerName::try_from(san.as_str())
            .map_err(|e| format!("SAN {san:?}: {e}"))?
            .to_owned();
        verifier
            .verify_server_cert(&ck.cert[0], &ck.cert[1..], &name, &[], at)
            .map_err(|e| format!("does not verify for {san} against ca.crt: {e}"))?;
    }
    validity(&ck.cert[0]).ok_or_else(|| "tls.crt has no readable validity".into())
}

fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
    }

    fn sans() -> Vec<String> {
        vec!["webhook.gpu-admission.svc".into()]
    }

    fn fresh() -> Material {
        issue(None, true, &sans(), t0(), &Lifetimes::default()).unwrap()
    }

    fn is_issue(p: &Plan, want_new_ca: bool) -> bool {
        matches!(p, Plan::Issue { new_ca, .. } if *new_ca == want_new_ca)
    }

    #[test]
    fn no_secret_means_a_new_ca_and_a_fresh_one_is_kept() {
        let l = Lifetimes::default();
        assert!(is_issue(&plan(None, &sans(), t0(), &l), true));
        let m = fresh();
        assert_eq!(plan(Some(&m), &sans(), t0(), &l), Plan::Keep);
        // Still kept with 61 of 90 days left... (a third of the lifetime is 30 days)
        assert_eq!(
            plan(Some(&m), &sans(), t0() + Duration::days(29), &l),
            Plan::Keep
        );
        let (_, na) = first_cert_validity(&m.tls_crt).unwrap();
        assert_eq!(na, t0() + Duration::days(90));
    }

    #[test]
    fn renewal_window_reuses_the_ca() {
        let l = Lifetimes::default();
        let m = fresh();
        let later = t0() + Duration::days(61);
        let p = plan(Some(&m), &sans(), later, &l);
        assert!(is_issue(&p, false), "{p:?}");
        let renewed = issue(Some(&m), false, &sans(), later, &l).unwrap();
        assert_eq!(renewed.ca_crt, m.ca_crt, "the caBundle must not change");
        assert_eq!(renewed.ca_key, m.ca_key);
        assert_ne!(renewed.tls_crt, m.tls_crt);
        assert_eq!(plan(Some(&renewed), &sans(), later, &l), Plan::Keep);
        // An expired certificate is renewed too.
        let p = plan(Some(&m), &sans(), t0() + Duration::days(100), &l);
        assert!(is_issue(&p, false), "{p:?}");
    }

    #[test]
    fn explicit_renew_before_overrides_a_third() {
        let l = Lifetimes {
            renew_before: Some(Duration::days(89)),
            ..Lifetimes::default()
        };
        let m = fresh();
        assert_eq!(plan(Some(&m), &sans(), t0(), &l), Plan::Keep);
        assert!(is_issue(
            &plan(Some(&m), &sans(), t0() + Duration::days(2), &l),
            false
        ));
    }

    #[test]
    fn an_old_ca_is_replaced_and_kept_in_the_bundle() {
        let l = Lifetimes::default();
        let m = fresh();
        // 60 days before the CA expires, a 90-day serving certificate no longer fits under it.
        let late = t0() + Duration::days(3650 - 60);
        let p = plan(Some(&m), &sans(), late, &l);
        assert!(is_issue(&p, true), "{p:?}");
        let rotated = issue(Some(&m), true, &sans(), late, &l).unwrap();
        assert_ne!(rotated.ca_key, m.ca_key);
        let bundle = String::from_utf8(rotated.ca_crt.clone()).unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(bundle.ends_with(std::str::from_utf8(&m.ca_crt).unwrap()));
        assert_eq!(plan(Some(&rotated), &sans(), late, &l), Plan::Keep);
        // The previous replica's certificate (old CA) still verifies against the new bundle.
        let mixed = Material {
            tls_crt: m.tls_crt.clone(),
            tls_key: m.tls_key.clone(),
            ..rotated.clone()
        };
        assert!(serving_validity(&mixed, &sans(), t0() + Duration::days(1)).is_ok());
        // Once the old CA has expired it is dropped from the bundle at the next renewal.
        let much_later = t0() + Duration::days(3650 + 70);
        let next = issue(Some(&rotated), false, &sans(), much_later, &l).unwrap();
        assert_eq!(
            String::from_utf8(next.ca_crt)
                .unwrap()
                .matches("BEGIN CERTIFICATE")
                .count(),
            1
        );
    }

    #[test]
    fn new_sans_or_broken_pieces_are_reissued() {
        let l = Lifetimes::default();
        let m = fresh();
        let more = vec!["webhook.gpu-admission.svc".into(), "other.example".into()];
        assert!(is_issue(&plan(Some(&m), &more, t0(), &l), false));

        let other = fresh();
        let wrong_key = Material {
            tls_key: other.tls_key.clone(),
            ..m.clone()
        };
        assert!(is_issue(&plan(Some(&wrong_key), &sans(), t0(), &l), false));
        let foreign_cert = Material {
            tls_crt: other.tls_crt.clone(),
            tls_key: other.tls_key.clone(),
            ..m.clone()
        };
        assert!(is_issue(
            &plan(Some(&foreign_cert), &sans(), t0(), &l),
            false
        ));
        let wrong_ca_key = Material {
            ca_key: other.ca_key.clone(),
            ..m.clone()
        };
        assert!(is_issue(
            &plan(Some(&wrong_ca_key), &sans(), t0(), &l),
            true
        ));
        let empty = Material::default();
        assert!(is_issue(&plan(Some(&empty), &sans(), t0(), &l), true));
        let garbage = Material {
            ca_crt: b"garbage".to_vec(),
            ca_key: b"\xff".to_vec(),
            tls_crt: b"x".to_vec(),
            tls_key: vec![],
        };
        assert!(is_issue(&plan(Some(&garbage), &sans(), t0(), &l), true));
        // Issuing from a broken Secret falls back to a new CA instead of failing.
        let m2 = issue(Some(&garbage), false, &sans(), t0(), &l).unwrap();
        assert_eq!(plan(Some(&m2), &sans(), t0(), &l), Plan::Keep);
    }

    #[test]
    fn secret_data_round_trip() {
        let m = fresh();
        let data = m.to_data();
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ca.crt", "ca.key", "tls.crt", "tls.key"]
        );
        let back = Material::from_data(data.iter().map(|(k, v)| (k, v.as_slice())));
        assert_eq!(back, m);
    }
}
