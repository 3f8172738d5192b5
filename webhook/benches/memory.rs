//! Peak RSS of the release binary under the most memory-hungry reviews there are, one at a time
//! and 16 at once, each shape in a fresh process (VmHWM is the process's peak). The chart's
//! memory limit is chosen from these figures (webhook/README.md).
//!
//! `cargo bench -p captf-webhook --bench memory` (env: MEMORY_CONCURRENT, default 16). The binary
//! measured is the one Cargo built with the bench (release under `cargo bench`, debug under
//! `cargo test --bench memory`), or the one `MEMORY_WEBHOOK_BIN` names, e.g. a release build
//! (`cargo build --release -p captf-webhook --bin captf-webhook`) measured by a debug bench.
//! Prints figures; asserts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use captf_webhook::{MUTATE_PATH, VALIDATE_PATH};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    common::status_kib(pid, field).unwrap_or(0)
}

/// A JSON array of zeros that serializes to about `bytes`.
fn zeros(bytes: usize) -> Value {
    json!(vec![0; bytes / 2])
}

/// The shapes: (name, route, body).
fn shapes() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    const MIB: usize = 1024 * 1024;
    let mut out = Vec::new();
    let to_vec = |v: &Value| serde_json::to_vec(v).unwrap();

    // A spec just under 1 MiB of small numbers: past the JSON value limit, denied unparsed.
    let mut numbers = fixture("cluster-create-accepted");
    numbers["request"]["object"]["spec"]["variables"] = json!({"x": zeros(MIB - 4096)});
    numbers["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("paused");
    out.push(("spec just under 1 MiB of numbers", VALIDATE_PATH, to_vec(&numbers)));
    out.push(("spec just under 1 MiB of numbers", MUTATE_PATH, to_vec(&numbers)));

    // An UPDATE with two such specs (both denied unparsed).
    let mut update = fixture("cluster-update-accepted");
    update["request"]["object"]["spec"]["variables"] = json!({"x": zeros(MIB - 4096)});
    update["request"]["oldObject"]["spec"]["variables"] = json!({"x": zeros(MIB - 4096), "y": 1});
    out.push(("update, two specs just under 1 MiB", VALIDATE_PATH, to_vec(&update)));

    // The largest specs that are parsed: just under the JSON value limit, as one list of zeros
    // and as variables of one value each (a key and a value, each kept in the tree), alone and
    // as both objects of an UPDATE.
    let limit = captf_webhook::admission::MAX_SPEC_VALUES;
    let mut list = fixture("cluster-create-accepted");
    list["request"]["object"]["spec"]["variables"] = json!({"x": vec![0; limit - 100]});
    out.push(("spec at the value limit, one list", VALIDATE_PATH, to_vec(&list)));
    out.push(("spec at the value limit, one list", MUTATE_PATH, to_vec(&list)));
    let mut strings = fixture("cluster-create-accepted");
    strings["request"]["object"]["spec"]["variables"] = json!({"x": vec!["abcdefg"; limit - 100]});
    out.push((
        "spec at the value limit, short strings",
        VALIDATE_PATH,
        to_vec(&strings),
    ));
    let many: serde_json::Map<String, Value> = (0..(limit - 100) / 2).map(|i| (format!("v{i}"), json!(i))).collect();
    let mut vars = fixture("cluster-create-accepted");
    vars["request"]["object"]["spec"]["variables"] = Value::Object(many.clone());
    out.push(("spec at the value limit, variables", VALIDATE_PATH, to_vec(&vars)));
    out.push(("spec at the value limit, variables", MUTATE_PATH, to_vec(&vars)));
    let mut update = fixture("cluster-update-accepted");
    update["request"]["object"]["spec"]["variables"] = Value::Object(many.clone());
    let mut old = many;
    old.insert("changed".into(), json!(1));
    update["request"]["oldObject"]["spec"]["variables"] = Value::Object(old);
    out.push(("update, two specs at the value limit", VALIDATE_PATH, to_vec(&update)));

    // A body at the limit whose spec is too large: denied unparsed.
    let mut huge = fixture("cluster-create-accepted");
    huge["request"]["object"]["spec"]["variables"] = json!({"x": zeros(7 * MIB - 8192)});
    out.push(("7 MiB spec of numbers (denied unparsed)", VALIDATE_PATH, to_vec(&huge)));
    out.push(("7 MiB spec of numbers (denied unparsed)", MUTATE_PATH, to_vec(&huge)));

    // Many bad variable names: violations.
    let mut names = fixture("cluster-create-accepted");
    let vars: serde_json::Map<String, Value> = (0..(MIB / 12)).map(|i| (format!("-{i}"), json!(0))).collect();
    names["request"]["object"]["spec"]["variables"] = Value::Object(vars);
    out.push(("~87,000 bad variable names", VALIDATE_PATH, to_vec(&names)));

    // userInfo with millions of empty groups (checked, not kept, on the fast path).
    let mut groups = fixture("cluster-create-accepted");
    groups["request"]["userInfo"]["groups"] = json!(vec![""; (7 * MIB - 8192) / 3]);
    out.push(("7 MiB of empty userInfo groups", VALIDATE_PATH, to_vec(&groups)));

    // A spec that does not parse with a huge status: the field-path report reads metadata and
    // spec only.
    let mut status = fixture("cluster-create-accepted");
    status["request"]["object"]["spec"]["jobs"] = json!({"activeDeadlineSeconds": "1h"});
    status["request"]["object"]["status"] = json!({"junk": zeros(7 * MIB - 8192)});
    out.push(("bad spec, 7 MiB status", VALIDATE_PATH, to_vec(&status)));

    // The object is a list (the fast path refuses it) of 7 MiB.
    let mut list = fixture("cluster-create-accepted");
    list["request"]["object"] = zeros(7 * MIB - 8192);
    out.push(("object that is a 7 MiB list", VALIDATE_PATH, to_vec(&list)));
    out
}

