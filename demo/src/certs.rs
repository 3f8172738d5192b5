//! A CA and a serving certificate made on the fly (rcgen), as cert-manager would issue them in a
//! cluster: the simulator trusts only the CA (the webhook configurations' `caBundle`) and checks
//! the server name `<service>.<namespace>.svc`.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("failed to write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// PEM documents of a CA and a serving certificate it signed.
#[derive(Clone, Debug)]
pub struct ServingCerts {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA and a serving certificate for `dns_name` (e.g. `captf-webhook.captf-system.svc`).
pub fn generate(dns_name: &str) -> Result<ServingCerts, CertsError> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "captf-demo CA");
    ca.distinguished_name = dn;
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(vec![dns_name.to_string()])?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, dns_name);
    leaf.distinguished_name = dn;
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok(ServingCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// Write `tls.crt` and `tls.key` (cert-manager's file names) into `dir`; returns their paths.
pub fn write(dir: &Path, certs: &ServingCerts) -> Result<(PathBuf, PathBuf), CertsError> {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    for (path, text) in [(&cert, &certs.cert_pem), (&key, &certs.key_pem)] {
        std::fs::write(path, text).map_err(|source| CertsError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok((cert, key))
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
