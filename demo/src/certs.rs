//! A CA and a serving certificate made on the fly, as cert-manager would issue them in a
//! cluster: the simulator trusts only the CA (the webhook configurations' `caBundle`) and checks
//! the server name `<service>.<namespace>.svc`. The webhook's own `dev-certs` code makes them, so
//! the demo and `captf-webhook dev-certs` cannot drift apart.

use std::path::{Path, PathBuf};

pub use captf_webhook::devcerts::{DevCerts as ServingCerts, DevCertsError as CertsError};

/// A CA and a serving certificate for `dns_name` (e.g. `captf-webhook.captf-system.svc`).
pub fn generate(dns_name: &str) -> Result<ServingCerts, CertsError> {
    captf_webhook::devcerts::generate("captf-demo CA", &[dns_name.to_string()], &[])
}

/// Write `tls.crt` and `tls.key` (cert-manager's file names, beside `ca.crt`) into `dir`;
/// returns the certificate's and the key's paths.
pub fn write(dir: &Path, certs: &ServingCerts) -> Result<(PathBuf, PathBuf), CertsError> {
    let files = captf_webhook::devcerts::write(dir, certs)?;
    Ok((files.cert, files.key))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn serving_certificate_is_signed_by_a_separate_ca() {
        let c = generate("captf-webhook.captf-system.svc").unwrap();
        assert!(c.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.key_pem.contains("PRIVATE KEY"));
        assert_ne!(c.ca_pem, c.cert_pem);
    }

    #[test]
    fn files_use_cert_managers_names() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write(dir.path(), &generate("x.y.svc").unwrap()).unwrap();
        assert!(cert.ends_with("tls.crt") && key.ends_with("tls.key"));
        assert!(std::fs::read_to_string(key).unwrap().contains("PRIVATE KEY"));
    }
}