async fn send(addr: SocketAddr, tls: Arc<rustls::ClientConfig>, path: &str, body: Bytes) -> u16 {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = TlsConnector::from(tls)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    match sender.send_request(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
        Err(_) => 0,
    }
}

struct Child {
    child: std::process::Child,
    addr: SocketAddr,
}

/// The webhook binary to measure: `MEMORY_WEBHOOK_BIN`, else the one built with the bench.
fn binary() -> std::path::PathBuf {
    std::env::var_os("MEMORY_WEBHOOK_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_captf-webhook").into())
}

fn spawn(files: &captf_webhook::devcerts::DevCertFiles) -> Child {
    let (child, addr) = common::spawn_webhook(&binary(), files);
    Child { child, addr }
}

fn main() {
    let concurrent = std::env::var("MEMORY_CONCURRENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16usize);
    let certs = captf_webhook::devcerts::generate("bench CA", &["localhost".into()], &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = captf_webhook::devcerts::write(dir.path(), &certs).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(certs.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(captf_webhook::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = Arc::new(c);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    println!("binary: {}", binary().display());
    println!(
        "{:<42} {:>9} {:>10} {:>8} | {:>14} {:>10} {:>8} {:>10}",
        "shape", "route", "body", "status", "peak RSS x1", "time x1", "statuses", "peak RSS x"
    );
    let mut worst = (0u64, 0u64);
    for (name, path, body) in shapes() {
        let body = Bytes::from(body);
        // One review.
        let one = spawn(&files);
        let idle = status_kib(one.child.id(), "VmHWM:");
        let started = Instant::now();
        let status = rt.block_on(send(one.addr, tls.clone(), path, body.clone()));
        let took = started.elapsed();
        let peak1 = status_kib(one.child.id(), "VmHWM:");
        kill(one);
        // `concurrent` at once, each on its own connection.
        let many = spawn(&files);
        let statuses = rt.block_on(async {
            let tasks: Vec<_> = (0..concurrent)
                .map(|_| tokio::spawn(send(many.addr, tls.clone(), path, body.clone())))
                .collect();
            let mut counts = std::collections::BTreeMap::<u16, usize>::new();
            for t in tasks {
                *counts.entry(t.await.unwrap()).or_default() += 1;
            }
            counts
        });
        let peak_n = status_kib(many.child.id(), "VmHWM:");
        kill(many);
        worst = (worst.0.max(peak1), worst.1.max(peak_n));
        let statuses: Vec<String> = statuses.iter().map(|(s, n)| format!("{s}x{n}")).collect();
        println!(
            "{:<42} {:>9} {:>9}K {:>8} | {:>11} KiB {:>8}ms {:>8} {:>6} KiB  (idle {} KiB)",
            name,
            path,
            body.len() / 1024,
            status,
            peak1,
            took.as_millis(),
            statuses.join(","),
            peak_n,
            idle
        );
    }
    println!(
        "worst peak RSS: one review {} KiB ({:.1} MiB), {concurrent} at once {} KiB ({:.1} MiB)",
        worst.0,
        worst.0 as f64 / 1024.0,
        worst.1,
        worst.1 as f64 / 1024.0
    );
}

fn kill(mut c: Child) {
    let _ = c.child.kill();
    let _ = c.child.wait();
}
