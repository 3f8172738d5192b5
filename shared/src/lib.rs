//! `captf-shared`: everything the webhook, the controller and the runner must agree on.
//!
//! Pure: no I/O, no async runtime. Every rule lives here exactly once.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`kind`] | the kinds and ops as enums |
//! | [`keys`] | every label and annotation key CAPTF owns |
//! | [`types`] | the CRD types (spec, status) and [`types::CaptfObject`] |
//! | [`conditions`] | condition types, reasons and the pure setter |
//! | [`duration`] | Go-style duration strings (`30m`, `1h30m`) |
//! | [`defaults`] | `apply_defaults` and the effective (defaulted) spec |
//! | [`validation`] | `validate_create` / `validate_update` |
//! | [`binding`] | what CAPTF makes for an object is bound to its UID (owner or annotation) |
//! | [`names`] | suffixes, Secret/Lease/Job names, the own-runner pattern |
//! | [`inputs`] | canonical JSON and the inputs hash |
//! | [`module_credentials`] | the module credentials Secret: its keys and when it is usable |
//! | [`pod`] | the runner pod's own volumes, mount paths, labels and annotations |
//! | [`policy`] | what a tenant may choose for runner pods (image, service account, Secret reads), and (feature `cli`) its flags |
//! | [`references`] | the Secrets a spec names, and the rule that none is CAPTF's own |
//! | [`runner_identity`] | each object's runner ServiceAccount and Role, its pre-created state objects |
//! | [`state_encryption`] | OpenTofu's client-side state encryption: passphrase files and rules |
//! | [`protocol`] | the runner's result JSON and exit codes |
//! | [`mask`] | masking secret values (multi-line, JSON-escaped, base64 at any offset, wrapped or line by line) in text |
//! | [`conversion`] | the served API versions and the conversion between them |
//! | [`crd`] | CRD generation for `charts/captf/crds/` |

pub mod approvals;
pub mod binding;
pub mod conditions;
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod duration;
pub mod events;
pub mod fuzzing;
pub mod inputs;
pub mod keys;
pub mod kind;
pub mod limits;
pub mod mask;
pub mod module_credentials;
pub mod names;
pub mod pod;
pub mod policy;
pub mod protocol;
pub mod references;
pub mod runner_identity;
pub mod state_encryption;
pub mod types;
pub mod validation;

pub use kind::{Kind, Op};
