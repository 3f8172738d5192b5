//! Development certificates for running the webhook outside a cluster; they are made by
//! `captf-certs`, which the simulator and the demo share.

pub use captf_certs::{DevCertFiles, DevCerts, DevCertsError, generate, write};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dev_certs_make_a_pair_the_server_accepts() {
        let c = generate("captf dev CA", &["localhost".into()], &["127.0.0.1".parse().unwrap()]).unwrap();
        crate::tls::certified_key_from_pem(c.cert_pem.as_bytes(), c.key_pem.as_bytes()).unwrap();
        assert!(c.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
