//! Development certificates (rcgen): a CA and a serving certificate it signs, for running the
//! webhook outside a cluster (in a cluster, cert-manager issues them), for the simulator's HTTPS
//! port and for the demo. `captf-webhook dev-certs` writes them with cert-manager's file names:
//! `ca.crt`, `tls.crt`, `tls.key`.

use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum DevCertsError {
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("failed to write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A CA and a serving certificate, PEM.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The CA certificate: give it to clients (the `caBundle` of a webhook configuration).
    pub ca_pem: String,
    /// The serving certificate chain (leaf only; the CA is the trust anchor).
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8).
    pub key_pem: String,
}

/// A CA named `common_name` and a serving certificate for `dns_names` and `ips`.
pub fn generate(common_name: &str, dns_names: &[String], ips: &[IpAddr]) -> Result<DevCerts, DevCertsError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    ca_params.distinguished_name = dn;
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        dns_names.first().map_or("captf-webhook", String::as_str),
    );
    leaf.distinguished_name = dn;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok(DevCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// The files written by [`write`].
#[derive(Clone, Debug)]
pub struct DevCertFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Write `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`, creating it.
pub fn write(dir: &Path, certs: &DevCerts) -> Result<DevCertFiles, DevCertsError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DevCertsError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let files = DevCertFiles {
        ca: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.ca, &certs.ca_pem).map_err(err(&files.ca))?;
    std::fs::write(&files.cert, &certs.cert_pem).map_err(err(&files.cert))?;
    write_private(&files.key, certs.key_pem.as_bytes()).map_err(err(&files.key))?;
    Ok(files)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    opts.open(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dev_certs_are_written_with_cert_manager_names_and_a_private_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = generate("ca", &["localhost".into()], &[]).unwrap();
        let files = write(dir.path(), &c).unwrap();
        assert_eq!(files.cert.file_name().unwrap(), "tls.crt");
        assert_eq!(std::fs::read_to_string(&files.key).unwrap(), c.key_pem);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&files.key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
