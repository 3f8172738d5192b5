//! The control plane's own PKI, made fresh for every start: a CA (and its key, which signs the
//! certificates of nodes that join), the API server's serving certificate, client certificates
//! for the admin and for kube-controller-manager, and the service-account signing key.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The first address of the service range the API server is given: its own `kubernetes`
/// Service's cluster IP, which its serving certificate must name.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// The admin's user name; the group `system:masters` makes it a cluster admin.
pub const ADMIN_USER: &str = "captf-kubetest-admin";

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Everything the control plane's TLS and tokens need.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_pem: String,
    /// The CA's private key (PKCS#8): kube-controller-manager signs the certificates of the
    /// CertificateSigningRequests it approves with it when the control plane lets nodes join,
    /// and Cluster API's `<cluster>-ca` Secret holds a cluster's CA with its key.
    pub ca_key_pem: String,
    pub serving: CertKey,
    pub admin: CertKey,
    pub controller_manager: CertKey,
    /// The service-account signing key (PKCS#8) and its public key (SPKI).
    pub sa_private_pem: String,
    pub sa_public_pem: String,
}

impl Pki {
    pub fn generate() -> Result<Pki, rcgen::Error> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca_params.distinguished_name = name("captf-kubetest-ca", None);
        let ca_key = KeyPair::generate()?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let dns = [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ];
        let mut serving = CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())?;
        serving.subject_alt_names.extend([
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V4(KUBERNETES_SERVICE_IP)),
        ]);
        serving.distinguished_name = name("kube-apiserver", None);
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = sign(serving, &issuer)?;

        let admin = client_cert(ADMIN_USER, Some("system:masters"), &issuer)?;
        // The name the API server's bootstrap RBAC policy grants the controller manager's own
        // role to; each controller then runs under its own service account.
        let controller_manager = client_cert("system:kube-controller-manager", None, &issuer)?;

        let sa = KeyPair::generate()?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            ca_key_pem,
            serving,
            admin,
            controller_manager,
            sa_private_pem: sa.serialize_pem(),
            sa_public_pem: sa.public_key_pem(),
        })
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

fn client_cert(user: &str, group: Option<&str>, issuer: &Issuer<'_, KeyPair>) -> Result<CertKey, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = name(user, group);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign(params, issuer)
}

fn sign(params: CertificateParams, issuer: &Issuer<'_, KeyPair>) -> Result<CertKey, rcgen::Error> {
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
